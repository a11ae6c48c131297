//! Remote execution on loopback, with real TLS, real sockets, real session
//! processes and real kernels on the worker's CPU device.

use crate::common::{cpu_module, example, examples, rocmc_bin, worker_bin, Worker};
use rocmc::remote::client::RemoteDevice;
use rocmc::remote::proto::{self, Reply, WireArg};
use rocmc::remote::tls::Pin;
use rocmc::remote::Device;
use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

/// vadd compiled for the CPU: the shared object and its launch document.
pub(crate) fn vadd() -> Vec<u8> {
    cpu_module(&std::fs::read_to_string(example("vadd")).unwrap(), &[]).0
}

/// The worker is built with the workspace, whose build gives rocmc-linker
/// its embedded lld; the worker binary still links no LLVM, statically or
/// as a library: a GPU host needs none.
#[test]
fn the_worker_links_no_llvm() {
    let ldd = Command::new("ldd").arg(worker_bin()).output().unwrap();
    let libs = String::from_utf8_lossy(&ldd.stdout);
    assert!(ldd.status.success(), "{libs}");
    for lib in ["libLLVM", "libstdc++", "libzstd"] {
        assert!(!libs.contains(lib), "{lib}:\n{libs}");
    }
    // Itanium-mangled names in namespace llvm (`_ZN4llvm`), or lld's.
    let bytes = std::fs::read(worker_bin()).unwrap();
    for sym in [&b"_ZN4llvm"[..], &b"_ZN3lld"[..]] {
        assert!(
            !bytes.windows(sym.len()).any(|w| w == sym),
            "{}",
            String::from_utf8_lossy(sym)
        );
    }
}

pub(crate) fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Runs vadd on `d` with inputs from `seed`; checks C = A + B exactly.
pub(crate) fn vadd_on(d: &mut RemoteDevice, so: &[u8], seed: u32) {
    let n = 1000 + seed as usize;
    let a: Vec<f32> = (0..n).map(|i| (i as f32) * 0.5 + seed as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 3.0 - i as f32).collect();
    let h = d.load_module(so).unwrap();
    let ids: Vec<u32> = (0..3).map(|_| d.alloc(4 * n as u64).unwrap()).collect();
    d.write(ids[0], 0, &f32s(&a)).unwrap();
    d.write(ids[1], 0, &f32s(&b)).unwrap();
    let buf = |id| WireArg::Buffer {
        id,
        dtype: "f32".into(),
        len: n as u64,
        offset: 0,
    };
    d.launch(
        &h,
        "vadd",
        &[
            buf(ids[0]),
            buf(ids[1]),
            buf(ids[2]),
            WireArg::Size(n as i32),
        ],
    )
    .unwrap();
    let c = d.read_all(ids[2]).unwrap();
    for i in 0..n {
        let got = f32::from_le_bytes(c[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!(got, a[i] + b[i], "element {i} (seed {seed})");
    }
}

#[test]
fn every_example_runs_through_a_worker_and_matches_the_interpreter() {
    let w = Worker::start(&[]);
    let known = w.state.path().join("known_workers");
    for name in examples() {
        let src = std::fs::read_to_string(example(&name)).unwrap();
        let k = rocmc::ir::parse_kernel(&name, &src).unwrap();
        let mut args: Vec<String> = vec![
            "run".into(),
            example(&name).display().to_string(),
            "--device".into(),
            w.url("cpu"),
            "--check".into(),
        ];
        let span = if k.sizes.len() > 3 { 6 } else { 60 };
        let picked: Vec<i64> = (0..k.sizes.len())
            .map(|i| 3 + ((i * 37 + 11) % span) as i64)
            .collect();
        for (s, v) in k.sizes.iter().zip(k.fit_sizes(&picked)) {
            args.push("--size".into());
            args.push(format!("{}={v}", s.name));
        }
        let out = Command::new(rocmc_bin())
            .args(&args)
            .env("ROCMC_WORKER_SECRET", &w.secret)
            .env("ROCMC_KNOWN_WORKERS", &known)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains(" ok") && !text.contains("FAIL"),
            "{name}: {text}"
        );
        assert!(
            text.contains("x86-64"),
            "{name} ran on the worker's CPU: {text}"
        );
    }
    // The first run pinned the certificate; it is the worker's.
    let pinned = std::fs::read_to_string(&known).unwrap();
    assert_eq!(pinned.lines().count(), 1, "{pinned}");
}

#[test]
fn authentication_refuses_wrong_secrets_certificates_and_protocols() {
    let w = Worker::start(&[]);
    let mut o = w.opts();
    o.secret = "not-the-secret".into();
    let e = RemoteDevice::connect(&w.url("cpu"), &o)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("wrong secret"), "{e}");

    let mut o = w.opts();
    o.pin = Some(Pin::Exact(format!("sha256:{}", "0".repeat(64))));
    let e = RemoteDevice::connect(&w.url("cpu"), &o)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("certificate changed"), "{e}");

    let mut o = w.opts();
    o.insecure = true;
    let e = RemoteDevice::connect(&w.url("cpu"), &o)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("does not speak rocmc's protocol") || e.contains("unset ROCMC_WORKER_INSECURE"),
        "{e}"
    );

    // A TLS client to a plain worker.
    let plain = Worker::start(&["--insecure"]);
    let e = RemoteDevice::connect(&plain.url("cpu"), &plain.opts())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("TLS handshake failed"), "{e}");
    let mut o = plain.opts();
    o.insecure = true;
    let so = vadd();
    vadd_on(
        &mut RemoteDevice::connect(&plain.url("cpu"), &o).unwrap(),
        &so,
        1,
    );

    // After all that, the TLS worker still serves a correct client.
    vadd_on(&mut w.connect(), &so, 2);
    let e = RemoteDevice::connect(&w.url("cuda:7"), &w.opts())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("no device `cuda:7`") && e.contains("cpu (x86-64)"),
        "{e}"
    );
}

