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
