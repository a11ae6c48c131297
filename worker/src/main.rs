//! `rocmc-worker`: runs on the GPU machine and serves its devices to
//! `rocmc run --device remote://HOST:PORT/DEVICE` and the library API.

use clap::Parser;
use rocmc_remote::server::{Worker, WorkerConfig};
use rocmc_remote::session::SessionConfig;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "rocmc-worker",
    version,
    about = "Serves this machine's devices (CPU, CUDA, AMD GPUs) to rocmc clients over TLS"
)]
struct Args {
    /// Address to listen on (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: String,
    /// Folder for the certificate, key, secret and module cache.
    #[arg(long, value_name = "DIR")]
    state: Option<PathBuf>,
    /// Host names clients use for this machine (put in the certificate).
    #[arg(long = "name", value_name = "HOST")]
    names: Vec<String>,
    /// Plain TCP without TLS: anyone on the network can read and alter traffic.
    #[arg(long)]
    insecure: bool,
    /// Concurrent sessions.
    #[arg(long, default_value_t = 32)]
    max_sessions: usize,
    /// Device memory one session may allocate, bytes.
    #[arg(long, default_value_t = 8 << 30)]
    session_memory: u64,
    /// Bytes the module cache may hold; the least recently used modules are removed first.
    #[arg(long, default_value_t = 1 << 30)]
    module_cache: u64,
    /// Seconds of silence after which a connection is closed.
    #[arg(long, default_value_t = 600)]
    idle_timeout: u64,
    /// Wrong secrets one address may send in a minute before its logins are refused for the rest of it.
    #[arg(long, default_value_t = 10)]
    max_login_failures: u32,
    /// Seconds a request may wait for its session (kernels included) before the session is ended.
    #[arg(long, default_value_t = 300)]
    kernel_timeout: u64,
    /// Seconds a connection has for its TLS handshake and login, however it trickles bytes.
    #[arg(long, default_value_t = 10)]
    login_timeout: u64,
    /// Connections not logged in yet, at most; past it a new one takes the place of the oldest silent one.
    #[arg(long, default_value_t = 64)]
    max_pending: usize,
    /// Silent connections (no byte sent yet) from one address, at most; past it a new one takes the place of that address's oldest.
    #[arg(long, default_value_t = 8)]
    max_pending_per_address: usize,
    /// Largest frame (one upload or module), bytes.
    #[arg(long, default_value_t = rocmc_remote::proto::DEFAULT_MAX_FRAME)]
    max_frame: usize,
    /// Obey clients' requests to crash their session (isolation tests only).
    #[arg(long, hide = true)]
    allow_crash_requests: bool,
    /// Internal: run one session on stdin/stdout.
    #[arg(long, hide = true)]
    session: bool,
    /// Internal: print the devices and exit.
    #[arg(long, hide = true)]
    list_devices: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Checks and times an offline tuning plan (from `rocmc tune --export DIR`) on this
    /// machine's devices, and writes DIR/results.json for `rocmc tune --import DIR`.
    Measure {
        /// The plan folder.
        dir: PathBuf,
        /// A device of this machine (cpu, cuda:N, amdgpu:N); repeat to spread the measuring.
        #[arg(long = "device", value_name = "DEVICE", required = true)]
        devices: Vec<String>,
        /// Rows of the results table.
        #[arg(long, default_value_t = 10)]
        show: usize,
    },
}

/// `rocmc-worker measure`: an offline tuning plan on local devices.
fn measure(dir: &std::path::Path, devices: Vec<String>, show: usize) -> ExitCode {
    use rocmc_tuner::{Devices, Event};
    let mut done = 0usize;
    let mut total = 0usize;
    // A line per candidate: this often runs in a batch job's log, not a terminal.
    let r = rocmc_tuner::plan::measure(dir, Devices::Named(devices), &mut |e| match e {
        Event::Measuring(n) => total = n,
        Event::Measured(c, best) => {
            done += 1;
            let best = best.map_or(String::new(), |(b, ms)| {
                format!("; best {ms:.4} ms: {}", rocmc_tuner::describe(b))
            });
            eprintln!(
                "[{done}/{total}] {}: {:?}{best}",
                rocmc_tuner::describe(&c.config),
                c.outcome
            );
        }
        _ => {}
    });
    match r {
        Ok(report) => {
            println!(
                "{} on {}, {}: {} candidates; {:.1} s compiling (where exported) and measuring",
                report.kernel,
                report.device_text(),
                report.target,
                report.candidates.len(),
                report.elapsed.as_secs_f64()
            );
            print!("{}", rocmc_tuner::table(&report, show));
            println!("wrote {}", dir.join("results.json").display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: rocmc-worker measure: {e}");
            ExitCode::from(1)
        }
    }
}

fn default_state() -> PathBuf {
    std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("rocmc-worker")
}

fn main() -> ExitCode {
    let a = Args::parse();
    if let Some(Command::Measure { dir, devices, show }) = a.command {
        return measure(&dir, devices, show);
    }
    let state = a.state.clone().unwrap_or_else(default_state);
    if a.list_devices {
        return match rocmc_remote::server::print_devices(&rocmc_runtime::list_devices()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    if a.session {
        let cfg = SessionConfig {
            state,
            memory_limit: a.session_memory,
            max_frame: a.max_frame,
            allow_crash: a.allow_crash_requests,
            open: rocmc_runtime::open_local,
        };
        return match rocmc_remote::session::run(cfg) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    let mut names = a.names.clone();
    names.extend(["localhost".to_string()]);
    let cfg = WorkerConfig {
        state,
        insecure: a.insecure,
        max_sessions: a.max_sessions,
        session_memory: a.session_memory,
        module_cache: a.module_cache,
        idle_timeout: Duration::from_secs(a.idle_timeout),
        login_timeout: Duration::from_secs(a.login_timeout),
        kernel_timeout: Duration::from_secs(a.kernel_timeout.max(1)),
        max_login_failures: a.max_login_failures.max(1),
        max_pending: a.max_pending,
        max_pending_per_address: a.max_pending_per_address,
        max_frame: a.max_frame,
        names,
        allow_crash: a.allow_crash_requests,
    };
    let w = match Worker::bind(&a.listen, cfg) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: rocmc-worker: {e}");
            return ExitCode::from(1);
        }
    };
    let addr = w.local_addr().map_or(a.listen.clone(), |x| x.to_string());
    if a.insecure {
        eprintln!("WARNING: --insecure: plain TCP without TLS. Anyone who can reach {addr} can read and alter kernels and data, and the secret travels in clear. Use only on a trusted, isolated network.");
    }
    println!("rocmc-worker listening on {addr}");
    if !a.insecure {
        println!("certificate fingerprint {}", w.fingerprint());
    }
    println!("secret in {}", w.secret_file().display());
    for d in w.devices() {
        println!("device {} {} ({})", d.name, d.target, d.description);
    }
    use rocmc_remote::confine::{expected, kernel_abi, Confinement};
    match expected() {
        Confinement::Full => println!("sessions confined (Landlock ABI {})", kernel_abi()),
        Confinement::Partial => println!(
            "sessions confined (Landlock ABI {}: files and tracing; signals need Linux 6.12)",
            kernel_abi()
        ),
        Confinement::None => eprintln!(
            "WARNING: this kernel has no Landlock: sessions (your clients' code) can read the worker's key and secret in {}",
            w.secret_file().parent().map_or_else(String::new, |p| p.display().to_string())
        ),
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    match w.serve() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: rocmc-worker: {e}");
            ExitCode::from(1)
        }
    }
}
