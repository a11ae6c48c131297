//! The worker: accepts connections, authenticates them (TLS with its own
//! certificate, then the shared secret), and gives each one a session
//! process of its own, relaying frames between the two.
//!
//! The worker process never loads a GPU runtime: it learns its devices
//! from a short-lived child (`--list-devices`), and every session is a
//! fresh `exec` of this binary (`--session`), never a fork of a process
//! that initialised HIP or CUDA (ROCm's runtime is not fork-safe). A
//! session that crashes (a kernel faulting, a driver abort) ends its own
//! connection with an error; the worker and other sessions go on.

use crate::proto::{self, DeviceInfo, FrameError, Hello, Reply, Request, Welcome, VERSION};
use crate::tls::{secrets_match, Identity};
use std::io::{BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How a worker runs.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Certificate, key, secret, module cache.
    pub state: PathBuf,
    /// Plain TCP, no TLS (refused unless asked for explicitly).
    pub insecure: bool,
    /// Concurrent sessions.
    pub max_sessions: usize,
    /// Device memory per session, bytes.
    pub session_memory: u64,
    /// Bytes the module cache may hold; the least recently used modules
    /// go first.
    pub module_cache: u64,
    /// A connection silent this long is closed.
    pub idle_timeout: Duration,
    /// Wrong secrets one address may send within a minute; after that,
    /// its logins are refused, unread, until the minute is over.
    pub max_login_failures: u32,
    /// A request waiting this long for its session (a kernel that never
    /// returns, or many queued before it) ends the session, which the
    /// client is told; its slot is free again.
    pub kernel_timeout: Duration,
    /// A connection not logged in (TLS handshake and Hello) this long
    /// after it was accepted is closed, however it trickles bytes.
    pub login_timeout: Duration,
    /// Connections accepted and not yet logged in, at most; more are
    /// closed at once, so idle sockets cannot lock out clients with the
    /// secret (nor exhaust the worker's file descriptors).
    pub max_pending: usize,
    /// Largest frame, bytes.
    pub max_frame: usize,
    /// Names for the certificate (host names the worker is reached by).
    pub names: Vec<String>,
    /// Obey crash requests (isolation tests).
    pub allow_crash: bool,
}

/// A worker bound to its address, ready to serve.
pub struct Worker {
    listener: TcpListener,
    cfg: WorkerConfig,
    identity: Identity,
    tls: Option<Arc<rustls::ServerConfig>>,
    devices: Vec<DeviceInfo>,
    sessions: Arc<AtomicUsize>,
    pending: Arc<Pending>,
    /// Wrong secrets by address: how many, since when.
    failures:
        std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, (u32, std::time::Instant)>>,
}

/// The window of `max_login_failures`.
const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// Connections not logged in yet, each with its deadline: a reaper thread
/// shuts down the sockets whose deadline passed, which ends any read
/// blocked on them.
#[derive(Default)]
struct Pending {
    next: AtomicUsize,
    open: std::sync::Mutex<Vec<(usize, std::time::Instant, TcpStream)>>,
}

impl Pending {
    /// Registers `tcp` until `deadline`; `None` at the limit.
    fn admit(&self, tcp: &TcpStream, deadline: std::time::Instant, max: usize) -> Option<usize> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.len() >= max {
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        open.push((id, deadline, tcp.try_clone().ok()?));
        Some(id)
    }

    /// The connection logged in (or ended): no deadline any more.
    fn done(&self, id: usize) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|(i, _, _)| *i != id);
    }

    /// Shuts down the connections past their deadline.
    fn reap(&self) {
        let now = std::time::Instant::now();
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|(_, deadline, tcp)| {
            let late = *deadline <= now;
            if late {
                let _ = tcp.shutdown(std::net::Shutdown::Both);
            }
            !late
        });
    }
}

