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
//! Failure modes: etcd unreachable or without quorum is an error after the
//! request deadline (a third of the lease TTL, at least 5 s), naming the
//! endpoints; never a guess.

use std::future::Future;
use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, TlsOptions, Txn, TxnOp,
};

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
        let mut options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(request_deadline(ttl))
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5));
        if let Some(ca) = &config.ca_file {
            let read = |p: &std::path::PathBuf| {
                let path = base.join(p);
                std::fs::read(&path).map_err(|e| fail(format!("cannot read {}: {e}", path.display())))
            };
            let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(read(ca)?));
            if let (Some(cert), Some(key)) = (&config.cert_file, &config.key_file) {
                tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            options = options.with_tls(tls);
        }
        if let (Some(user), Some(password)) = (&config.user, &config.password) {
            let secret = password.resolve().map_err(|e| fail(format!("the password: {e}")))?;
            options = options.with_user(user.clone(), secret.expose().to_string());
        }
        let urls = config.endpoints.clone();
        let client = run_on(&rt, request_deadline(ttl) + Duration::from_secs(5), async move {
            Client::connect(urls, Some(options)).await
        })
        .and_then(|r| r.map_err(|e| e.to_string()))
        .map_err(fail)?;
        Ok(EtcdConn { rt: Some(rt), client, prefix: config.prefix().to_string(), ttl, endpoints })
    }

    /// A client to move into a request (clones share the channel).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Run `f` on the connection's runtime and wait for it, with the request deadline.
    pub fn block<T: Send + 'static>(
        &self,
        action: &str,
        f: impl Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
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
        let (mut client, key) = (self.client(), key.to_string());
        let answer = self.block(action, async move { client.get(key, None).await })?;
        Ok(answer.kvs().first().map(|kv| kv.value().to_vec()))
    }

    /// Every `(key, value)` under `prefix`, in key order.
    pub fn list(&self, prefix: &str, action: &str) -> Result<Vec<(String, Vec<u8>)>, EtcdFailure> {
        let (mut client, prefix) = (self.client(), prefix.to_string());
        let answer =
            self.block(action, async move { client.get(prefix, Some(GetOptions::new().with_prefix())).await })?;
        Ok(answer
            .kvs()
            .iter()
            .map(|kv| (String::from_utf8_lossy(kv.key()).into_owned(), kv.value().to_vec()))
            .collect())
    }

    /// Put `value` at `key` (or delete `key`, when `value` is `None`) in one
    /// transaction with the check of `fence`.
    pub fn fenced(&self, key: &str, value: Option<Vec<u8>>, fence: &Fence, action: &str) -> Result<(), EtcdFailure> {
        let mut client = self.client();
        let op = match value {
            Some(v) => TxnOp::put(key, v, None),
            None => TxnOp::delete(key, None),
        };
        let txn = Txn::new()
            .when([Compare::create_revision(fence.lock_key.clone(), CompareOp::Equal, fence.revision)])
            .and_then([op]);
        let answer = self.block(action, async move { client.txn(txn).await })?;
        if answer.succeeded() {
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
