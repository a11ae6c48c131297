//! `rocmc-gpu-check gelu16 DIR`: `f16(gelu(x))` of f32 `x` as rocmc
//! compiles it for the GPU (the short GELU: the hardware's approximate
//! 2^x and reciprocal) against the exact tanh GELU rounded to f16, over
//! 2^16 points of [-12, 12] and the special values: every result must be
//! the correctly rounded value or its neighbour. The CPU's form is checked
//! the same way by tests/run_data.rs; only the GPU has these instructions.
//! DIR holds `gelu16.toml` (`Y[i] = f16(gelu(X[i]))`) and its `.ptx`.

use crate::{kernels, DeviceRunner, Res};
use rocmc_ir::reference::random_inputs;
use std::collections::HashMap;
use std::path::PathBuf;

/// The points: the ones tests/run_data.rs checks on the CPU.
fn points() -> Vec<f32> {
    let mut xs: Vec<f32> = (0..1 << 16)
        .map(|i| -12.0 + 24.0 * i as f32 / 65536.0)
        .collect();
    xs.extend([
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        30.0,
        -30.0,
        1e20,
        -1e20,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ]);
    xs
}

/// The exact tanh GELU of `x`, rounded to f16 (its bits).
fn want(x: f32) -> u16 {
    let x = f64::from(x);
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let g = match x {
        f64::INFINITY => x,
        f64::NEG_INFINITY => -0.0,
        _ => 0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh()),
    };
    half::f16::from_f64(g).to_bits()
}

pub fn gelu16(args: &[String]) -> Res<bool> {
    let dir = PathBuf::from(args.first().ok_or("gelu16 needs a folder")?);
    let (_, k, ptx) = kernels(&dir, "ptx")?
        .into_iter()
        .find(|(n, _, _)| n == "gelu16")
        .ok_or("the folder has no gelu16.ptx")?;
    let xs = points();
    let sizes = [xs.len() as i64];
    let mut inputs = random_inputs(&k, &sizes, &HashMap::new(), 1)?;
    inputs.host[0] = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let local = rocmc_remote::open_local("cuda:0").map_err(|e| e.to_string())?;
    let mut runner = DeviceRunner::new(local, "ptx");
    runner.load(&ptx)?;
    let out = runner.run(&k, &sizes, &inputs)?;
    // Ordered integers of the f16 bit patterns: neighbours differ by one.
    let ord = |v: u16| {
        let v = i32::from(v);
        if v & 0x8000 != 0 {
            -(v & 0x7fff)
        } else {
            v
        }
    };
    let (mut exact, mut one, mut far) = (0, 0, Vec::new());
    for (x, b) in xs.iter().zip(out[1].chunks_exact(2)) {
        let got = u16::from_le_bytes([b[0], b[1]]);
        match (ord(got) - ord(want(*x))).abs() {
            0 => exact += 1,
            1 => one += 1,
            _ => far.push((*x, got, want(*x))),
        }
    }
    println!(
        "gelu16 on the GPU: {} points, {exact} correctly rounded, {one} one f16 ulp away, {} further",
        xs.len(),
        far.len()
    );
    for (x, got, want) in far.iter().take(8) {
        println!("  x = {x:e}: got {got:#06x}, want {want:#06x}");
    }
    Ok(far.is_empty())
}
