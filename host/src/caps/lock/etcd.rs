//! Workflow locks in etcd v3, shared by several control nodes.
//!
//! Contract (the [`LockStore`] contract, plus):
//! - A lock is the key `<prefix>locks/<lock key>`, created in a transaction
//!   only if absent (`create_revision == 0`), bound to a lease of
//!   `lease_ttl_s` that the holder keeps alive from a background task; the
//!   value is the [`Holder`] as JSON (host, pid, cradle version, start, run).
//! - The key's create revision is the lock's **fencing token**
//!   ([`Acquired::fence`]): a release deletes the key only if it still has
//!   that revision, so a holder that lost its lease never deletes the lock a
//!   new holder took.
//! - A crashed holder stops renewing: etcd deletes its key when the lease
//!   expires, so the lock frees itself after the TTL. Dropping the store does
//!   not release anything (a crash would not either); runs release their locks.
//! - A holder whose keep-alive has not been confirmed for three quarters of
//!   the TTL may have lost the lease: [`LockStore::check_held`] then fails with
//!   [`LockError::Lost`], and the guard refuses the run's next capability call
//!   before it has any effect. The clock is monotonic and keeps counting while
//!   the process is stopped (SIGSTOP), so a resumed holder knows.
//! - `remove_stale` (`cradle unlock`) refuses while the key's lease is alive,
//!   and removes a key whose lease is gone (never the normal case: etcd
//!   deletes those itself).
//!
//! Every etcd request has a deadline (a third of the TTL, at least 5 s); etcd
//! unreachable, or a quorum lost, is [`LockError::Etcd`] naming the endpoints,
//! never a lock taken by guess.
//!
//! The store is synchronous like the others: requests and keep-alive tasks
//! run on the runtime of the shared [`EtcdConn`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Acquired, Holder, LockError, LockStore, Removal};
use crate::caps::coordination::CoordinationConfig;
use crate::caps::coordination::etcd::gateway::{self, Compare, Op};
use crate::caps::coordination::etcd::{EtcdConn, Fence};
use crate::state::process::Liveness;

/// A lock this process holds.
#[derive(Debug)]
struct Held {
    run_id: String,
    lease: i64,
    fence: i64,
    health: Arc<LeaseHealth>,
}

/// What the keep-alive task knows of one lease.
#[derive(Debug)]
struct LeaseHealth {
    /// Milliseconds after the store's epoch of the last confirmed renewal.
    confirmed_ms: AtomicU64,
    /// etcd said the lease is gone (TTL 0).
    expired: AtomicBool,
    /// Set by release: the task ends.
    stop: AtomicBool,
}

/// Locks in etcd (see the module docs).
#[derive(Debug)]
pub struct EtcdLockStore {
    conn: Arc<EtcdConn>,
    epoch: Instant,
    held: Mutex<HashMap<String, Held>>,
}

fn etcd_error(key: &str, e: crate::caps::coordination::etcd::EtcdFailure) -> LockError {
    LockError::Etcd { key: key.to_string(), source: e }
}

impl EtcdLockStore {
    /// Locks over `conn`.
    pub fn new(conn: Arc<EtcdConn>) -> EtcdLockStore {
        EtcdLockStore { conn, epoch: Instant::now(), held: Mutex::new(HashMap::new()) }
    }

    /// Connect to the etcd of `config` (`backend = "etcd"`, validated) for
    /// locks only; relative TLS paths are relative to `base`.
    pub fn connect(config: &CoordinationConfig, base: &std::path::Path) -> Result<EtcdLockStore, LockError> {
        Ok(EtcdLockStore::new(Arc::new(EtcdConn::connect(config, base).map_err(|e| etcd_error("", e))?)))
    }

    /// The etcd key of lock `key`.
    fn etcd_key(&self, key: &str) -> String {
        format!("{}locks/{key}", self.conn.prefix)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Run `f` on the connection and wait for it, with the request deadline.
    fn block<T: Send + 'static>(
        &self,
        key: &str,
        action: &'static str,
        f: impl Future<Output = Result<T, gateway::Error>> + Send + 'static,
    ) -> Result<T, LockError> {
        self.conn.block(&format!("{action} lock `{key}`"), f).map_err(|e| etcd_error(key, e))
    }

