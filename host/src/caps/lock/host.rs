//! The `lock` WIT adapter and the lock calls workflows make.
//!
//! Locks are held by the run, not by a store: a key acquired in one backend
//! call stays held across later calls of the same run (nested steps reuse it)
//! and [`RunHandle::release_all`] frees whatever the run still holds when it
//! ends, on every path.
//!
//! Within the run, each acquisition is counted per caller: the workflow, or
//! the plugin by name. A plugin may release only keys it acquired itself in
//! this run (anything else is `denied` and journaled, and nobody's count
//! changes), so a backend cannot free the workflow's VM lock; the lock store
//! is released when the last caller's last acquisition is released. The
//! workflow (operator code) may release any key the run holds.
//!
//! Failures, besides the guard's: a lock held by another run or by an
//! unrecorded holder, or a release by a run that does not hold it, is
//! `conflict`; a bad key `invalid`; a corrupt holder file or a filesystem
//! error `failed`.

use super::scope::{LockCall, LockOp};
use super::{Holder as StoredHolder, LockError, LockStore};
use crate::caps::Call;
use crate::caps::context::{CapCtx, RunHandle};
use crate::contract::bindings::cradle::host::lock::{self, Holder};
use crate::contract::bindings::cradle::host::types::Error as WitError;
use crate::contract::{CapError, ErrorKind};

impl From<LockError> for CapError {
    fn from(e: LockError) -> CapError {
        let kind = match &e {
            LockError::Held { .. }
            | LockError::UnknownHolder { .. }
            | LockError::NotHolder { .. }
            | LockError::NotStale { .. } => ErrorKind::Conflict,
            LockError::InvalidKey { .. } => ErrorKind::Invalid,
            _ => ErrorKind::Failed,
        };
        CapError::new(kind, e.to_string())
    }
}

fn wit_holder(h: StoredHolder) -> Holder {
    Holder { host: h.host, pid: h.pid, started: h.started, run_id: h.run_id }
}

impl RunHandle {
    /// Release every lock the run still holds; returns the keys that could not
    /// be released (already logged).
    pub fn release_all(&self, locks: &dyn LockStore) -> Vec<String> {
        let keys: Vec<String> =
            std::mem::take(&mut *self.held_locks.lock().unwrap_or_else(|e| e.into_inner())).into_keys().collect();
        let mut failed = Vec::new();
        for key in keys {
            if let Err(e) = locks.release(&key, &self.run_id) {
                tracing::error!(key = %key, error = %e, "could not release a lock at the end of the run");
                failed.push(key);
            }
        }
        failed
    }
}

impl RunHandle {
    /// Whether the run's workflow holds an acquisition of `key`.
    pub fn workflow_holds(&self, key: &str) -> bool {
        let held = self.held_locks.lock().unwrap_or_else(|e| e.into_inner());
        held.get(key).and_then(|by| by.get(WORKFLOW_CALLER)).is_some_and(|n| *n > 0)
    }
}

/// The caller label of the workflow's own acquisitions in
/// [`RunHandle::held_locks`]; plugins are `plugins.NAME`, so no plugin name
/// can pass for the workflow.
pub const WORKFLOW_CALLER: &str = "workflow";

impl CapCtx {
    /// Who this context's acquisitions belong to within the run.
    fn lock_caller(&self) -> String {
        if self.scope.operator { WORKFLOW_CALLER.to_string() } else { format!("plugins.{}", self.caller) }
    }

    /// Take `key` for this run.
    pub fn lock_acquire(&self, key: &str) -> Result<Holder, CapError> {
        self.guard("acquire", Call::Lock(LockCall { key, op: LockOp::Acquire }), || {
            let taken = super::acquire_taking_back(self.services.locks.as_ref(), key, &self.run.holder)?;
            if let Some(former) = &taken.took_back {
                self.journal_takeover(key, former);
            }
            let acquired = taken.acquired;
            if let (Some(fence), false, Some(journal)) = (acquired.fence, acquired.reentrant, &self.run.journal) {
                // The fencing token, so the journal shows which holder this run was.
                let fields = vec![("key".to_string(), key.to_string()), ("fence".to_string(), fence.to_string())];
                if let Err(e) = journal.log(self.vm.as_deref(), crate::journal::LogLevel::Info, "lock taken", fields) {
                    tracing::error!(error = %e, "could not journal a lock's fencing token");
                }
            }
            let mut held = self.run.held_locks.lock().unwrap_or_else(|e| e.into_inner());
            *held.entry(key.to_string()).or_default().entry(self.lock_caller()).or_insert(0) += 1;
            Ok(wit_holder(self.run.holder.clone()))
        })
    }

