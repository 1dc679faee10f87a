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
//! - [`Plans::keep`] takes one of the run's plans out of the run: the file is
//!   renamed `cradle-kept-<id>.tfplan` (no pid: never pruned as a dead
//!   attempt's) for a later run, which [`Plans::adopt`]s it by that id and then
//!   uses it like its own; an adopted plan's file is not removed when the run
//!   ends, only when discarded (after its apply), so a run that dies before
//!   applying leaves it for the rerun. [`Plans::remove_kept`] removes every
//!   kept plan of a module (after an apply there they are all stale), and a
//!   keep removes the module's kept plans older than `plan_max_age` (no plan
//!   file that old can be applied).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

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
    /// Adopted from a kept plan: the file outlives the run unless discarded.
    kept: bool,
}

const PREFIX: &str = "cradle-";
const SUFFIX: &str = ".tfplan";
const KEPT: &str = "cradle-kept-";

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
        lock(self).insert(
            id.clone(),
            Made { module_dir: module_dir.to_path_buf(), file: file.clone(), destroy, kept: false },
        );
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

    /// Keep plan `id` (this run's, for `module_dir`, not a `-destroy` plan)
    /// beyond the run: its file becomes `cradle-kept-<new id>.tfplan`; the new
    /// id. Kept plans of the module older than `max_age` go: `cradle apply`
    /// refuses a plan file that old (`[maintenance] plan_max_age`), so nothing
    /// can adopt them, and a plan never applied would otherwise stay.
    pub fn keep(&self, module_dir: &Path, id: &str, max_age: Option<Duration>) -> Result<String, CapError> {
        let file = self.file(module_dir, id)?;
        if self.is_destroy(module_dir, id)? {
            return Err(CapError::invalid(format!(
                "terraform: plan `{id}` of {} was made with -destroy; only an update plan can be kept",
                module_dir.display()
            )));
        }
        let kept = random_id();
        let to = kept_file(module_dir, &kept);
        std::fs::rename(&file, &to).map_err(|e| {
            CapError::failed(format!("terraform: cannot keep plan {} as {}: {e}", file.display(), to.display()))
        })?;
        lock(self).remove(id);
        let Some(max_age) = max_age else { return Ok(kept) };
        match Plans::remove_kept_older(module_dir, Some(max_age)) {
            Ok(gone) if !gone.is_empty() => {
                tracing::info!(module = %module_dir.display(), removed = gone.len(), "removed kept plans older than plan_max_age");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e.message, "could not remove old kept plans"),
        }
        Ok(kept)
    }

    /// Take the kept plan `kept` of `module_dir` into this run; its run id.
    pub fn adopt(&self, module_dir: &Path, kept: &str) -> Result<String, CapError> {
        let missing = || {
            CapError::not_found(format!(
                "terraform: {} holds no kept plan `{kept}` (applied already, removed after another apply in the \
                 module, or never made there); plan again",
                module_dir.display()
            ))
        };
        if kept.is_empty() || kept.len() > 64 || !kept.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(missing());
        }
        let file = kept_file(module_dir, kept);
        if !file.is_file() {
            return Err(missing());
        }
        let id = random_id();
        lock(self).insert(id.clone(), Made { module_dir: module_dir.to_path_buf(), file, destroy: false, kept: true });
        Ok(id)
    }

    /// Remove every kept plan of `module_dir` (after an apply there, terraform
    /// would refuse each as stale); what was removed.
    pub fn remove_kept(module_dir: &Path) -> Result<Vec<PathBuf>, CapError> {
        Plans::remove_kept_older(module_dir, None)
    }

    /// Remove the kept plans of `module_dir` last written more than
    /// `older_than` ago (all of them with `None`); what was removed.
    fn remove_kept_older(module_dir: &Path, older_than: Option<Duration>) -> Result<Vec<PathBuf>, CapError> {
        let mut removed = Vec::new();
        let Ok(entries) = std::fs::read_dir(module_dir) else { return Ok(removed) };
        let now = SystemTime::now();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !(name.starts_with(KEPT) && name.ends_with(SUFFIX)) {
                continue;
            }
            if let Some(age) = older_than {
                let written = entry.metadata().and_then(|m| m.modified()).ok();
                // An unreadable time or one in the future is kept: only a
                // plan known to be too old goes.
                if written.and_then(|w| now.duration_since(w).ok()).is_none_or(|d| d <= age) {
                    continue;
                }
            }
            remove(&entry.path())?;
            removed.push(entry.path());
        }
        Ok(removed)
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
        for made in lock(self).values().filter(|m| !m.kept) {
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

/// The file of kept plan `id` in `module_dir`.
fn kept_file(module_dir: &Path, id: &str) -> PathBuf {
    module_dir.join(format!("{KEPT}{id}{SUFFIX}"))
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

    const DAY: Duration = Duration::from_secs(86_400);

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
    fn a_kept_plan_outlives_its_run_and_another_run_adopts_it_until_it_is_discarded() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path();
        let planning = Plans::default();
        let (id, file) = planning.reserve(dir, false);
        std::fs::write(&file, "plan").expect("write");
        let kept = planning.keep(dir, &id, Some(DAY)).expect("kept");
        assert!(planning.file(dir, &id).is_err(), "no longer the planning run's");
        drop(planning);
        let kept_path = dir.join(format!("cradle-kept-{kept}{SUFFIX}"));
        assert!(kept_path.is_file() && !file.exists(), "renamed, and not removed when the planning run ended");
        assert!(Plans::prune_dead(dir).expect("prune").is_empty(), "not a dead attempt's plan");

        let dying = Plans::default();
        let adopted = dying.adopt(dir, &kept).expect("adopted");
        assert_eq!(dying.file(dir, &adopted).expect("file"), kept_path);
        drop(dying);
        assert!(kept_path.is_file(), "a run that ends without applying leaves it for the rerun");

        let applying = Plans::default();
        let adopted = applying.adopt(dir, &kept).expect("adopted again");
        assert!(applying.adopt(tmp.path().join("other").as_path(), &kept).is_err(), "another module");
        applying.discard(dir, &adopted).expect("discarded");
        assert!(!kept_path.exists());
        assert!(applying.adopt(dir, &kept).is_err(), "gone: plan again");
    }

    #[test]
    fn a_destroy_plan_cannot_be_kept_and_a_kept_id_is_never_a_path() {
        let tmp = tempfile::tempdir().expect("tmp");
        let plans = Plans::default();
        let (id, file) = plans.reserve(tmp.path(), true);
        std::fs::write(&file, "plan").expect("write");
        assert!(plans.keep(tmp.path(), &id, Some(DAY)).is_err());
        std::fs::write(tmp.path().join("x.tfplan"), "plan").expect("write");
        for bad in ["../x", "", "x", "ab/../../x"] {
            assert!(plans.adopt(tmp.path(), bad).is_err(), "{bad}");
        }
    }

    /// A plan made in `dir` and kept (plans older than a day removed); its kept id.
    fn keep_one(plans: &Plans, dir: &Path) -> String {
        let (id, file) = plans.reserve(dir, false);
        std::fs::write(&file, "plan").expect("write");
        plans.keep(dir, &id, Some(DAY)).expect("kept")
    }

    #[test]
    fn every_kept_plan_of_a_module_is_removed_after_an_apply_there() {
        let tmp = tempfile::tempdir().expect("tmp");
        let plans = Plans::default();
        for _ in 0..2 {
            keep_one(&plans, tmp.path());
        }
        std::fs::write(tmp.path().join("main.tf.json"), "{}").expect("write");
        assert_eq!(Plans::remove_kept(tmp.path()).expect("removed").len(), 2);
        assert!(tmp.path().join("main.tf.json").exists());
    }

    #[test]
    fn a_keep_removes_the_modules_kept_plans_older_than_plan_max_age_and_no_other() {
        let tmp = tempfile::tempdir().expect("tmp");
        let plans = Plans::default();
        let kept = [keep_one(&plans, tmp.path()), keep_one(&plans, tmp.path())];
        let path = |k: &str| tmp.path().join(format!("{KEPT}{k}{SUFFIX}"));
        // The first was never applied and is two days old now.
        let old = std::fs::File::options().write(true).open(path(&kept[0])).expect("open");
        old.set_modified(SystemTime::now() - 2 * DAY).expect("mtime");
        let newest = keep_one(&plans, tmp.path());
        assert!(!path(&kept[0]).exists(), "older than plan_max_age: no plan file could adopt it");
        assert!(path(&kept[1]).exists() && path(&newest).exists(), "younger ones stay");
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