#[test]
fn malformed_truncated_and_oversized_frames_end_only_their_session() {
    let w = Worker::start(&["--max-frame", "65536"]);
    let so = vadd();
    let mut d = w.connect();
    let mut garbage = Vec::new();
    proto::write_frame(&mut garbage, &[0xc1, 0x00, 0x13]).unwrap();
    match d.send_raw(&garbage).unwrap() {
        Reply::Error(m) => assert!(m.contains("malformed"), "{m}"),
        other => panic!("{other:?}"),
    }
    let mut d = w.connect();
    match d.send_raw(&(1u32 << 30).to_le_bytes()).unwrap() {
        Reply::Error(m) => assert!(m.contains("over the limit"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Half a frame, then the client goes away. No reply can come: the
    // client stops waiting after 5 s (the default 60 s made this test take
    // a minute; 5 s leaves the handshake room on a loaded machine).
    let opts = rocmc::remote::client::ConnectOptions {
        timeout: Duration::from_secs(5),
        ..w.opts()
    };
    let mut d = RemoteDevice::connect(&w.url("cpu"), &opts).unwrap();
    let mut half = Vec::new();
    proto::write_frame(&mut half, &[1, 2, 3, 4, 5, 6]).unwrap();
    let _ = d.send_raw(&half[..5]).err();
    drop(d);
    // A client that disconnects with a launch queued and never synchronised.
    let mut d = w.connect();
    let h = d.load_module(&so).unwrap();
    let id = d.alloc(4000).unwrap();
    let b = WireArg::Buffer {
        id,
        dtype: "f32".into(),
        len: 1000,
        offset: 0,
    };
    d.launch(&h, "vadd", &[b.clone(), b.clone(), b, WireArg::Size(1000)])
        .unwrap();
    drop(d);
    vadd_on(&mut w.connect(), &so, 3);
    // A buffer larger than the frame limit goes in parts, both ways.
    let mut d = w.connect();
    let id = d.alloc(1 << 20).unwrap();
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    d.write(id, 0, &data).unwrap();
    assert!(d.read_all(id).unwrap() == data);
    // A module over the limit is refused before it is sent, and says so.
    let e = d
        .load_module(&vec![0u8; 1 << 17])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("over the limit of 65536"), "{e}");
    vadd_on(&mut d, &so, 11);
    vadd_on(&mut w.connect(), &so, 4);
}

#[test]
fn a_crashing_session_does_not_take_down_the_worker_or_other_sessions() {
    let w = Worker::start(&["--allow-crash-requests"]);
    let so = vadd();
    let mut bystander = w.connect();
    vadd_on(&mut bystander, &so, 5);
    let mut victim = w.connect();
    let e = victim.crash().err().unwrap().to_string();
    assert!(e.contains("session process died"), "{e}");
    vadd_on(&mut bystander, &so, 6);
    vadd_on(&mut w.connect(), &so, 7);
    // The second load used the worker's cache: the module was not re-sent.
    assert!(w.state.path().join("modules").read_dir().unwrap().count() >= 1);
}

#[test]
fn sixteen_concurrent_clients_all_get_correct_results() {
    let w = Worker::start(&[]);
    let so = vadd();
    std::thread::scope(|s| {
        for seed in 0..16 {
            let (w, so) = (&w, &so);
            s.spawn(move || {
                let mut d = w.connect();
                for round in 0..3 {
                    vadd_on(&mut d, so, seed * 10 + round);
                }
            });
        }
    });
}

#[test]
fn a_session_over_its_memory_limit_is_refused_and_nothing_else_is_affected() {
    // On the CPU a buffer takes two 64 KiB guard bands beside its bytes:
    // 60,000 bytes take 191,072 and 500,000 take 631,072; vadd's three
    // small buffers then still fit.
    let w = Worker::start(&["--session-memory", "700000"]);
    let so = vadd();
    let mut d = w.connect();
    let _ = d.alloc(60_000).unwrap();
    let _ = d.alloc(500_000).unwrap();
    let e = d.synchronize().err().unwrap().to_string();
    assert!(e.contains("memory limit of 700000 bytes"), "{e}");
    assert!(e.contains("(631072 with what the device adds"), "{e}");
    vadd_on(&mut d, &so, 8);
    vadd_on(&mut w.connect(), &so, 9);
}

/// The limit counts what the device takes for a buffer, not what was
/// asked: empty buffers cost the CPU's guard bands (128 KiB), so a 64 MiB
/// session holds at most 511 of them, and its resident memory stays near
/// the limit. Before, 4,000 of them took a session to 518 MB.
#[test]
fn empty_buffers_count_what_the_device_takes_for_them() {
    let limit: u64 = 64 << 20;
    let w = Worker::start(&["--session-memory", &limit.to_string()]);
    let mut d = w.connect();
    // One word and two 64 KiB guard bands (runtime-cpu's `footprint`).
    let each: u64 = 8 + 2 * (64 << 10);
    let mut held = 0;
    let mut refused = None;
    for _ in 0..4000 {
        let _ = d.alloc(0).unwrap();
        if let Err(e) = d.synchronize() {
            refused = Some(e.to_string());
            break;
        }
        held += 1;
    }
    assert_eq!(held, limit / each, "{refused:?}");
    let e = refused.expect("refused at the limit");
    assert!(e.contains("memory limit of 67108864 bytes"), "{e}");
    let sessions = sessions_of(w.child.id());
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let peak = peak_memory(sessions[0]);
    assert!(peak < limit + (96 << 20), "session peaked at {peak} bytes");
}

/// An empty `Write` past a buffer's end is refused as the same `Read` is:
/// the worker once sent the session nothing for it, so nothing checked it.
#[test]
fn an_empty_write_past_the_end_is_refused_like_the_read() {
    let w = Worker::start(&[]);
    let mut d = w.connect();
    let id = d.alloc(16).unwrap();
    d.synchronize().unwrap();
    let frame = |r: &proto::Request| {
        let mut b = Vec::new();
        proto::write_frame(&mut b, &proto::encode(r)).unwrap();
        b
    };
    let mut raw = frame(&proto::Request::Write {
        id,
        offset: 17,
        len: 0,
    });
    raw.extend(frame(&proto::Request::Sync));
    match d.send_raw(&raw).unwrap() {
        proto::Reply::Error(e) => assert!(e.contains("writing"), "{e}"),
        other => panic!("an empty write past the end answered {other:?}"),
    }
    let read = d
        .send_raw(&frame(&proto::Request::Read {
            id,
            offset: 17,
            len: 0,
        }))
        .unwrap();
    assert!(matches!(read, proto::Reply::Error(_)), "{read:?}");
    // Inside the buffer an empty write is fine.
    let mut raw = frame(&proto::Request::Write {
        id,
        offset: 16,
        len: 0,
    });
    raw.extend(frame(&proto::Request::Sync));
    assert_eq!(d.send_raw(&raw).unwrap(), proto::Reply::Ok);
}

#[test]
fn launches_are_checked_on_the_client_before_anything_is_sent() {
    let w = Worker::start(&[]);
    let so = vadd();
    let mut d = w.connect();
    let h = d.load_module(&so).unwrap();
    let id = d.alloc(400).unwrap();
    let b = WireArg::Buffer {
        id,
        dtype: "f32".into(),
        len: 100,
        offset: 0,
    };
    let e = d
        .launch(&h, "vadd", &[b.clone(), b.clone(), b, WireArg::Size(1000)])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("must hold at least 1000 elements"), "{e}");
    d.synchronize().unwrap();
}

#[test]
fn a_killed_worker_gives_a_clear_error_and_nothing_hangs() {
    let mut w = Worker::start(&[]);
    let so = vadd();
    let mut d = w.connect();
    vadd_on(&mut d, &so, 10);
    w.child.kill().unwrap();
    w.child.wait().unwrap();
    let t = std::time::Instant::now();
    let e = d.synchronize().err().unwrap().to_string();
    assert!(e.contains("connection was lost"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(30));
    let e = RemoteDevice::connect(&w.url("cpu"), &w.opts())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("Connection refused") || e.contains("connection"),
        "{e}"
    );
}

/// A session answers every request, even one asking for more launches
/// than fit in a u32 (which once overflowed): refused with the limit.
#[test]
fn a_time_request_is_capped() {
    use rocmc::remote::proto::{Reply, Request};
    use rocmc::remote::session::{Session, SessionConfig};
    let cache = tempfile::tempdir().unwrap();
    let cfg = SessionConfig {
        state: cache.path().to_path_buf(),
        memory_limit: 1 << 20,
        max_frame: usize::MAX,
        allow_crash: false,
        open: rocmc::runtime::open_local,
    };
    let mut dev = Session::open(cfg, "cpu").unwrap();
    let r = dev.answer(Request::Time {
        module: "0".repeat(64),
        kernel: "k".into(),
        args: vec![],
        warmup: u32::MAX,
        reps: 2,
    });
    let e = match r {
        Some(Reply::Error(e)) => e,
        other => panic!("{other:?}"),
    };
    assert!(e.contains("at most 1000000"), "{e}");
    // The session still answers afterwards.
    assert_eq!(dev.answer(Request::Sync), Some(Reply::Ok));
}

/// A plain (`--insecure`) client's options for `w`.
pub(crate) fn plain_opts(w: &Worker) -> rocmc::remote::ConnectOptions {
    let mut o = w.opts();
    o.insecure = true;
    o
}

#[test]
fn a_deeply_nested_frame_is_refused_before_login_and_after() {
    // A debug worker (as tests run it) decoding 900 nested arrays
    // recursively would overflow its thread's stack and die.
    let w = Worker::start(&["--insecure"]);
    let mut deep = vec![0x91u8; 900];
    deep.push(0x01);
    let mut frame = Vec::new();
    proto::write_frame(&mut frame, &deep).unwrap();
    let mut tcp = std::net::TcpStream::connect(&w.addr).unwrap();
    tcp.write_all(&frame).unwrap();
    let mut rest = Vec::new();
    // The worker closes this connection (after refusing), nothing more.
    let _ = tcp.read_to_end(&mut rest);
    // After login, inside a request.
    let so = vadd();
    let mut d = RemoteDevice::connect(&w.url("cpu"), &plain_opts(&w)).unwrap();
    match d.send_raw(&frame).unwrap() {
        Reply::Error(m) => assert!(m.contains("nested") && m.contains("limit of 32"), "{m}"),
        other => panic!("{other:?}"),
    }
    // The worker is alive and serves.
    vadd_on(
        &mut RemoteDevice::connect(&w.url("cpu"), &plain_opts(&w)).unwrap(),
        &so,
        5,
    );
}

#[test]
fn idle_connections_cannot_lock_out_clients_with_the_secret() {
    let w = Worker::start(&["--login-timeout", "1", "--max-pending", "4"]);
    // Eight sockets that never start TLS: four are held until the login
    // deadline, the rest closed at once.
    let idle: Vec<std::net::TcpStream> = (0..8)
        .map(|_| std::net::TcpStream::connect(&w.addr).unwrap())
        .collect();
    let t0 = std::time::Instant::now();
    let mut closed = 0;
    for mut s in idle {
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut b = [0u8; 1];
        // EOF or reset: the worker closed it (not a timeout of ours).
        match s.read(&mut b) {
            Ok(0) => closed += 1,
            Err(e)
                if e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut =>
            {
                closed += 1
            }
            other => panic!("an idle connection was kept: {other:?}"),
        }
    }
    assert_eq!(closed, 8);
    assert!(t0.elapsed() < std::time::Duration::from_secs(4));
    // A client trickling its handshake is cut at the deadline too.
    let mut slow = std::net::TcpStream::connect(&w.addr).unwrap();
    slow.write_all(&[0x16]).unwrap();
    let t1 = std::time::Instant::now();
    slow.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let _ = slow.read(&mut [0u8; 1]);
    assert!(t1.elapsed() < std::time::Duration::from_secs(3));
    // And a client with the secret is served.
    let so = vadd();
    vadd_on(&mut w.connect(), &so, 6);
}

#[test]
fn an_empty_or_short_secret_is_refused_at_start() {
    for secret in ["", "\n", "short"] {
        let state = tempfile::tempdir().unwrap();
        std::fs::write(state.path().join("secret"), secret).unwrap();
        let out = Command::new(crate::common::worker_bin())
            .args(["--listen", "127.0.0.1:0", "--state"])
            .arg(state.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{secret:?}: started");
        assert!(err.contains("at least 16 are needed"), "{err}");
    }
}

#[test]
fn an_unwritable_known_workers_file_refuses_instead_of_trusting_every_certificate() {
    let w = Worker::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    // Its parent is a file: it can be neither created nor appended to
    // (whatever the user's privileges).
    std::fs::write(dir.path().join("not_a_dir"), "x").unwrap();
    let mut o = w.opts();
    o.pin = Some(Pin::KnownWorkers {
        file: dir.path().join("not_a_dir/known_workers"),
        key: w.addr.clone(),
    });
    let e = RemoteDevice::connect(&w.url("cpu"), &o)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("could not record the worker's certificate fingerprint")
            && e.contains("ROCMC_WORKER_FINGERPRINT="),
        "{e}"
    );
    // A writable one pins on first use and the connection works.
    let so = vadd();
    vadd_on(&mut w.connect(), &so, 8);
}

/// With m = 10^9, m * m = 10^18 serial steps per thread: it would run for ages.
pub(crate) const SPIN: &str = r#"
[kernel]
name = "spin"
sizes = ["n", "m"]

[inputs]
A = { dtype = "f32", shape = ["n"] }

[[stage]]
compute = "S[i] = sum(A[i] * f32(k + l), k, l)"
shape = ["n"]
reduce = { k = "m", l = "m" }
"#;

/// Loads [`SPIN`] (`so`, built for the worker's CPU) on `d` and launches
/// it for 10^18 steps: a kernel that never returns by itself. The id of
/// its output buffer.
pub(crate) fn start_spin(d: &mut RemoteDevice, so: &[u8]) -> u32 {
    let h = d.load_module(so).unwrap();
    let a = d.alloc(4).unwrap();
    let s = d.alloc(4).unwrap();
    let buf = |id| WireArg::Buffer {
        id,
        dtype: "f32".into(),
        len: 1,
        offset: 0,
    };
    d.launch(
        &h,
        "spin",
        &[
            buf(a),
            buf(s),
            WireArg::Size(1),
            WireArg::Size(1_000_000_000),
        ],
    )
    .unwrap();
    s
}

#[test]
fn a_kernel_that_never_returns_ends_its_session_at_the_kernel_timeout() {
    let (so, _) = cpu_module(SPIN, &[]);
    let w = Worker::start(&["--kernel-timeout", "1", "--max-sessions", "1"]);
    let mut d = w.connect();
    let t0 = std::time::Instant::now();
    let s = start_spin(&mut d, &so);
    // A read queued behind it: answered with the reason, not never.
    let e = d
        .read_all(s)
        .expect_err("the session was ended")
        .to_string();
    assert!(e.contains("--kernel-timeout of 1 s"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(20));
    drop(d);
    // The only session slot is free again.
    let so = vadd();
    vadd_on(&mut w.connect(), &so, 9);
}

/// Established TCP connections the local port `port` accepted (IPv4,
/// from /proc/net/tcp: local address, remote address, state 01).
fn accepted(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3
                && f[3] == "01"
                && f[1]
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
                    == Some(port)
        })
        .count()
}

