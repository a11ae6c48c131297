//! Helpers shared by the end-to-end tests.

use rocmc::remote::client::{ConnectOptions, RemoteDevice};
use rocmc::remote::tls::Pin;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

pub fn example(name: &str) -> PathBuf {
    root().join("examples").join(format!("{name}.toml"))
}

/// Every example kernel file that compiles for every target, sorted. The
/// matrix-core examples (an `mma` step) are shaped for one family's
/// instructions: [`matrix_examples`] lists them, and tests/mma.rs runs
/// each through every target that has its instruction.
pub fn examples() -> Vec<String> {
    all_examples()
        .into_iter()
        .filter(|n| !is_matrix(n))
        .collect()
}

/// The examples with an `mma` step, sorted.
pub fn matrix_examples() -> Vec<String> {
    all_examples()
        .into_iter()
        .filter(|n| is_matrix(n))
        .collect()
}

fn is_matrix(name: &str) -> bool {
    std::fs::read_to_string(example(name)).is_ok_and(|s| s.contains("\"mma("))
}

fn all_examples() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root().join("examples"))
        .expect("examples/")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The most work ([`rocmc::ir::Kernel::work`]) a test gives the interpreter
/// for one randomly sized run of an example: attention's 4-dimensional,
/// triangular reductions otherwise take minutes at sizes a 2-D kernel runs
/// in milliseconds.
pub const WORK_BUDGET: u128 = 1 << 26;

/// Binary `bin` of this workspace, after `cargo build --workspace
/// --all-targets` (once per test process). That build resolves features as
/// `cargo test --workspace --all-targets` does, so after scripts/test.sh's
/// build it compiles nothing; `cargo build -p PACKAGE` (or without the
/// tests' dev-dependencies) resolves them otherwise and compiled much of
/// the workspace a second time.
pub fn workspace_bin(bin: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>")
            .to_path_buf();
        let status = cargo()
            .args(["build", "-q", "--workspace", "--all-targets"])
            // A timing run (`RUSTC_BOOTSTRAP=1 e2e -Z unstable-options
            // --report-time`, docs/testing.md) must not change what cargo
            // sees, or it rebuilds the whole workspace.
            .env_remove("RUSTC_BOOTSTRAP")
            .current_dir(root())
            .status()
            .expect("cargo build");
        assert!(status.success(), "cargo build --workspace --all-targets");
        dir
    });
    let path = dir.join(bin);
    assert!(path.exists(), "{} missing", path.display());
    path
}

/// Cargo, run from a test without what Cargo set for the test process
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, …). Build scripts that declare
/// those variables (ring's) would see them change, and every nested build
/// would recompile ring, rustls and all that depends on them, twice: here,
/// and again in the next build without them.
pub fn cargo() -> Command {
    let mut c = Command::new(env!("CARGO"));
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        let set_for_tests = k.starts_with("CARGO_PKG_")
            || matches!(
                &*k,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "OUT_DIR"
            );
        if set_for_tests {
            c.env_remove(&*k);
        }
    }
    c
}

/// The `rocmc` binary of this workspace.
pub fn rocmc_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| workspace_bin("rocmc"))
}

/// Runs rocmc in `cwd` with `args`.
pub fn rocmc(cwd: &Path, args: &[&str]) -> Output {
    Command::new(rocmc_bin())
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run rocmc")
}

/// `src` (a kernel file named `name`) compiled for the AMD processor
/// `mcpu`: its code object as llvm-objdump-22 disassembles it, and the
/// assembly rocmc wrote.
pub fn amd_code(name: &str, src: &str, mcpu: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let emit = rocmc::Emit {
        asm: true,
        code_object: true,
        ..Default::default()
    };
    let art = rocmc::compile(name, src, &rocmc::Options::new(mcpu), emit)
        .unwrap_or_else(|e| panic!("{name} {mcpu}: {e}"));
    let co = dir.path().join("k.hsaco");
    std::fs::write(&co, art.code_object.unwrap()).unwrap();
    let dis = tool(
        "llvm-objdump-22",
        &["-d", &format!("--mcpu={mcpu}"), co.to_str().unwrap()],
    );
    (dis, art.asm.unwrap())
}

