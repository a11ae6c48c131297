//! Adds two vectors and computes a saxpy on the GPU with kernels compiled
//! by rocmc at build time, then checks the results on the host.

use rocmc_runtime_hip::{DeviceBuffer, Hip};
use std::process::ExitCode;

include!(concat!(env!("OUT_DIR"), "/rocmc_kernels.rs"));

fn run() -> rocmc_runtime_hip::Result<()> {
    let hip = Hip::load()?;
    let dev = hip.device("amdgpu")?;
    println!(
        "device {}: {} ({})",
        dev.info.index, dev.info.name, dev.info.arch
    );
    let n = 1 << 20;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 2.0 * i as f32).collect();
    let (da, db): (DeviceBuffer<f32>, DeviceBuffer<f32>) = (dev.upload(&a)?, dev.upload(&b)?);
    let dc = dev.alloc::<f32>(n)?;
    vadd::Vadd::load(&dev)?.launch(&da, &db, &dc, n as i32)?;
    let c = dc.to_vec()?;
    let dy = dev.alloc::<f32>(n)?;
    saxpy::Saxpy::load(&dev)?.launch(&da, &db, &dy, n as i32, 0.5)?;
    let y = dy.to_vec()?;
    let bad = (0..n)
        .filter(|&i| c[i] != a[i] + b[i] || y[i] != 0.5 * a[i] + b[i])
        .count();
    if bad > 0 {
        eprintln!("{bad} of {n} results are wrong");
        std::process::exit(1);
    }
    println!("vadd and saxpy on {n} elements: all results correct");
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vadd-app: {e}");
            ExitCode::FAILURE
        }
    }
}