impl Worker {
    /// Binds `addr`, loads or creates the identity, asks a fresh process for the devices.
    pub fn bind(addr: &str, cfg: WorkerConfig) -> std::io::Result<Worker> {
        let identity = Identity::load_or_create(&cfg.state, &cfg.names)?;
        let tls = if cfg.insecure {
            None
        } else {
            Some(identity.server_config().map_err(std::io::Error::other)?)
        };
        // The module cache is the worker's user's only (an existing folder too).
        let modules = cfg.state.join("modules");
        std::fs::create_dir_all(&modules)?;
        std::fs::set_permissions(
            &modules,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )?;
        let devices = discover_devices()?;
        Ok(Worker {
            listener: TcpListener::bind(addr)?,
            cfg,
            identity,
            tls,
            devices,
            sessions: Arc::new(AtomicUsize::new(0)),
            pending: Arc::new(Pending::default()),
            failures: Default::default(),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// The certificate fingerprint clients pin.
    pub fn fingerprint(&self) -> String {
        self.identity.fingerprint()
    }

    /// Where the shared secret is kept.
    pub fn secret_file(&self) -> PathBuf {
        self.cfg.state.join("secret")
    }

    /// The devices served.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    /// Serves connections forever, one thread each.
    pub fn serve(self) -> std::io::Result<()> {
        let me = Arc::new(self);
        let pending = me.pending.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(100));
            pending.reap();
        });
        for conn in me.listener.incoming() {
            let stream = match conn {
                Ok(s) => s,
                Err(e) => {
                    // Out of file descriptors (or a transient error): wait
                    // for connections to close rather than spin.
                    eprintln!("rocmc-worker: accept: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            let deadline = std::time::Instant::now() + me.cfg.login_timeout;
            let Some(id) = me.pending.admit(&stream, deadline, me.cfg.max_pending) else {
                // Dropped: closed at once.
                continue;
            };
            let me = me.clone();
            std::thread::spawn(move || {
                let peer = stream
                    .peer_addr()
                    .map_or_else(|_| "?".into(), |a| a.to_string());
                let r = me.connection(stream, id);
                me.pending.done(id);
                if let Err(e) = r {
                    eprintln!("rocmc-worker: {peer}: {e}");
                }
            });
        }
        Ok(())
    }

    fn connection(&self, tcp: TcpStream, id: usize) -> Result<(), String> {
        let logged_in = || self.pending.done(id);
        let peer = tcp.peer_addr().ok().map(|a| a.ip());
        // Watched while a request runs: a client that leaves ends its session.
        let fd = tcp.as_raw_fd();
        tcp.set_read_timeout(Some(self.cfg.idle_timeout))
            .and_then(|_| tcp.set_nodelay(true))
            .map_err(|e| e.to_string())?;
        match &self.tls {
            Some(cfg) => {
                let conn = rustls::ServerConnection::new(cfg.clone()).map_err(|e| e.to_string())?;
                let mut s = rustls::StreamOwned::new(conn, tcp);
                // Completes the handshake before anything else: a client
                // speaking plain frames fails here.
                while s.conn.is_handshaking() {
                    s.conn
                        .complete_io(&mut s.sock)
                        .map_err(|e| format!("TLS handshake: {e}"))?;
                }
                self.session(&mut s, peer, &logged_in, fd)
            }
            None => {
                let mut s = tcp;
                self.session(&mut s, peer, &logged_in, fd)
            }
        }
    }

    /// Whether `peer` sent too many wrong secrets within the window; with
    /// `failed`, counts one more.
    fn locked_out(&self, peer: Option<std::net::IpAddr>, failed: bool) -> bool {
        let Some(ip) = peer else { return false };
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        f.retain(|_, (_, since)| now.duration_since(*since) < FAILURE_WINDOW);
        let e = f.entry(ip).or_insert((0, now));
        if failed {
            e.0 += 1;
        }
        e.0 >= self.cfg.max_login_failures
    }

    fn session<S: Read + Write>(
        &self,
        s: &mut S,
        peer: Option<std::net::IpAddr>,
        logged_in: &dyn Fn(),
        fd: std::os::fd::RawFd,
    ) -> Result<(), String> {
        let hello: Hello = proto::recv(s, 64 << 10).map_err(|e| format!("hello: {e}"))?;
        let refuse = |s: &mut S, why: String| -> Result<(), String> {
            let _ = proto::send(s, &Welcome::Refused(why.clone()));
            let _ = s.flush();
            Err(why)
        };
        if hello.version != VERSION {
            return refuse(
                s,
                format!(
                    "protocol version {} is not this worker's ({VERSION}): use the same rocmc version on both ends",
                    hello.version
                ),
            );
        }
        if self.locked_out(peer, false) {
            return refuse(
                s,
                format!(
                    "too many wrong secrets from this address (at most {} a minute); try again in a minute",
                    self.cfg.max_login_failures
                ),
            );
        }
        if !secrets_match(&hello.secret, &self.identity.secret) {
            self.locked_out(peer, true);
            return refuse(s, "wrong secret".into());
        }
        logged_in();
        let _slot = match SessionSlot::take(&self.sessions, self.cfg.max_sessions) {
            Some(slot) => slot,
            None => {
                return refuse(
                    s,
                    format!(
                        "the worker already runs its limit of {} sessions; try again later",
                        self.cfg.max_sessions
                    ),
                )
            }
        };
        let child = self
            .spawn_session()
            .map_err(|e| format!("starting a session: {e}"))?;
        let child = Arc::new(std::sync::Mutex::new(child));
        proto::send(
            s,
            &Welcome::Ok {
                version: VERSION,
                devices: self.devices.clone(),
                max_frame: self.cfg.max_frame as u64,
            },
        )
        .and_then(|_| s.flush().map_err(FrameError::from))
        .map_err(|e| e.to_string())?;
        let r = relay(s, &child, self.cfg.max_frame, self.cfg.kernel_timeout, fd);
        let mut child = child.lock().unwrap_or_else(|p| p.into_inner());
        drop(child.stdin.take());
        // A session that does not exit once its input is closed is ended.
        for _ in 0..50 {
            if let Ok(Some(_)) = child.try_wait() {
                return r;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        r
    }

    fn spawn_session(&self) -> std::io::Result<Child> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.arg("--session")
            .arg("--state")
            .arg(&self.cfg.state)
            .arg("--session-memory")
            .arg(self.cfg.session_memory.to_string())
            .arg("--module-cache")
            .arg(self.cfg.module_cache.to_string())
            .arg("--max-frame")
            .arg(self.cfg.max_frame.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if self.cfg.allow_crash {
            cmd.arg("--allow-crash-requests");
        }
        let child = cmd.spawn()?;
        if let (Some(i), Some(o)) = (&child.stdin, &child.stdout) {
            widen_pipe(i.as_raw_fd());
            widen_pipe(o.as_raw_fd());
        }
        Ok(child)
    }
}

/// Asks for a 1 MiB pipe buffer (the default 64 KiB makes a large upload
/// cost a context switch per 64 KiB between worker and session). Best
/// effort: the system's limit (`/proc/sys/fs/pipe-max-size`) may refuse.
fn widen_pipe(fd: std::os::fd::RawFd) {
    // SAFETY: F_SETPIPE_SZ on a pipe descriptor this process owns; it only
    // changes the pipe's capacity, and a failure is ignored.
    unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, 1 << 20) };
}

/// Counts a session while it lives.
struct SessionSlot(Arc<AtomicUsize>);

impl SessionSlot {
    fn take(n: &Arc<AtomicUsize>, max: usize) -> Option<SessionSlot> {
        n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
            (v < max).then_some(v + 1)
        })
        .ok()
        .map(|_| SessionSlot(n.clone()))
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Relays requests to the session process and its replies back, checking
/// each request decodes (a malformed frame ends the connection with the
/// reason) and is within the frame limit.
/// Waits for a session's reply, killing the session if none comes within
/// `limit`, or as soon as the client hangs up (its socket, `peer`, shows
/// the peer's shutdown): a watchdog thread, so the wait itself stays a
/// plain blocking read of the session's pipe.
struct Watchdog {
    /// When the current wait started, if one is on; set to `None` to stop.
    since: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    fired: Arc<std::sync::atomic::AtomicBool>,
    /// The client left while a request ran.
    departed: Arc<std::sync::atomic::AtomicBool>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

/// Whether the peer of socket `fd` has shut down or reset the connection.
fn hung_up(fd: std::os::fd::RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one pollfd for a socket the connection's thread keeps open
    // while the watchdog runs; a zero timeout never blocks.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

impl Watchdog {
    fn start(
        child: &Arc<std::sync::Mutex<Child>>,
        limit: Duration,
        peer: std::os::fd::RawFd,
    ) -> Watchdog {
        let w = Watchdog {
            since: Arc::default(),
            fired: Arc::default(),
            departed: Arc::default(),
            stop: Arc::default(),
        };
        let (since, fired, departed, stop, child) = (
            w.since.clone(),
            w.fired.clone(),
            w.departed.clone(),
            w.stop.clone(),
            child.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50).min(limit));
                let guard = since.lock().unwrap_or_else(|p| p.into_inner());
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let Some(t) = *guard else { continue };
                let (late, gone) = (t.elapsed() >= limit, hung_up(peer));
                drop(guard);
                if late || gone {
                    fired.store(late, Ordering::Relaxed);
                    departed.store(gone && !late, Ordering::Relaxed);
                    let _ = child.lock().unwrap_or_else(|p| p.into_inner()).kill();
                    return;
                }
            }
        });
        w
    }

    fn waiting(&self, on: bool) {
        *self.since.lock().unwrap_or_else(|p| p.into_inner()) = on.then(std::time::Instant::now);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn relay<S: Read + Write>(
    s: &mut S,
    child: &Arc<std::sync::Mutex<Child>>,
    max: usize,
    kernel_timeout: Duration,
    peer: std::os::fd::RawFd,
) -> Result<(), String> {
    let lock = || child.lock().unwrap_or_else(|p| p.into_inner());
    let mut to = lock().stdin.take().expect("piped");
    let mut from = BufReader::new(lock().stdout.take().expect("piped"));
    let dog = Watchdog::start(child, kernel_timeout, peer);
    loop {
        let frame = match proto::read_frame(s, max) {
            Ok(f) => f,
            Err(FrameError::Closed) => return Ok(()),
            Err(e) => {
                let _ = proto::send(s, &Reply::Error(e.to_string()));
                let _ = s.flush();
                return Err(e.to_string());
            }
        };
        let req: Request = match proto::decode(&frame) {
            Ok(r) => r,
            Err(e) => {
                let _ = proto::send(s, &Reply::Error(e.to_string()));
                let _ = s.flush();
                return Err(e.to_string());
            }
        };
        let died = |_: ()| {
            if dog.departed.load(Ordering::Relaxed) {
                let _ = lock().wait();
                return "the client left while its request ran: the session was ended".to_string();
            }
            if dog.fired.load(Ordering::Relaxed) {
                let _ = lock().wait();
                return format!(
                    "the request waited over the worker's --kernel-timeout of {} s (a kernel that does not return?): the session was ended; the worker and other sessions are unaffected",
                    kernel_timeout.as_secs_f64()
                );
            }
            let status = lock()
                .wait()
                .map_or_else(|e| e.to_string(), |s| s.to_string());
            format!(
                "the session process died ({status}); the worker and other sessions are unaffected"
            )
        };
        if proto::write_frame(&mut to, &frame)
            .and_then(|_| to.flush().map_err(FrameError::from))
            .is_err()
        {
            let why = died(());
            let _ = proto::send(s, &Reply::Error(why.clone()));
            let _ = s.flush();
            return Err(why);
        }
        if req.is_async() {
            continue;
        }
        dog.waiting(true);
        let reply = proto::read_frame(&mut from, usize::MAX);
        dog.waiting(false);
        match reply {
            Ok(reply) => {
                proto::write_frame(s, &reply)
                    .and_then(|_| s.flush().map_err(FrameError::from))
                    .map_err(|e| e.to_string())?;
            }
            Err(_) => {
                let why = died(());
                let _ = proto::send(s, &Reply::Error(why.clone()));
                let _ = s.flush();
                return Err(why);
            }
        }
    }
}

/// Runs `--list-devices` in a fresh process and reads its answer.
fn discover_devices() -> std::io::Result<Vec<DeviceInfo>> {
    let out = Command::new(std::env::current_exe()?)
        .arg("--list-devices")
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "listing devices failed: {}",
            out.status
        )));
    }
    proto::decode(&out.stdout).map_err(|e| std::io::Error::other(e.to_string()))
}

/// `--list-devices`: prints the devices as one message on stdout.
pub fn print_devices() -> std::io::Result<()> {
    std::io::stdout().write_all(&proto::encode(&crate::device::list_devices()))
}
