//! Conversion between the host's [`CapError`] and the WIT `error` variant.

use super::context::{CapError, ErrorKind};
use crate::plugin::bindings::cradle::host::types::Error as WitError;

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
