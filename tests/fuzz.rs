//! Structure-aware mutation fuzzing, on stable Rust and in CI.
//!
//! Two targets: kernel text → parse → validate → lower → LLVM IR (and, for
//! a share of inputs, the AMDGPU backend and lld), and the code-object /
//! offload-bundle reader. Seeds are the examples, tests/bad/ and real code
//! objects (ours and clang's); mutations flip, delete, duplicate and splice
//! bytes and insert tokens of the kernel language. Any panic fails the test
//! with the input that caused it.
//!
//! `ROCMC_FUZZ_SECS` sets the time per target (default 10),
//! `ROCMC_FUZZ_SEED` the seed (default fixed, so CI is repeatable):
//!
//! ```sh
//! ROCMC_FUZZ_SECS=600 ROCMC_FUZZ_SEED=$RANDOM cargo test -p rocmc-tests --test e2e -- fuzz:: --skip difffuzz:: --nocapture
//! ```

use crate::common::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn settings() -> (Duration, u64) {
    let secs = std::env::var("ROCMC_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let seed = std::env::var("ROCMC_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    (Duration::from_secs(secs), seed | 1)
}

const TOKENS: &[&str] = &[
    "split(",
    "cache_read(",
    "shared",
    "pad=",
    "compute_inline()",
    "compute_at(Y, r)",
    "compute_at(",
    "local",
    "cache_write(",
    "sum(",
    "reduce_max(",
    "erf(",
    "pow(",
    "fuse(",
    "tile(",
    "bind(",
    "reorder(",
    "unroll(",
    "blockIdx.x",
    "blockIdx.y",
    "threadIdx.x",
    "threadIdx.z",
    "nparts=",
    "factor=",
    "[",
    "]",
    "(",
    ")",
    "\"",
    "=",
    ",",
    ".",
    "0",
    "-1",
    "1",
    "7",
    "64",
    "1024",
    "4096",
    "2147483647",
    "4000000000000",
    "9223372036854775807",
    "99999999999999999999",
    "n",
    "i",
    "A",
    "C",
    "f16",
    "bf16",
    "f64",
    "i8",
    "u8",
    "bool",
    "i64",
    "u32",
    "max(",
    "min(",
    "select(",
    "exp(",
    "tanh(",
    "fma(",
    "f32(",
    "i32(",
    "*",
    "/",
    "%",
    "+",
    "-",
    "<",
    "&&",
    "!",
    "0.5",
    "1e-30",
    "1e38",
    "\n[[stage]]\ncompute = \"D[i] = C[i] * 2\"\nshape = [\"n\"]\n",
    "max = { n = 1 }",
    "\nsizes = [\"m\"]\n",
    "shape = [1, 2, 3, 4]",
    "\u{fffd}",
    "\\u0041",
    "'''",
    "\n",
    " ",
];

fn mutate(rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>], tokens: &[&[u8]]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let len = 1 + rng.below(16.min(v.len() - at.min(v.len() - 1)));
                let at = at.min(v.len() - 1);
                v.drain(at..(at + len).min(v.len()));
            }
            2 => {
                let t = tokens[rng.below(tokens.len())];
                v.splice(at..at, t.iter().copied());
            }
            3 if !v.is_empty() => {
                let start = rng.below(v.len());
                let end = (start + 1 + rng.below(32)).min(v.len());
                let piece = v[start..end].to_vec();
                v.splice(at..at, piece);
            }
            4 => {
                let other = &corpus[rng.below(corpus.len())];
                let from = rng.below(other.len());
                let to = (from + rng.below(200)).min(other.len());
                v.splice(at..at, other[from..to].iter().copied());
            }
            5 if v.len() >= 8 => {
                // Overwrite 8 bytes with an interesting integer (sizes, offsets, counts).
                let vals = [
                    0u64,
                    1,
                    0xff,
                    0x7fff_ffff,
                    0xffff_ffff,
                    u64::MAX,
                    1 << 40,
                    4096,
                ];
                let at = rng.below(v.len() - 7);
                v[at..at + 8].copy_from_slice(&vals[rng.below(vals.len())].to_le_bytes());
            }
            _ => {
                let cut = rng.below(v.len() + 1);
                v.truncate(cut);
            }
        }
    }
    v
}

