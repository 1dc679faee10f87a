//! The capability error: the WIT `error` variant on the host side
//! ([`CapError`], its case [`ErrorKind`]) and the conversions both ways. Every
//! capability returns it, the policy's denials become it, and the plugin host
//! hands it to guests as the WIT variant: expected failures are values, never
//! traps.

use super::bindings::WitError;

/// The kinds of the WIT `error` variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Outside the grant.
    Denied,
    /// Does not exist.
    NotFound,
    /// The world is in the way (lock held, VM locked, ...).
    Conflict,
    /// Bad arguments.
    Invalid,
    /// May pass; only idempotent calls may be retried.
    Transient,
    /// Anything else.
    Failed,
}

impl ErrorKind {
    /// The WIT case name (`not-found`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Denied => "denied",
            ErrorKind::NotFound => "not-found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Transient => "transient",
            ErrorKind::Failed => "failed",
        }
    }
}

/// A failed capability call: the WIT `error` variant on the host side.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CapError {
    /// The case.
    pub kind: ErrorKind,
    /// What happened, naming the thing concerned.
    pub message: String,
}

impl CapError {
    /// Build an error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> CapError {
        CapError { kind, message: message.into() }
    }
    /// A `failed` error.
    pub fn failed(message: impl Into<String>) -> CapError {
        CapError::new(ErrorKind::Failed, message)
    }
    /// An `invalid` error.
    pub fn invalid(message: impl Into<String>) -> CapError {
        CapError::new(ErrorKind::Invalid, message)
    }
    /// A `not-found` error.
    pub fn not_found(message: impl Into<String>) -> CapError {
        CapError::new(ErrorKind::NotFound, message)
    }
}

impl CapError {
    /// The host-side form of a WIT error.
    pub fn from_wit(e: WitError) -> CapError {
        use WitError as W;
        match e {
            W::Denied(m) => CapError::new(ErrorKind::Denied, m),
            W::NotFound(m) => CapError::new(ErrorKind::NotFound, m),
            W::Conflict(m) => CapError::new(ErrorKind::Conflict, m),
            W::Invalid(m) => CapError::new(ErrorKind::Invalid, m),
            W::Transient(m) => CapError::new(ErrorKind::Transient, m),
            W::Failed(m) => CapError::new(ErrorKind::Failed, m),
        }
    }
}

impl From<CapError> for WitError {
    fn from(e: CapError) -> WitError {
        match e.kind {
            ErrorKind::Denied => WitError::Denied(e.message),
            ErrorKind::NotFound => WitError::NotFound(e.message),
            ErrorKind::Conflict => WitError::Conflict(e.message),
            ErrorKind::Invalid => WitError::Invalid(e.message),
            ErrorKind::Transient => WitError::Transient(e.message),
            ErrorKind::Failed => WitError::Failed(e.message),
        }
    }
}
