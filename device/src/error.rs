//! What a device can refuse or fail at, as values a caller can match on.

/// An error of any device: this machine's runtimes or a worker's.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No device by that name, or an address that does not parse.
    #[error("{0}")]
    NoDevice(String),
    /// A buffer id the device does not hold.
    #[error("buffer #{0} does not exist")]
    NoBuffer(u32),
    /// A copy reaching past the end of a buffer.
    #[error("{what} {len} bytes at byte {offset} of buffer #{id} of {size} bytes")]
    OutOfRange {
        /// `reading` or `writing`.
        what: &'static str,
        /// The buffer.
        id: u32,
        /// Where the copy starts.
        offset: u64,
        /// How many bytes it copies.
        len: u64,
        /// The buffer's size.
        size: u64,
    },
    /// A module id the device has not loaded.
    #[error("module {0} is not loaded on this device")]
    NoModule(String),
    /// Module bytes the device cannot load (wrong form, wrong target, no
    /// launch document).
    #[error("{0}")]
    BadModule(String),
    /// A launch the launch document refuses (nothing ran).
    #[error("launch of `{kernel}` refused: {reason}")]
    BadLaunch {
        /// The kernel.
        kernel: String,
        /// Why.
        reason: String,
    },
    /// A request over a limit of the device or its session.
    #[error("{0}")]
    Limit(String),
    /// The runtime underneath failed (the driver's own message).
    #[error("{device}: {message}")]
    Runtime {
        /// The device, as named.
        device: String,
        /// The runtime's message.
        message: String,
    },
    /// Reaching a device on another machine failed (connection, TLS,
    /// pinning, refusal); the error says which.
    #[error(transparent)]
    Transport(Box<dyn std::error::Error + Send + Sync>),
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Whether the user's input is at fault (a name, a module, a launch),
    /// not the device at run time.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Error::NoDevice(_) | Error::BadModule(_) | Error::BadLaunch { .. }
        )
    }
}