/// A client killed while its kernel runs: the worker sees the socket's
/// hang-up and ends the session at once, long before --kernel-timeout, so
/// the only session slot serves the next client.
#[test]
fn a_client_that_leaves_during_a_kernel_frees_its_session_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let spin = dir.path().join("spin.toml");
    std::fs::write(&spin, SPIN).unwrap();
    let w = Worker::start(&["--kernel-timeout", "300", "--max-sessions", "1"]);
    let known = dir.path().join("known");
    let mut run = Command::new(rocmc_bin())
        .arg("run")
        .arg(&spin)
        .args([
            "--device",
            &w.url("cpu"),
            "--size",
            "n=1",
            "--size",
            "m=1000000000",
        ])
        .env("ROCMC_WORKER_SECRET", &w.secret)
        .env("ROCMC_KNOWN_WORKERS", &known)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The run compiles the kernel first, then connects, launches it and
    // waits for its result, holding the only slot. A probe that got in
    // before it would take the slot from it, so wait for its connection
    // (the kernel's TCP socket) and then as long again as a login and a
    // launch take on loopback, many times over.
    let port: u16 = w.addr.rsplit(':').next().unwrap().parse().unwrap();
    let t0 = std::time::Instant::now();
    while accepted(port) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the run never connected"
        );
        assert!(
            run.try_wait().unwrap().is_none(),
            "the run ended before connecting"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(5));
    assert!(run.try_wait().unwrap().is_none(), "the run ended early");
    let e = RemoteDevice::connect(&w.url("cpu"), &w.opts())
        .err()
        .expect("the run's session holds the only slot")
        .to_string();
    assert!(e.contains("limit of 1 sessions"), "{e}");
    run.kill().unwrap();
    run.wait().unwrap();
    let gone = std::time::Instant::now();
    let so = vadd();
    loop {
        match RemoteDevice::connect(&w.url("cpu"), &w.opts()) {
            Ok(mut d) => {
                vadd_on(&mut d, &so, 5);
                break;
            }
            Err(e) => assert!(
                gone.elapsed() < Duration::from_secs(10),
                "still refused 10 s after the client left: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn buffers_of_256_mib_and_1_gib_round_trip_with_the_default_frame_limit() {
    // A buffer's bytes are not framed: 256 MiB and more pass the default
    // 256 MiB frame limit.
    let w = Worker::start(&[]);
    let mut d = w.connect();
    for mib in [256usize, 1024] {
        let n = mib << 20;
        let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8 ^ (i >> 20) as u8).collect();
        let id = d.alloc(n as u64).unwrap();
        d.write(id, 0, &data).unwrap();
        let back = d.read_all(id).unwrap();
        assert_eq!(back.len(), n);
        assert!(back == data, "{mib} MiB differ");
        d.free(id).unwrap();
    }
    d.synchronize().unwrap();
}

#[test]
fn an_address_sending_wrong_secrets_is_locked_out_for_a_minute() {
    let w = Worker::start(&["--max-login-failures", "3"]);
    let mut bad = w.opts();
    bad.secret = "guess-0123456789abcdef".into();
    for _ in 0..3 {
        let e = RemoteDevice::connect(&w.url("cpu"), &bad)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("wrong secret"), "{e}");
    }
    // Now even the right secret is not looked at from this address.
    let e = RemoteDevice::connect(&w.url("cpu"), &w.opts())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("too many wrong secrets from this address"),
        "{e}"
    );
    // Another worker (its own count) serves the right secret at once.
    let other = Worker::start(&["--max-login-failures", "3"]);
    let so = vadd();
    vadd_on(&mut other.connect(), &so, 12);
}

