//! The client: a device on a remote worker (`remote://HOST:PORT/DEVICE`).
//!
//! Asynchronous requests (allocations, writes, fills, frees, launches) are
//! queued and sent together with the next synchronous one, in one write;
//! an error among them comes back from that synchronous request. Launches
//! are checked against the module's launch document here, before anything
//! is sent, with the same checks as the local runtimes.

use crate::proto::{self, DeviceInfo, FrameError, Hello, Reply, Request, Welcome, VERSION};
use crate::tls::{client_config, Pin, PinOutcome, PinVerifier};
use rocmc_device::launch::LaunchInfo;
use rocmc_device::{self as dev, Arg, BufferId, ModuleId};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// What can go wrong talking to a worker.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// A device address that does not parse.
    #[error("{0}")]
    Address(String),
    /// This machine's device failed or does not exist.
    #[error("{0}")]
    Local(String),
    /// Connecting, TLS, or the connection breaking.
    #[error("worker {addr}: {message}")]
    Connection {
        /// `host:port`.
        addr: String,
        /// What happened.
        message: String,
    },
    /// The worker's certificate is not the pinned one.
    #[error("worker {addr}: its certificate changed: pinned {expected}, presented {got}. If the worker was re-installed, remove its line from {file}; otherwise someone may be intercepting the connection")]
    PinMismatch {
        /// `host:port`.
        addr: String,
        /// Pinned fingerprint.
        expected: String,
        /// Presented fingerprint.
        got: String,
        /// Where pins are kept.
        file: String,
    },
    /// The worker refused the connection.
    #[error("worker {addr} refused the connection: {reason}")]
    Refused {
        /// `host:port`.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The worker reported an error for a request.
    #[error("worker {addr}: {message}")]
    Worker {
        /// `host:port`.
        addr: String,
        /// Its message.
        message: String,
    },
    /// A launch that the launch document refuses (nothing was sent).
    #[error("launch of `{kernel}` refused: {reason}")]
    BadLaunch {
        /// Kernel.
        kernel: String,
        /// Why.
        reason: String,
    },
}

/// `Result` with [`RemoteError`].
pub type Result<T> = std::result::Result<T, RemoteError>;

/// A parsed `remote://HOST:PORT/DEVICE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteAddress {
    /// `host:port`.
    pub host_port: String,
    /// The host.
    pub host: String,
    /// The device on the worker: `cpu`, `cuda:0`, `amdgpu:1`.
    pub device: String,
}

impl RemoteAddress {
    /// Parses `remote://HOST:PORT/DEVICE` (DEVICE defaults to the worker's first).
    pub fn parse(s: &str) -> Result<RemoteAddress> {
        let bad = |why: &str| {
            RemoteError::Address(format!(
                "device `{s}`: {why} (expected remote://HOST:PORT/DEVICE, e.g. remote://gpu-host:7000/amdgpu:0)"
            ))
        };
        let rest = s
            .strip_prefix("remote://")
            .ok_or_else(|| bad("not a remote:// address"))?;
        let (hp, device) = rest.split_once('/').unwrap_or((rest, ""));
        let (host, port) = hp.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        if host.is_empty() {
            return Err(bad("no host"));
        }
        port.parse::<u16>()
            .map_err(|_| bad("the port is not a number"))?;
        Ok(RemoteAddress {
            host_port: hp.to_string(),
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            device: device.to_string(),
        })
    }
}

/// How to authenticate a worker and to it.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// The worker's secret (`ROCMC_WORKER_SECRET` by default).
    pub secret: String,
    /// Certificate pinning; `None`: the known-workers file.
    pub pin: Option<Pin>,
    /// Plain TCP: no encryption, no certificate (only to a worker started `--insecure`).
    pub insecure: bool,
    /// How long to wait for the worker at any point.
    pub timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            secret: std::env::var("ROCMC_WORKER_SECRET").unwrap_or_default(),
            pin: std::env::var("ROCMC_WORKER_FINGERPRINT")
                .ok()
                .map(Pin::Exact),
            insecure: std::env::var("ROCMC_WORKER_INSECURE").is_ok_and(|v| v == "1"),
            timeout: Duration::from_secs(120),
        }
    }
}

enum Conn {
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
    Plain(TcpStream),
}

impl Read for Conn {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tls(s) => s.read(b),
            Conn::Plain(s) => s.read(b),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tls(s) => s.write(b),
            Conn::Plain(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Tls(s) => s.flush(),
            Conn::Plain(s) => s.flush(),
        }
    }
}

