//! What a session prints. Its standard output and error are one pipe the
//! worker drains at once (so a chatty kernel never blocks), logs to its own
//! standard error line by line up to [`LOGGED`] bytes a session, and keeps
//! the last [`TAIL`] bytes of, which a client whose session dies is told.

use std::io::{BufRead, BufReader, Read};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Bytes of one session's output the worker logs; the rest is counted.
const LOGGED: usize = 64 << 10;

/// Bytes of the output's end kept for the client's error.
const TAIL: usize = 2 << 10;

#[derive(Default)]
struct State {
    tail: Vec<u8>,
    ended: bool,
}

/// A session's output, drained by a thread of its own.
#[derive(Clone, Default)]
pub(super) struct Output(Arc<(Mutex<State>, Condvar)>);

impl Output {
    /// Drains `pipe` until every writer closed it, logging under `who`.
    pub(super) fn drain(pipe: std::io::PipeReader, who: String) -> Output {
        let out = Output::default();
        let me = out.clone();
        std::thread::spawn(move || {
            let mut logged = 0usize;
            let mut dropped = 0usize;
            let mut r = BufReader::new(pipe);
            let mut line = Vec::new();
            // Lines are cut at 4 KiB, so one without an end is bounded too.
            while let Ok(n) = r.by_ref().take(4096).read_until(b'\n', &mut line) {
                if n == 0 {
                    break;
                }
                if logged + n <= LOGGED {
                    let text = String::from_utf8_lossy(&line);
                    eprintln!("rocmc-worker: {who}: {}", text.trim_end());
                    logged += n;
                } else {
                    dropped += n;
                }
                me.keep(&line);
                line.clear();
            }
            if dropped > 0 {
                eprintln!("rocmc-worker: {who}: {dropped} more bytes of output not logged");
            }
            let (state, ended) = &*me.0;
            state.lock().unwrap_or_else(|p| p.into_inner()).ended = true;
            ended.notify_all();
        });
        out
    }

    fn keep(&self, line: &[u8]) {
        let mut s = self.0 .0.lock().unwrap_or_else(|p| p.into_inner());
        s.tail.extend_from_slice(line);
        let over = s.tail.len().saturating_sub(TAIL);
        s.tail.drain(..over);
    }

    /// The output's last lines, once the session's writers are gone (or
    /// after `wait`, should a process the session started keep the pipe).
    pub(super) fn tail(&self, wait: Duration) -> String {
        let (state, ended) = &*self.0;
        let s = state.lock().unwrap_or_else(|p| p.into_inner());
        let (s, _) = ended
            .wait_timeout_while(s, wait, |s| !s.ended)
            .unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&s.tail).trim_end().to_string()
    }
}
