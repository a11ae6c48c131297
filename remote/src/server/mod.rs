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

use crate::link::{REPLY_FD, REQUEST_FD};
use crate::proto::{self, DeviceInfo, FrameError, Hello, Welcome, VERSION};
use crate::tls::{secrets_match, Identity};
use crate::window::{Window, SESSION_FD};
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod cache;
mod output;
mod pending;
mod relay;

use cache::ModuleCache;
use pending::Pending;

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
    /// Connections accepted and not yet logged in, at most (so idle
    /// sockets cannot exhaust the worker's file descriptors). A new one
    /// past the limit takes the place of the oldest connection of the
    /// address holding most, so idle sockets cannot lock out a client
    /// with the secret either.
    pub max_pending: usize,
    /// Of those, silent ones (no byte sent yet) from one address at most; a
    /// new one past it takes the place of that address's oldest silent one.
    pub max_pending_per_address: usize,
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
    /// This binary, opened at start: sessions are started from it, never
    /// from a path, which a session (or anyone) could have replaced since.
    exe: std::fs::File,
    cache: ModuleCache,
    identity: Identity,
    tls: Option<Arc<rustls::ServerConfig>>,
    devices: Vec<DeviceInfo>,
    sessions: Arc<AtomicUsize>,
    pending: Arc<Pending>,
    /// Wrong secrets by address: how many, since when.
    failures: std::sync::Mutex<std::collections::HashMap<IpAddr, (u32, Instant)>>,
}

/// The window of `max_login_failures`.
const FAILURE_WINDOW: Duration = Duration::from_secs(60);

impl Worker {
    /// Binds `addr`, loads or creates the identity, asks a fresh process for the devices.
    pub fn bind(addr: &str, cfg: WorkerConfig) -> std::io::Result<Worker> {
        // Before anything can change the file at our path.
        let exe = above_session_fds(std::fs::File::open("/proc/self/exe")?)?;
        more_descriptors();
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
        let devices = discover_devices(&exe)?;
        let pending = Pending::new(cfg.max_pending, cfg.max_pending_per_address);
        Ok(Worker {
            listener: TcpListener::bind(addr)?,
            cache: ModuleCache::new(modules, cfg.module_cache),
            cfg,
            exe,
            identity,
            tls,
            devices,
            sessions: Arc::new(AtomicUsize::new(0)),
            pending: Arc::new(pending),
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
                Ok(s) => Arc::new(s),
                Err(e) => {
                    // Out of file descriptors (or a transient error): wait
                    // for connections to close rather than spin.
                    eprintln!("rocmc-worker: accept: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            let Ok(peer) = stream.peer_addr() else {
                continue;
            };
            let deadline = Instant::now() + me.cfg.login_timeout;
            let id = me.pending.admit(&stream, peer.ip(), deadline);
            let me = me.clone();
            std::thread::spawn(move || {
                let r = me.connection(&stream, id);
                me.pending.done(id);
                if let Err(e) = r {
                    eprintln!("rocmc-worker: {peer}: {e}");
                }
            });
        }
        Ok(())
    }

    fn connection(&self, tcp: &TcpStream, id: usize) -> Result<(), String> {
        let logged_in = || self.pending.done(id);
        let peer = tcp.peer_addr().ok().map(|a| a.ip());
        // Watched while a request runs: a client that leaves ends its session.
        let fd = tcp.as_raw_fd();
        tcp.set_read_timeout(Some(self.cfg.idle_timeout))
            .and_then(|_| tcp.set_nodelay(true))
            .map_err(|e| e.to_string())?;
        // Its first byte (or the login deadline): from then on it is not
        // one of the silent connections a full table drops first.
        if tcp.peek(&mut [0u8; 1]).map_err(|e| e.to_string())? == 0 {
            return Ok(());
        }
        self.pending.heard(id);
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
    fn locked_out(&self, peer: Option<IpAddr>, failed: bool) -> bool {
        let Some(ip) = peer else { return false };
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
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
        peer: Option<IpAddr>,
        logged_in: &dyn Fn(),
        fd: RawFd,
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
        let who = peer.map_or_else(|| "?".to_string(), |p| p.to_string());
        let (child, channel, output) = self
            .spawn_session(&window, &who)
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
            relay::Session {
                child: &child,
                channel,
                output,
                window: &mut window,
                cache: &self.cache,
                challenge: crate::tls::random_secret(),
            },
            self.cfg.max_frame,
            self.cfg.kernel_timeout,
            fd,
        );
        // The channel is closed (the relay owned it): a session that does
        // not exit once its input is closed is ended.
        let mut child = child.lock().unwrap_or_else(|p| p.into_inner());
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

    /// Starts a session from the binary opened at start, with its window on
    /// [`SESSION_FD`], its channel on [`REQUEST_FD`] and [`REPLY_FD`], and
    /// its standard output and error drained into the worker's log.
    fn spawn_session(
        &self,
        window: &Window,
        who: &str,
    ) -> std::io::Result<(Child, relay::Channel, output::Output)> {
        use std::os::unix::process::CommandExt;
        let (requests, to) = std::io::pipe()?;
        let (from, replies) = std::io::pipe()?;
        let (printed, prints) = std::io::pipe()?;
        let mut cmd = exe_command(&self.exe);
        cmd.arg("--session")
            .arg("--state")
            .arg(&self.cfg.state)
            .arg("--session-memory")
            .arg(self.cfg.session_memory.to_string())
            .arg("--max-frame")
            .arg(self.cfg.max_frame.to_string())
            .stdin(Stdio::null())
            .stdout(prints.try_clone()?)
            .stderr(prints);
        if self.cfg.allow_crash {
            cmd.arg("--allow-crash-requests");
        }
        // Each descriptor goes to this session only: close-on-exec here,
        // duplicated onto the session's numbers in its child alone.
        let give = [
            (window.fd(), SESSION_FD),
            (requests.as_raw_fd(), REQUEST_FD),
            (replies.as_raw_fd(), REPLY_FD),
        ];
        let worker = std::process::id();
        // SAFETY: the closure runs between fork and exec and calls only
        // fcntl, dup2, prctl and getppid, which are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                hand_over(&give)?;
                die_with(worker)
            });
        }
        let child = cmd.spawn()?;
        // The session's ends, ours no more.
        drop((requests, replies, cmd));
        widen_pipe(to.as_raw_fd());
        widen_pipe(from.as_raw_fd());
        let output = output::Output::drain(printed, format!("session {} ({who})", child.id()));
        Ok((child, relay::Channel { to, from }, output))
    }
}