/// A session with one device of a worker.
pub struct RemoteDevice {
    addr: String,
    conn: Conn,
    /// Asynchronous requests not yet sent.
    pending: Vec<u8>,
    devices: Vec<DeviceInfo>,
    device: DeviceInfo,
    max_frame: usize,
    next_id: u32,
    /// Bytes of each buffer allocated (for range checks before sending).
    sizes: HashMap<BufferId, u64>,
    /// Each loaded module's launch document, if readable here.
    launches: HashMap<ModuleId, Option<LaunchInfo>>,
    /// Whether the last connection pinned the certificate for the first time.
    pub first_use: Option<String>,
    /// The session's challenge, for module possession proofs.
    challenge: String,
}

/// Flush queued requests beyond this many bytes.
const COALESCE: usize = 1 << 20;

impl RemoteDevice {
    /// Connects to `remote://HOST:PORT/DEVICE` and opens the device.
    pub fn connect(address: &str, opts: &ConnectOptions) -> Result<RemoteDevice> {
        let a = RemoteAddress::parse(address)?;
        let conn_err = |m: String| RemoteError::Connection {
            addr: a.host_port.clone(),
            message: m,
        };
        let tcp = TcpStream::connect(&a.host_port).map_err(|e| conn_err(e.to_string()))?;
        tcp.set_read_timeout(Some(opts.timeout))
            .and_then(|_| tcp.set_nodelay(true))
            .map_err(|e| conn_err(e.to_string()))?;
        let pin = opts
            .pin
            .clone()
            .unwrap_or_else(|| Pin::default_for(&a.host_port));
        let mut first_use = None;
        let mut conn = if opts.insecure {
            Conn::Plain(tcp)
        } else {
            let v = PinVerifier::new(pin.clone());
            let cfg = client_config(v.clone()).map_err(|e| conn_err(e.to_string()))?;
            let name = rustls::pki_types::ServerName::try_from(a.host.clone())
                .map_err(|e| conn_err(format!("host name: {e}")))?;
            let c =
                rustls::ClientConnection::new(cfg, name).map_err(|e| conn_err(e.to_string()))?;
            let mut s = rustls::StreamOwned::new(c, tcp);
            let mut handshake = Ok(());
            while s.conn.is_handshaking() {
                if let Err(e) = s.conn.complete_io(&mut s.sock) {
                    handshake = Err(e);
                    break;
                }
            }
            let outcome = v.outcome.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(PinOutcome::Mismatch { expected, got }) = outcome {
                return Err(RemoteError::PinMismatch {
                    addr: a.host_port.clone(),
                    expected,
                    got,
                    file: match &pin {
                        Pin::KnownWorkers { file, .. } => file.display().to_string(),
                        Pin::Exact(_) => "the pin given (ROCMC_WORKER_FINGERPRINT)".into(),
                    },
                });
            }
            if let (Some(PinOutcome::Unrecorded { got, why }), Pin::KnownWorkers { file, .. }) =
                (&outcome, &pin)
            {
                return Err(conn_err(format!(
                    "could not record the worker's certificate fingerprint in {} ({why}), so a later connection could not tell another certificate from it; make the file writable, or pin it with ROCMC_WORKER_FINGERPRINT={got}",
                    file.display()
                )));
            }
            if let Some(PinOutcome::FirstUse(f)) = outcome {
                first_use = Some(f);
            }
            handshake.map_err(|e| {
                conn_err(format!(
                    "TLS handshake failed ({e}); is the worker started with --insecure? (then connect with ROCMC_WORKER_INSECURE=1)"
                ))
            })?;
            Conn::Tls(Box::new(s))
        };
        proto::send(
            &mut conn,
            &Hello {
                version: VERSION,
                secret: opts.secret.clone(),
            },
        )
        .and_then(|_| conn.flush().map_err(FrameError::from))
        .map_err(|e| conn_err(e.to_string()))?;
        let welcome: Welcome = proto::recv(&mut conn, 1 << 20).map_err(|e| {
            conn_err(match e {
                FrameError::Malformed(_) | FrameError::TooLarge { .. } => format!(
                    "it does not speak rocmc's protocol ({e}); if it is a TLS worker, do not set ROCMC_WORKER_INSECURE"
                ),
                // A TLS worker drops a plain Hello (it is no TLS record).
                FrameError::Closed if opts.insecure => format!(
                    "{e} before the worker answered the login: a worker started without --insecure speaks TLS; unset ROCMC_WORKER_INSECURE"
                ),
                other => other.to_string(),
            })
        })?;
        let (devices, max_frame) = match welcome {
            Welcome::Ok {
                devices, max_frame, ..
            } => (devices, max_frame as usize),
            Welcome::Refused(reason) => {
                return Err(RemoteError::Refused {
                    addr: a.host_port.clone(),
                    reason,
                })
            }
        };
        let device = if a.device.is_empty() {
            devices.first().cloned()
        } else {
            devices.iter().find(|d| d.name == a.device).cloned()
        }
        .ok_or_else(|| RemoteError::Worker {
            addr: a.host_port.clone(),
            message: format!(
                "no device `{}`; it serves: {}",
                a.device,
                devices
                    .iter()
                    .map(|d| format!("{} ({})", d.name, d.target))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })?;
        let mut me = RemoteDevice {
            addr: a.host_port.clone(),
            conn,
            pending: Vec::new(),
            devices,
            device: device.clone(),
            max_frame,
            next_id: 0,
            sizes: HashMap::new(),
            launches: HashMap::new(),
            first_use,
            challenge: String::new(),
        };
        match me.call(Request::Open {
            device: device.name,
        })? {
            Reply::Opened { challenge } => me.challenge = challenge,
            other => return Err(me.err(format!("unexpected reply {other:?} to Open"))),
        }
        Ok(me)
    }

    /// The device this session uses.
    pub fn info(&self) -> &DeviceInfo {
        &self.device
    }

    /// Every device the worker serves.
    pub fn worker_devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    pub(crate) fn err(&self, message: String) -> RemoteError {
        RemoteError::Worker {
            addr: self.addr.clone(),
            message,
        }
    }

    /// Appends `r`'s frame to the queue, refusing frames over the worker's limit.
    fn enqueue(&mut self, r: &Request) -> Result<()> {
        let bytes = proto::encode(r);
        if bytes.len() > self.max_frame {
            return Err(self.err(format!(
                "a frame of {} bytes is over the limit of {} (raise the worker's --max-frame)",
                bytes.len(),
                self.max_frame
            )));
        }
        proto::write_frame(&mut self.pending, &bytes).map_err(|e| self.err(e.to_string()))
    }

    pub(crate) fn queue(&mut self, r: Request) -> Result<()> {
        self.enqueue(&r)?;
        if self.pending.len() > COALESCE {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let p = std::mem::take(&mut self.pending);
        self.conn
            .write_all(&p)
            .and_then(|_| self.conn.flush())
            .map_err(|e| self.lost(FrameError::from(e)))
    }

    fn lost(&self, e: FrameError) -> RemoteError {
        RemoteError::Connection {
            addr: self.addr.clone(),
            message: format!("the connection was lost ({e})"),
        }
    }

    /// Sends queued requests and `r`, and waits for `r`'s reply.
    pub(crate) fn call(&mut self, r: Request) -> Result<Reply> {
        self.enqueue(&r)?;
        self.flush()?;
        self.call_reply()
    }

    /// The next reply; an error reply as an error.
    fn call_reply(&mut self) -> Result<Reply> {
        match proto::recv::<Reply>(&mut self.conn, usize::MAX >> 1) {
            Ok(Reply::Error(m)) => Err(self.err(m)),
            Ok(r) => Ok(r),
            Err(e) => Err(self.lost(e)),
        }
    }

    /// Asks the session process to crash (tests of isolation).
    pub fn crash(&mut self) -> Result<()> {
        self.call(Request::Crash).map(|_| ())
    }

    /// The session's challenge, which module possession proofs are made
    /// with ([`proto::possession`]).
    pub fn challenge(&self) -> &str {
        &self.challenge
    }

    /// Sends raw bytes (tests of malformed input).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<Reply> {
        self.flush()?;
        self.conn
            .write_all(bytes)
            .and_then(|_| self.conn.flush())
            .map_err(|e| self.lost(FrameError::from(e)))?;
        proto::recv::<Reply>(&mut self.conn, usize::MAX >> 1).map_err(|e| self.lost(e))
    }

    fn unexpected(&self, r: Reply) -> dev::Error {
        self.err(format!("unexpected reply {r:?}")).into()
    }

    fn checked(&self, module: &str, kernel: &str, args: &[Arg]) -> dev::Result<()> {
        match self.launches.get(module) {
            None => Err(dev::Error::NoModule(module.to_string())),
            Some(Some(info)) => dev::check_launch(info, kernel, args),
            // No launch document readable here: the worker's runtime checks.
            Some(None) => Ok(()),
        }
    }

    fn size_of(&self, id: BufferId) -> dev::Result<u64> {
        self.sizes.get(&id).copied().ok_or(dev::Error::NoBuffer(id))
    }
}

impl dev::Device for RemoteDevice {
    fn info(&self) -> &DeviceInfo {
        &self.device
    }

