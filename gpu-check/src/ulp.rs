//! `rocmc-gpu-check gelu16 DIR`: `f16(gelu(x))` of f32 `x` as rocmc
//! compiles it for the GPU (the short GELU: the hardware's approximate
//! 2^x and reciprocal) against the exact tanh GELU rounded to f16, over
//! 2^16 points of [-12, 12] and the special values: every result must be
//! the correctly rounded value or its neighbour. The CPU's form is checked
//! the same way by tests/run_data.rs; only the GPU has these instructions.
//! DIR holds `gelu16.toml` (`Y[i] = f16(gelu(X[i]))`) and its `.ptx`.

use crate::{kernels, DeviceRunner, Res};
use rocmc_ir::reference::{gelu16, random_inputs};
use std::collections::HashMap;
use std::path::PathBuf;

pub fn gelu16(args: &[String]) -> Res<bool> {
    let dir = PathBuf::from(args.first().ok_or("gelu16 needs a folder")?);
    let (_, k, ptx) = kernels(&dir, "ptx")?
        .into_iter()
        .find(|(n, _, _)| n == "gelu16")
        .ok_or("the folder has no gelu16.ptx")?;
    let xs = gelu16::points();
    let sizes = [xs.len() as i64];
    let mut inputs = random_inputs(&k, &sizes, &HashMap::new(), 1)?;
    inputs.host[0] = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let local = rocmc_runtime::open_local("cuda:0").map_err(|e| e.to_string())?;
    let mut runner = DeviceRunner::new(local, "ptx");
    runner.load(&ptx)?;
    let out = runner.run(&k, &sizes, &inputs)?;
    let (mut exact, mut one, mut far) = (0, 0, Vec::new());
    for (x, b) in xs.iter().zip(out[1].chunks_exact(2)) {
        let got = u16::from_le_bytes([b[0], b[1]]);
        let want = gelu16::exact(*x);
        match gelu16::ulps(got, want) {
            0 => exact += 1,
            1 => one += 1,
            _ => far.push((*x, got, want)),
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