fn report(kind: &str, seed: u64, execs: u64, input: &[u8], msg: &str) -> ! {
    let path = std::env::temp_dir().join(format!("rocmc-fuzz-crash-{kind}-{seed}.bin"));
    let _ = std::fs::write(&path, input);
    panic!(
        "{kind}: panic after {execs} executions (seed {seed}): {msg}\ninput saved to {}\n{}",
        path.display(),
        String::from_utf8_lossy(input)
    );
}

#[test]
fn fuzz_kernel_pipeline() {
    let (budget, seed) = settings();
    let mut corpus: Vec<Vec<u8>> = Vec::new();
    for dir in [root().join("examples"), root().join("tests/bad")] {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                corpus.push(std::fs::read(p).unwrap());
            }
        }
    }
    let tokens: Vec<&[u8]> = TOKENS.iter().map(|t| t.as_bytes()).collect();
    let mut rng = Rng(seed);
    let (mut execs, mut accepted, mut compiled) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    let opts = rocmc::Options::new("gfx90a");
    let target = rocmc::targets(&opts).unwrap().remove(0);
    while start.elapsed() < budget {
        let base = corpus[rng.below(corpus.len())].clone();
        let input = mutate(&mut rng, &base, &corpus, &tokens);
        let text = String::from_utf8_lossy(&input).into_owned();
        let backend_too = rng.below(8) == 0;
        let r = catch_unwind(AssertUnwindSafe(|| {
            let front = rocmc::frontend("fuzz.toml", &text)?;
            let emit = if backend_too {
                rocmc::Emit {
                    code_object: true,
                    ..Default::default()
                }
            } else {
                rocmc::Emit::default()
            };
            rocmc::backend(&front, &target, &opts, emit).map(|_| ())
        }));
        execs += 1;
        match r {
            Err(p) => report(
                "kernel",
                seed,
                execs,
                &input,
                &format!(
                    "{:?}",
                    p.downcast_ref::<String>()
                        .cloned()
                        .or(p.downcast_ref::<&str>().map(|s| s.to_string()))
                ),
            ),
            Ok(Ok(())) => {
                accepted += 1;
                compiled += backend_too as u64;
                // Inputs that still compile are good seeds for deeper mutations.
                if corpus.len() < 400 {
                    corpus.push(input);
                }
            }
            Ok(Err(e)) => {
                // Every error renders without panicking and has an exit code.
                let _ = e.to_string();
                assert!(matches!(e.exit_code(), 1 | 2));
                let backend = match &e {
                    rocmc::Error::Codegen(m) => Some(m.to_string()),
                    rocmc::Error::Link(l) => Some(l.to_string()),
                    rocmc::Error::Backend(b) => Some(b.to_string()),
                    _ => None,
                };
                if let Some(m) = backend {
                    report(
                        "kernel",
                        seed,
                        execs,
                        &input,
                        &format!("accepted input failed in the back end: {m}"),
                    );
                }
            }
        }
    }
    println!("fuzz_kernel_pipeline: {execs} executions in {:?} (seed {seed}); {accepted} accepted, {compiled} through the backend and lld", start.elapsed());
    assert!(execs > 0);
}

