//! The eight holes an attacker's probes found in the worker (issue 66),
//! each probed as the attacker did: real session processes running hostile
//! host code, real sockets on loopback. Each test failed before its fix.

use crate::common::{worker_bin, Worker};
use crate::remote::{frame_fuzz, hostile_module, sessions_of, start_spin, vadd, vadd_on, SPIN};
use rocmc::remote::proto::{self, Reply, Request, WireArg};
use rocmc::remote::Device;
use std::io::Write;
use std::time::{Duration, Instant};

/// The descriptor a session's replies go to the worker on.
const REPLIES_FD: i32 = rocmc::remote::link::REPLY_FD;

/// Loads `module` in a fresh session of `w`, whose host code prints its
/// probes to standard error and exits: the client's error carries what the
/// session printed.
fn probe(w: &Worker, module: &[u8]) -> String {
    let e = w.connect().load_module(module).unwrap_err().to_string();
    println!("{e}");
    e
}

/// Hole 1: a session wrote beside the worker's binary and replaced the
/// file the next session was started from. Now the sandbox refuses every
/// write outside the session's scratch, and sessions start from the binary
/// the worker opened at start, whatever lies at its path since.
#[test]
fn sessions_start_from_the_binary_the_worker_opened_whatever_lies_at_its_path() {
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join("rocmc-worker");
    std::fs::copy(worker_bin(), &bin).unwrap();
    let w = Worker::start_from(&bin, &[]);
    let dir = tempfile::tempdir().unwrap();
    let src = format!(
        r#"#include <stdio.h>
#include <fcntl.h>
#include <unistd.h>
void vadd(void) {{}}
__attribute__((constructor)) static void tamper(void) {{
    int fd = open("{bin} (deleted)", O_WRONLY | O_CREAT, 0755);
    fprintf(stderr, "plant %s\n", fd >= 0 ? "made" : "denied");
    fprintf(stderr, "unlink %s\n", unlink("{bin}") == 0 ? "done" : "denied");
    fd = open("{dir}/elsewhere", O_WRONLY | O_CREAT, 0644);
    fprintf(stderr, "elsewhere %s\n", fd >= 0 ? "made" : "denied");
    fflush(stderr);
    _exit(3);
}}
"#,
        bin = bin.display(),
        dir = dir.path().display(),
    );
    let e = probe(&w, &hostile_module(dir.path(), "tamper", &src));
    for denied in ["plant denied", "unlink denied", "elsewhere denied"] {
        assert!(e.contains(denied), "{e}");
    }
    // What a session could do before: the binary unlinked and a script at
    // both its path and the one /proc/self/exe then names. The next
    // session must still be the worker's own.
    let mark = dir.path().join("impostor-ran");
    let script = format!(
        "#!/bin/sh\ntouch {}\nexec {} \"$@\"\n",
        mark.display(),
        worker_bin().display()
    );
    std::fs::remove_file(&bin).unwrap();
    for at in [bin.clone(), home.path().join("rocmc-worker (deleted)")] {
        std::fs::write(&at, &script).unwrap();
        std::fs::set_permissions(&at, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    vadd_on(&mut w.connect(), &vadd(), 3);
    assert!(
        !mark.exists(),
        "a session was started from the replaced file"
    );
}

/// Hole 2: host code listed the module cache, read another client's
/// module and could create and delete files there. Now a session never
/// sees the cache: the worker keeps it and hands the session a module's
/// bytes.
#[test]
fn a_session_cannot_see_the_module_cache() {
    let w = Worker::start(&[]);
    let so = vadd();
    // Another client's module, cached.
    w.connect().load_module(&so).unwrap();
    let cache = w.state.path().join("modules");
    let theirs = cache.join(format!("{}.module", proto::content_hash(&so)));
    assert!(theirs.exists());
    let dir = tempfile::tempdir().unwrap();
    let src = format!(
        r#"#include <stdio.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
void vadd(void) {{}}
__attribute__((constructor)) static void spy(void) {{
    DIR *d = opendir("{cache}");
    fprintf(stderr, "list %s\n", d ? "listed" : "denied");
    int fd = open("{theirs}", O_RDONLY);
    fprintf(stderr, "read %s\n", fd >= 0 ? "opened" : "denied");
    fd = open("{cache}/planted.module", O_WRONLY | O_CREAT, 0600);
    fprintf(stderr, "create %s\n", fd >= 0 ? "made" : "denied");
    fprintf(stderr, "delete %s\n", unlink("{theirs}") == 0 ? "done" : "denied");
    fflush(stderr);
    _exit(3);
}}
"#,
        cache = cache.display(),
        theirs = theirs.display(),
    );
    let e = probe(&w, &hostile_module(dir.path(), "spy", &src));
    for denied in [
        "list denied",
        "read denied",
        "create denied",
        "delete denied",
    ] {
        assert!(e.contains(denied), "{e}");
    }
    assert!(theirs.exists());
    // The cache still serves the client that holds the module.
    vadd_on(&mut w.connect(), &so, 4);
}

/// A TCP connection to `to` from the loopback address `from`.
fn connect_from(from: std::net::Ipv4Addr, to: &str) -> std::io::Result<std::net::TcpStream> {
    use socket2::{Domain, Socket, Type};
    let to: std::net::SocketAddr = to.parse().unwrap();
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    s.bind(&std::net::SocketAddr::from((from, 0)).into())?;
    s.connect(&to.into())?;
    Ok(s.into())
}

/// Hole 3: 64 idle connections, reopened as the worker dropped them at the
/// login deadline, kept every pending place full: a client with the secret
/// got in 0 times in 26. Now each address holds a bounded share of the
/// silent places and a full table makes room by dropping the oldest silent
/// connection of the address holding most. The attacker here reopens as
/// fast as it is dropped, from 8 addresses other than the client's.
#[test]
fn idle_connections_from_many_addresses_cannot_lock_out_a_client_with_the_secret() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let w = Worker::start(&["--login-timeout", "2", "--max-pending", "16"]);
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    let attacker = {
        let (stop, opened, addr) = (stop.clone(), opened.clone(), w.addr.clone());
        std::thread::spawn(move || {
            // 64 idle sockets from 8 addresses, each reopened once closed.
            let mut held: Vec<Option<std::net::TcpStream>> = (0..64).map(|_| None).collect();
            while !stop.load(Ordering::Relaxed) {
                for (i, slot) in held.iter_mut().enumerate() {
                    let closed = slot.as_ref().is_none_or(|s| {
                        s.set_nonblocking(true).unwrap();
                        let r = s.peek(&mut [0u8; 1]);
                        !matches!(r, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
                    });
                    if closed {
                        // Not the client's own address (127.0.0.1): a
                        // flood from that one can outrun its handshake.
                        let from = std::net::Ipv4Addr::new(127, 0, 0, 2 + (i % 8) as u8);
                        *slot = connect_from(from, &addr).ok();
                        opened.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    std::thread::sleep(Duration::from_secs(3));
    let so = vadd();
    let mut served = 0;
    for seed in 0..8 {
        match rocmc::remote::RemoteDevice::connect(&w.url("cpu"), &w.opts()) {
            Ok(mut d) => {
                vadd_on(&mut d, &so, seed);
                served += 1;
            }
            Err(e) => println!("login {seed}: {e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    attacker.join().unwrap();
    let opened = opened.load(Ordering::Relaxed);
    println!("{served} of 8 logins served while {opened} idle connections were opened");
    assert!(opened > 64, "the attacker's connections were never dropped");
    assert_eq!(served, 8);
}

/// Hole 4: a kernel that wrote to its standard output wrote into the
/// protocol: one undecodable frame, and the worker waited for its session
/// forever. Now the protocol has descriptors of its own; what a kernel
/// prints is captured and logged by the worker, bounded.
#[test]
fn a_kernel_that_prints_does_not_touch_the_protocol() {
    let w = Worker::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let src = r#"#include <stdio.h>
#include <unistd.h>
void vadd(void) {
    /* A whole frame of bytes no MessagePack value starts with. */
    unsigned char frame[12] = { 8, 0, 0, 0, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1 };
    if (write(1, frame, sizeof frame) != sizeof frame) return;
    printf("debug: inside the kernel\n");
    fflush(stdout);
    fprintf(stderr, "debug: on standard error\n");
}
"#;
    let so = hostile_module(dir.path(), "chatty", src);
    let mut d = w.connect();
    let h = d.load_module(&so).unwrap();
    let bufs: Vec<WireArg> = (0..3)
        .map(|_| WireArg::Buffer {
            id: d.alloc(64).unwrap(),
            dtype: "f32".into(),
            len: 16,
            offset: 0,
        })
        .collect();
    let args = [bufs, vec![WireArg::Size(16)]].concat();
    for _ in 0..3 {
        d.launch(&h, "vadd", &args).unwrap();
        d.synchronize().unwrap();
    }
    vadd_on(&mut d, &vadd(), 5);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !w.log.lock().unwrap().contains("debug: on standard error") {
        assert!(Instant::now() < deadline, "{}", w.log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(w.log.lock().unwrap().contains("debug: inside the kernel"));
}

/// Hole 6: a spinning kernel with about a megabyte of asynchronous frames
/// queued behind it blocked the worker writing to its session, with no
/// deadline, and the session spun on long after its client left. (The
/// client's leaving cannot be seen here: its unsent frames queue ahead of
/// its FIN, into a window the blocked worker never opens.) Now every write
/// to a session is watched as a wait for a reply is: --kernel-timeout (or
/// the client's hang-up, where it shows) ends the session.
#[test]
fn a_session_blocked_behind_a_spinning_kernel_ends_at_the_kernel_timeout() {
    let w = Worker::start(&["--insecure", "--kernel-timeout", "3"]);
    let (so, _) = crate::common::cpu_module(SPIN, &[]);
    let hash = proto::content_hash(&so);
    let mut tcp = std::net::TcpStream::connect(&w.addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let say = |tcp: &mut std::net::TcpStream, r: &Request| {
        proto::send(tcp, r).unwrap();
        tcp.flush().unwrap();
    };
    proto::send(
        &mut tcp,
        &proto::Hello {
            version: proto::VERSION,
            secret: w.secret.clone(),
        },
    )
    .unwrap();
    let welcome: proto::Welcome = proto::recv(&mut tcp, 1 << 20).unwrap();
    assert!(matches!(welcome, proto::Welcome::Ok { .. }), "{welcome:?}");
    say(
        &mut tcp,
        &Request::Open {
            device: "cpu".into(),
        },
    );
    let _: Reply = proto::recv(&mut tcp, 1 << 20).unwrap();
    say(
        &mut tcp,
        &Request::LoadModule {
            hash: hash.clone(),
            proof: String::new(),
            bytes: Some(so),
        },
    );
    let r: Reply = proto::recv(&mut tcp, 1 << 20).unwrap();
    assert_eq!(r, Reply::Ok);
    for id in 0..2 {
        say(&mut tcp, &Request::Alloc { id, bytes: 4 });
    }
    let buf = |id| WireArg::Buffer {
        id,
        dtype: "f32".into(),
        len: 1,
        offset: 0,
    };
    let spin = Request::Launch {
        module: hash,
        kernel: "spin".into(),
        args: vec![
            buf(0),
            buf(1),
            WireArg::Size(1),
            WireArg::Size(1_000_000_000),
        ],
    };
    // The spinning launch and 8 MiB of launches behind it, from a thread:
    // the worker stops reading once its pipe to the session is full.
    let mut writer = tcp.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let queue = std::thread::spawn(move || {
        let mut frames = Vec::new();
        while frames.len() < 8 << 20 {
            proto::send(&mut frames, &spin).unwrap();
        }
        let _ = writer.write_all(&frames);
    });
    std::thread::sleep(Duration::from_secs(3));
    let sessions = sessions_of(w.child.id());
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    // The client leaves.
    tcp.shutdown(std::net::Shutdown::Both).unwrap();
    drop(tcp);
    let _ = queue.join();
    let left = Instant::now();
    while !sessions_of(w.child.id()).is_empty() {
        assert!(
            left.elapsed() < Duration::from_secs(8),
            "the session spins on {:?} after its client left; the worker said:\n{}",
            left.elapsed(),
            w.log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Junk and oversized frames from a session toward the worker (host code
/// writing to the reply descriptor before the session's own reply): each
/// ends only its own session, within bounded time, with a reason; the
/// worker serves the next client.
#[test]
fn junk_frames_from_a_session_end_only_that_session() {
    let (seed, mut next) = frame_fuzz(91);
    let w = Worker::start(&["--kernel-timeout", "10"]);
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.bin");
    let src = format!(
        r#"#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
void vadd(void) {{}}
__attribute__((constructor)) static void junk(void) {{
    static unsigned char b[1 << 16];
    FILE *f = fopen("{junk}", "rb");
    if (!f) return;
    size_t n = fread(b, 1, sizeof b, f);
    if (write({fd}, b, n) < 0) return;
}}
"#,
        junk = junk.display(),
        fd = REPLIES_FD,
    );
    let module = hostile_module(dir.path(), "junk", &src);
    let seeds: Vec<Vec<u8>> = [
        Reply::Ok,
        Reply::Error("x".into()),
        Reply::Has(true),
        Reply::Data { len: 1 << 40 },
        Reply::Opened {
            challenge: "0".repeat(64),
        },
        Reply::Times(vec![1.0; 4]),
    ]
    .iter()
    .map(proto::encode)
    .collect();
    let mut endings = std::collections::BTreeMap::<String, usize>::new();
    for case in 0..24 {
        let mut payload = seeds[(next() % seeds.len() as u64) as usize].clone();
        let mut bytes = Vec::new();
        match next() % 5 {
            0 => {
                let i = (next() as usize) % payload.len();
                payload[i] ^= 1 << (next() % 8);
                proto::write_frame(&mut bytes, &payload).unwrap();
            }
            // A header naming more than the worker takes from a session.
            1 => bytes.extend(((next() % 0xffff_ffff) as u32 | 1 << 28).to_le_bytes()),
            // Cut short.
            2 => {
                proto::write_frame(&mut bytes, &payload).unwrap();
                bytes.truncate((next() as usize) % bytes.len());
            }
            // Nested arrays in front.
            3 => {
                payload.splice(0..0, vec![0x91; (next() % 64) as usize]);
                proto::write_frame(&mut bytes, &payload).unwrap();
            }
            // Valid, as generated: a reply to a request not asked.
            _ => proto::write_frame(&mut bytes, &payload).unwrap(),
        }
        std::fs::write(&junk, &bytes).unwrap();
        let t0 = Instant::now();
        let mut d = w.connect();
        let how = match d.load_module(&module) {
            Ok(_) => match d.synchronize() {
                Ok(()) => "answered".to_string(),
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        };
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "case {case} hung: {how}"
        );
        let kind = how.split(':').next().unwrap_or_default().to_string();
        *endings.entry(kind).or_default() += 1;
    }
    println!("session framefuzz: seed {seed}, 24 cases: {endings:?}");
    vadd_on(&mut w.connect(), &vadd(), 22);
}

/// A worker killed while its session spins a kernel takes the session with
/// it (the session has the parent-death signal): before, the session spun
/// on, orphaned, until killed by hand (four of them, left by earlier test
/// runs, once took 1.5 of this machine's 2 cores).
#[test]
fn sessions_die_with_their_worker() {
    let mut w = Worker::start(&[]);
    let (so, _) = crate::common::cpu_module(SPIN, &[]);
    let mut d = w.connect();
    start_spin(&mut d, &so);
    // Sent (launches are queued until a wait), and waited for elsewhere.
    let waiter = std::thread::spawn(move || d.synchronize());
    std::thread::sleep(Duration::from_millis(1500));
    let sessions = sessions_of(w.child.id());
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    w.child.kill().unwrap();
    w.child.wait().unwrap();
    let gone = Instant::now();
    // Gone, or a zombie about to be reaped by whoever adopted it.
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| !r.trim_start().starts_with('Z'))
        })
    };
    while alive(sessions[0]) {
        assert!(
            gone.elapsed() < Duration::from_secs(5),
            "session {} outlived its worker",
            sessions[0]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(waiter.join().unwrap().is_err());
}
