//! Errors of the simulator's library API (starting, persisting, serving).
//!
//! API-level failures that a client sees (PVE error envelopes) are not these: they are
//! `api::ApiError`. A `SimError` means the simulator itself could not run, and its
//! message says what to fix.

use std::path::PathBuf;

/// Why the simulator could not start, persist or serve.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The configuration is unusable; the message names the field.
    #[error("invalid simulator configuration: {0}")]
    Config(String),
    /// The fault spec could not be parsed.
    #[error("invalid fault spec '{spec}': {reason} (expected e.g. 'api-500=0.05,clone-fail=1')")]
    FaultSpec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A file or directory of the state dir could not be read or written.
    #[error("state dir: cannot {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The persisted state could not be parsed; move the file away to start fresh.
    #[error("state dir: {path} is not valid simulator state ({reason}); move it away to start fresh")]
    CorruptState {
        /// The file.
        path: PathBuf,
        /// The parse error.
        reason: String,
    },
    /// The TLS certificate or key could not be generated or loaded.
    #[error("TLS setup failed: {0}")]
    Tls(String),
    /// A listening socket could not be bound.
    #[error("cannot listen on {addr}: {source} (is the address in use, or below 1024 without root?)")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An SSH key could not be generated or parsed.
    #[error("SSH key: {0}")]
    SshKey(String),
}

impl SimError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SimError::Io { action, path: path.into(), source }
    }
}
