//! The wire protocol: length-prefixed frames, each one MessagePack-encoded
//! message (rmp-serde: compact, no schema compiler, the same serde types
//! on both ends; an RPC framework would add a runtime and per-call
//! allocations for what is a single ordered stream per session).
//!
//! A frame is a 4-byte little-endian length, then that many bytes. The
//! first frame each way is a [`Hello`] carrying [`VERSION`]; a peer with
//! another version is refused with a message naming both.
//!
//! Requests are either synchronous (the worker answers each with one
//! [`Reply`]) or asynchronous ([`Request::is_async`]: launches, writes,
//! frees, fills — no reply; the first error among them is reported by the
//! next synchronous request, which fails with it).
//!
//! A buffer's bytes are not framed: a [`Request::Write`] is followed on the
//! stream by the `len` bytes it announces, and each [`Reply::Data`] by its
//! `len` bytes. Neither has a size limit but memory, and neither is
//! decoded on the way: the worker moves them between TLS and the session's
//! shared [`Window`](crate::window::Window) directly.

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// Protocol version; bumped on any incompatible change.
pub const VERSION: u32 = 9;

/// Largest frame a peer accepts by default (a code object is one frame;
/// a buffer's bytes are not framed).
pub const DEFAULT_MAX_FRAME: usize = 256 << 20;

/// Largest frame a session may send the worker. Replies never carry bulk
/// data (a read's bytes go through the transfer window): the largest is
/// [`Reply::Times`] of `rocmc_device::MAX_LAUNCHES` launches, 9 bytes
/// each. A session that names more (a kernel writing to its standard
/// output, hostile host code) is ended before anything is allocated.
pub const MAX_SESSION_REPLY: usize = 16 << 20;
const _: () = assert!(9 * rocmc_device::MAX_LAUNCHES as usize + 4096 <= MAX_SESSION_REPLY);

/// The first frame from the client.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Hello {
    /// [`VERSION`].
    pub version: u32,
    /// The worker's shared secret.
    pub secret: String,
}

/// The first frame from the worker, answering [`Hello`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Welcome {
    /// Accepted: the worker's version and devices.
    Ok {
        /// [`VERSION`].
        version: u32,
        /// What it serves.
        devices: Vec<DeviceInfo>,
        /// Its frame limit: the client refuses to send larger frames.
        max_frame: u64,
    },
    /// Refused, and why.
    Refused(String),
}

/// One device a worker serves (the device interface's own description).
pub use rocmc_device::DeviceInfo;

/// A kernel argument on the wire: the device interface's own arguments,
/// with buffer ids of the session.
pub use rocmc_device::Arg as WireArg;

