//! The maintenance plan file `cradle plan --out PLAN` writes and `cradle
//! apply PLAN` reads: JSON, owner-only (0600), written atomically (a temp
//! file in the same directory, fsync, rename), never to stdout.
//!
//! Contract:
//! - [`PlanFile::write`] sets `id` (sha256 over the file's canonical JSON
//!   without `id`: keys sorted, no whitespace) and writes the file; what it
//!   writes reads back equal.
//! - [`read`] returns a plan only when every check passes, else a
//!   [`PlanFileError`] naming the file and the field: another `format`, a
//!   file that is not such a plan, an `id` that does not match (an edited or
//!   truncated file), a `created` older than `[maintenance] plan_max_age` (or
//!   more than [`FUTURE_SLACK`] ahead of this clock), an `environment`
//!   cradle.toml does not define, a `cluster` other than the one that
//!   environment uses now.
//! - The file holds only what cradle compares (config values, sizes,
//!   digests), never a credential: `cipassword` is never compared or stored.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::caps::maintenance::{Allow, VmChanges};
use crate::config::human_duration;

/// The `format` this cradle writes and reads.
pub const FORMAT: &str = "cradle-maintenance-plan/1";

/// How far ahead of this machine's clock a plan's `created` may be (another
/// control node's clock): beyond it the age check would mean nothing.
pub const FUTURE_SLACK: Duration = Duration::from_secs(300);

/// A maintenance plan (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// [`FORMAT`].
    pub format: String,
    /// sha256 hex of the canonical JSON of every other field.
    #[serde(default)]
    pub id: String,
    /// When the plan was made (RFC 3339, UTC).
    pub created: String,
    /// The cluster identity the lock keys use (the API endpoint, or `sim://NAME`).
    pub cluster: String,
    /// The environment the plan was made in.
    pub environment: String,
    /// The inventory, as an absolute path.
    pub inventory: PathBuf,
    /// `--limit`, if any.
    pub limit: Option<String>,
    /// The `--allow-*` flags the plan was made with.
    pub allow: Allow,
    /// Every VM that could be planned, in inventory order (with no
    /// operations too: shown as unchanged).
    pub vms: Vec<PlannedVm>,
}

/// One VM of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedVm {
    /// The inventory host.
    pub host: String,
    /// `direct` or `terraform`.
    pub backend: String,
    /// sha256 of the VM's resolved vm-spec JSON at plan time: apply refuses
    /// the VM when the inventory now resolves differently.
    pub spec_digest: String,
    /// The classified changes and the operations that make them.
    pub changes: VmChanges,
    /// The terraform backend's saved plan, if any.
    #[serde(default)]
    pub terraform_plan: Option<String>,
}

impl PlannedVm {
    /// Whether apply has anything to write for this VM.
    pub fn has_operations(&self) -> bool {
        let c = &self.changes;
        !c.set.is_empty()
            || !c.delete.is_empty()
            || !c.moves.is_empty()
            || !c.resize.is_empty()
            || self.terraform_plan.is_some()
    }

    /// Whether PVE held changes pending when the plan was made (an earlier
    /// apply with `--reboot never`, or someone else's): `--reboot if-needed`
    /// runs the VM's apply for them even with no operation.
    pub fn had_pending(&self) -> bool {
        !self.changes.pending_before.is_empty()
    }
}

/// Why a plan file cannot be used: the file, the field, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanFileError {
    /// The plan file.
    pub file: PathBuf,
    /// The field at fault (`file` for the file as a whole).
    pub field: &'static str,
    /// One sentence.
    pub problem: String,
}

impl fmt::Display for PlanFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "plan file {}: {}: {}", self.file.display(), self.field, self.problem)
    }
}

impl std::error::Error for PlanFileError {}

fn refuse(file: &Path, field: &'static str, problem: impl Into<String>) -> PlanFileError {
    PlanFileError { file: file.to_path_buf(), field, problem: problem.into() }
}

/// The time now as a plan's `created`.
pub fn now_rfc3339() -> String {
    OffsetDateTime::now_utc().format(&Rfc3339).unwrap_or_default()
}

