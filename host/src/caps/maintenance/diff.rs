//! The diff (skeleton).
#![allow(clippy::todo, reason = "skeleton commit: replaced by the next one")]

use super::change::{Allow, Live, VmChanges, Wanted};

/// A live config the diff cannot read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DiffError {
    /// A value it cannot parse.
    #[error("{vm}: cannot read `{key}` of the live config ({value:?}): {reason}")]
    Unreadable { vm: String, key: String, value: String, reason: String },
}

/// The changes that make `live` what `want` asks for.
pub fn diff(want: &Wanted, live: &Live, allow: &Allow) -> Result<VmChanges, DiffError> {
    let _ = (want, live, allow);
    todo!()
}
