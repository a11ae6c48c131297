//! rocmc's remote execution: compile here, run on a worker there.
//!
//! - [`proto`]: the versioned frame protocol (MessagePack over TLS).
//! - [`tls`]: the worker's identity, certificate pinning, the shared secret.
//! - [`server`]: the worker (accepts, authenticates, one session process per client).
//! - [`session`]: the session process, the only one that touches a device.
//! - [`confine`]: the Landlock rules a session puts itself under.
//! - [`link`], [`window`]: what the worker says to a session, and the
//!   shared memory a buffer's bytes pass through between the two.
//! - [`client`]: a worker's device as a [`client::RemoteDevice`].
//! - [`device`]: a remote device's errors and launch arguments as the one
//!   device interface's ([`Device`], from `rocmc-device`). Devices are
//!   opened by name in `rocmc-runtime` (its `remote` feature is this crate).
//!
//! The crate links no LLVM: the worker binary (`rocmc-worker`) is built from it.

#![deny(missing_docs)]

pub mod client;
pub mod confine;
pub mod device;
pub mod link;
pub mod proto;
pub mod server;
pub mod session;
pub mod tls;
pub mod window;

pub use client::{ConnectOptions, RemoteAddress, RemoteDevice, RemoteError};
pub use rocmc_device::{Device, Error as DeviceError};
