//! Progress (skeleton).
#![allow(clippy::todo, reason = "skeleton commit: replaced by the next one")]

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::change::{Resize, VmChanges};

/// Whether a step is still to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// Still to do.
    Todo,
    /// Done.
    Done,
}

/// How far an apply has got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// The config write.
    pub config: Step,
    /// Resizes still to do.
    pub resize: Vec<Resize>,
    /// Set when someone else changed the VM since the plan.
    pub changed: Option<String>,
}

/// How far the apply of `planned` has got on `live_config` with `digest`.
pub fn progress(planned: &VmChanges, live_config: &BTreeMap<String, String>, digest: &str) -> Progress {
    let _ = (planned, live_config, digest);
    todo!()
}