#[test]
fn fuzz_code_object_reader() {
    let (budget, seed) = settings();
    let mut corpus: Vec<Vec<u8>> = Vec::new();
    let src = std::fs::read_to_string(example("bias2d")).unwrap();
    for mcpu in ["gfx90a", "gfx1100", "gfx942,gfx1030"] {
        let arts = rocmc::compile_all(
            "bias2d.toml",
            &src,
            &rocmc::Options::new(mcpu),
            rocmc::Emit {
                code_object: true,
                ..Default::default()
            },
        )
        .unwrap();
        corpus.push(rocmc::bundle(&arts));
        corpus.extend(arts.into_iter().filter_map(|a| a.code_object));
    }
    let tokens: Vec<&[u8]> = vec![
        b"__CLANG_OFFLOAD_BUNDLE__",
        b"\x7fELF",
        b"AMDGPU",
        b"amdhsa.kernels",
        b".rocmc.launch",
        b"{\"version\":1}",
    ];
    let mut rng = Rng(seed);
    let (mut execs, mut ok) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < budget {
        let base = corpus[rng.below(corpus.len())].clone();
        let input = mutate(&mut rng, &base, &corpus, &tokens);
        let r = catch_unwind(AssertUnwindSafe(|| {
            use rocmc::linker::{bundle, codeobject};
            if bundle::is_bundle(&input) {
                if let Ok(entries) = bundle::read(&input) {
                    for e in entries {
                        let _ = codeobject::read(&input[e.range]);
                    }
                    return true;
                }
                false
            } else {
                codeobject::read(&input).is_ok()
            }
        }));
        execs += 1;
        match r {
            Err(p) => report(
                "reader",
                seed,
                execs,
                &input,
                &format!("{:?}", p.downcast_ref::<String>()),
            ),
            Ok(good) => ok += good as u64,
        }
    }
    println!("fuzz_code_object_reader: {execs} executions in {:?} (seed {seed}); {ok} read without error", start.elapsed());
    assert!(execs > 0);
}