/// A command running this worker's binary as it was at start: the
/// descriptor opened then, named through `/proc` (the child's own copy of
/// it, which exec opens before closing it).
fn exe_command(exe: &std::fs::File) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(format!("/proc/self/fd/{}", exe.as_raw_fd()));
    cmd.arg0("rocmc-worker");
    cmd
}

/// Duplicates each `(from, to)` descriptor onto `to` in a child between
/// fork and exec. Every source is first moved above the targets, so that no
/// `dup2` closes a source still to be handed over.
fn hand_over(give: &[(RawFd, RawFd); 3]) -> std::io::Result<()> {
    let mut high = [0; 3];
    for (i, &(from, _)) in give.iter().enumerate() {
        // SAFETY: duplicates a descriptor this child inherited; checked.
        high[i] = unsafe { libc::fcntl(from, libc::F_DUPFD_CLOEXEC, 64) };
        if high[i] < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    for (i, &(_, to)) in give.iter().enumerate() {
        // SAFETY: dup2 onto a fixed number (without close-on-exec, so the
        // session inherits it); checked.
        if unsafe { libc::dup2(high[i], to) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `f` on a descriptor above the numbers a session's descriptors are
/// handed over on, so that handing them over never closes it in the child
/// before exec opens it.
fn above_session_fds(f: std::fs::File) -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: duplicates a descriptor `f` owns; checked.
    let fd = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 16) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just made and is owned by nobody else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Makes the child (between fork and exec) die with the worker: a worker
/// killed or crashed would otherwise leave its sessions running, a
/// spinning kernel included. The signal follows the thread that started
/// the session, which lives as long as the session does (`session`).
fn die_with(worker: u32) -> std::io::Result<()> {
    // SAFETY: prctl with an integer signal and getppid read and set only
    // this process's attributes.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // The worker died before the signal was set: nothing would send it.
        if libc::getppid() as u32 != worker {
            return Err(std::io::Error::other("the worker is gone"));
        }
    }
    Ok(())
}

/// Raises this process's descriptor limit to its hard limit: each pending
/// connection holds one, each session a handful.
fn more_descriptors() {
    // SAFETY: reads and writes an rlimit this function owns.
    unsafe {
        let mut l: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

/// Asks for a 1 MiB pipe buffer (the default 64 KiB makes a large upload
/// cost a context switch per 64 KiB between worker and session). Best
/// effort: the system's limit (`/proc/sys/fs/pipe-max-size`) may refuse.
fn widen_pipe(fd: RawFd) {
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
fn discover_devices(exe: &std::fs::File) -> std::io::Result<Vec<DeviceInfo>> {
    let out = exe_command(exe)
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

/// `--list-devices`: prints `devices` (`rocmc_runtime::list_devices` in
/// the worker) as one message on stdout.
pub fn print_devices(devices: &[proto::DeviceInfo]) -> std::io::Result<()> {
    std::io::stdout().write_all(&proto::encode(&devices))
}
