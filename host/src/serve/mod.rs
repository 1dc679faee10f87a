//! `cradle serve`: a durable, signed webhook service that starts a workflow
//! for each NetBox virtual machine set to Staged (docs/SERVE.md).
//!
//! - `[serve]` in cradle.toml is `config::ServeConfig` (config/serve.rs);
//! - `signature`: `X-Hook-Signature` (HMAC-SHA512 of the raw body);
//! - `event`: which deliveries start a pipeline (NetBox 3.7–4.7 payloads);
//! - `store`: the durable event log (accepted before `202`, resumed after a
//!   restart, one event in flight per VM);
//! - `listener`: the HTTP side, with its bounds (rate, body size, time);
//!   `answer`: the answers it and the page build;
//! - `dispatch`: runs pipelines with bounded concurrency;
//! - `view`: the operator's view (`[serve.status]`) and the task keeping it
//!   current; `status`: who may read it;
//!   `metrics`: `GET /metrics` in the Prometheus text format, from the run
//!   journals (`scan`, read incrementally, into `histogram`s) and the
//!   listener's counters;
//!   `page`: the status page under `/status`, live by server-sent events;
//! - `notify`: systemd's `Type=notify` readiness (`READY=1` once the listener
//!   is bound and the unfinished events are queued, `STOPPING=1` when the
//!   shutdown starts);
//! - `pipeline`: an event's pipeline is three workflow functions (`host`,
//!   `staged`, `failed`), and `host`: the VM `host(event)` describes,
//!   resolved like an inventory host.
//!
//! Contract of [`run`]: events left unfinished by the last process are resumed
//! first; requests are served until `shutdown` completes; then no new
//! connection or pipeline starts, running pipelines get
//! `shutdown_grace_s` to finish (the rest resume at the next start), and the
//! event log is closed after its last line is on disk.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

pub mod answer;
pub mod dispatch;
pub mod event;
pub mod histogram;
pub mod host;
pub mod listener;
pub mod metrics;
pub mod notify;
pub mod page;
pub mod pipeline;
pub mod scan;
pub mod signature;
pub mod status;
pub mod store;
pub mod view;

pub use crate::config::{ServeConfig, SourceConfig, SourceKind};
pub use dispatch::{Outcome, Pipeline};
pub use signature::WebhookKey;
pub use store::{Event, EventState, EventStore};

/// Connections served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 1024;
/// How long a client may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections may finish their request after shutdown starts.
const DRAIN: Duration = Duration::from_secs(2);

/// Why `cradle serve` cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A source's secret cannot be resolved.
    #[error("serve.sources.{source_name}.secret: {error}")]
    Secret {
        /// The source.
        source_name: String,
        /// Why.
        error: crate::secrets::SecretError,
    },
    /// The event log.
    #[error(transparent)]
    Store(#[from] store::StoreError),
}

/// Each source's verification key, from its secret.
pub fn keys(config: &ServeConfig) -> Result<BTreeMap<String, WebhookKey>, ServeError> {
    config
        .sources
        .iter()
        .map(|(name, source)| {
            let secret =
                source.secret.resolve().map_err(|error| ServeError::Secret { source_name: name.clone(), error })?;
            Ok((name.clone(), WebhookKey::new(secret.expose().as_bytes())))
        })
        .collect()
}

/// What a [`run`] left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    /// Pipelines still running when the grace period ended.
    pub left_running: usize,
}

/// Serve `listener` until `shutdown` completes (module docs), without the
/// operator's view.
pub async fn run(
    listener: TcpListener,
    config: &ServeConfig,
    keys: BTreeMap<String, WebhookKey>,
    store_dir: &Path,
    pipeline: Arc<dyn Pipeline>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<Stopped, ServeError> {
    serve(listener, config, keys, store_dir, pipeline, None, shutdown).await
}

/// [`run`], with the operator's view (`/metrics`, `/status`) when `status`
/// is given.
pub async fn serve(
    listener: TcpListener,
    config: &ServeConfig,
    keys: BTreeMap<String, WebhookKey>,
    store_dir: &Path,
    pipeline: Arc<dyn Pipeline>,
    status: Option<view::View>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<Stopped, ServeError> {
    let (store, resume) = EventStore::open(store_dir, config.max_queued)?;
    let store = Arc::new(store);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for event in &resume {
        tracing::info!(seq = event.seq, vm = %event.vm_name, "resuming an event left unfinished");
        let _ = tx.send(event.seq);
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let grace = Duration::from_secs(config.shutdown_grace_s);
    let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
    let announcer = Arc::new(notify::Announcer::new(addr));
    let dispatcher = tokio::spawn(dispatch::run(
        store.clone(),
        announcer.clone(),
        pipeline,
        rx,
        config.concurrency,
        stop_rx.clone(),
        grace,
    ));
    let deliveries = metrics::Deliveries::new(keys.keys());
    let status = status.map(Arc::new);
    let watcher = status.as_ref().map(|view| tokio::spawn(view::watch(view.clone(), stop_rx.clone())));
    let shared = Arc::new(listener::Listener {
        keys,
        store: store.clone(),
        max_body: config.max_body_bytes,
        rate: listener::RateLimit::new(config.max_requests_per_s),
        dispatch: tx,
        deliveries,
        status,
        max_queued: config.max_queued,
        announcer: announcer.clone(),
    });
    // Ready: the caller bound the listener, and the unfinished events are loaded
    // and queued. Connections wait in the backlog until the loop below takes them.
    announcer.ready(resume.len());
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut open = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            p = connections.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        while open.try_join_next().is_some() {}
        let shared = shared.clone();
        open.spawn(async move {
            let _permit = permit;
            let service = service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, std::convert::Infallible>(shared.handle(req, peer).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    announcer.stopping(grace);
    tracing::info!("stopping: no new connections or pipelines");
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(DRAIN, async { while open.join_next().await.is_some() {} }).await;
    open.abort_all();
    if let Some(w) = watcher {
        w.abort();
    }
    let left_running = dispatcher.await.unwrap_or(0);
    store.close();
    Ok(Stopped { left_running })
}