/// The worker protocol as a session sees it: encoded requests (a real
/// session's traffic: open, load a CPU module, alloc, write, launch, time,
/// read) mutated byte-wise, decoded, and answered by the session code on
/// this machine's CPU device with a memory limit, as a worker runs it.
/// Undecodable frames must be refused; decodable ones answered or refused
/// with an error; nothing may panic.
#[test]
fn fuzz_worker_protocol() {
    use rocmc::remote::proto::Reply;
    use rocmc::remote::proto::{self, Request, WireArg};
    use rocmc::remote::session::{Session, SessionConfig};
    let (budget, seed) = settings();
    let src = std::fs::read_to_string(example("saxpy")).unwrap();
    let (module, _) = cpu_module(&src, &[]);
    let hash = proto::content_hash(&module);
    let n = 64u64;
    let buf = |id| WireArg::Buffer {
        id,
        dtype: "f32".into(),
        len: n,
        offset: 0,
    };
    let args = vec![
        buf(0),
        buf(1),
        buf(2),
        WireArg::Size(n as i32),
        WireArg::Scalar {
            dtype: "f32".into(),
            bytes: 1.5f32.to_le_bytes().to_vec(),
        },
    ];
    let session = vec![
        Request::LoadModule {
            hash: hash.clone(),
            proof: String::new(),
            bytes: Some(module.clone()),
        },
        Request::HasModule {
            hash: hash.clone(),
            proof: String::new(),
        },
        Request::Alloc {
            id: 0,
            bytes: n * 4,
        },
        Request::Alloc {
            id: 1,
            bytes: n * 4,
        },
        Request::Alloc {
            id: 2,
            bytes: n * 4,
        },
        Request::Write {
            id: 0,
            offset: 0,
            len: n * 4,
        },
        Request::Fill {
            id: 1,
            dtype: "f32".into(),
            seed: 7,
        },
        Request::Launch {
            module: hash.clone(),
            kernel: "saxpy".into(),
            args: args.clone(),
        },
        Request::Time {
            module: hash.clone(),
            kernel: "saxpy".into(),
            args,
            warmup: 1,
            reps: 2,
        },
        Request::Read {
            id: 2,
            offset: 0,
            len: n * 4,
        },
        Request::Free { id: 1 },
        Request::Sync,
    ];
    // Every frame of the session is a seed; the module's is large, so it is
    // mutated less often (it is one seed among twelve).
    // Seeds of the malformed-frame kinds the worker was probed with
    // (issue 35), besides the mutations below: double free, use after
    // free, out-of-range offsets, huge and many allocations, an unknown
    // request, a field of the wrong type.
    let hostile = [
        Request::Free { id: 1 },
        Request::Free { id: 1 },
        Request::Write {
            id: 1,
            offset: 0,
            len: 4,
        },
        Request::Read {
            id: 2,
            offset: u64::MAX - 3,
            len: 8,
        },
        Request::Write {
            id: 0,
            offset: n * 4 - 2,
            len: 4,
        },
        Request::Alloc {
            id: 9,
            bytes: u64::MAX,
        },
        // Over the session's 16 MiB with what it holds already.
        Request::Alloc {
            id: 10,
            bytes: 1 << 24,
        },
    ];
    let mut corpus: Vec<Vec<u8>> = session.iter().chain(&hostile).map(proto::encode).collect();
    let sync = proto::encode(&Request::Sync);
    // An unknown request: `Sync`'s encoding with another name.
    let pos = sync.windows(4).position(|w| w == b"Sync").unwrap();
    let mut unknown = sync.clone();
    unknown[pos..pos + 4].copy_from_slice(b"Nope");
    corpus.push(unknown);
    // A buffer id as a string where a number belongs.
    let free = proto::encode(&Request::Free { id: 7 });
    let mut wrong = free[..free.len() - 1].to_vec();
    wrong.extend([0xa1, b'7']);
    corpus.push(wrong);
    let tokens: Vec<&[u8]> = vec![
        b"saxpy",
        b"f32",
        b"i64",
        b"\x7fELF",
        b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff",
    ];
    let mut rng = Rng(seed);
    let cache = tempfile::tempdir().unwrap();
    let cfg = SessionConfig {
        state: cache.path().to_path_buf(),
        memory_limit: 1 << 24,
        max_frame: usize::MAX,
        allow_crash: false,
        open: rocmc::runtime::open_local,
    };
    let mut dev = Session::open(cfg, "cpu").unwrap();
    // A Write's and a Read's bytes go beside the frame, through the window
    // in a worker: here through the session's own write and read (at most
    // 64 KiB of them, whatever the mutated length says).
    let answer = |dev: &mut Session, req: Request| match req {
        Request::Write { id, offset, len } => {
            dev.write(id, offset, &vec![0x3f; len.min(1 << 16) as usize]);
            None
        }
        Request::Read { id, offset, len } => {
            let mut out = vec![0; len.min(1 << 16) as usize];
            Some(dev.read(id, offset, offset.saturating_add(len), &mut out))
        }
        req => dev.answer(req),
    };
    for r in &session {
        let reply = answer(&mut dev, r.clone());
        assert!(!matches!(reply, Some(Reply::Error(_))), "{r:?}: {reply:?}");
    }
    // The hostile seeds are refused, each with a reason, never a panic.
    for r in &hostile {
        // An asynchronous one's error comes with the next `Sync`.
        let reply = answer(&mut dev, r.clone()).or_else(|| dev.answer(Request::Sync));
        assert!(matches!(reply, Some(Reply::Error(_))), "{r:?}: {reply:?}");
    }
    for bad in &corpus[corpus.len() - 2..] {
        assert!(proto::decode::<Request>(bad).is_err());
    }
    let (mut execs, mut decoded, mut answered) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < budget {
        let base = &corpus[rng.below(corpus.len())];
        let input = mutate(&mut rng, base, &corpus, &tokens);
        let r = catch_unwind(AssertUnwindSafe(|| {
            // The frame layer: a length prefix, refused over the limit before reading.
            let mut framed = (input.len() as u32).to_le_bytes().to_vec();
            framed.extend_from_slice(&input);
            let payload = proto::read_frame(&mut std::io::Cursor::new(&framed), 1 << 20);
            let Ok(payload) = payload else {
                return (false, false);
            };
            match proto::decode::<Request>(&payload) {
                // Crash is obeyed only by workers started for isolation tests.
                Ok(Request::Crash) | Err(_) => (false, false),
                Ok(req) => (
                    true,
                    !matches!(answer(&mut dev, req), Some(Reply::Error(_))),
                ),
            }
        }));
        execs += 1;
        match r {
            Err(p) => report(
                "protocol",
                seed,
                execs,
                &input,
                &format!("{:?}", p.downcast_ref::<String>()),
            ),
            Ok((d, a)) => {
                decoded += u64::from(d);
                answered += u64::from(a);
            }
        }
    }
    eprintln!("protocol: {execs} executions, {decoded} decoded, {answered} answered without error");
    assert!(
        decoded > 0 && answered > 0,
        "the mutations never reached the session"
    );
}
