//! The error every host call and every lifecycle function returns: the WIT
//! `error` variant (wit/types.wit) as a Rust enum, with the questions a
//! plugin asks of it answered in one place.

pub use crate::bindings::cradle::host::types::Error;

/// A host call's or a lifecycle function's result.
pub type Result<T, E = Error> = core::result::Result<T, E>;

impl Error {
    /// The case's WIT name: `denied`, `not-found`, `conflict`, `invalid`,
    /// `transient` or `failed`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Denied(_) => "denied",
            Error::NotFound(_) => "not-found",
            Error::Conflict(_) => "conflict",
            Error::Invalid(_) => "invalid",
            Error::Transient(_) => "transient",
            Error::Failed(_) => "failed",
        }
    }

    /// The message, which names what was refused or missing.
    pub fn message(&self) -> &str {
        match self {
            Error::Denied(m)
            | Error::NotFound(m)
            | Error::Conflict(m)
            | Error::Invalid(m)
            | Error::Transient(m)
            | Error::Failed(m) => m,
        }
    }

    /// Whether the failure may pass. Only an idempotent call may be retried
    /// after it: a clone that failed `transient` may have happened (see
    /// [`crate::proxmox::clone_once`]).
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Transient(_))
    }

    /// The same case with `what` put in front of the message
    /// (`"resize scsi0 of web1: " + message`), so the operator reads which
    /// step of the plugin failed.
    pub fn context(self, what: &str) -> Error {
        let wrap = |m: String| format!("{what}: {m}");
        match self {
            Error::Denied(m) => Error::Denied(wrap(m)),
            Error::NotFound(m) => Error::NotFound(wrap(m)),
            Error::Conflict(m) => Error::Conflict(wrap(m)),
            Error::Invalid(m) => Error::Invalid(wrap(m)),
            Error::Transient(m) => Error::Transient(wrap(m)),
            Error::Failed(m) => Error::Failed(wrap(m)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;

    #[test]
    fn context_keeps_the_case_and_prefixes_the_message() {
        let e = Error::Transient("connection reset".into()).context("clone tpl to web1");
        assert!(e.is_transient());
        assert_eq!(e.kind(), "transient");
        assert_eq!(e.message(), "clone tpl to web1: connection reset");
        assert!(!Error::Failed("x".into()).is_transient());
    }
}
