//! Workflow locks (invariant 1: one workflow per VM).
//!
//! Contract:
//! - A lock is keyed by a string, normally `<cluster identity>|<canonical VM name>`
//!   ([`lock_key`]: the API endpoint, or `sim://NAME`),
//!   and held by a run ([`Holder`]: host, pid, start time, run id, and the pid's
//!   start ticks to detect pid reuse).
//! - [`LockStore::acquire`] takes it at once or fails at once: held by another run
//!   is [`LockError::Held`], naming the holder and how to proceed. Taking a lock the
//!   same run holds succeeds with `reentrant: true` and adds no count — only the
//!   acquisition that returned `reentrant: false` should release.
//! - [`LockStore::release`] by a run that does not hold the lock is refused;
//!   releasing a free lock is a no-op, so failure paths can always release.
//! - A stale lock is removed by [`LockStore::remove_stale`] (the operator's
//!   `cradle unlock`): it refuses while the holder is alive on this host, and for
//!   another host unless the caller's liveness check says the holder is gone.
//! - [`acquire_taking_back`] is how every run takes a lock (provision, remove,
//!   run, serve, netbox sync, plugin test: all through `CapCtx::lock_acquire`):
//!   a lock whose holder is *provably* gone — recorded on this host, and that
//!   pid no longer running with that start time — is removed and taken, and the
//!   caller is told whose it was (to journal and print it). A holder that lives,
//!   runs on another host, or cannot be told keeps its lock: the error names it
//!   and `cradle unlock` stays the operator's explicit way. (etcd: a dead
//!   holder's key stays until its lease ends, `remove_stale` refuses before.)
//! - A lock whose holder cannot be read (a crash between taking the lock and
//!   recording the holder) counts as held by an unknown holder, never as free.
//!
//! [`FsLockStore`] (atomic `mkdir`) is the default; [`EtcdLockStore`] shares
//! locks between control nodes (leases, keep-alive, fencing tokens), chosen by
//! `[coordination]` ([`CoordinationConfig`]).

mod etcd;
mod fs;
mod host;
pub(crate) mod rhai;
pub mod scope;

pub use crate::caps::coordination::{CoordinationBackend, CoordinationConfig};
pub use crate::state::process::{Liveness, pid_start_ticks, process_liveness};
pub use etcd::EtcdLockStore;
pub use fs::FsLockStore;

/// The lock key of VM `vm_name` in cluster `cluster_id`.
pub fn lock_key(cluster_id: &str, vm_name: &str) -> String {
    format!("{cluster_id}|{vm_name}")
}

/// [`process_liveness`] of the holder's host, pid and start ticks.
pub fn local_liveness(holder: &Holder) -> Liveness {
    process_liveness(&holder.host, holder.pid, holder.pid_start_ticks)
}

/// What [`acquire_taking_back`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The acquisition.
    pub acquired: Acquired,
    /// `Some` when the lock was taken back from a holder shown to be gone on
    /// this host (the holder it had); the caller journals and prints it.
    pub took_back: Option<Holder>,
}

/// Takes `key` for `holder` ([`LockStore::acquire`]); a lock held by a process
/// of this host that is gone ([`local_liveness`] `Gone`: the pid is not running
/// with the recorded start time) is removed first ([`LockStore::remove_stale`],
/// told nothing is known of other hosts) and then taken. Any other holder — alive,
/// on another host, unknown, or a store that refuses (a live etcd lease) —
/// leaves the original [`LockError::Held`], naming it. Two runs taking back the
/// same dead holder's lock race on the store's atomic acquire: one wins, the
/// other gets `Held` naming the winner.
pub fn acquire_taking_back(store: &dyn LockStore, key: &str, holder: &Holder) -> Result<Taken, LockError> {
    match store.acquire(key, holder) {
        Ok(acquired) => Ok(Taken { acquired, took_back: None }),
        Err(LockError::Held { key: held_key, holder: dead }) if local_liveness(&dead) == Liveness::Gone => {
            let took_back = match store.remove_stale(key, &|_| Liveness::Unknown) {
                Ok(Removal::Removed { holder: former }) => former.or_else(|| Some((*dead).clone())),
                // Released meanwhile: nothing was taken back.
                Ok(Removal::NotLocked) => None,
                Err(LockError::NotStale { .. }) => return Err(LockError::Held { key: held_key, holder: dead }),
                Err(e) => return Err(e),
            };
            let acquired = store.acquire(key, holder)?;
            Ok(Taken { acquired, took_back })
        }
        Err(e) => Err(e),
    }
}

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::state::StateError;