    /// Whether the lease behind `health` may have expired by now.
    fn may_be_lost(&self, health: &LeaseHealth) -> bool {
        let quiet = self.now_ms().saturating_sub(health.confirmed_ms.load(Ordering::SeqCst));
        health.expired.load(Ordering::SeqCst) || Duration::from_millis(quiet) >= self.conn.ttl * 3 / 4
    }

    /// Keep `lease` alive every third of the TTL until `health.stop`.
    fn spawn_keep_alive(&self, lease: i64, health: Arc<LeaseHealth>) {
        let client = self.conn.client();
        let (period, epoch) = (self.conn.ttl / 3, self.epoch);
        self.conn.spawn(async move {
            while !health.stop.load(Ordering::SeqCst) {
                tokio::time::sleep(period).await;
                if health.stop.load(Ordering::SeqCst) {
                    break;
                }
                match tokio::time::timeout(period, client.lease_keep_alive(lease)).await {
                    Ok(Ok(ttl)) if ttl > 0 => {
                        health.confirmed_ms.store(epoch.elapsed().as_millis() as u64, Ordering::SeqCst);
                    }
                    Ok(Ok(_)) => {
                        // TTL 0: etcd has already deleted the lease and its key.
                        health.expired.store(true, Ordering::SeqCst);
                        break;
                    }
                    // Unanswered or failed: tried again at the next round;
                    // `may_be_lost` judges by the last confirmed renewal.
                    _ => {}
                }
            }
        });
    }

    /// Test hook: stop renewing `key`'s lease, as a stopped or partitioned
    /// holder would.
    #[cfg(test)]
    pub(crate) fn stop_keep_alive(&self, key: &str) {
        if let Some(h) = self.held.lock().unwrap_or_else(|e| e.into_inner()).get(key) {
            h.health.stop.store(true, Ordering::SeqCst);
        }
    }
}

fn parse_holder(key: &str, value: &[u8]) -> Result<Holder, LockError> {
    serde_json::from_slice(value).map_err(|e| LockError::CorruptValue { key: key.to_string(), detail: e.to_string() })
}

