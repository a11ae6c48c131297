//! Streams and events: the order of queued work and its timing.

use crate::ffi::{Api, Handle};
use crate::Result;
use std::sync::Arc;

/// A CUDA stream.
pub struct Stream {
    pub(crate) api: Arc<Api>,
    pub(crate) ptr: Handle,
    /// Created here, destroyed on drop; a borrowed one is not.
    pub(crate) owned: bool,
}

impl Stream {
    /// Waits for the stream's work.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a live stream.
        self.api
            .check(unsafe { (self.api.stream_synchronize)(self.ptr) }, || {
                "synchronising a stream".into()
            })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: a live stream, destroyed once.
        let _ = unsafe { (self.api.stream_destroy)(self.ptr) };
    }
}

/// A CUDA event.
pub struct Event {
    pub(crate) api: Arc<Api>,
    pub(crate) ptr: Handle,
}

impl Event {
    /// Records the event on `stream` (the default stream when `None`).
    pub fn record(&self, stream: Option<&Stream>) -> Result<()> {
        let s = stream.map_or(std::ptr::null_mut(), |s| s.ptr);
        // SAFETY: a live event and stream (or the default stream).
        self.api
            .check(unsafe { (self.api.event_record)(self.ptr, s) }, || {
                "recording an event".into()
            })
    }

    /// Milliseconds from `start` to this event, waiting for this one.
    pub fn elapsed_since(&self, start: &Event) -> Result<f32> {
        // SAFETY: a live event.
        self.api
            .check(unsafe { (self.api.event_synchronize)(self.ptr) }, || {
                "waiting for an event".into()
            })?;
        let mut ms = 0f32;
        // SAFETY: valid out-pointer and two recorded events.
        self.api.check(
            unsafe { (self.api.event_elapsed_time)(&mut ms, start.ptr, self.ptr) },
            || "timing between events".into(),
        )?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: a live event, destroyed once.
        let _ = unsafe { (self.api.event_destroy)(self.ptr) };
    }
}