/// What a client asks of its session.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Request {
    /// Selects the device the session uses (once, first).
    Open {
        /// A [`DeviceInfo::name`].
        device: String,
    },
    /// Whether the worker's cache has a module (by SHA-256 of its bytes)
    /// that this client holds too: `proof` is [`possession`] of the bytes
    /// under the session's challenge. Without the right proof the answer
    /// is `false`, whatever the cache holds.
    HasModule {
        /// Hex SHA-256.
        hash: String,
        /// [`possession`] of the module's bytes.
        proof: String,
    },
    /// Loads a module: its bytes when the worker does not have them yet;
    /// from the cache only with the [`possession`] proof.
    LoadModule {
        /// Hex SHA-256 of the bytes.
        hash: String,
        /// [`possession`] of the bytes (unused when they are sent).
        proof: String,
        /// The code object, PTX or shared object; `None` to use the cache.
        #[serde(with = "serde_bytes")]
        bytes: Option<Vec<u8>>,
    },
    /// Allocates a zeroed buffer of `bytes` bytes under id `id` (async).
    Alloc {
        /// Client-chosen id.
        id: u32,
        /// Size.
        bytes: u64,
    },
    /// Writes the `len` bytes that follow this frame on the stream
    /// (unframed) into buffer `id` from byte `offset` on (async). There is
    /// no limit on `len` but the buffer's size.
    Write {
        /// Buffer.
        id: u32,
        /// Where, in bytes.
        offset: u64,
        /// How many bytes follow.
        len: u64,
    },
    /// Fills buffer `id` with seeded random values of `dtype` in the worker,
    /// so that benchmarks need not send inputs (async).
    Fill {
        /// Buffer.
        id: u32,
        /// Element type.
        dtype: String,
        /// Seed.
        seed: u64,
    },
    /// Frees buffer `id` (async).
    Free {
        /// Buffer.
        id: u32,
    },
    /// Launches a kernel of a loaded module (async).
    Launch {
        /// Module hash.
        module: String,
        /// Kernel name.
        kernel: String,
        /// Arguments in kernel order.
        args: Vec<WireArg>,
    },
    /// Launches `reps` times after `warmup` untimed launches and returns
    /// each launch's time measured by the device (sync).
    Time {
        /// Module hash.
        module: String,
        /// Kernel name.
        kernel: String,
        /// Arguments.
        args: Vec<WireArg>,
        /// Untimed launches first.
        warmup: u32,
        /// Timed launches.
        reps: u32,
    },
    /// Reads `len` bytes of buffer `id` from byte `offset` on (sync), all
    /// within the buffer. Answered with [`Reply::Data`] parts whose lengths
    /// add up to `len`, or an [`Reply::Error`] (which may come after some
    /// parts, should the device fail half-way).
    Read {
        /// Buffer.
        id: u32,
        /// Where, in bytes.
        offset: u64,
        /// How many.
        len: u64,
    },
    /// Waits for everything sent before; reports the first error of the
    /// asynchronous requests since the last synchronisation (sync).
    Sync,
    /// Crashes the session process on purpose (tests of isolation; only a
    /// worker started with `--allow-crash-requests` obeys).
    Crash,
}

impl Request {
    /// Whether the worker answers it (`false`: fire-and-forget).
    pub fn is_async(&self) -> bool {
        matches!(
            self,
            Request::Alloc { .. }
                | Request::Write { .. }
                | Request::Fill { .. }
                | Request::Free { .. }
                | Request::Launch { .. }
        )
    }
}

/// The worker's answer to a synchronous request.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Reply {
    /// Done.
    Ok,
    /// [`Request::HasModule`]'s answer.
    Has(bool),
    /// [`Request::Open`]'s answer: the session's challenge, 32 random
    /// bytes in hex, that [`possession`] proofs are made with.
    Opened {
        /// Hex.
        challenge: String,
    },
    /// A part of a [`Request::Read`]: `len` bytes follow this frame on the
    /// stream, unframed.
    Data {
        /// How many bytes follow.
        len: u64,
    },
    /// Launch times, milliseconds.
    Times(Vec<f64>),
    /// The request (or an asynchronous one before it) failed.
    Error(String),
}

/// Errors of the frame layer.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the connection.
    #[error("the connection was closed")]
    Closed,
    /// A frame longer than allowed.
    #[error("a frame of {len} bytes is over the limit of {max}")]
    TooLarge {
        /// Its announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Bytes that do not decode as the expected message.
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// The socket.
    #[error("{0}")]
    Io(std::io::Error),
}

impl From<std::io::Error> for FrameError {
    fn from(e: std::io::Error) -> Self {
        match e.kind() {
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe => FrameError::Closed,
            _ => FrameError::Io(e),
        }
    }
}

