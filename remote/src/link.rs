//! What the worker says to its session process over the pipe. Clients
//! never speak this: the worker decodes every client frame as a
//! [`Request`] and turns a `Write` or `Read`, whose bytes travel unframed
//! beside it, into messages naming a slot of the shared
//! [`Window`](crate::window::Window).

use crate::proto::Request;
use serde::{Deserialize, Serialize};

/// One message from the worker to its session.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Link {
    /// A client request other than `Write` and `Read`, as the client sent it.
    Request(Request),
    /// Copy `len` bytes from window slot `slot` into buffer `id` at byte
    /// `offset`. Answered at once with `Reply::Ok`, which frees the slot; a
    /// failure is kept for the client's next synchronous request, as for
    /// any asynchronous request.
    WriteSlot {
        /// The client's buffer id.
        id: u32,
        /// Where, in bytes.
        offset: u64,
        /// How many (at most a slot).
        len: u64,
        /// Which slot holds them.
        slot: u32,
    },
    /// Copy `len` bytes of buffer `id` from byte `offset` into slot `slot`;
    /// the whole read ends at byte `end`, which the session checks first.
    /// Answered with `Reply::Ok` once the slot holds them, or an error.
    ReadSlot {
        /// The client's buffer id.
        id: u32,
        /// Where, in bytes.
        offset: u64,
        /// How many (at most a slot).
        len: u64,
        /// The end of the client's whole read.
        end: u64,
        /// Which slot to fill.
        slot: u32,
    },
}

/// The descriptor a session reads the worker's [`Link`] messages on. The
/// protocol has descriptors of its own, never standard input and output:
/// a kernel that prints (a debugging `printf`) writes to a pipe the worker
/// only logs.
pub const REQUEST_FD: std::os::fd::RawFd = 4;

/// The descriptor a session writes its replies to the worker on.
pub const REPLY_FD: std::os::fd::RawFd = 5;

/// The session's ends of its channel to the worker: `(requests, replies)`.
/// Refused unless both descriptors are open pipes (a session started by
/// anything but the worker has none).
pub fn inherited() -> std::io::Result<(std::fs::File, std::fs::File)> {
    use std::os::fd::FromRawFd;
    let take = |fd: std::os::fd::RawFd| {
        // SAFETY: fstat writes into a stat this function owns; a closed
        // descriptor makes it fail, which is checked before taking it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut st) } < 0 || st.st_mode & libc::S_IFMT != libc::S_IFIFO {
            return Err(std::io::Error::other(format!(
                "descriptor {fd} is not the worker's pipe: a session is started by rocmc-worker only"
            )));
        }
        // SAFETY: the worker duplicates its pipe onto `fd` for this
        // process alone (`Command::pre_exec`); nothing else here owns it.
        Ok(unsafe { std::fs::File::from_raw_fd(fd) })
    };
    Ok((take(REQUEST_FD)?, take(REPLY_FD)?))
}
