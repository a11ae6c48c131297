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

use crate::proto::{self, DeviceInfo, FrameError, Hello, Welcome, VERSION};
use crate::tls::{secrets_match, Identity};
use crate::window::{Window, SESSION_FD};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod relay;

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
        let mut window = Window::create(crate::window::SLOT)
            .map_err(|e| format!("making the session's transfer window: {e}"))?;
        let child = self
            .spawn_session(&window)
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
        let r = relay::relay(
            s,
            &child,
            &mut window,
            self.cfg.max_frame,
            self.cfg.kernel_timeout,
            fd,
        );
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

    fn spawn_session(&self, window: &Window) -> std::io::Result<Child> {
        use std::os::unix::process::CommandExt;
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
        // The window goes to this session only: it is close-on-exec here,
        // and duplicated onto the session's descriptor in its child alone.
        let fd = window.fd();
        // SAFETY: the closure runs between fork and exec and calls only
        // dup2 and fcntl, which are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if fd == SESSION_FD {
                    libc::fcntl(fd, libc::F_SETFD, 0);
                } else if libc::dup2(fd, SESSION_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
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