/// Who holds a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The control node's host name.
    pub host: String,
    /// The process id there.
    pub pid: u32,
    /// When the lock was taken (RFC 3339).
    pub started: String,
    /// The run that holds it.
    pub run_id: String,
    /// Field 22 of `/proc/<pid>/stat` (process start time in clock ticks), so a
    /// reused pid is not mistaken for the holder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start_ticks: Option<u64>,
    /// The holder's cradle version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl Holder {
    /// This process as the holder for `run_id`, started now.
    pub fn current(run_id: &str) -> Holder {
        let pid = std::process::id();
        Holder {
            host: crate::state::host_name(),
            pid,
            started: crate::journal::Timestamp::now().to_string(),
            run_id: run_id.to_string(),
            pid_start_ticks: pid_start_ticks(pid),
            version: Some(env!("CARGO_PKG_VERSION").to_string()),
        }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "run {} (host {}, pid {}, since {})", self.run_id, self.host, self.pid, self.started)
    }
}

/// The result of a successful [`LockStore::acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    /// The run already held the lock; the caller must not release it for this
    /// acquisition (the outer one will).
    pub reentrant: bool,
    /// The lock's fencing token (etcd: the revision that created the key),
    /// increasing with every new holder; `None` for the file store, whose
    /// locks cannot be taken over while held.
    pub fence: Option<i64>,
}

/// What [`LockStore::remove_stale`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// Nothing was locked under that key.
    NotLocked,
    /// The lock was removed; `holder` is who held it (none: unknown holder).
    Removed {
        /// The former holder, if it was recorded.
        holder: Option<Holder>,
    },
}

/// A store of workflow locks.
pub trait LockStore: Send + Sync + std::fmt::Debug {
    /// Takes `key` for `holder.run_id`, or fails at once if another run holds it.
    fn acquire(&self, key: &str, holder: &Holder) -> Result<Acquired, LockError>;
    /// Releases `key` if `run_id` holds it; a free lock is Ok, another holder is refused.
    fn release(&self, key: &str, run_id: &str) -> Result<(), LockError>;
    /// The current holder of `key`, if any.
    fn holder(&self, key: &str) -> Result<Option<Holder>, LockError>;
    /// Removes a lock whose holder is gone (the operator's `cradle unlock`).
    fn remove_stale(&self, key: &str, liveness: &dyn Fn(&Holder) -> Liveness) -> Result<Removal, LockError>;
    /// Fails with [`LockError::Lost`] when `run_id` took `key` in this process
    /// and may no longer hold it (an etcd lease not renewed in time). No I/O:
    /// the guard asks before every capability call of a run that holds locks.
    /// A file lock is never taken over while its holder lives.
    fn check_held(&self, _key: &str, _run_id: &str) -> Result<(), LockError> {
        Ok(())
    }
    /// The fencing token of `key` when `run_id` holds it in this process and
    /// the store has one (etcd); shared records are written under it.
    fn fence(&self, _key: &str, _run_id: &str) -> Option<crate::caps::coordination::etcd::Fence> {
        None
    }
}

/// The store `[coordination]` names: the file store in `locks_dir` (made
/// only then), or etcd, connected now.
pub fn open_store(
    config: &CoordinationConfig,
    base: &std::path::Path,
    locks_dir: impl FnOnce() -> Result<PathBuf, StateError>,
) -> Result<std::sync::Arc<dyn LockStore>, LockError> {
    Ok(match config.backend {
        CoordinationBackend::File => std::sync::Arc::new(FsLockStore::new(locks_dir()?)),
        CoordinationBackend::Etcd => std::sync::Arc::new(EtcdLockStore::connect(config, base)?),
    })
}