    /// Journal (and print) that `key` was taken back from `former`, a process
    /// of this host that is gone: the warning names the dead run so the
    /// operator can look at what it left.
    fn journal_takeover(&self, key: &str, former: &StoredHolder) {
        let message = format!("took back lock `{key}` from {former}: that process is gone (killed or crashed)");
        tracing::warn!(vm = self.vm.as_deref().unwrap_or("-"), "{message}");
        if let Some(journal) = &self.run.journal {
            let fields = vec![
                ("key".to_string(), key.to_string()),
                ("former_run".to_string(), former.run_id.clone()),
                ("former_pid".to_string(), former.pid.to_string()),
            ];
            if let Err(e) = journal.log(self.vm.as_deref(), crate::journal::LogLevel::Warn, &message, fields) {
                tracing::error!(error = %e, "could not journal a lock taken back");
            }
        }
    }

    /// Release `key` if this run holds it. A nested acquisition's release only
    /// closes that nesting level; the lock is freed when the outermost
    /// acquisition of the last caller holding it is released. A plugin
    /// releasing a key it did not acquire is denied (see the module docs).
    pub fn lock_release(&self, key: &str) -> Result<(), CapError> {
        let caller = self.lock_caller();
        let mut held = self.run.held_locks.lock().unwrap_or_else(|e| e.into_inner());
        let acquired_by_caller = held.get(key).and_then(|by| by.get(&caller)).is_some_and(|n| *n > 0);
        self.guard("release", Call::Lock(LockCall { key, op: LockOp::Release { acquired_by_caller } }), || {
            // Changes are committed only once the store agrees, so a failed
            // release leaves the run's record as it was (release_all retries).
            let mut by = held.get(key).cloned().unwrap_or_default();
            match by.get_mut(&caller) {
                Some(n) if *n > 1 => *n -= 1,
                Some(_) => {
                    by.remove(&caller);
                }
                // Only the workflow gets here (the policy denies a plugin):
                // operator code releasing the run's key frees it.
                None => by.clear(),
            }
            if by.is_empty() {
                self.services.locks.release(key, &self.run.run_id)?;
                held.remove(key);
            } else {
                held.insert(key.to_string(), by);
            }
            Ok(())
        })
    }

    /// Who holds `key`.
    pub fn lock_holder(&self, key: &str) -> Result<Option<Holder>, CapError> {
        self.guard("current-holder", Call::Lock(LockCall { key, op: LockOp::Holder }), || {
            Ok(self.services.locks.holder(key)?.map(wit_holder))
        })
    }
}

impl CapCtx {
    /// Whether the holder of `key` is a process that is gone (checked from
    /// this host): `Some(true)` only then, `Some(false)` when it runs or
    /// cannot be told, `None` when the lock is free. Lets a workflow that
    /// waits for a lock stop at once, naming `cradle unlock`, instead of
    /// waiting out its bound for a run that will never release it.
    pub fn lock_holder_gone(&self, key: &str) -> Result<Option<bool>, CapError> {
        self.guard("current-holder", Call::Lock(LockCall { key, op: LockOp::Holder }), || {
            Ok(self
                .services
                .locks
                .holder(key)?
                .map(|h| crate::caps::lock::local_liveness(&h) == crate::state::process::Liveness::Gone))
        })
    }
}

impl CapCtx {
    /// Take back `key` when its holder is a process shown to be gone, as
    /// `cradle unlock` does: `true` when a stale lock was removed, `false`
    /// when the lock was free; an error (naming why) when the holder runs or
    /// cannot be told. For a service that resumes its own work unattended
    /// (`cradle serve` after a crash); the removal is journaled.
    pub fn lock_reclaim(&self, key: &str) -> Result<bool, CapError> {
        self.guard("reclaim", Call::Lock(LockCall { key, op: LockOp::Reclaim }), || {
            match self.services.locks.remove_stale(key, &crate::caps::lock::local_liveness)? {
                crate::caps::lock::Removal::NotLocked => Ok(false),
                crate::caps::lock::Removal::Removed { holder } => {
                    tracing::warn!(key, holder = ?holder.map(|h| h.to_string()), "took back a lock whose holder is gone");
                    Ok(true)
                }
            }
        })
    }
}

impl lock::Host for CapCtx {
    fn acquire(&mut self, key: String) -> Result<Holder, WitError> {
        self.lock_acquire(&key).map_err(Into::into)
    }
    fn release(&mut self, key: String) -> Result<(), WitError> {
        self.lock_release(&key).map_err(Into::into)
    }
    fn current_holder(&mut self, key: String) -> Result<Option<Holder>, WitError> {
        self.lock_holder(&key).map_err(Into::into)
    }
}
