//! One connection to the etcd of `[coordination]`, shared by the lock store
//! and the shared records (checkpoints, creation records): the client, a
//! runtime of its own (one worker thread) that runs its requests and the
//! lease keep-alives, and the deadline of every request.
//!
//! Also the fenced write every shared record goes through: a put or delete
//! applied in one transaction with the check that the writer's lock key still
//! has the create revision it had when the writer took it (its fencing
//! token). A writer whose lock was taken over since is refused
//! ([`EtcdFailure::Fenced`]) and nothing is written.
//!
//! The client speaks etcd's gRPC gateway (JSON over HTTP, [`gateway`]), so
//! the build needs no `protoc`; several endpoints are tried in turn when one
//! cannot be reached.
//!
//! Failure modes: etcd unreachable or without quorum is an error after the
//! request deadline (a third of the lease TTL, at least 5 s), naming the
//! endpoints; never a guess.

use std::future::Future;
use std::time::Duration;

pub mod gateway;

use gateway::{Client, Compare, Op, Tls};

use super::CoordinationConfig;

/// A fencing token: the etcd key of a lock and the revision that created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The lock's etcd key.
    pub lock_key: String,
    /// Its create revision when the writer took it.
    pub revision: i64,
}

/// Why an etcd request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EtcdFailure {
    /// No answer, or an error answer.
    #[error("cannot {action} in etcd at {endpoints}: {detail}")]
    Request {
        /// What was being done.
        action: String,
        /// The configured endpoints.
        endpoints: String,
        /// What the client said.
        detail: String,
    },
    /// The fencing check failed: the writer's lock belongs to someone else now.
    #[error(
        "refused to {action}: the lock it was written under ({lock}, fencing token {revision}) has been taken \
         over by another run since; this run no longer owns the VM"
    )]
    Fenced {
        /// What was refused.
        action: String,
        /// The lock's etcd key.
        lock: String,
        /// The writer's token.
        revision: i64,
    },
}

/// The etcd client of `[coordination]`.
pub struct EtcdConn {
    rt: Option<tokio::runtime::Runtime>,
    client: Client,
    /// Every key starts with it.
    pub prefix: String,
    /// The lease TTL of locks.
    pub ttl: Duration,
    /// The endpoints, for messages.
    pub endpoints: String,
}

impl std::fmt::Debug for EtcdConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdConn").field("endpoints", &self.endpoints).field("prefix", &self.prefix).finish()
    }
}

impl Drop for EtcdConn {
    fn drop(&mut self) {
        // Allowed inside an async context, unlike dropping the runtime.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// The deadline of one etcd request: a third of the TTL, at least 5 s (a
/// loaded etcd fsyncing on a busy disk answers in seconds, not
/// milliseconds). A request answered after the lease ended cannot do harm:
/// shared writes are fenced, and the guard checks the lease by its own clock.
fn request_deadline(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_secs(5))
}

/// Run `f` on `rt` and wait up to `deadline` for it, from any thread
/// (also a blocking thread of another runtime).
fn run_on<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    deadline: Duration,
    f: impl Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    rt.spawn(async move {
        let _ = tx.send(tokio::time::timeout(deadline, f).await);
    });
    match rx.recv() {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => Err(format!("no answer within {} ms (etcd down, or its quorum lost?)", deadline.as_millis())),
        Err(_) => Err("the etcd client stopped".to_string()),
    }
}