/// A fuzz of the session protocol, seeded from the malformed-frame kinds
/// the worker was probed with: valid requests (every kind, random ids,
/// offsets, lengths, dtypes and arguments, a loaded module's kernel),
/// then mutated — bytes flipped, the payload cut short under a corrected
/// length, a MessagePack length made huge, a nesting prefix, a request
/// repeated — each followed by a `Sync` so that an answer is due. Every
/// case gets an answer or a closed connection, never a hang; the worker
/// keeps serving; a last client's vadd is correct.
/// The frame fuzzers' seed (`ROCMC_FRAMEFUZZ_SEED`, else `default`) and
/// their xorshift generator from it.
pub(crate) fn frame_fuzz(default: u64) -> (u64, impl FnMut() -> u64) {
    let seed: u64 = std::env::var("ROCMC_FRAMEFUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    let mut state = seed | 1;
    let next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (seed, next)
}

#[test]
fn mutated_session_frames_never_take_the_worker_down() {
    let (seed, mut next) = frame_fuzz(77);
    let w = Worker::start(&[
        "--max-frame",
        "1048576",
        "--session-memory",
        "67108864",
        "--idle-timeout",
        "3",
    ]);
    let so = vadd();
    let module = w.connect().load_module(&so).unwrap();
    let mut answered = 0;
    for case in 0..200 {
        let id = (next() % 4) as u32;
        let arg = |r: u64| match r % 4 {
            0 => WireArg::Buffer {
                id,
                dtype: ["f32", "i8", "f16", "nope"][(r / 4 % 4) as usize].into(),
                len: r / 16 % 5000,
                offset: 0,
            },
            1 => WireArg::Size((r / 4) as i32),
            _ => WireArg::Size((r % 3000) as i32),
        };
        let req = match next() % 9 {
            0 => proto::Request::Alloc {
                id,
                bytes: next() % (1 << 20),
            },
            1 => proto::Request::Write {
                id,
                offset: next() % 5000,
                len: next() % 300,
            },
            2 => proto::Request::Read {
                id,
                offset: next() % 5000,
                len: next(),
            },
            3 => proto::Request::Free { id },
            4 => proto::Request::Fill {
                id,
                dtype: ["f32", "u8", "bool", "x"][(next() % 4) as usize].into(),
                seed: next(),
            },
            5 => proto::Request::Launch {
                module: module.clone(),
                kernel: ["vadd", "nope"][(next() % 2) as usize].into(),
                args: (0..next() % 6).map(|_| arg(next())).collect(),
            },
            6 => proto::Request::Time {
                module: module.clone(),
                kernel: "vadd".into(),
                args: (0..next() % 6).map(|_| arg(next())).collect(),
                warmup: (next() % 3) as u32,
                reps: (next() % 3) as u32,
            },
            7 => proto::Request::HasModule {
                hash: format!("{:x}", next()),
                proof: format!("{:x}", next()),
            },
            _ => proto::Request::LoadModule {
                hash: module.clone(),
                proof: format!("{:x}", next()),
                bytes: None,
            },
        };
        let mut payload = proto::encode(&req);
        match next() % 6 {
            // Bytes flipped.
            0 | 1 => {
                for _ in 0..1 + next() % 4 {
                    let i = (next() as usize) % payload.len();
                    payload[i] ^= 1 << (next() % 8);
                }
            }
            // Cut short, the frame's length saying so.
            2 => payload.truncate((next() as usize) % payload.len()),
            // A str/bin/array length made huge.
            3 => {
                let i = (next() as usize) % payload.len();
                payload.splice(i..i, [0xdb, 0x7f, 0xff, 0xff, 0xff]);
            }
            // Nested arrays in front.
            4 => {
                payload.splice(0..0, vec![0x91; (next() % 64) as usize]);
            }
            // Valid, as generated.
            _ => {}
        }
        let mut bytes = Vec::new();
        proto::write_frame(&mut bytes, &payload).unwrap();
        // A Write's bytes follow its frame (as many as it announced before
        // the mutation: one announcing more waits for them until the
        // worker's idle timeout closes the connection).
        if let proto::Request::Write { len, .. } = req {
            bytes.resize(bytes.len() + len as usize, 7);
        }
        if next() % 4 == 0 {
            bytes.extend_from_within(..);
        }
        proto::write_frame(&mut bytes, &proto::encode(&proto::Request::Sync)).unwrap();
        let mut d = w.connect();
        // Buffers for the requests to find, sometimes.
        if case % 2 == 0 {
            for _ in 0..2 {
                d.alloc(4096).unwrap();
            }
        }
        let t0 = std::time::Instant::now();
        match d.send_raw(&bytes) {
            Ok(_) => answered += 1,
            Err(e) => assert!(!e.to_string().contains("timed out"), "case {case}: {e}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "case {case} hung");
    }
    println!(
        "framefuzz: seed {seed}, 200 cases, {answered} answered, the rest closed with a reason"
    );
    assert!(answered > 50, "only {answered} of 200 cases answered");
    vadd_on(&mut w.connect(), &so, 21);
}

/// The module cache is shared by content, but only with clients that hold
/// the module: one that knows only its hash is told nothing (`HasModule`
/// is false) and loads nothing; a module the device refuses is not kept;
/// the cache is readable by the worker's user only.
#[test]
fn the_module_cache_serves_only_clients_that_hold_the_module() {
    use std::os::unix::fs::PermissionsExt;
    let w = Worker::start(&[]);
    let so = vadd();
    let hash = w.connect().load_module(&so).unwrap();
    // Another client with the bytes proves it and loads from the cache.
    vadd_on(&mut w.connect(), &so, 3);
    let frame = |r: &proto::Request| {
        let mut b = Vec::new();
        proto::write_frame(&mut b, &proto::encode(r)).unwrap();
        b
    };
    let mut spy = w.connect();
    for proof in [hash.clone(), proto::possession("", &so), String::new()] {
        let has = spy
            .send_raw(&frame(&proto::Request::HasModule {
                hash: hash.clone(),
                proof: proof.clone(),
            }))
            .unwrap();
        assert_eq!(has, proto::Reply::Has(false), "proof {proof:?}");
        let load = spy
            .send_raw(&frame(&proto::Request::LoadModule {
                hash: hash.clone(),
                proof,
                bytes: None,
            }))
            .unwrap();
        match load {
            proto::Reply::Error(e) => assert!(e.contains("not in the worker's cache"), "{e}"),
            other => panic!("a load by hash alone answered {other:?}"),
        }
    }
    let cache = w.state.path().join("modules");
    let junk = b"\x7fELF, but not a shared object".to_vec();
    assert!(w.connect().load_module(&junk).is_err());
    let names: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n.starts_with(&hash)), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with(&proto::content_hash(&junk))),
        "a refused module stayed cached: {names:?}"
    );
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&cache), 0o700);
    for n in &names {
        assert_eq!(mode(&cache.join(n)), 0o600, "{n}");
    }
}

