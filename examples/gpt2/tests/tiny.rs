//! The tiny GPT-2 (2 layers, width 64, 4 heads, 512 tokens) on the CPU
//! device against `reference/tiny.py`'s independent numpy forward pass:
//! the prefill's logits at every position, and 8 greedy tokens per
//! sequence through the KV cache.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn npy(path: &Path) -> (Vec<u64>, Vec<f32>) {
    let bytes = std::fs::read(path).expect("a .npy file");
    let a = npyz::NpyFile::new(&bytes[..]).expect("a .npy header");
    let shape = a.shape().to_vec();
    (shape, a.into_vec::<f32>().expect("f32 data"))
}

/// Runs the example on `device`; its stdout.
fn run(device: &str, logits: &Path) -> String {
    let f = fixtures();
    let out = Command::new(env!("CARGO_BIN_EXE_gpt2"))
        .arg("--weights")
        .arg(f.join("tiny.safetensors"))
        .arg("--ids-file")
        .arg(f.join("prompts.txt"))
        .args(["--batch", "2", "--new", "8", "--device", device])
        .arg("--logits")
        .arg(logits)
        .output()
        .expect("the example runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "gpt2 failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Checks what [`run`] printed and wrote against the reference.
fn check(stdout: &str, logits: &Path) {
    let f = fixtures();
    let want = std::fs::read_to_string(f.join("tokens.txt")).expect("tokens.txt");
    for (b, line) in want.lines().enumerate() {
        let got = format!("sequence {b}: {line}");
        assert!(stdout.contains(&got), "expected `{got}` in:\n{stdout}");
    }
    let (shape, got) = npy(logits);
    let (want_shape, want) = npy(&f.join("logits.npy"));
    assert_eq!(shape, want_shape);
    // f16 weights and activations (layer norm outputs, QKV, attention,
    // GELU) against a float64 reference: 0.019 at most was seen.
    let (mut worst, mut at) = (0.0f32, 0);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let e = (g - w).abs() / (1.0 + w.abs());
        if e > worst || e.is_nan() {
            (worst, at) = (e, i);
        }
    }
    assert!(
        worst <= 0.03,
        "logit {at} (row {}, token {}): {} against the reference's {} (error {worst} > 0.03 · (1 + |ref|))",
        at / 512,
        at % 512,
        got[at],
        want[at]
    );
}

#[test]
fn tiny_gpt2_on_the_cpu_matches_the_numpy_reference() {
    let dir = tempfile::tempdir().unwrap();
    let logits = dir.path().join("logits.npy");
    let out = run("cpu", &logits);
    check(&out, &logits);
    assert!(out.contains("prefill: 2 x 12 tokens"), "{out}");
    assert!(out.contains("decode: 7 steps of 2 tokens"), "{out}");
}

#[test]
fn bad_input_is_named() {
    let f = fixtures();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gpt2"))
            .arg("--weights")
            .arg(f.join("tiny.safetensors"))
            .args(args)
            .output()
            .expect("the example runs");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = run(&["--ids", "1,2,512"]);
    assert!(
        e.contains("token id 512 is outside the vocabulary 0..512"),
        "{e}"
    );
    let e = run(&["--ids", "1", "--device", "cuda:7"]);
    assert!(e.contains("cuda:7"), "{e}");
    let long: Vec<String> = (0..129).map(|i| i.to_string()).collect();
    let e = run(&["--ids", &long.join(",")]);
    assert!(e.contains("would exceed the model's 128"), "{e}");
    let out = Command::new(env!("CARGO_BIN_EXE_gpt2"))
        .args(["--weights", "/nonexistent.safetensors", "--ids", "1"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("/nonexistent.safetensors"),
        "{e}"
    );
}
