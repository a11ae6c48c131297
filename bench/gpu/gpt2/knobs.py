"""Times several builds of examples/gpt2 (different tile knobs, GPT2_TUNE)
on the same random GPT-2 small weights: prefill of 1,024 tokens at batch 1
and 8, decode at batch 1 and 16, and the per-kernel shares of the batch-8
prefill. rocmc only; run.py has the peers and the correctness checks.

    python3 bench/gpu/gpt2/knobs.py OUT BIN...
"""
import re
import subprocess
import sys
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

OUT = Path(sys.argv[1])
OUT.mkdir(parents=True, exist_ok=True)
bins = sys.argv[2:]
torch.manual_seed(0)
wdir = OUT / "weights"
GPT2LMHeadModel(GPT2Config(initializer_range=0.02)).half().save_pretrained(wdir)
g = torch.Generator().manual_seed(2)
cases = [("prefill_b1", 1, 1024, 1), ("prefill_b8", 8, 1024, 1), ("decode_b1", 1, 128, 129), ("decode_b16", 16, 128, 129)]
prompts = {c[0]: torch.randint(0, 50257, (c[1], c[2]), generator=g).tolist() for c in cases}


def run(binary, key, batch, new, extra):
    pf = wdir / f"{key}.txt"
    pf.write_text("".join(",".join(map(str, r)) + "\n" for r in prompts[key]))
    cmd = [binary, "--weights", str(wdir / "model.safetensors"), "--device", "cuda:0",
           "--ids-file", str(pf), "--batch", str(batch), "--new", str(new), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return r.stdout


rows = []
for b in bins:
    row = {"binary": Path(b).name}
    for key, batch, _, new in cases:
        out = run(b, key, batch, new, ["--warmup", "1", "--runs", "5"])
        if key.startswith("prefill"):
            row[key] = float(re.search(r"prefill: .* in ([0-9.]+) ms", out).group(1))
        else:
            row[key] = float(re.search(r"decode: .*\(([0-9.]+) ms per step", out).group(1))
    prof = run(b, "prefill_b8", 8, 1, ["--profile"])
    print(f"{row['binary']}: prefill batch 8, " + prof[prof.find("time per kernel"):], flush=True)
    rows.append(row)
print("| build | prefill b1 ms | prefill b8 ms | decode b1 ms/step | decode b16 ms/step |")
print("|---|---:|---:|---:|---:|")
for r in rows:
    print(f"| {r['binary']} | {r['prefill_b1']:.3f} | {r['prefill_b8']:.3f} | {r['decode_b1']:.3f} | {r['decode_b16']:.3f} |")