/// The longest lock key.
const MAX_KEY_LEN: usize = 1024;

/// A key every store accepts: non-empty, at most 1024 bytes, no control characters.
pub(crate) fn check_key(key: &str) -> Result<(), LockError> {
    let reason = if key.is_empty() {
        "it is empty"
    } else if key.len() > MAX_KEY_LEN {
        "it is longer than 1024 bytes"
    } else if key.chars().any(char::is_control) {
        "it contains control characters"
    } else {
        return Ok(());
    };
    Err(LockError::InvalidKey { key: key.escape_debug().to_string(), reason })
}

/// The VM part of a `<endpoint>|<vm>` key, for the `cradle unlock` hint.
fn unlock_hint(key: &str) -> &str {
    key.rsplit('|').next().unwrap_or(key)
}

/// Why a lock operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another run holds the lock.
    #[error(
        "lock `{key}` is held by {holder}; wait for that run to finish, or once that \
         process is gone run `cradle unlock {}`",
        unlock_hint(key)
    )]
    Held {
        /// The key.
        key: String,
        /// Who holds it.
        holder: Box<Holder>,
    },
    /// The lock exists but its holder was never recorded.
    #[error(
        "lock `{key}` is held by an unknown holder: {} has no holder.json (locked since \
         {since}); a run is taking it right now or crashed while taking it — if no cradle \
         run is active, run `cradle unlock {}`",
        dir.display(),
        unlock_hint(key)
    )]
    UnknownHolder {
        /// The key.
        key: String,
        /// The lock directory.
        dir: PathBuf,
        /// The lock directory's modification time (RFC 3339).
        since: String,
    },
    /// A run tried to release a lock it does not hold.
    #[error("run {run_id} cannot release lock `{key}`: it is held by {holder}")]
    NotHolder {
        /// The key.
        key: String,
        /// The run that asked.
        run_id: String,
        /// Who holds it.
        holder: Box<Holder>,
    },
    /// `remove_stale` refused because the holder may still be running.
    #[error("refusing to remove lock `{key}`: {reason}")]
    NotStale {
        /// The key.
        key: String,
        /// Why, and what to check.
        reason: String,
    },
    /// The recorded holder cannot be parsed.
    #[error(
        "lock `{key}`: {} is corrupt ({detail}); inspect it, and if no cradle run \
         holds the lock, remove {} by hand",
        path.display(),
        path.parent().map(|p| p.display().to_string()).unwrap_or_default()
    )]
    Corrupt {
        /// The key.
        key: String,
        /// The holder file.
        path: PathBuf,
        /// What the parser said.
        detail: String,
    },
    /// The lock may have been taken over: the run must stop before its next side effect.
    #[error(
        "lock `{key}` was lost: {detail}; this run stops before its next side effect. Check which \
         run holds the VM now (`cradle unlock {}` shows it) before running again",
        unlock_hint(key)
    )]
    Lost {
        /// The key.
        key: String,
        /// Why it may be lost.
        detail: String,
    },
    /// The coordination store could not be reached or answered an error.
    #[error("{source}")]
    Etcd {
        /// The key (empty when connecting).
        key: String,
        /// What failed.
        source: crate::caps::coordination::etcd::EtcdFailure,
    },
    /// The holder stored in etcd cannot be parsed.
    #[error("lock `{key}`: its holder in etcd is corrupt ({detail}); inspect the key with etcdctl")]
    CorruptValue {
        /// The key.
        key: String,
        /// What the parser said.
        detail: String,
    },
    /// The key cannot be used.
    #[error("invalid lock key `{key}`: {reason}")]
    InvalidKey {
        /// The key (control characters escaped).
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The state directory could not be used.
    #[error(transparent)]
    State(#[from] StateError),
    /// A filesystem operation failed.
    #[error("lock `{key}`: cannot {action} {}: {source}", path.display())]
    Io {
        /// The key.
        key: String,
        /// What was being done.
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests;