    fn alloc(&mut self, bytes: u64) -> dev::Result<BufferId> {
        let id = self.next_id;
        self.next_id += 1;
        self.queue(Request::Alloc { id, bytes })?;
        self.sizes.insert(id, bytes);
        Ok(id)
    }

    fn free(&mut self, id: BufferId) -> dev::Result<()> {
        self.size_of(id)?;
        self.queue(Request::Free { id })?;
        self.sizes.remove(&id);
        Ok(())
    }

    fn size(&self, id: BufferId) -> dev::Result<u64> {
        self.size_of(id)
    }

    fn write(&mut self, id: BufferId, offset: u64, data: &[u8]) -> dev::Result<()> {
        dev::in_range("writing", id, offset, data.len() as u64, self.size_of(id)?)?;
        if data.is_empty() {
            return Ok(());
        }
        let len = data.len() as u64;
        self.enqueue(&Request::Write { id, offset, len })?;
        if data.len() <= COALESCE {
            // Small: queued with the requests around it, one TLS write.
            self.pending.extend_from_slice(data);
            if self.pending.len() > COALESCE {
                self.flush()?;
            }
            return Ok(());
        }
        // Large: encrypted straight from the caller's slice, no copy here.
        self.flush()?;
        self.conn
            .write_all(data)
            .map_err(|e| self.lost(FrameError::from(e)).into())
    }

