//! The race check's record of a work-group's LDS accesses (see
//! docs/architecture.md, "The race check").

use super::{Access, InterpError};

/// Who last touched each LDS element of a work-group, and in which barrier
/// interval (epoch), to find accesses no barrier orders.
///
/// Two threads' accesses to one element, at least one a write, race unless
/// a barrier separates them. The check is per thread, not per wave: AMD
/// runs a wave's lanes together, but NVIDIA's lanes are scheduled
/// independently, and lowering emits one program for both. Since every
/// thread's accesses are recorded with their epoch, the order in which the
/// interpreter runs the threads does not matter: a wave that would run
/// ahead on the GPU into the next loop iteration is caught as well.
#[derive(Default)]
pub(super) struct Races {
    pub(super) kernel: String,
    pub(super) names: Vec<String>,
    /// Arrays from here on are the interpreter's own lane-exchange scratch
    /// (see [`crate::lower::matrix::Exchange::Lockstep`]), not checked.
    pub(super) checked: usize,
    /// The thread whose statement runs now.
    pub(super) current: usize,
    pub(super) epoch: u64,
    pub(super) cells: Vec<Vec<Cell>>,
    /// Asynchronous matrix instructions' LDS reads ([`Races::matrix_async`]):
    /// while `capturing` (a `MatrixDesc`'s reads), each thread's reads since
    /// its last commit; its committed groups not yet waited for, oldest
    /// first; and per element, how many such groups read it and the thread
    /// of the latest.
    pub(super) capturing: bool,
    pub(super) open: std::collections::HashMap<usize, Vec<(usize, usize)>>,
    pub(super) groups:
        std::collections::HashMap<usize, std::collections::VecDeque<Vec<(usize, usize)>>>,
    pub(super) in_flight: std::collections::HashMap<(usize, usize), (u32, usize)>,
}

/// The latest access of each kind to one element, and the latest by a
/// thread other than that one: enough to say exactly whether any thread
/// but a given one accessed it since a given epoch. Epoch 0: never.
#[derive(Clone, Copy, Default)]
pub(super) struct Cell {
    write: Latest,
    read: Latest,
}

#[derive(Clone, Copy, Default)]
struct Latest {
    last: (usize, u64),
    other: (usize, u64),
}

impl Latest {
    fn note(&mut self, t: usize, e: u64) {
        if self.last.0 != t {
            self.other = self.last;
        }
        self.last = (t, e);
    }

    /// A thread other than `t` that accessed the element in epoch `since`
    /// or later.
    fn by_other_since(&self, t: usize, since: u64) -> Option<usize> {
        let (u, e) = if self.last.0 != t {
            self.last
        } else {
            self.other
        };
        (e != 0 && e >= since).then_some(u)
    }
}

impl Races {
    pub(super) fn race(
        &self,
        b: usize,
        i: usize,
        first: (usize, Access),
        second: Access,
    ) -> InterpError {
        InterpError::Race {
            kernel: self.kernel.clone(),
            buffer: self.names[b].clone(),
            index: i,
            first,
            second: (self.current, second),
        }
    }

    /// The record of `b[i]`, or the error of an access past the array.
    pub(super) fn cell(&mut self, b: usize, i: usize) -> Result<&mut Cell, InterpError> {
        let len = self.cells[b].len();
        if i >= len {
            return Err(InterpError::LdsOutOfBounds {
                kernel: self.kernel.clone(),
                buffer: self.names[b].clone(),
                index: i,
                len,
            });
        }
        Ok(&mut self.cells[b][i])
    }

    pub(super) fn read(&mut self, b: usize, i: usize) -> Result<(), InterpError> {
        if b >= self.checked {
            return Ok(());
        }
        let (t, e) = (self.current, self.epoch);
        let c = self.cell(b, i)?;
        if let Some(u) = c.write.by_other_since(t, e) {
            return Err(self.race(b, i, (u, Access::Write), Access::Read));
        }
        c.read.note(t, e);
        if self.capturing {
            self.open.entry(t).or_default().push((b, i));
        }
        Ok(())
    }

    /// Thread `current`'s ordering of its asynchronous matrix
    /// instructions: a commit puts the LDS elements they read since the
    /// last one in flight, a wait retires all but the newest `pending`
    /// groups. Until retired, any thread's write to those elements races
    /// (the instructions read them at some moment in between).
    pub(super) fn matrix_async(&mut self, op: crate::loops::MatrixAsync) {
        use crate::loops::MatrixAsync;
        let t = self.current;
        match op {
            MatrixAsync::Fence => {}
            MatrixAsync::Commit => {
                let group = self.open.remove(&t).unwrap_or_default();
                for e in &group {
                    let n = self.in_flight.entry(*e).or_insert((0, t));
                    *n = (n.0 + 1, t);
                }
                self.groups.entry(t).or_default().push_back(group);
            }
            MatrixAsync::Wait(pending) => {
                let groups = self.groups.entry(t).or_default();
                let mut retired = Vec::new();
                while groups.len() > pending as usize {
                    retired.extend(groups.pop_front().unwrap_or_default());
                }
                for e in retired {
                    if let Some(n) = self.in_flight.get_mut(&e) {
                        n.0 -= 1;
                        if n.0 == 0 {
                            self.in_flight.remove(&e);
                        }
                    }
                }
            }
        }
    }

    pub(super) fn write(&mut self, b: usize, i: usize) -> Result<(), InterpError> {
        self.write_since(b, i, self.epoch)
    }

    /// A write that may have happened at any moment from epoch `since` to
    /// now: an asynchronous copy lands somewhere between its issue and the
    /// wait that completes it.
    pub(super) fn write_since(
        &mut self,
        b: usize,
        i: usize,
        since: u64,
    ) -> Result<(), InterpError> {
        if b >= self.checked {
            return Ok(());
        }
        if let Some(&(_, u)) = self.in_flight.get(&(b, i)) {
            return Err(self.race(b, i, (u, Access::InFlight), Access::Write));
        }
        let (t, e) = (self.current, self.epoch);
        let c = self.cell(b, i)?;
        if let Some(u) = c.write.by_other_since(t, since) {
            return Err(self.race(b, i, (u, Access::Write), Access::Write));
        }
        if let Some(u) = c.read.by_other_since(t, since) {
            return Err(self.race(b, i, (u, Access::Read), Access::Write));
        }
        c.write.note(t, e);
        Ok(())
    }
}