/// A possession proof is checked against the module's key, kept beside it,
/// never by reading the module: a wrong proof costs the same whether or
/// not the module is cached (hashing a cached 48 MiB module told them
/// apart, 212-255 ms against 0.2-5 ms). Shown with the cached module
/// replaced by a named pipe nobody writes: a read of it would never end,
/// and `HasModule` with a wrong proof answers at once. With the right
/// proof the bytes are read and checked: wrong ones are dropped, and the
/// next client sends them again.
#[test]
fn a_possession_proof_is_checked_without_reading_the_module() {
    let w = Worker::start(&[]);
    let so = vadd();
    let hash = w.connect().load_module(&so).unwrap();
    let cached = w
        .state
        .path()
        .join("modules")
        .join(format!("{hash}.module"));
    std::fs::remove_file(&cached).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&cached)
        .status()
        .unwrap();
    assert!(made.success());
    let frame = |r: &proto::Request| {
        let mut b = Vec::new();
        proto::write_frame(&mut b, &proto::encode(r)).unwrap();
        b
    };
    let mut spy = w.connect();
    let proof = proto::possession(spy.challenge(), &so);
    let ask = |proof: String| {
        frame(&proto::Request::HasModule {
            hash: hash.clone(),
            proof,
        })
    };
    let wrong = ask(proof[1..].to_string());
    let (tx, rx) = std::sync::mpsc::channel();
    let spy = std::thread::spawn(move || {
        let r = spy.send_raw(&wrong).unwrap();
        tx.send(r).unwrap();
        spy
    });
    let answer = rx.recv_timeout(std::time::Duration::from_secs(10));
    assert_eq!(
        answer,
        Ok(proto::Reply::Has(false)),
        "a wrong proof read the module"
    );
    let mut spy = spy.join().unwrap();
    std::fs::remove_file(&cached).unwrap();
    std::fs::write(&cached, vec![0u8; so.len()]).unwrap();
    assert_eq!(spy.send_raw(&ask(proof)).unwrap(), proto::Reply::Has(false));
    assert!(
        !cached.exists(),
        "a module whose bytes are wrong stayed cached"
    );
    vadd_on(&mut w.connect(), &so, 4);
    assert_eq!(proto::content_hash(&std::fs::read(&cached).unwrap()), hash);
}

