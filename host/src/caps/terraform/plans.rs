//! The saved plans of one run: the host owns every plan file, the plugin only
//! ever holds an opaque id.
//!
//! Contract:
//! - A plan file is `cradle-<pid>-<start ticks>-<id>.tfplan` in the module
//!   directory: the process that made it, so a later run can tell a dead
//!   attempt's plan from a live one, and a random id.
//! - [`Plans`] lives in the run ([`crate::caps::context::RunHandle`]): an id
//!   resolves only in the run that made it and only for its module, so no run
//!   can show, apply or discard another run's plan, and a rerun after a crash
//!   can never apply the plan of the attempt that died.
//! - [`Plans::prune_dead`] removes plan files whose process is gone (a kill -9
//!   between plan and apply); plans of live processes are never touched.
//! - Dropping [`Plans`] (the run ends) removes the plans it still holds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::contract::CapError;
use crate::state::process::{Liveness, pid_start_ticks, process_liveness};

/// The plans a run made, by id.
#[derive(Debug, Default)]
pub struct Plans {
    made: Mutex<BTreeMap<String, Made>>,
}

#[derive(Debug, Clone)]
struct Made {
    module_dir: PathBuf,
    file: PathBuf,
    /// Made with `-destroy`: `apply` approves it only as a removal.
    destroy: bool,
}

const PREFIX: &str = "cradle-";
const SUFFIX: &str = ".tfplan";

fn lock(p: &Plans) -> std::sync::MutexGuard<'_, BTreeMap<String, Made>> {
    p.made.lock().unwrap_or_else(|e| e.into_inner())
}

impl Plans {
    /// A new plan file's id and path in `module_dir` (recorded as this run's,
    /// with whether it is a `destroy` plan).
    pub fn reserve(&self, module_dir: &Path, destroy: bool) -> (String, PathBuf) {
        let pid = std::process::id();
        let ticks = pid_start_ticks(pid).unwrap_or(0);
        let id = random_id();
        let file = module_dir.join(format!("{PREFIX}{pid}-{ticks}-{id}{SUFFIX}"));
        lock(self).insert(id.clone(), Made { module_dir: module_dir.to_path_buf(), file: file.clone(), destroy });
        (id, file)
    }

    /// The file of plan `id`, which this run made for `module_dir`.
    pub fn file(&self, module_dir: &Path, id: &str) -> Result<PathBuf, CapError> {
        match lock(self).get(id) {
            Some(m) if m.module_dir == module_dir => Ok(m.file.clone()),
            _ => Err(CapError::not_found(format!(
                "terraform: plan `{id}` was not made by this run for {}; plan again",
                module_dir.display()
            ))),
        }
    }

    /// Whether plan `id` (of this run, for `module_dir`) was made with `-destroy`.
    pub fn is_destroy(&self, module_dir: &Path, id: &str) -> Result<bool, CapError> {
        self.file(module_dir, id)?;
        Ok(lock(self).get(id).is_some_and(|m| m.destroy))
    }

    /// Forget plan `id` and remove its file (a missing file is fine).
    pub fn discard(&self, module_dir: &Path, id: &str) -> Result<(), CapError> {
        let file = self.file(module_dir, id)?;
        lock(self).remove(id);
        remove(&file)
    }

    /// Remove the plan files in `module_dir` whose process is gone.
    pub fn prune_dead(module_dir: &Path) -> Result<Vec<PathBuf>, CapError> {
        let mut removed = Vec::new();
        let Ok(entries) = std::fs::read_dir(module_dir) else { return Ok(removed) };
        let host = crate::state::host_name();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((pid, ticks)) = owner(&name) else { continue };
            let ticks = (ticks != 0).then_some(ticks);
            if process_liveness(&host, pid, ticks) == Liveness::Gone {
                remove(&entry.path())?;
                removed.push(entry.path());
            }
        }
        Ok(removed)
    }
}

impl Drop for Plans {
    fn drop(&mut self) {
        for made in lock(self).values() {
            if let Err(e) = remove(&made.file) {
                tracing::warn!(error = %e.message, "could not remove a saved plan at the end of its run");
            }
        }
    }
}

/// 16 hex digits from the kernel's random source (a counter if it cannot be
/// read: ids only need to be unique, since they resolve only in their run).
fn random_id() -> String {
    use std::io::Read;
    let mut b = [0u8; 8];
    match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)) {
        Ok(()) => hex::encode(b),
        Err(_) => {
            // Unique within the process all the same: the pid covers others.
            static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            format!("{:016x}", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed) ^ 0x5eed_0000_0000_0000)
        }
    }
}

/// The pid and start ticks in a plan file's name.
fn owner(name: &str) -> Option<(u32, u64)> {
    let rest = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let mut parts = rest.splitn(3, '-');
    let pid = parts.next()?.parse().ok()?;
    let ticks = parts.next()?.parse().ok()?;
    parts.next().filter(|id| !id.is_empty() && id.chars().all(|c| c.is_ascii_hexdigit()))?;
    Some((pid, ticks))
}

fn remove(file: &Path) -> Result<(), CapError> {
    match std::fs::remove_file(file) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CapError::failed(format!("terraform: cannot remove plan {}: {e}", file.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_id_resolves_only_in_the_run_and_module_that_made_it() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        let run1 = Plans::default();
        let run2 = Plans::default();
        let (id, file) = run1.reserve(&a, false);
        assert_eq!(run1.file(&a, &id).expect("own plan"), file);
        assert!(run1.file(&b, &id).is_err(), "another module");
        assert!(run2.file(&a, &id).is_err(), "another run");
        assert!(run2.discard(&a, &id).is_err(), "another run cannot discard it");
    }

    #[test]
    fn only_plans_of_dead_processes_are_pruned() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path();
        let me = std::process::id();
        let live = dir.join(format!("cradle-{me}-{}-ab12{SUFFIX}", pid_start_ticks(me).unwrap_or(0)));
        // pid_max on Linux is at most 2^22: this pid cannot exist.
        let dead = dir.join(format!("cradle-4194305-1-cd34{SUFFIX}"));
        let other = dir.join("operator.tfplan");
        for f in [&live, &dead, &other] {
            std::fs::write(f, "plan").expect("write");
        }
        let removed = Plans::prune_dead(dir).expect("prune");
        assert_eq!(removed, vec![dead.clone()]);
        assert!(live.exists() && other.exists() && !dead.exists());
    }

    #[test]
    fn the_plans_a_run_still_holds_are_removed_when_it_ends() {
        let tmp = tempfile::tempdir().expect("tmp");
        let plans = Plans::default();
        let (_, file) = plans.reserve(tmp.path(), false);
        std::fs::write(&file, "plan").expect("write");
        drop(plans);
        assert!(!file.exists());
    }
}
