//! The worker's side of one logged-in connection: client frames in,
//! session messages out, the session's replies back. A `Write`'s bytes go
//! from TLS straight into a slot of the session's transfer window, and a
//! `Read`'s from a slot straight into TLS, several slots in flight so that
//! the client, the worker and the session work at once.

use super::cache::ModuleCache;
use super::output::Output;
use crate::link::Link;
use crate::proto::{self, FrameError, Reply, Request};
use crate::window::{Window, SLOTS};
use std::collections::VecDeque;
use std::io::{BufReader, Read, Write};
use std::process::Child;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The worker's ends of a session's channel.
pub(super) struct Channel {
    /// Requests to the session.
    pub(super) to: std::io::PipeWriter,
    /// Its replies.
    pub(super) from: std::io::PipeReader,
}

/// What the relay serves one client with: its session process, channel,
/// output and window, the worker's module cache, and the challenge the
/// client's possession proofs are made under.
pub(super) struct Session<'a> {
    pub(super) child: &'a Arc<Mutex<Child>>,
    pub(super) channel: Channel,
    pub(super) output: Output,
    pub(super) window: &'a mut Window,
    pub(super) cache: &'a ModuleCache,
    pub(super) challenge: String,
}

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

/// One connection's pipe to its session, its window and the slots whose
/// `WriteSlot` the session has not answered yet.
struct Relay<'a> {
    child: &'a Arc<Mutex<Child>>,
    to: std::io::PipeWriter,
    from: BufReader<std::io::PipeReader>,
    output: Output,
    window: &'a mut Window,
    cache: &'a ModuleCache,
    challenge: String,
    dog: Watchdog,
    kernel_timeout: Duration,
    /// `WriteSlot`s sent and not answered, oldest first.
    writes: VecDeque<u64>,
    /// Slots handed out so far (a slot's number is this modulo [`SLOTS`]).
    next: u64,
    /// Why the session was ended for breaking the protocol, if it was.
    broken: Option<String>,
}

/// Serves a logged-in client until it leaves: checks each request decodes
/// (a malformed frame ends the connection with the reason) and is within
/// the frame limit, and hands it to the session.
pub(super) fn relay<S: Read + Write>(
    s: &mut S,
    session: Session<'_>,
    max: usize,
    kernel_timeout: Duration,
    peer: std::os::fd::RawFd,
) -> Result<(), String> {
    let child = session.child;
    let mut r = Relay {
        child,
        to: session.channel.to,
        from: BufReader::new(session.channel.from),
        output: session.output,
        window: session.window,
        cache: session.cache,
        challenge: session.challenge,
        dog: Watchdog::start(child, kernel_timeout, peer),
        kernel_timeout,
        writes: VecDeque::new(),
        next: 0,
        broken: None,
    };
    loop {
        let req = match proto::read_frame(s, max).and_then(|f| proto::decode::<Request>(&f)) {
            Ok(req) => req,
            Err(FrameError::Closed) => return Ok(()),
            Err(e) => return fail(s, e.to_string()),
        };
        let done = match req {
            Request::Write { id, offset, len } => r.write(s, id, offset, len),
            Request::Read { id, offset, len } => r.read(s, id, offset, len),
            req if req.is_async() => r.send(&Link::Request(req)),
            Request::HasModule { hash, proof } => {
                let has = r.cache.proven(&hash, &proof, &r.challenge);
                forward(
                    s,
                    &has.map_or_else(Reply::Error, |m| Reply::Has(m.is_some())),
                )
            }
            Request::LoadModule { hash, proof, bytes } => r
                .load(&hash, &proof, bytes)
                .and_then(|reply| forward(s, &reply)),
            req => r.ask(req).and_then(|reply| forward(s, &reply)),
        };
        match done {
            Ok(()) => {}
            // The client's own stream failed: nothing to tell it.
            Err(Failure::Client(e)) => return Err(e),
            Err(Failure::Session) => {
                let why = r.died();
                return fail(s, why);
            }
        }
    }
}

/// Why serving a request stopped.
enum Failure {
    /// The session process is gone (crashed, killed by the watchdog).
    Session,
    /// The client's connection failed.
    Client(String),
}

