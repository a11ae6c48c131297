//! Connections accepted and not logged in yet. Each has a deadline (a
//! reaper shuts down the late ones, which ends any read blocked on them),
//! each address a bounded share of the places held by silent connections
//! (ones that have not sent a byte), and a full table makes room
//! rather than refuses: the newcomer takes the place of the oldest silent
//! connection of the address holding most silent ones, or, with none silent, of the oldest of the address holding
//! most. Idle sockets, however many addresses they come from and however
//! fast they are reopened, then only push each other out, and a client with
//! the secret, which speaks at once, always gets in.

use std::net::{IpAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

struct Entry {
    id: usize,
    ip: IpAddr,
    deadline: Instant,
    /// It has sent a byte.
    heard: bool,
    /// The connection's own socket (shared, not a second descriptor).
    tcp: Arc<TcpStream>,
}

pub(super) struct Pending {
    max: usize,
    per_address: usize,
    next: AtomicUsize,
    /// Oldest first.
    open: Mutex<Vec<Entry>>,
}

impl Pending {
    pub(super) fn new(max: usize, per_address: usize) -> Pending {
        Pending {
            max: max.max(1),
            per_address: per_address.clamp(1, max.max(1)),
            next: AtomicUsize::new(0),
            open: Mutex::new(Vec::new()),
        }
    }

    /// Registers `tcp` from `ip` until `deadline`, making room as above;
    /// its id.
    pub(super) fn admit(&self, tcp: &Arc<TcpStream>, ip: IpAddr, deadline: Instant) -> usize {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        // A connection whose first bytes wait unread has spoken too (its
        // thread may not have run yet).
        for e in open.iter_mut().filter(|e| !e.heard) {
            e.heard = readable(&e.tcp);
        }
        let silent_here = open.iter().filter(|e| e.ip == ip && !e.heard).count();
        let victim = if silent_here >= self.per_address {
            // Its own oldest silent one.
            open.iter().position(|e| e.ip == ip && !e.heard)
        } else if open.len() >= self.max {
            let silent = |e: &&Entry| !e.heard;
            let from = busiest(open.iter().filter(silent)).or_else(|| busiest(open.iter()));
            let silent_only = open.iter().any(|e| !e.heard);
            open.iter()
                .position(|e| Some(e.ip) == from && (!silent_only || !e.heard))
        } else {
            None
        };
        if let Some(at) = victim {
            let _ = open.remove(at).tcp.shutdown(std::net::Shutdown::Both);
        }
        open.push(Entry {
            id,
            ip,
            deadline,
            heard: false,
            tcp: tcp.clone(),
        });
        id
    }

    /// The connection sent its first byte.
    pub(super) fn heard(&self, id: usize) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = open.iter_mut().find(|e| e.id == id) {
            e.heard = true;
        }
    }

    /// The connection logged in (or ended): no deadline any more.
    pub(super) fn done(&self, id: usize) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|e| e.id != id);
    }

    /// Shuts down the connections past their deadline.
    pub(super) fn reap(&self) {
        let now = Instant::now();
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|e| {
            let late = e.deadline <= now;
            if late {
                let _ = e.tcp.shutdown(std::net::Shutdown::Both);
            }
            !late
        });
    }
}

/// Whether bytes wait on `tcp` (or it was closed).
fn readable(tcp: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: tcp.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd for a socket this table keeps open; a zero
    // timeout never blocks.
    unsafe { libc::poll(&mut p, 1, 0) > 0 }
}

/// The address holding most of `entries` (of those tied, the one whose
/// oldest entry is oldest).
fn busiest<'a>(entries: impl Iterator<Item = &'a Entry>) -> Option<IpAddr> {
    let mut counts: Vec<(IpAddr, usize)> = Vec::new();
    for e in entries {
        match counts.iter_mut().find(|(ip, _)| *ip == e.ip) {
            Some((_, n)) => *n += 1,
            None => counts.push((e.ip, 1)),
        }
    }
    // `counts` is in order of each address's oldest entry: the first
    // maximum is the tie's oldest.
    let most = counts.iter().map(|c| c.1).max()?;
    counts.into_iter().find(|c| c.1 == most).map(|c| c.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Arc<TcpStream>, TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (Arc::new(l.accept().unwrap().0), c)
    }

    fn closed(c: &TcpStream) -> bool {
        c.set_nonblocking(true).unwrap();
        !matches!(c.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }

    #[test]
    fn a_full_table_drops_the_oldest_of_the_address_holding_most() {
        let p = Pending::new(4, 3);
        let later = Instant::now() + std::time::Duration::from_secs(60);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let conns: Vec<_> = [a, a, a, b]
            .iter()
            .map(|&ip| {
                let (s, c) = pair();
                p.admit(&s, ip, later);
                c
            })
            .collect();
        // Full: a newcomer from a third address pushes out a's oldest.
        let (s, newcomer) = pair();
        p.admit(&s, "10.0.0.3".parse().unwrap(), later);
        let shut: Vec<bool> = conns.iter().map(closed).collect();
        assert_eq!(shut, [true, false, false, false]);
        // An address at its share pushes out only its own oldest.
        let (s, _) = pair();
        p.admit(&s, b, later);
        let (s, _) = pair();
        p.admit(&s, b, later);
        let (s, _) = pair();
        p.admit(&s, b, later);
        assert!(closed(&conns[3]));
        assert!(!closed(&newcomer));
    }

    #[test]
    fn silent_connections_make_room_before_one_that_spoke() {
        let p = Pending::new(2, 2);
        let later = Instant::now() + std::time::Duration::from_secs(60);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let (s, spoke) = pair();
        let id = p.admit(&s, ip, later);
        p.heard(id);
        let mut silent = vec![];
        for _ in 0..5 {
            let (s, c) = pair();
            p.admit(&s, ip, later);
            silent.push(c);
        }
        assert!(!closed(&spoke));
        assert_eq!(silent.iter().filter(|c| closed(c)).count(), 4);
    }
}