/// The module cache keeps at most `--module-cache` bytes: the least
/// recently used module goes first, one larger than the whole cache is
/// loaded but not kept, and an evicted module is simply sent again.
#[test]
fn the_module_cache_stays_within_its_limit() {
    let so = vadd();
    let other = cpu_module(&std::fs::read_to_string(example("saxpy")).unwrap(), &[]).0;
    let limit = so.len().max(other.len()) + 16;
    let w = Worker::start(&["--module-cache", &limit.to_string()]);
    let cache = w.state.path().join("modules");
    // The modules; each is kept with its possession key, and no key alone.
    let cached = || -> Vec<String> {
        let names: Vec<String> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let mut v: Vec<String> = names
            .iter()
            .filter(|n| n.ends_with(".module"))
            .cloned()
            .collect();
        let mut keys: Vec<String> = names
            .iter()
            .filter_map(|n| n.strip_suffix(".key"))
            .map(|h| format!("{h}.module"))
            .collect();
        v.sort();
        keys.sort();
        assert_eq!(v, keys, "{names:?}");
        v
    };
    let a = w.connect().load_module(&so).unwrap();
    assert_eq!(cached(), [format!("{a}.module")]);
    let b = w.connect().load_module(&other).unwrap();
    assert_eq!(
        cached(),
        [format!("{b}.module")],
        "the older module was not evicted"
    );
    // The evicted one is sent again and runs.
    vadd_on(&mut w.connect(), &so, 9);
    assert_eq!(cached(), [format!("{a}.module")]);
    // Larger than the whole cache: loaded, not kept.
    let small = Worker::start(&["--module-cache", "100"]);
    vadd_on(&mut small.connect(), &so, 2);
    assert!(std::fs::read_dir(small.state.path().join("modules"))
        .unwrap()
        .next()
        .is_none());
}

