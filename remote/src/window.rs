//! The transfer window: memory shared by the worker and one session
//! process, through which buffer bytes pass without being framed, copied
//! through a pipe or decoded. The worker reads a `Write`'s bytes from TLS
//! straight into a slot and the session copies them from there to the
//! device; a `Read` goes the other way. The pipe between them carries only
//! small messages naming a slot ([`crate::link::Link`]).
//!
//! The window is an anonymous memory file (`memfd`), sealed against
//! shrinking and growing before the session is started: a session, which
//! runs arbitrary kernels, cannot truncate it under the worker (which
//! would kill the worker with `SIGBUS` on its next access). It is handed to
//! that one session as descriptor [`SESSION_FD`], so no other session
//! inherits it.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

/// The descriptor a session finds its window on.
pub const SESSION_FD: RawFd = 3;

/// Bytes per slot: large enough that the per-slot messages cost nothing
/// beside the copy, small enough that the worker, the session and the
/// client work on different slots at once.
pub const SLOT: usize = 4 << 20;

/// Slots per window: one being filled while the others are drained.
pub const SLOTS: usize = 3;

/// A mapped window of [`SLOTS`] slots of `slot` bytes each.
pub struct Window {
    map: memmap2::MmapMut,
    file: File,
    slot: usize,
}

impl Window {
    /// A new sealed window (the worker's side).
    pub fn create(slot: usize) -> io::Result<Window> {
        let name = c"rocmc-transfer-window";
        // SAFETY: a NUL-terminated name and flags; the result is checked.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len((slot * SLOTS) as u64)?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: adds seals to a memfd this process owns; checked.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Window::map(file, slot)
    }

    /// The window the worker handed to this session on [`SESSION_FD`].
    /// Refused unless its size cannot change any more.
    pub fn inherited(slot: usize) -> io::Result<Window> {
        // SAFETY: the worker opens SESSION_FD for every session it starts
        // (`Command::pre_exec` in the worker); nothing else in this process
        // owns it.
        let file = unsafe { File::from_raw_fd(SESSION_FD) };
        // SAFETY: reads the seals of a descriptor this process owns.
        let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(io::Error::other(
                "the transfer window is not a sealed memory file",
            ));
        }
        if file.metadata()?.len() != (slot * SLOTS) as u64 {
            return Err(io::Error::other("the transfer window has the wrong size"));
        }
        Window::map(file, slot)
    }

    fn map(file: File, slot: usize) -> io::Result<Window> {
        // SAFETY: the file is a sealed memfd of exactly this size, so the
        // mapping never loses pages under us. The other process mapping it
        // uses each slot only while the pipe's messages give it that slot;
        // a session that breaks the rule anyway changes only bytes (which
        // have no invalid values) of its own client's transfer.
        let map = unsafe { memmap2::MmapMut::map_mut(&file)? };
        Ok(Window { map, file, slot })
    }

    /// Bytes per slot.
    pub fn slot_len(&self) -> usize {
        self.slot
    }

    /// Slot `i`'s bytes.
    pub fn slot(&mut self, i: usize) -> &mut [u8] {
        let at = (i % SLOTS) * self.slot;
        &mut self.map[at..at + self.slot]
    }

    /// The memory file (to hand to the session).
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_cannot_be_shrunk_or_grown() {
        let mut w = Window::create(4096).unwrap();
        w.slot(2)[4095] = 7;
        // What a session holding the descriptor would try.
        // SAFETY: duplicates a descriptor this test owns.
        let other = unsafe { File::from_raw_fd(libc::dup(w.fd())) };
        assert!(other.set_len(0).is_err());
        assert!(other.set_len(1 << 30).is_err());
        assert_eq!(w.slot(2)[4095], 7);
        assert_eq!(w.slot(SLOTS + 2)[4095], 7, "slot numbers wrap");
    }
}