    fn read(&mut self, id: BufferId, offset: u64, len: u64) -> dev::Result<Vec<u8>> {
        let r = dev::in_range("reading", id, offset, len, self.size_of(id)?)?;
        let mut out = vec![0u8; r.len()];
        self.enqueue(&Request::Read { id, offset, len })?;
        self.flush()?;
        // The parts are read straight into `out`, whatever their number.
        let mut got = 0;
        while got < out.len() {
            let n = match proto::recv::<Reply>(&mut self.conn, usize::MAX >> 1) {
                Ok(Reply::Data { len }) if len <= (out.len() - got) as u64 => len as usize,
                Ok(Reply::Error(m)) => return Err(self.err(m).into()),
                Ok(other) => return Err(self.unexpected(other)),
                Err(e) => return Err(self.lost(e).into()),
            };
            self.conn
                .read_exact(&mut out[got..got + n])
                .map_err(|e| self.lost(FrameError::from(e)))?;
            got += n;
        }
        if out.is_empty() {
            // An empty read is still answered with one (empty) part.
            match self.call_reply()? {
                Reply::Data { len: 0 } => {}
                other => return Err(self.unexpected(other)),
            }
        }
        Ok(out)
    }

    fn fill(&mut self, id: BufferId, dtype: &str, seed: u64) -> dev::Result<()> {
        self.size_of(id)?;
        Ok(self.queue(Request::Fill {
            id,
            dtype: dtype.into(),
            seed,
        })?)
    }

    fn load_module(&mut self, bytes: &[u8]) -> dev::Result<ModuleId> {
        let hash = proto::content_hash(bytes);
        let proof = proto::possession(&self.challenge, bytes);
        let cached = matches!(
            self.call(Request::HasModule {
                hash: hash.clone(),
                proof: proof.clone(),
            })?,
            Reply::Has(true)
        );
        // A cached module that fails the worker's check of its bytes is
        // dropped there: then its bytes go.
        let from_cache = cached
            && self
                .call(Request::LoadModule {
                    hash: hash.clone(),
                    proof: proof.clone(),
                    bytes: None,
                })
                .is_ok();
        if !from_cache {
            self.call(Request::LoadModule {
                hash: hash.clone(),
                proof,
                bytes: Some(bytes.to_vec()),
            })?;
        }
        self.launches
            .insert(hash.clone(), dev::module_launch(bytes).ok());
        Ok(hash)
    }

    fn launch(&mut self, module: &str, kernel: &str, args: &[Arg]) -> dev::Result<()> {
        self.checked(module, kernel, args)?;
        Ok(self.queue(Request::Launch {
            module: module.to_string(),
            kernel: kernel.into(),
            args: args.to_vec(),
        })?)
    }

    fn time(
        &mut self,
        module: &str,
        kernel: &str,
        args: &[Arg],
        warmup: u32,
        reps: u32,
    ) -> dev::Result<Vec<f64>> {
        self.checked(module, kernel, args)?;
        match self.call(Request::Time {
            module: module.to_string(),
            kernel: kernel.into(),
            args: args.to_vec(),
            warmup,
            reps,
        })? {
            Reply::Times(t) => Ok(t),
            other => Err(self.unexpected(other)),
        }
    }

    fn synchronize(&mut self) -> dev::Result<()> {
        self.call(Request::Sync)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_bad_ones_say_why() {
        let a = RemoteAddress::parse("remote://gpu-host:7000/amdgpu:0").unwrap();
        assert_eq!(
            (a.host.as_str(), a.device.as_str()),
            ("gpu-host", "amdgpu:0")
        );
        assert_eq!(RemoteAddress::parse("remote://h:1").unwrap().device, "");
        for bad in [
            "remote://h/cpu",
            "remote://:7/cpu",
            "remote://h:x/cpu",
            "h:7/cpu",
        ] {
            assert!(RemoteAddress::parse(bad).is_err(), "{bad}");
        }
    }
}