/// A module's code runs in its session, as the worker's user; it must not
/// reach the worker's identity. A shared object with a valid launch
/// document (vadd's, copied by llvm-objcopy) and an ELF initialiser that,
/// at load, tries the worker's secret, key and certificate, the worker's
/// memory and root under /proc, and writes what it managed to a file beside
/// (outside the state folder); an ordinary file is the control. Without
/// the session's Landlock rules every probe reads.
#[test]
fn a_module_in_a_session_cannot_read_the_workers_identity() {
    use rocmc::remote::confine::{expected, Confinement};
    let w = Worker::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let so = vadd();
    let state = w.state.path().display().to_string();
    let src = format!(
        r#"#include <stdio.h>
#include <fcntl.h>
#include <unistd.h>
void vadd(void) {{}}
static void probe(FILE *out, const char *what, const char *path, int opening) {{
    char b[1];
    int fd = open(path, O_RDONLY);
    int ok = fd >= 0 && (opening || read(fd, b, 1) == 1);
    fprintf(out, "%s %s\n", what, ok ? "read" : "denied");
    if (fd >= 0) close(fd);
}}
__attribute__((constructor)) static void spy(void) {{
    char p[64];
    /* Printed, then the session ends: the client is told its last output. */
    FILE *out = stderr;
    probe(out, "secret", "{state}/secret", 0);
    probe(out, "key", "{state}/key.der", 0);
    probe(out, "cert", "{state}/cert.der", 0);
    /* The worker's memory (where the key is once loaded): opening it is
       what takes the tracing permission (offset 0 is not mapped). */
    snprintf(p, sizeof p, "/proc/%d/mem", (int)getppid());
    probe(out, "worker-memory", p, 1);
    snprintf(p, sizeof p, "/proc/%d/root{state}/secret", (int)getppid());
    probe(out, "secret-through-proc", p, 0);
    probe(out, "control", "/etc/hosts", 0);
    fflush(out);
    _exit(3);
}}
"#
    );
    let spy = hostile_module(dir.path(), "spy", &src);
    let probes = w.connect().load_module(&spy).unwrap_err().to_string();
    println!("{probes}");
    assert!(probes.contains("control read"), "{probes}");
    if expected() == Confinement::None {
        eprintln!(
            "this kernel has no Landlock: the worker's identity is readable (stated at its start)"
        );
        return;
    }
    for what in [
        "secret",
        "key",
        "cert",
        "worker-memory",
        "secret-through-proc",
    ] {
        assert!(probes.contains(&format!("{what} denied")), "{probes}");
    }
    vadd_on(&mut w.connect(), &so, 5);
}

/// A CPU module that passes for vadd's (its launch document) but runs `c`,
/// C source with a `vadd` and whatever else the probe needs, compiled by
/// clang-22: hostile host code in a session.
pub(crate) fn hostile_module(dir: &std::path::Path, name: &str, c: &str) -> Vec<u8> {
    let vadd_so = dir.join("vadd.so");
    std::fs::write(&vadd_so, vadd()).unwrap();
    let doc = dir.join("launch.bin");
    let ok = Command::new("llvm-objcopy-22")
        .arg(format!("--dump-section=.rocmc.launch={}", doc.display()))
        .arg(&vadd_so)
        .arg(dir.join("unused.so"))
        .status()
        .unwrap();
    assert!(ok.success());
    let bytes: Vec<String> = std::fs::read(&doc)
        .unwrap()
        .iter()
        .map(|b| b.to_string())
        .collect();
    let src = format!(
        "__attribute__((section(\".rocmc.launch\"), used))\nstatic const unsigned char doc[] = {{ {} }};\n{c}",
        bytes.join(",")
    );
    let path = dir.join(format!("{name}.c"));
    std::fs::write(&path, src).unwrap();
    let so = dir.join(format!("{name}.so"));
    let ok = Command::new("clang-22")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&so)
        .arg(&path)
        .status()
        .unwrap();
    assert!(ok.success());
    std::fs::read(&so).unwrap()
}