impl EtcdConn {
    /// Connect to the etcd of `config` (`backend = "etcd"`, validated);
    /// relative TLS file paths are relative to `base` (cradle.toml's directory).
    pub fn connect(config: &CoordinationConfig, base: &std::path::Path) -> Result<EtcdConn, EtcdFailure> {
        let endpoints = config.endpoints.join(", ");
        let ttl = Duration::from_secs(config.lease_ttl_s());
        let fail =
            |detail: String| EtcdFailure::Request { action: "connect".into(), endpoints: endpoints.clone(), detail };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("cradle-etcd")
            .enable_all()
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let read = |p: &std::path::PathBuf| {
            let path = base.join(p);
            std::fs::read(&path).map_err(|e| fail(format!("cannot read {}: {e}", path.display())))
        };
        let tls = match &config.ca_file {
            Some(ca) => Some(Tls {
                ca: read(ca)?,
                identity: match (&config.cert_file, &config.key_file) {
                    (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
                    _ => None,
                },
            }),
            None => None,
        };
        let login = match (&config.user, &config.password) {
            (Some(user), Some(password)) => {
                Some((user.clone(), password.resolve().map_err(|e| fail(format!("the password: {e}")))?))
            }
            _ => None,
        };
        let deadline = request_deadline(ttl);
        // One endpoint's connection may take a share of the deadline, so that
        // the next can still be tried within it.
        let per_endpoint = (deadline / (config.endpoints.len() as u32 + 1)).min(Duration::from_secs(5));
        let client = Client::new(&config.endpoints, tls, login, per_endpoint).map_err(fail)?;
        // With a user, a wrong password or an unreachable etcd shows now.
        let login = client.clone();
        run_on(&rt, deadline, async move { login.authenticate().await })
            .and_then(|r| r.map_err(|e| e.to_string()))
            .map_err(fail)?;
        Ok(EtcdConn { rt: Some(rt), client, prefix: config.prefix().to_string(), ttl, endpoints })
    }

    /// A client to move into a request (clones share the connections).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Run `f` on the connection's runtime and wait for it, with the request deadline.
    pub fn block<T: Send + 'static>(
        &self,
        action: &str,
        f: impl Future<Output = Result<T, gateway::Error>> + Send + 'static,
    ) -> Result<T, EtcdFailure> {
        let fail = |detail: String| EtcdFailure::Request {
            action: action.to_string(),
            endpoints: self.endpoints.clone(),
            detail,
        };
        let rt = self.rt.as_ref().ok_or_else(|| fail("the client is stopped".into()))?;
        run_on(rt, request_deadline(self.ttl), f).and_then(|r| r.map_err(|e| e.to_string())).map_err(fail)
    }

    /// Spawn a background task on the connection's runtime.
    pub fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        if let Some(rt) = &self.rt {
            rt.spawn(f);
        }
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &str, action: &str) -> Result<Option<Vec<u8>>, EtcdFailure> {
        let (client, key) = (self.client(), key.to_string());
        let answer = self.block(action, async move { client.get(&key).await })?;
        Ok(answer.map(|kv| kv.value))
    }

    /// Every `(key, value)` under `prefix`, in key order.
    pub fn list(&self, prefix: &str, action: &str) -> Result<Vec<(String, Vec<u8>)>, EtcdFailure> {
        let (client, prefix) = (self.client(), prefix.to_string());
        let answer = self.block(action, async move { client.get_prefix(&prefix).await })?;
        Ok(answer.into_iter().map(|kv| (String::from_utf8_lossy(&kv.key).into_owned(), kv.value)).collect())
    }

    /// Put `value` at `key` (or delete `key`, when `value` is `None`) in one
    /// transaction with the check of `fence`.
    pub fn fenced(&self, key: &str, value: Option<Vec<u8>>, fence: &Fence, action: &str) -> Result<(), EtcdFailure> {
        let client = self.client();
        let op = match value {
            Some(value) => Op::Put { key: key.to_string(), value, lease: 0 },
            None => Op::Delete(key.to_string()),
        };
        let guard = [Compare::CreateRevision(fence.lock_key.clone(), fence.revision)];
        let answer = self.block(action, async move { client.txn(&guard, &[op], &[]).await })?;
        if answer.succeeded {
            Ok(())
        } else {
            Err(EtcdFailure::Fenced {
                action: action.to_string(),
                lock: fence.lock_key.clone(),
                revision: fence.revision,
            })
        }
    }
}
