//! The remote half: kernels run on a device of a `rocmc-worker` started on
//! loopback, through the same client (TLS, pinned certificate, secret) that
//! `rocmc run --device remote://…` uses, and what that path costs.

use crate::{check_all, flag, kernels, opt, DeviceRunner, Res};
use rocmc_device::launch::KernelArg;
use rocmc_remote::client::{ConnectOptions, RemoteDevice};
use rocmc_remote::device::wire_args;
use rocmc_remote::tls::Pin;
use rocmc_remote::Device;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A worker process on loopback with its own state folder.
pub(crate) struct Worker {
    child: Child,
    addr: String,
    fingerprint: String,
    secret: String,
    _state: tempfile::TempDir,
}

impl Worker {
    pub(crate) fn start(bin: &Path) -> Res<Worker> {
        let state = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut child = Command::new(bin)
            .args(["--listen", "127.0.0.1:0", "--state"])
            .arg(state.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let mut next = || -> Res<String> {
            lines
                .next()
                .ok_or("the worker exited before it listened")?
                .map_err(|e| e.to_string())
        };
        let first = next()?;
        let addr = first.rsplit(' ').next().unwrap_or_default().to_string();
        let fingerprint = next()?
            .strip_prefix("certificate fingerprint ")
            .ok_or("the worker printed no certificate fingerprint")?
            .to_string();
        // Keep reading so the worker never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let secret = std::fs::read_to_string(state.path().join("secret"))
            .map_err(|e| format!("the worker's secret: {e}"))?
            .trim()
            .to_string();
        Ok(Worker {
            child,
            addr,
            fingerprint,
            secret,
            _state: state,
        })
    }

    /// A fresh session on `device`, the certificate pinned to the
    /// fingerprint the worker printed (as a user pins it out of band).
    pub(crate) fn connect(&self, device: &str) -> Res<RemoteDevice> {
        let opts = ConnectOptions {
            secret: self.secret.clone(),
            pin: Some(Pin::Exact(self.fingerprint.clone())),
            insecure: false,
            timeout: Duration::from_secs(120),
        };
        RemoteDevice::connect(&format!("remote://{}/{device}", self.addr), &opts)
            .map_err(|e| e.to_string())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The module kind a worker device runs, as the folder's files end.
fn extension(device: &str) -> Res<&'static str> {
    match device.split(':').next() {
        Some("cuda") => Ok("ptx"),
        Some("cpu") => Ok("so"),
        Some("amdgpu") => Ok("hsaco"),
        _ => Err(format!("unknown device `{device}`")),
    }
}

/// `remote WORKER DIR [--device D] [--cases N] [--seed S]`: every kernel of
/// `DIR` checked against the interpreter on a worker's device.
pub fn check(args: &[String]) -> Res<bool> {
    let [bin, dir, ..] = args else {
        return Err("remote needs the worker binary and a folder".into());
    };
    let device = opt(args, "--device")?.unwrap_or("cuda:0");
    let ext = extension(device)?;
    let w = Worker::start(Path::new(bin))?;
    let dev = w.connect(device)?;
    let i = dev.info();
    println!(
        "worker {} (TLS, pinned {}…), device {}: {} ({})",
        w.addr,
        &w.fingerprint[..16.min(w.fingerprint.len())],
        i.name,
        i.description,
        i.target
    );
    let mut r = DeviceRunner::new(Box::new(dev), ext);
    check_all(
        &mut r,
        &PathBuf::from(dir),
        flag(args, "--cases", 6)?,
        flag(args, "--seed", 1)?,
        crate::part_flag(args)?,
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Wall-clock microseconds of `f`.
fn us(f: impl FnOnce() -> Res<()>) -> Res<f64> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed().as_secs_f64() * 1e6)
}

/// What launching the smallest kernel costs on the device itself:
/// (launch + wait, median µs; per launch of `batch` launches and one wait, µs).
fn local_figures(ext: &str, module: &[u8], reps: usize, batch: usize) -> Res<(f64, f64)> {
    match ext {
        "ptx" => {
            let cuda = rocmc_runtime_cuda::Cuda::load().map_err(|e| e.to_string())?;
            let dev = cuda.device("cuda").map_err(|e| e.to_string())?;
            let ptx = std::str::from_utf8(module).map_err(|e| e.to_string())?;
            let m = dev.load_ptx(ptx).map_err(|e| e.to_string())?;
            let k = m.kernel("vadd").map_err(|e| e.to_string())?;
            let a = dev.alloc::<f32>(1).map_err(|e| e.to_string())?;
            let args = [
                KernelArg::buffer(&a),
                KernelArg::buffer(&a),
                KernelArg::buffer(&a),
                KernelArg::size(1),
            ];
            let launch = || k.launch(&args, None).map_err(|e| e.to_string());
            let sync = || dev.synchronize().map_err(|e| e.to_string());
            launch()?;
            sync()?;
            let rt = (0..reps)
                .map(|_| us(|| launch().and_then(|_| sync())))
                .collect::<Res<Vec<_>>>()?;
            let b = us(|| {
                for _ in 0..batch {
                    launch()?;
                }
                sync()
            })?;
            Ok((median(rt), b / batch as f64))
        }
        "so" => {
            let cpu = rocmc_runtime_cpu::Cpu::new();
            let m = cpu.load(module).map_err(|e| e.to_string())?;
            let k = m.kernel("vadd").map_err(|e| e.to_string())?;
            let a = cpu.alloc::<f32>(1);
            let args = [
                KernelArg::buffer(&a),
                KernelArg::buffer(&a),
                KernelArg::buffer(&a),
                KernelArg::size(1),
            ];
            // The CPU runtime's launches return when the kernel is done.
            let launch = || k.launch(&args).map_err(|e| e.to_string());
            launch()?;
            let rt = (0..reps).map(|_| us(launch)).collect::<Res<Vec<_>>>()?;
            let b = us(|| (0..batch).try_for_each(|_| launch()))?;
            Ok((median(rt), b / batch as f64))
        }
        other => Err(format!("no local runtime for .{other} here")),
    }
}

/// `latency WORKER DIR [--device D] [--reps N]`: what the remote path costs
/// over the device itself, with `DIR/vadd.*` at one element (so the kernel
/// takes no time): a launch's round trip, launches sent without waiting,
/// connecting, a module's first and cached loads, and bulk transfers.
/// Prints a Markdown table.
pub fn latency(args: &[String]) -> Res<bool> {
    let [bin, dir, ..] = args else {
        return Err("latency needs the worker binary and a folder".into());
    };
    let device = opt(args, "--device")?.unwrap_or("cuda:0");
    let reps = flag(args, "--reps", 300)? as usize;
    let batch = 1000;
    let ext = extension(device)?;
    let (_, k, module) = kernels(Path::new(dir), ext)?
        .into_iter()
        .find(|(n, ..)| n == "vadd")
        .ok_or_else(|| format!("{dir} has no vadd.{ext}"))?;
    let info = rocmc_device::module_launch(&module).map_err(|e| e.to_string())?;
    let kl = info
        .kernel("vadd")
        .ok_or("vadd's module has no vadd")?
        .clone();
    let (local_rt, local_batch) = local_figures(ext, &module, reps, batch)?;

    let w = Worker::start(Path::new(bin))?;
    let e = |e: rocmc_device::Error| e.to_string();
    let mut connect = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        drop(w.connect(device)?);
        connect.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut d = w.connect(device)?;
    let desc = format!(
        "{} ({}, {})",
        d.info().name,
        d.info().description,
        d.info().target
    );
    let first_load = us(|| d.load_module(&module).map(|_| ()).map_err(e))? / 1e3;
    let hash = rocmc_remote::proto::content_hash(&module);
    let mut d2 = w.connect(device)?;
    let cached_load = us(|| d2.load_module(&module).map(|_| ()).map_err(e))? / 1e3;
    drop(d2);

    let a = d.alloc(4).map_err(e)?;
    let ids = [a, a, a];
    let args_v = wire_args(&k, &kl, &ids, &[1, 1, 1], &[1], &[])?;
    let launch = |d: &mut RemoteDevice| d.launch(&hash, "vadd", &args_v).map_err(e);
    launch(&mut d)?;
    d.synchronize().map_err(e)?;
    let rt = (0..reps)
        .map(|_| {
            us(|| {
                launch(&mut d)?;
                d.synchronize().map_err(e)
            })
        })
        .collect::<Res<Vec<_>>>()?;
    let fire = us(|| {
        for _ in 0..batch {
            launch(&mut d)?;
        }
        d.synchronize().map_err(e)
    })? / batch as f64;
    let each = us(|| {
        for _ in 0..batch {
            launch(&mut d)?;
            d.synchronize().map_err(e)?;
        }
        Ok(())
    })? / batch as f64;

    let mib = 64usize;
    let bytes = mib << 20;
    let big = d.alloc(bytes as u64).map_err(e)?;
    let data = vec![7u8; bytes];
    let write = us(|| {
        d.write(big, 0, &data)
            .and_then(|_| d.synchronize())
            .map_err(e)
    })?;
    let read = us(|| d.read_all(big).map(|_| ()).map_err(e))?;
    let fill = us(|| {
        d.fill(big, "f32", 1)
            .and_then(|_| d.synchronize())
            .map_err(e)
    })?;
    d.free(big).map_err(e)?;
    d.free(a).map_err(e)?;
    d.synchronize().map_err(e)?;

    let rate = |t_us: f64| format!("{:.0} MB/s", bytes as f64 / t_us);
    println!("device: {desc}; worker on loopback over TLS; {reps} repetitions, batches of {batch}");
    println!();
    println!("| what | on the device here | through the worker |");
    println!("|---|---:|---:|");
    println!(
        "| launch + wait, smallest kernel (median) | {local_rt:.1} µs | {:.1} µs |",
        median(rt)
    );
    println!("| {batch} launches, one wait (per launch) | {local_batch:.2} µs | {fire:.2} µs |");
    println!("| {batch} × (launch + wait) (per launch) | {local_rt:.1} µs | {each:.1} µs |");
    println!(
        "| connect: TCP + TLS + secret + session process (median of 5) | | {:.1} ms |",
        median(connect)
    );
    println!(
        "| load module, first time ({} KiB sent) | | {first_load:.2} ms |",
        module.len() / 1024
    );
    println!("| load module again, new session (cached by hash) | | {cached_load:.2} ms |");
    println!("| write {mib} MiB + wait | | {} |", rate(write));
    println!("| read {mib} MiB | | {} |", rate(read));
    println!("| fill {mib} MiB on the worker + wait | | {} |", rate(fill));
    Ok(true)
}
