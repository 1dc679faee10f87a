//! Verify (skeleton).
#![allow(clippy::todo, reason = "skeleton commit: replaced by the next one")]

use std::collections::BTreeMap;

use super::change::{PendingEntry, VmChanges};

/// Changes not in effect and not pending.
pub fn outstanding(
    planned: &VmChanges,
    live_config: &BTreeMap<String, String>,
    pending: &[PendingEntry],
) -> Vec<String> {
    let _ = (planned, live_config, pending);
    todo!()
}

/// Whether anything is pending until a cold start.
pub fn needs_cold_start(pending: &[PendingEntry]) -> bool {
    let _ = pending;
    todo!()
}
