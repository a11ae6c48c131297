//! Adds two vectors and computes a saxpy on the GPU with kernels compiled
//! by rocmc at build time, then checks the results on the host. `vadd-app`
//! runs on an AMD GPU through HIP, `vadd-app cuda` on an NVIDIA GPU through
//! the CUDA driver; the same kernel files are compiled for both.

use std::process::ExitCode;

mod amd {
    include!(concat!(env!("OUT_DIR"), "/amd/rocmc_kernels.rs"));
}
mod nvidia {
    include!(concat!(env!("OUT_DIR"), "/nvidia/rocmc_kernels.rs"));
}

const N: usize = 1 << 20;

fn inputs() -> (Vec<f32>, Vec<f32>) {
    let a = (0..N).map(|i| i as f32).collect();
    let b = (0..N).map(|i| 2.0 * i as f32).collect();
    (a, b)
}

/// The number of wrong results.
fn wrong(a: &[f32], b: &[f32], c: &[f32], y: &[f32]) -> usize {
    (0..N)
        .filter(|&i| c[i] != a[i] + b[i] || y[i] != 0.5 * a[i] + b[i])
        .count()
}

/// Runs both kernels on a device of either runtime (their APIs are the
/// same, their types are not) and counts the wrong results.
macro_rules! run_on {
    ($rt:ident, $kernels:ident, $dev:expr, $arch:expr) => {{
        let e = |e: $rt::Error| e.to_string();
        let dev = $dev.map_err(e)?;
        println!(
            "device {}: {} ({})",
            dev.info.index,
            dev.info.name,
            $arch(&dev)
        );
        let (a, b) = inputs();
        let (da, db) = (dev.upload(&a).map_err(e)?, dev.upload(&b).map_err(e)?);
        let (dc, dy) = (
            dev.alloc::<f32>(N).map_err(e)?,
            dev.alloc::<f32>(N).map_err(e)?,
        );
        $kernels::vadd::Vadd::load(&dev)
            .map_err(e)?
            .launch(&da, &db, &dc, N as i32)
            .map_err(e)?;
        $kernels::saxpy::Saxpy::load(&dev)
            .map_err(e)?
            .launch(&da, &db, &dy, N as i32, 0.5)
            .map_err(e)?;
        Ok(wrong(
            &a,
            &b,
            &dc.to_vec().map_err(e)?,
            &dy.to_vec().map_err(e)?,
        ))
    }};
}

fn on_amd() -> Result<usize, String> {
    use rocmc_runtime_hip::{Device, Hip};
    let dev = Hip::load().and_then(|h| h.device("amdgpu"));
    run_on!(rocmc_runtime_hip, amd, dev, |d: &Device| d
        .info
        .arch
        .clone())
}

fn on_nvidia() -> Result<usize, String> {
    use rocmc_runtime_cuda::{Cuda, Device};
    let dev = Cuda::load().and_then(|c| c.device("cuda"));
    run_on!(rocmc_runtime_cuda, nvidia, dev, |d: &Device| d
        .info
        .processor())
}

/// `vadd-app cuda launches K`: the host's cost of one typed launch —
/// K launches of vadd on 1,024 elements queued back to back, then one
/// synchronize, in µs per launch (what bench/python compares the Python
/// call with).
fn launch_cost_nvidia(k: u32) -> Result<f64, String> {
    use rocmc_runtime_cuda::Cuda;
    let e = |e: rocmc_runtime_cuda::Error| e.to_string();
    let dev = Cuda::load().and_then(|c| c.device("cuda")).map_err(e)?;
    let n = 1024;
    let a = dev.upload(&vec![1.0f32; n]).map_err(e)?;
    let c = dev.alloc::<f32>(n).map_err(e)?;
    let vadd = nvidia::vadd::Vadd::load(&dev).map_err(e)?;
    for _ in 0..10 {
        vadd.launch(&a, &a, &c, n as i32).map_err(e)?;
    }
    dev.synchronize().map_err(e)?;
    let t = std::time::Instant::now();
    for _ in 0..k {
        vadd.launch(&a, &a, &c, n as i32).map_err(e)?;
    }
    dev.synchronize().map_err(e)?;
    Ok(t.elapsed().as_secs_f64() * 1e6 / f64::from(k.max(1)))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("cuda")
        && args.get(2).map(String::as_str) == Some("launches")
    {
        let k = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(1000);
        return match launch_cost_nvidia(k) {
            Ok(us) => {
                println!("rust typed launcher: {us:.2} us per launch ({k} launches)");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("vadd-app: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let cuda = args.get(1).map(String::as_str) == Some("cuda");
    match if cuda { on_nvidia() } else { on_amd() } {
        Ok(0) => {
            println!("vadd and saxpy on {N} elements: all results correct");
            ExitCode::SUCCESS
        }
        Ok(bad) => {
            eprintln!("{bad} of {N} results are wrong");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("vadd-app: {e}");
            ExitCode::FAILURE
        }
    }
}