impl PlanFile {
    /// The canonical JSON id of this plan (its `id` left out).
    pub fn compute_id(&self) -> String {
        let mut value = match serde_json::to_value(self) {
            Ok(v) => v,
            Err(_) => return String::new(),
        };
        if let Some(map) = value.as_object_mut() {
            map.remove("id");
        }
        // serde_json's maps are sorted (no `preserve_order`): the text is canonical.
        hex::encode(Sha256::digest(value.to_string().as_bytes()))
    }

    /// Set `id` and write the plan to `path` (0600, atomic).
    pub fn write(&mut self, path: &Path) -> Result<(), PlanFileError> {
        self.id = self.compute_id();
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| refuse(path, "file", format!("cannot serialize the plan: {e}")))?;
        crate::state::write_private_file_atomic(path, format!("{text}\n").as_bytes())
            .map_err(|e| refuse(path, "file", format!("cannot write it: {e}")))
    }
}

/// What the project says a plan must match when it is read.
pub struct Expect<'a> {
    /// The time now.
    pub now: OffsetDateTime,
    /// `[maintenance] plan_max_age`.
    pub max_age: Duration,
    /// The cluster identity of an environment now, or why there is no such
    /// environment (a sentence naming the known ones).
    pub cluster_of: &'a dyn Fn(&str) -> Result<String, String>,
}

/// Read and check the plan file at `path` (see the module doc).
pub fn read(path: &Path, expect: &Expect<'_>) -> Result<PlanFile, PlanFileError> {
    let text = std::fs::read_to_string(path).map_err(|e| refuse(path, "file", format!("cannot read it: {e}")))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        refuse(path, "file", format!("not JSON ({e}): not a plan `cradle plan --out` wrote, or cut short; plan again"))
    })?;
    match value.get("format").and_then(|f| f.as_str()) {
        Some(FORMAT) => {}
        Some(other) => {
            return Err(refuse(path, "format", format!("`{other}` is not a format this cradle reads ({FORMAT})")));
        }
        None => return Err(refuse(path, "format", format!("missing: not a cradle maintenance plan ({FORMAT})"))),
    }
    let plan: PlanFile = serde_json::from_value(value)
        .map_err(|e| refuse(path, "file", format!("not a maintenance plan of this cradle: {e}; plan again")))?;
    if plan.id.is_empty() || plan.id != plan.compute_id() {
        return Err(refuse(
            path,
            "id",
            "does not match the plan's content: the file was edited or cut short since `cradle plan` wrote it; plan \
             again",
        ));
    }
    let created = OffsetDateTime::parse(&plan.created, &Rfc3339)
        .map_err(|e| refuse(path, "created", format!("`{}` is not an RFC 3339 time: {e}", plan.created)))?;
    let age = expect.now - created;
    if age.is_negative() && age.unsigned_abs() > FUTURE_SLACK {
        return Err(refuse(
            path,
            "created",
            format!(
                "{} is {} ahead of this machine's clock; check the clocks and plan again",
                plan.created,
                human_duration(age.unsigned_abs())
            ),
        ));
    }
    if !age.is_negative() && age.unsigned_abs() > expect.max_age {
        return Err(refuse(
            path,
            "created",
            format!(
                "the plan was made {} ago; the limit is {} ([maintenance] plan_max_age); plan again",
                human_duration(age.unsigned_abs()),
                human_duration(expect.max_age)
            ),
        ));
    }
    let cluster = (expect.cluster_of)(&plan.environment).map_err(|why| refuse(path, "environment", why))?;
    if cluster != plan.cluster {
        return Err(refuse(
            path,
            "cluster",
            format!(
                "the plan was made for cluster `{}`, but environment `{}` is cluster `{cluster}` now; a plan applies \
                 only to the cluster it was made on",
                plan.cluster, plan.environment
            ),
        ));
    }
    Ok(plan)
}

#[cfg(test)]
#[path = "plan_file_tests.rs"]
mod tests;