/// Reads one frame's bytes, refusing lengths over `max` before reading them.
pub fn read_frame(r: &mut impl Read, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

/// Writes one frame (not flushed: callers coalesce).
pub fn write_frame(w: &mut impl Write, payload: &[u8]) -> Result<(), FrameError> {
    let len = u32::try_from(payload.len()).map_err(|_| FrameError::TooLarge {
        len: payload.len(),
        max: u32::MAX as usize,
    })?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(payload)?;
    Ok(())
}

/// Encodes a message.
pub fn encode<T: Serialize>(m: &T) -> Vec<u8> {
    rmp_serde::to_vec(m).expect("protocol messages always encode")
}

/// Deepest nesting of maps and arrays a frame may have. rocmc's messages
/// nest at most 5 deep (a request, its argument list, an argument, its
/// value); the decoder recurses once per level, so an unchecked frame
/// nested thousands deep would overflow the stack of the thread decoding it.
pub const MAX_DEPTH: usize = 32;

/// Decodes a message, refusing frames nested deeper than [`MAX_DEPTH`]
/// before the (recursive) decoder sees them.
pub fn decode<T: for<'de> Deserialize<'de>>(b: &[u8]) -> Result<T, FrameError> {
    let depth = nesting(b).map_err(FrameError::Malformed)?;
    if depth > MAX_DEPTH {
        return Err(FrameError::Malformed(format!(
            "nested {depth} deep, over the limit of {MAX_DEPTH}"
        )));
    }
    rmp_serde::from_slice(b).map_err(|e| FrameError::Malformed(e.to_string()))
}

/// The deepest nesting of MessagePack maps and arrays in `b`, walked
/// without recursion (a stack of counts of items still to read). Stops
/// counting past [`MAX_DEPTH`] + 1.
fn nesting(b: &[u8]) -> Result<usize, String> {
    let mut pos = 0usize;
    // Items still to read at each open level; the outermost is the value.
    let mut open: Vec<u64> = vec![1];
    let mut deepest = 0;
    let take = |pos: &mut usize, n: usize| -> Result<u64, String> {
        let end = pos
            .checked_add(n)
            .filter(|&e| e <= b.len())
            .ok_or("truncated")?;
        let v = b[*pos..end]
            .iter()
            .fold(0u64, |a, &x| (a << 8) | u64::from(x));
        *pos = end;
        Ok(v)
    };
    let skip = |pos: &mut usize, n: u64| -> Result<(), String> {
        let n = usize::try_from(n).map_err(|_| "truncated")?;
        take(pos, 0)?;
        *pos = pos
            .checked_add(n)
            .filter(|&e| e <= b.len())
            .ok_or("truncated")?;
        Ok(())
    };
    while let Some(left) = open.last_mut() {
        if *left == 0 {
            open.pop();
            continue;
        }
        *left -= 1;
        let m = take(&mut pos, 1)? as u8;
        // (items of a container opened here, bytes to skip)
        let (items, bytes): (Option<u64>, u64) = match m {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (None, 0),
            0x80..=0x8f => (Some(2 * u64::from(m & 0x0f)), 0),
            0x90..=0x9f => (Some(u64::from(m & 0x0f)), 0),
            0xa0..=0xbf => (None, u64::from(m & 0x1f)),
            0xc4 | 0xd9 => (None, take(&mut pos, 1)?),
            0xc5 | 0xda => (None, take(&mut pos, 2)?),
            0xc6 | 0xdb => (None, take(&mut pos, 4)?),
            0xc7 => (None, take(&mut pos, 1)? + 1),
            0xc8 => (None, take(&mut pos, 2)? + 1),
            0xc9 => (None, take(&mut pos, 4)? + 1),
            0xca => (None, 4),
            0xcb => (None, 8),
            0xcc | 0xd0 => (None, 1),
            0xcd | 0xd1 => (None, 2),
            0xce | 0xd2 => (None, 4),
            0xcf | 0xd3 => (None, 8),
            0xd4 => (None, 2),
            0xd5 => (None, 3),
            0xd6 => (None, 5),
            0xd7 => (None, 9),
            0xd8 => (None, 17),
            0xdc => (Some(take(&mut pos, 2)?), 0),
            0xdd => (Some(take(&mut pos, 4)?), 0),
            0xde => (Some(2 * take(&mut pos, 2)?), 0),
            0xdf => (Some(2 * take(&mut pos, 4)?), 0),
            0xc1 => return Err("the reserved byte 0xc1".into()),
        };
        skip(&mut pos, bytes)?;
        if let Some(n) = items {
            open.push(n);
            deepest = deepest.max(open.len() - 1);
            if deepest > MAX_DEPTH {
                return Ok(deepest);
            }
        }
    }
    Ok(deepest)
}

/// Reads and decodes one message.
pub fn recv<T: for<'de> Deserialize<'de>>(r: &mut impl Read, max: usize) -> Result<T, FrameError> {
    decode(&read_frame(r, max)?)
}

/// Encodes and writes one message (not flushed).
pub fn send<T: Serialize>(w: &mut impl Write, m: &T) -> Result<(), FrameError> {
    write_frame(w, &encode(m))
}

/// Proof that a client holds a module's bytes, not only their hash: the
/// SHA-256 of the session's challenge followed by the module's
/// [`possession_key`] (itself a digest of the bytes), in hex. A
/// client that learnt another's hash cannot make it, so the shared module
/// cache neither tells it whether the hash was uploaded nor loads it.
pub fn possession(challenge: &str, bytes: &[u8]) -> String {
    possession_by_key(challenge, &possession_key(bytes))
}

/// The key a module's [`possession`] proofs are made with: a digest of its
/// bytes that its name ([`content_hash`]) does not give away. The worker
/// keeps it beside the cached module, so that it checks a proof without
/// reading the module: a wrong proof costs the same whether or not the
/// module is cached (reading and hashing a 48 MiB module told them apart,
/// 212-255 ms against 0.2-5 ms).
pub fn possession_key(bytes: &[u8]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(b"rocmc module possession key\0");
    h.update(bytes);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// [`possession`] from the module's [`possession_key`].
pub fn possession_by_key(challenge: &str, key: &str) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(challenge.as_bytes());
    h.update(key.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex SHA-256 of `bytes`: how modules are named.
pub fn content_hash(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_measured_without_recursion_and_limited() {
        // Every message kind nests well within the limit.
        let m = Request::Launch {
            module: "ab".into(),
            kernel: "k".into(),
            args: vec![
                WireArg::Buffer {
                    id: 3,
                    dtype: "f32".into(),
                    len: 8,
                    offset: 0,
                },
                WireArg::Scalar {
                    dtype: "f32".into(),
                    bytes: vec![0, 0, 128, 63],
                },
            ],
        };
        let d = nesting(&encode(&m)).unwrap();
        assert!((1..=5).contains(&d), "{d}");
        // 100,000 nested one-element arrays: measured, refused, no overflow.
        let mut deep = vec![0x91u8; 100_000];
        deep.push(0x01);
        assert_eq!(nesting(&deep).unwrap(), MAX_DEPTH + 1);
        let e = decode::<Request>(&deep).unwrap_err().to_string();
        assert!(e.contains("over the limit of 32"), "{e}");
        // Truncated containers and strings are malformed, not a panic.
        assert!(nesting(&[0xdc, 0x00]).is_err());
        assert!(nesting(&[0xa5, b'a']).is_err());
        assert!(nesting(&[0xc6, 0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn frames_round_trip_and_limits_hold() {
        let mut buf = Vec::new();
        let m = Request::Launch {
            module: "ab".into(),
            kernel: "k".into(),
            args: vec![WireArg::Size(3)],
        };
        send(&mut buf, &m).unwrap();
        let back: Request = recv(&mut buf.as_slice(), 1 << 10).unwrap();
        assert_eq!(back, m);
        assert!(matches!(
            read_frame(&mut buf.as_slice(), 4),
            Err(FrameError::TooLarge { .. })
        ));
        // Truncated: a length with fewer bytes behind it.
        assert!(matches!(
            read_frame(&mut &buf[..buf.len() - 1], 1 << 10),
            Err(FrameError::Closed)
        ));
        // Garbage that frames correctly but does not decode.
        let mut g = Vec::new();
        write_frame(&mut g, &[0xc1, 0xff, 0x00]).unwrap();
        assert!(matches!(
            recv::<Request>(&mut g.as_slice(), 1 << 10),
            Err(FrameError::Malformed(_))
        ));
    }
}