/// Runs a tool (llvm-readobj-22, ...) and returns its stdout; panics with its stderr on failure.
pub fn tool(name: &str, args: &[&str]) -> String {
    let out = Command::new(name)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{name}: {e} (run scripts/install-deps.sh)"));
    assert!(
        out.status.success(),
        "{name} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Files in a folder, sorted by name.
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Compiles a HIP source with clang-22 for `mcpu` (device only, no ROCm)
/// and links it with ld.lld-22; returns the code object's path.
pub fn clang_hip(dir: &Path, src: &str, mcpu: &str, cov: u32) -> PathBuf {
    let hip = dir.join("k.hip");
    std::fs::write(&hip, src).unwrap();
    let obj = dir.join(format!("clang-{}-v{cov}.o", mcpu.replace(':', "_")));
    tool(
        "clang-22",
        &[
            "-x",
            "hip",
            &format!("--offload-arch={mcpu}"),
            "--cuda-device-only",
            "-nogpulib",
            "-nogpuinc",
            "-O3",
            &format!("-mcode-object-version={cov}"),
            "-fhip-emit-relocatable",
            "-c",
            hip.to_str().unwrap(),
            "-o",
            obj.to_str().unwrap(),
        ],
    );
    let out = obj.with_extension("hsaco");
    tool(
        "ld.lld-22",
        &[
            "-shared",
            obj.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
    );
    out
}

/// NVIDIA's PTX assembler (see [`rocmc::ptxas::find`]). Panics with the way
/// to get it when there is none: the PTX tests need this independent
/// checker and must not pass without it.
pub fn ptxas() -> PathBuf {
    rocmc::ptxas::find().unwrap_or_else(|| {
        panic!("ptxas not found: run scripts/install-ptxas.sh (or set ROCMC_PTXAS)")
    })
}

pub use rocmc::ptxas::Report as PtxasReport;

/// Assembles `ptx` for `arch` with ptxas; its per-kernel report, or its output as the error.
pub fn assemble_ptx(ptx: &str, arch: &str) -> Result<Vec<PtxasReport>, String> {
    rocmc::ptxas::assemble(&ptxas(), ptx, arch)
}

/// The worker binary. It links no LLVM, though the workspace build gives
/// rocmc-linker its `lld` feature: nothing the worker calls reaches lld
/// (remote::the_worker_links_no_llvm checks).
pub fn worker_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| workspace_bin("rocmc-worker"))
}

/// A `rocmc-worker` on loopback with its own state folder; killed when dropped.
pub struct Worker {
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    pub state: tempfile::TempDir,
    pub secret: String,
    /// The certificate's fingerprint as the worker printed it (none with --insecure).
    pub fingerprint: Option<String>,
    /// What the worker wrote to its standard error so far (its first MiB).
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Worker {
    pub fn start(extra: &[&str]) -> Worker {
        Worker::start_from(worker_bin(), extra)
    }

    /// A worker started from the binary at `bin` (a copy a test may replace).
    pub fn start_from(bin: &Path, extra: &[&str]) -> Worker {
        let state = tempfile::tempdir().unwrap();
        let mut child = Command::new(bin)
            .args(["--listen", "127.0.0.1:0", "--state"])
            .arg(state.path())
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (into, err) = (log.clone(), child.stderr.take().unwrap());
        // Read to the end so the worker never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut l = into.lock().unwrap();
                if l.len() < 1 << 20 {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let addr = first.rsplit(' ').next().unwrap().to_string();
        let second = lines.next().unwrap().unwrap();
        let fingerprint = second
            .strip_prefix("certificate fingerprint ")
            .map(str::to_string);
        // Keep reading so the worker never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let secret = std::fs::read_to_string(state.path().join("secret"))
            .unwrap()
            .trim()
            .to_string();
        Worker {
            child,
            addr,
            state,
            secret,
            fingerprint,
            log,
        }
    }

    pub fn opts(&self) -> ConnectOptions {
        ConnectOptions {
            secret: self.secret.clone(),
            pin: Some(Pin::KnownWorkers {
                file: self.state.path().join("known_workers_client"),
                key: self.addr.clone(),
            }),
            insecure: false,
            timeout: Duration::from_secs(60),
        }
    }

    pub fn url(&self, dev: &str) -> String {
        format!("remote://{}/{dev}", self.addr)
    }

    pub fn connect(&self) -> RemoteDevice {
        RemoteDevice::connect(&self.url("cpu"), &self.opts()).unwrap()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A kernel compiled for the CPU with `tune` values: the shared object and its launch document.
pub fn cpu_module(
    src: &str,
    tune: &[(String, i64)],
) -> (Vec<u8>, rocmc::linker::launch::LaunchInfo) {
    let front = rocmc::frontend_with("kernel.toml", src, tune).unwrap();
    let opts = rocmc::Options::new("x86-64");
    let t = rocmc::targets(&opts).unwrap().remove(0);
    let art = rocmc::backend(
        &front,
        &t,
        &opts,
        rocmc::Emit {
            code_object: true,
            ..Default::default()
        },
    )
    .unwrap();
    (art.code_object.unwrap(), art.launch)
}

/// The kernel files of a folder under tests/ (`tests/gather`), as (name,
/// source), sorted by name.
pub fn kernel_files(folder: &str) -> Vec<(String, String)> {
    let dir = root().join("tests").join(folder);
    files_in(&dir)
        .into_iter()
        .filter(|f| f.ends_with(".toml"))
        .map(|f| {
            let src = std::fs::read_to_string(dir.join(&f)).unwrap();
            (f.trim_end_matches(".toml").to_string(), src)
        })
        .collect()
}

/// Each kernel run on the CPU path at every size (all sizes equal) and
/// compared with the reference interpreter.
pub fn check_on_the_cpu(kernels: &[(String, String)], sizes: &[i64]) {
    for (name, src) in kernels {
        let front = rocmc::frontend(name, src).unwrap_or_else(|e| panic!("{e}"));
        for &n in sizes {
            // Within the kernel's bounds, as every run requires.
            let sizes = front.kernel.fit_sizes(&vec![n; front.kernel.sizes.len()]);
            let cmp = rocmc::run::run_cpu(
                &front,
                &sizes,
                &std::collections::HashMap::new(),
                n as u64,
                false,
            )
            .unwrap_or_else(|e| panic!("{name} at {n}: {e}"));
            for c in &cmp {
                assert!(
                    c.ok(),
                    "{name} at {n}: {} differs by {}",
                    c.tensor,
                    c.max_error
                );
            }
        }
    }
}

/// Each kernel compiled to a code object for every AMD target and to PTX
/// for every NVIDIA one, which ptxas must accept.
pub fn compile_everywhere(kernels: &[(String, String)], amd: &[&str], nvidia: &[&str]) {
    for (name, src) in kernels {
        for t in amd {
            let emit = rocmc::Emit {
                code_object: true,
                ..Default::default()
            };
            let art = rocmc::compile(name, src, &rocmc::Options::new(t), emit)
                .unwrap_or_else(|e| panic!("{name} for {t}: {e}"));
            assert!(art.code_object.is_some_and(|c| c.starts_with(b"\x7fELF")));
        }
        for t in nvidia {
            let emit = rocmc::Emit {
                asm: true,
                ..Default::default()
            };
            let art = rocmc::compile(name, src, &rocmc::Options::new(t), emit)
                .unwrap_or_else(|e| panic!("{name} for {t}: {e}"));
            let ptx = art.asm.unwrap_or_default();
            assert!(ptx.contains(".entry"), "{name} for {t}: no entry in\n{ptx}");
            assemble_ptx(&ptx, t).unwrap_or_else(|e| panic!("ptxas refused {name} for {t}:\n{e}"));
        }
    }
}

/// The PTX rocmc writes for `src` and NVIDIA processor `mcpu`.
pub fn ptx_of(name: &str, src: &str, mcpu: &str) -> String {
    let emit = rocmc::Emit {
        asm: true,
        ..Default::default()
    };
    rocmc::compile(name, src, &rocmc::Options::new(mcpu), emit)
        .unwrap_or_else(|e| panic!("{name} for {mcpu}: {e}"))
        .asm
        .expect("PTX")
}

/// Each kernel lowered to loop IR and executed the way a GPU runs it (the
/// interpreter's `run_lowered`) at every size, against its meaning
/// (`run`), every tensor in memory within the dtype's tolerance.
pub fn check_lowered(kernels: &[(String, String)], sizes: &[i64]) {
    use rocmc::ir::{interp, reference};
    for (name, src) in kernels {
        let k = rocmc::ir::parse_kernel(name, src).unwrap_or_else(|e| panic!("{}", e.render()));
        let prog = rocmc::ir::lower(&k).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        for &n in sizes {
            // Within the kernel's bounds, as every run requires.
            let sizes = k.fit_sizes(&vec![n; k.sizes.len()]);
            let inputs =
                reference::random_inputs(&k, &sizes, &std::collections::HashMap::new(), n as u64)
                    .unwrap()
                    .inputs;
            let want = interp::run(&k, &sizes, &[], &inputs).unwrap();
            let got = interp::run_lowered(&k, &prog, &sizes, &[], &inputs).unwrap();
            let cmp =
                reference::compare(&k, &want, |i| Ok::<_, String>(got[i].to_bytes())).unwrap();
            for c in cmp {
                assert!(
                    c.ok(),
                    "{name} at {n}: {} differs by {}",
                    c.tensor,
                    c.max_error
                );
            }
        }
    }
}

/// An NPY 1.0 file: magic, version, header length, the header dict padded
/// with spaces to a multiple of 64 bytes, then the little-endian data.
pub fn npy_file(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

/// A kernel file of bench/gpu/variants (another schedule of an example).
pub fn variant(name: &str) -> String {
    std::fs::read_to_string(root().join(format!("bench/gpu/variants/{name}.toml"))).unwrap()
}

/// The error compiling `src` for `mcpu` gives (it must fail).
pub fn refusal(src: &str, mcpu: &str) -> String {
    rocmc::compile(
        "k.toml",
        src,
        &rocmc::Options::new(mcpu),
        rocmc::Emit::default(),
    )
    .expect_err("refused")
    .to_string()
}

/// The CPU's comparisons with the interpreter of `src` lowered for the
/// emulated `processor` at `sizes` (through its matrix instructions' lane
/// layouts).
pub fn emulated(
    src: &str,
    processor: &str,
    sizes: &[(&str, i64)],
) -> Result<Vec<rocmc::run::Comparison>, String> {
    let front = rocmc::frontend("k.toml", src).map_err(|e| e.to_string())?;
    let mut o = rocmc::Options::new("x86-64");
    o.emulate = Some(processor.into());
    o.fp_contract = false;
    let cpu = rocmc::targets(&o).unwrap().remove(0);
    let lowered = front.for_target(&cpu, &o).map_err(|e| e.to_string())?;
    let given: std::collections::HashMap<String, i64> =
        sizes.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    let sizes = rocmc::run::size_values(&lowered.kernel, &given).unwrap();
    rocmc::run::run_cpu(
        &lowered,
        &sizes,
        &std::collections::HashMap::new(),
        5,
        false,
    )
    .map_err(|e| e.to_string())
}

/// `src` compiled for sm_90a with its PTX, which ptxas assembles with no
/// wgmma serialized; and ptxas's reports.
pub fn sm_90a_with_reports(src: &str) -> (rocmc::Artifact, Vec<PtxasReport>) {
    let art = rocmc::compile(
        "k.toml",
        src,
        &rocmc::Options::new("sm_90a"),
        rocmc::Emit {
            asm: true,
            ..Default::default()
        },
    )
    .unwrap();
    let reports = assemble_ptx(art.asm.as_deref().unwrap(), "sm_90a").unwrap();
    assert!(reports.iter().all(|r| !r.wgmma_serialized), "{reports:?}");
    (art, reports)
}