impl LockStore for EtcdLockStore {
    fn acquire(&self, key: &str, holder: &Holder) -> Result<Acquired, LockError> {
        super::check_key(key)?;
        {
            let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(h) = held.get(key)
                && h.run_id == holder.run_id
            {
                return Ok(Acquired { reentrant: true, fence: Some(h.fence) });
            }
        }
        let ekey = self.etcd_key(key);
        let value = serde_json::to_vec(holder)
            .map_err(|e| LockError::CorruptValue { key: key.to_string(), detail: e.to_string() })?;
        let ttl = self.conn.ttl.as_secs() as i64;
        let client = self.conn.client();
        let lease = self.block(key, "grant a lease for", async move { client.lease_grant(ttl).await })?;
        let client = self.conn.client();
        let guard = [Compare::CreateRevision(ekey.clone(), 0)];
        let put = [Op::Put { key: ekey.clone(), value, lease }];
        let read = [Op::Get(ekey.clone())];
        let answer = self.block(key, "take", async move { client.txn(&guard, &put, &read).await });
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                self.revoke(key, lease);
                return Err(e);
            }
        };
        if !answer.succeeded {
            self.revoke(key, lease);
            let current = answer.read().first().map(|kv| kv.value.clone());
            // Deleted between the compare and the get: held a moment ago.
            let Some(current) = current else {
                return Err(LockError::Lost {
                    key: key.to_string(),
                    detail: "it changed hands while it was being taken; run again".into(),
                });
            };
            let other = parse_holder(key, &current)?;
            return Err(LockError::Held { key: key.to_string(), holder: Box::new(other) });
        }
        // The transaction's revision is the one that created the key.
        let fence = answer.revision();
        let health = Arc::new(LeaseHealth {
            confirmed_ms: AtomicU64::new(self.now_ms()),
            expired: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        self.spawn_keep_alive(lease, health.clone());
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), Held { run_id: holder.run_id.clone(), lease, fence, health });
        Ok(Acquired { reentrant: false, fence: Some(fence) })
    }

    fn release(&self, key: &str, run_id: &str) -> Result<(), LockError> {
        super::check_key(key)?;
        let mine = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            match held.get(key) {
                Some(h) if h.run_id == run_id => held.remove(key),
                _ => None,
            }
        };
        let ekey = self.etcd_key(key);
        let Some(h) = mine else {
            // Not ours in this process: free is fine, anyone else's is refused.
            // (The same run id from another process cannot release it either:
            // its keep-alive and fencing token are that process's.)
            return match self.holder(key)? {
                None => Ok(()),
                Some(other) => Err(LockError::NotHolder {
                    key: key.to_string(),
                    run_id: run_id.to_string(),
                    holder: Box::new(other),
                }),
            };
        };
        h.health.stop.store(true, Ordering::SeqCst);
        // Delete only the key this acquisition created (its fencing token):
        // after a lost lease, another holder's key stays.
        let client = self.conn.client();
        let guard = [Compare::CreateRevision(ekey.clone(), h.fence)];
        let delete = [Op::Delete(ekey)];
        let deleted = self.block(key, "release", async move { client.txn(&guard, &delete, &[]).await });
        self.revoke(key, h.lease);
        match deleted {
            Ok(a) if !a.succeeded => {
                tracing::warn!(
                    key,
                    fence = h.fence,
                    "the lock's lease had ended and another holder may have it; left it alone"
                );
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn holder(&self, key: &str) -> Result<Option<Holder>, LockError> {
        super::check_key(key)?;
        let ekey = self.etcd_key(key);
        let client = self.conn.client();
        let answer = self.block(key, "read", async move { client.get(&ekey).await })?;
        answer.map(|kv| parse_holder(key, &kv.value)).transpose()
    }

    fn remove_stale(&self, key: &str, _liveness: &dyn Fn(&Holder) -> Liveness) -> Result<Removal, LockError> {
        super::check_key(key)?;
        let ekey = self.etcd_key(key);
        let client = self.conn.client();
        let get_key = ekey.clone();
        let answer = self.block(key, "read", async move { client.get(&get_key).await })?;
        let Some(kv) = answer else { return Ok(Removal::NotLocked) };
        let holder = parse_holder(key, &kv.value).ok();
        let (lease, revision) = (kv.lease, kv.mod_revision);
        if lease != 0 {
            let client = self.conn.client();
            let left = self.block(key, "read the lease of", async move { client.lease_time_to_live(lease).await })?;
            if left > 0 {
                return Err(LockError::NotStale {
                    key: key.to_string(),
                    reason: format!(
                        "it is held under a live etcd lease ({} s left, renewed by its holder while it runs); \
                         a crashed holder's lock frees itself within lease_ttl_s",
                        left
                    ),
                });
            }
        }
        let client = self.conn.client();
        let guard = [Compare::ModRevision(ekey.clone(), revision)];
        let delete = [Op::Delete(ekey)];
        let done = self.block(key, "remove", async move { client.txn(&guard, &delete, &[]).await })?;
        if done.succeeded { Ok(Removal::Removed { holder }) } else { Ok(Removal::NotLocked) }
    }

    fn fence(&self, key: &str, run_id: &str) -> Option<Fence> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.get(key).filter(|h| h.run_id == run_id).map(|h| Fence { lock_key: self.etcd_key(key), revision: h.fence })
    }

    fn check_held(&self, key: &str, run_id: &str) -> Result<(), LockError> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match held.get(key) {
            Some(h) if h.run_id == run_id && self.may_be_lost(&h.health) => Err(LockError::Lost {
                key: key.to_string(),
                detail: format!(
                    "its etcd lease (ttl {} s) was not renewed in time; another control node may hold it now",
                    self.conn.ttl.as_secs()
                ),
            }),
            _ => Ok(()),
        }
    }
}

impl EtcdLockStore {
    /// Give a lease back; a failure only delays the key's deletion to the TTL.
    fn revoke(&self, key: &str, lease: i64) {
        let client = self.conn.client();
        if let Err(e) = self.block(key, "revoke the lease of", async move { client.lease_revoke(lease).await }) {
            tracing::warn!(key, error = %e, "could not revoke an etcd lease; it ends with its TTL");
        }
    }
}

#[cfg(test)]
#[path = "etcd_tests.rs"]
mod tests;