/// A session's frame toward the worker is bounded: host code that writes
/// a frame header naming 200 MiB to the protocol pipe, then 200 MiB, has
/// its session ended at the header (the worker allocated and read all of
/// it before: its peak memory rose by the frame), the client is told why,
/// and the worker serves the next client.
#[test]
fn a_session_cannot_make_the_worker_allocate_an_oversized_frame() {
    let w = Worker::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let src = format!(
        "#define REPLY_FD {}\n{}",
        rocmc::remote::link::REPLY_FD,
        r#"#include <stdlib.h>
#include <string.h>
#include <unistd.h>
void vadd(void) {}
__attribute__((constructor)) static void flood(void) {
    unsigned n = 200u << 20;
    unsigned char header[4] = { n & 255, (n >> 8) & 255, (n >> 16) & 255, n >> 24 };
    if (write(REPLY_FD, header, 4) != 4) return;
    char *junk = malloc(1 << 20);
    memset(junk, 0x90, 1 << 20);
    for (int i = 0; i < 200; i++)
        if (write(REPLY_FD, junk, 1 << 20) < 0) return;
    sleep(30);
}
"#
    );
    let so = hostile_module(dir.path(), "flood", &src);
    let before = peak_memory(w.child.id());
    let t0 = std::time::Instant::now();
    let mut d = w.connect();
    let e = d.load_module(&so).unwrap_err().to_string();
    assert!(e.contains("refuses") && e.contains("over the limit"), "{e}");
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        t0.elapsed()
    );
    let grew = peak_memory(w.child.id()).saturating_sub(before);
    assert!(
        grew < 64 << 20,
        "the worker's peak memory grew by {} MiB",
        grew >> 20
    );
    let mut next = w.connect();
    vadd_on(&mut next, &vadd(), 5);
}

/// Peak resident memory of process `pid` (`VmHWM`), bytes.
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb << 10
}

/// The worker's session processes (its children, whichever thread started them).
pub(crate) fn sessions_of(worker: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{worker}/task"))
        .unwrap()
        .flatten()
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// A 512 MiB fill and read through the worker hold the buffer once in the
/// session (the fill is made in 16 MiB parts, the read goes from the
/// device straight into the transfer window) and never in the worker:
/// `--session-memory` counts what a session holds but for a few tens of
/// MiB. Before, the same fill and read peaked at three times the buffer in
/// the session and once more in the worker.
#[test]
fn a_large_fill_and_read_make_no_whole_buffer_copies() {
    let w = Worker::start(&[]);
    let mut d = w.connect();
    let n: u64 = 512 << 20;
    let id = d.alloc(n).unwrap();
    d.fill(id, "f32", 3).unwrap();
    let back = d.read_all(id).unwrap();
    assert_eq!(back.len() as u64, n);
    assert!(back.iter().any(|&b| b != 0));
    let sessions = sessions_of(w.child.id());
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let (session, worker) = (peak_memory(sessions[0]), peak_memory(w.child.id()));
    println!(
        "peak resident memory: session {} MiB, worker {} MiB, for a {} MiB buffer",
        session >> 20,
        worker >> 20,
        n >> 20
    );
    assert!(
        session < n + (96 << 20),
        "session peaked at {session} bytes"
    );
    assert!(worker < 96 << 20, "worker peaked at {worker} bytes");
}

#[test]
fn a_kernel_reads_and_writes_views_of_buffers_through_a_worker() {
    let w = Worker::start(&[]);
    let mut d = w.connect();
    let so = vadd();
    let h = d.load_module(&so).unwrap();
    // A and C live 8 elements (32 bytes) into buffers of 40: the kernel sees
    // only its 32 elements, and C's elements around the view stay zero.
    let n = 32usize;
    let a: Vec<f32> = (0..40).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 100.0 * i as f32).collect();
    let (ia, ib, ic) = (
        d.alloc(160).unwrap(),
        d.alloc(128).unwrap(),
        d.alloc(160).unwrap(),
    );
    d.write(ia, 0, &f32s(&a)).unwrap();
    d.write(ib, 0, &f32s(&b)).unwrap();
    let view = |id, offset| WireArg::Buffer {
        id,
        dtype: "f32".into(),
        len: n as u64,
        offset,
    };
    d.launch(
        &h,
        "vadd",
        &[
            view(ia, 8),
            view(ib, 0),
            view(ic, 4),
            WireArg::Size(n as i32),
        ],
    )
    .unwrap();
    let c = d.read_all(ic).unwrap();
    let c: Vec<f32> = c
        .chunks_exact(4)
        .map(|x| f32::from_le_bytes(x.try_into().unwrap()))
        .collect();
    for (i, got) in c.iter().enumerate() {
        let want = if (4..4 + n).contains(&i) {
            a[8 + i - 4] + b[i - 4]
        } else {
            0.0
        };
        assert_eq!(*got, want, "element {i}");
    }
    // A view that leaves its buffer, or starts off a 16-byte boundary, is
    // refused by the worker's device.
    for (offset, why) in [(9, "from element 9 on"), (1, "not a multiple of 16")] {
        let mut d = w.connect();
        let h = d.load_module(&so).unwrap();
        let (ia, ic) = (d.alloc(160).unwrap(), d.alloc(160).unwrap());
        let e = d
            .launch(
                &h,
                "vadd",
                &[
                    view(ia, offset),
                    view(ia, 0),
                    view(ic, 0),
                    WireArg::Size(n as i32),
                ],
            )
            .and_then(|()| d.synchronize())
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "offset {offset}: {e}");
    }
}

#[test]
fn the_gpt2_example_runs_on_a_workers_cpu_and_matches_its_reference() {
    let w = Worker::start(&[]);
    let known = w.state.path().join("known_workers");
    let fx =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gpt2/tests/fixtures");
    let out = Command::new(crate::common::workspace_bin("gpt2"))
        .arg("--weights")
        .arg(fx.join("tiny.safetensors"))
        .arg("--ids-file")
        .arg(fx.join("prompts.txt"))
        .args(["--batch", "2", "--new", "8", "--device", &w.url("cpu")])
        .env("ROCMC_WORKER_SECRET", &w.secret)
        .env("ROCMC_KNOWN_WORKERS", &known)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("x86-64") || text.contains("host CPU"),
        "ran on the worker's CPU: {text}"
    );
    let want = std::fs::read_to_string(fx.join("tokens.txt")).unwrap();
    for (b, line) in want.lines().enumerate() {
        assert!(
            text.contains(&format!("sequence {b}: {line}")),
            "sequence {b}: {text}"
        );
    }
}
