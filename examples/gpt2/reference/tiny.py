"""The tiny GPT-2 the CI test runs on the CPU device, and its reference
outputs, computed here independently of rocmc: a plain numpy forward pass
(float64 from the f16 weights, no KV cache: every greedy step recomputes
the whole sequence).

    python3 examples/gpt2/reference/tiny.py examples/gpt2/tests/fixtures

writes tiny.safetensors (f16, Hugging Face's GPT2LMHeadModel names),
config.json, prompts.txt, logits.npy ([batch, prompt, vocab] f32, the
prefill's logits) and tokens.txt (each sequence's greedy tokens).
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np

LAYERS, WIDTH, HEADS, VOCAB, POSITIONS, EPS = 2, 64, 4, 512, 128, 1e-5
BATCH, PROMPT, NEW = 2, 12, 8


def weights(rng):
    w = {}
    n = lambda *s, std: rng.normal(0.0, std, s)
    w["wte.weight"] = n(VOCAB, WIDTH, std=0.15)
    w["wpe.weight"] = n(POSITIONS, WIDTH, std=0.5)
    for l in range(LAYERS):
        h = f"h.{l}"
        for ln in ("ln_1", "ln_2"):
            w[f"{h}.{ln}.weight"] = 1.0 + n(WIDTH, std=0.1)
            w[f"{h}.{ln}.bias"] = n(WIDTH, std=0.05)
        for name, i, o in (("attn.c_attn", WIDTH, 3 * WIDTH), ("attn.c_proj", WIDTH, WIDTH),
                           ("mlp.c_fc", WIDTH, 4 * WIDTH), ("mlp.c_proj", 4 * WIDTH, WIDTH)):
            w[f"{h}.{name}.weight"] = n(i, o, std=2.0 / np.sqrt(i))
            w[f"{h}.{name}.bias"] = n(o, std=0.05)
    w["ln_f.weight"] = 4.0 * (1.0 + n(WIDTH, std=0.1))
    w["ln_f.bias"] = n(WIDTH, std=0.05)
    return {k: v.astype(np.float16) for k, v in w.items()}


def save_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        b = t.tobytes()
        header["transformer." + name] = {"dtype": "F16", "shape": list(t.shape),
                                         "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def layernorm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + EPS) * g + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(w, ids):
    """Logits [batch, seq, vocab] of token ids [batch, seq]."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    bsz, s = ids.shape
    d = WIDTH // HEADS
    x = w["wte.weight"][ids] + w["wpe.weight"][np.arange(s)][None]
    mask = np.tril(np.ones((s, s), bool))
    for l in range(LAYERS):
        h = f"h.{l}"
        a = layernorm(x, w[f"{h}.ln_1.weight"], w[f"{h}.ln_1.bias"])
        qkv = a @ w[f"{h}.attn.c_attn.weight"] + w[f"{h}.attn.c_attn.bias"]
        q, k, v = (qkv[..., i * WIDTH:(i + 1) * WIDTH].reshape(bsz, s, HEADS, d).transpose(0, 2, 1, 3)
                   for i in range(3))
        sc = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
        sc = np.where(mask, sc, -np.inf)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = (p @ v).transpose(0, 2, 1, 3).reshape(bsz, s, WIDTH)
        x = x + o @ w[f"{h}.attn.c_proj.weight"] + w[f"{h}.attn.c_proj.bias"]
        a = layernorm(x, w[f"{h}.ln_2.weight"], w[f"{h}.ln_2.bias"])
        f = gelu_tanh(a @ w[f"{h}.mlp.c_fc.weight"] + w[f"{h}.mlp.c_fc.bias"])
        x = x + f @ w[f"{h}.mlp.c_proj.weight"] + w[f"{h}.mlp.c_proj.bias"]
    x = layernorm(x, w["ln_f.weight"], w["ln_f.bias"])
    return x @ w["wte.weight"].T


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(int(__import__("os").environ.get("SEED", "5")))
    w = weights(rng)
    ids = rng.integers(0, VOCAB, (BATCH, PROMPT))
    logits = forward(w, ids)
    seq, margins = ids, []
    for _ in range(NEW):
        last = forward(w, seq)[:, -1]
        top = np.sort(last, -1)
        margins.append(float((top[:, -1] - top[:, -2]).min()))
        seq = np.concatenate([seq, last.argmax(-1)[:, None]], 1)
    save_safetensors(out / "tiny.safetensors", w)
    (out / "config.json").write_text(json.dumps({
        "model_type": "gpt2", "n_layer": LAYERS, "n_embd": WIDTH, "n_head": HEADS,
        "vocab_size": VOCAB, "n_positions": POSITIONS, "layer_norm_epsilon": EPS}, indent=1) + "\n")
    (out / "prompts.txt").write_text("".join(",".join(map(str, r)) + "\n" for r in ids))
    np.save(out / "logits.npy", logits.astype(np.float32))
    (out / "tokens.txt").write_text("".join(",".join(map(str, r)) + "\n" for r in seq[:, PROMPT:]))
    print(f"logits in [{logits.min():.2f}, {logits.max():.2f}]; smallest top-2 margin of a greedy step {min(margins):.3f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "examples/gpt2/tests/fixtures")