/// Tells the client why its connection ends, and ends it.
fn fail<S: Write>(s: &mut S, why: String) -> Result<(), String> {
    let _ = proto::send(s, &Reply::Error(why.clone()));
    let _ = s.flush();
    Err(why)
}

fn forward<S: Write>(s: &mut S, reply: &Reply) -> Result<(), Failure> {
    proto::send(s, reply)
        .and_then(|_| s.flush().map_err(FrameError::from))
        .map_err(|e| Failure::Client(e.to_string()))
}

impl Relay<'_> {
    /// Sends the session a message. Watched as a wait for a reply is: a
    /// session that stops reading (a kernel that spins, with requests
    /// queued behind it) fills the pipe, and the client's hang-up or the
    /// kernel timeout must still end it.
    fn send(&mut self, m: &Link) -> Result<(), Failure> {
        self.dog.waiting(true);
        let r =
            proto::send(&mut self.to, m).and_then(|_| self.to.flush().map_err(FrameError::from));
        self.dog.waiting(false);
        r.map_err(|_| Failure::Session)
    }

    /// A synchronous request's reply, once the session answered every
    /// earlier one. The challenge of an `Opened` is the worker's: the
    /// cache it proves possession for is the worker's.
    fn ask(&mut self, req: Request) -> Result<Reply, Failure> {
        self.send(&Link::Request(req))?;
        self.drain()?;
        Ok(match self.reply()? {
            Reply::Opened { .. } => Reply::Opened {
                challenge: self.challenge.clone(),
            },
            other => other,
        })
    }

    /// Loads a module in the session: its bytes as the client sent them
    /// (checked and cached here) or, for a client that proved it holds
    /// them, from the cache. A module the device refuses is not kept.
    fn load(&mut self, hash: &str, proof: &str, bytes: Option<Vec<u8>>) -> Result<Reply, Failure> {
        let (bytes, written) = match bytes {
            Some(b) => match self.cache.keep(hash, &b) {
                Ok(written) => (b, written),
                Err(e) => return Ok(Reply::Error(e)),
            },
            None => match self.cache.proven(hash, proof, &self.challenge) {
                Ok(Some(b)) => (b, None),
                Ok(None) => {
                    return Ok(Reply::Error(format!(
                        "module {hash} is not in the worker's cache (send its bytes)"
                    )))
                }
                Err(e) => return Ok(Reply::Error(e)),
            },
        };
        let reply = self.ask(Request::LoadModule {
            hash: hash.to_string(),
            proof: String::new(),
            bytes: Some(bytes),
        })?;
        if let (Reply::Error(_), Some(path)) = (&reply, written) {
            self.cache.forget(&path);
        }
        Ok(reply)
    }

    /// The session's next reply, waited for under the watchdog. A frame
    /// over [`proto::MAX_SESSION_REPLY`] or one that does not decode ends
    /// the session at once: it is alive but no longer speaks the protocol.
    fn reply(&mut self) -> Result<Reply, Failure> {
        self.dog.waiting(true);
        let r = proto::recv::<Reply>(&mut self.from, proto::MAX_SESSION_REPLY);
        self.dog.waiting(false);
        match r {
            // Only the worker makes `Data` (its bytes come from the window).
            Ok(Reply::Data { .. }) => Err(self.refuse("a Data reply".into())),
            Ok(reply) => Ok(reply),
            Err(FrameError::Closed) => Err(Failure::Session),
            Err(e) => Err(self.refuse(e.to_string())),
        }
    }

    /// Ends a session that broke the protocol, with the reason.
    fn refuse(&mut self, what: String) -> Failure {
        let _ = self.child.lock().unwrap_or_else(|p| p.into_inner()).kill();
        self.broken = Some(format!(
            "the session sent the worker a reply it refuses ({what}): the session was ended"
        ));
        Failure::Session
    }

    /// Waits for the oldest unanswered `WriteSlot`, freeing its slot.
    fn retire(&mut self) -> Result<(), Failure> {
        if self.writes.pop_front().is_some() {
            match self.reply()? {
                Reply::Ok => {}
                other => return Err(self.refuse(format!("{other:?} for a write"))),
            }
        }
        Ok(())
    }

    /// Waits for every unanswered `WriteSlot`: the session's next reply is
    /// then the one to the request just sent.
    fn drain(&mut self) -> Result<(), Failure> {
        while !self.writes.is_empty() {
            self.retire()?;
        }
        Ok(())
    }

    /// A free slot for the next part of a write.
    fn slot(&mut self) -> Result<u64, Failure> {
        if self.writes.len() == SLOTS {
            self.retire()?;
        }
        self.next += 1;
        Ok(self.next - 1)
    }

    /// Streams a `Write`'s `len` bytes from the client through the window.
    fn write<S: Read>(&mut self, s: &mut S, id: u32, offset: u64, len: u64) -> Result<(), Failure> {
        let part = self.window.slot_len() as u64;
        let mut done = 0;
        // At least one part, so that an empty write past a buffer's end is
        // checked (and refused) as an empty read is.
        let mut first = true;
        while done < len || std::mem::take(&mut first) {
            let n = part.min(len - done);
            let slot = self.slot()?;
            s.read_exact(&mut self.window.slot(slot as usize)[..n as usize])
                .map_err(|e| Failure::Client(FrameError::from(e).to_string()))?;
            self.send(&Link::WriteSlot {
                id,
                offset: offset.saturating_add(done),
                len: n,
                slot: (slot % SLOTS as u64) as u32,
            })?;
            self.writes.push_back(slot);
            done += n;
        }
        Ok(())
    }

    /// Answers a `Read` with `Data` parts, [`SLOTS`] parts asked of the
    /// session ahead of the one being sent.
    fn read<S: Write>(&mut self, s: &mut S, id: u32, offset: u64, len: u64) -> Result<(), Failure> {
        self.drain()?;
        let part = self.window.slot_len() as u64;
        let end = offset.saturating_add(len);
        let parts = len.div_ceil(part).max(1);
        let ask = |r: &mut Self, k: u64| {
            let at = offset.saturating_add(k * part);
            r.send(&Link::ReadSlot {
                id,
                offset: at,
                len: part.min(end - at),
                end,
                slot: (k % SLOTS as u64) as u32,
            })
        };
        for k in 0..parts.min(SLOTS as u64) {
            ask(self, k)?;
        }
        for k in 0..parts {
            let reply = match self.reply()? {
                r @ (Reply::Ok | Reply::Error(_)) => r,
                other => return Err(self.refuse(format!("{other:?} for a read"))),
            };
            if let Reply::Error(_) = reply {
                // The parts asked for after it are answered too: read
                // those answers so the next reply is the next request's.
                for _ in k + 1..parts.min(k + SLOTS as u64) {
                    self.reply()?;
                }
                return forward(s, &reply);
            }
            let at = offset + k * part;
            let n = part.min(end - at);
            proto::send(s, &Reply::Data { len: n })
                .and_then(|_| {
                    s.write_all(&self.window.slot(k as usize)[..n as usize])
                        .map_err(FrameError::from)
                })
                .map_err(|e| Failure::Client(e.to_string()))?;
            if k + (SLOTS as u64) < parts {
                ask(self, k + SLOTS as u64)?;
            }
        }
        s.flush().map_err(|e| Failure::Client(e.to_string()))
    }

    /// Why the session is gone, once it is reaped, with the end of what
    /// it printed.
    fn died(&mut self) -> String {
        let why = self.why_died();
        let printed = self.output.tail(Duration::from_millis(500));
        if printed.is_empty() {
            why
        } else {
            format!("{why}; its last output:\n{printed}")
        }
    }

    fn why_died(&mut self) -> String {
        let lock = || self.child.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = self.broken.take() {
            let _ = lock().wait();
            return why;
        }
        if self.dog.departed.load(Ordering::Relaxed) {
            let _ = lock().wait();
            return "the client left while its request ran: the session was ended".to_string();
        }
        if self.dog.fired.load(Ordering::Relaxed) {
            let _ = lock().wait();
            return format!(
                "the request waited over the worker's --kernel-timeout of {} s (a kernel that does not return?): the session was ended; the worker and other sessions are unaffected",
                self.kernel_timeout.as_secs_f64()
            );
        }
        let status = lock()
            .wait()
            .map_or_else(|e| e.to_string(), |s| s.to_string());
        format!("the session process died ({status}); the worker and other sessions are unaffected")
    }
}
