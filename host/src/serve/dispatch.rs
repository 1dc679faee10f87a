//! Runs accepted events' pipelines, at most `concurrency` at once, oldest
//! first.
//!
//! Contract: an event's `started` line is on disk before its pipeline runs
//! and its `finished` line after, so a restart knows what was interrupted.
//! The pipeline runs on a blocking thread (workflows are synchronous Rhai).
//! When told to stop, no new pipeline starts; running ones get the grace
//! period to finish and are otherwise left `running` on disk, to resume at
//! the next start (pipelines are crash-safe: locks, checkpoints, creation
//! records).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use super::notify::Announcer;
use super::store::{Event, EventStore};

/// What one pipeline run came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// It succeeded.
    pub ok: bool,
    /// Its run id, when a run was started.
    pub run_id: Option<String>,
    /// The result or the error, in a line.
    pub detail: String,
}

/// The work done for an accepted event.
pub trait Pipeline: Send + Sync + 'static {
    /// Run the pipeline for `event` (blocking).
    fn run(&self, event: &Event) -> Outcome;
}

/// Take event numbers from `rx` and run them until `stop` says so; then wait
/// up to `grace` for the running ones. Returns how many were left running.
pub async fn run(
    store: Arc<EventStore>,
    announcer: Arc<Announcer>,
    pipeline: Arc<dyn Pipeline>,
    mut rx: mpsc::UnboundedReceiver<u64>,
    concurrency: usize,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) -> usize {
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut running = JoinSet::new();
    loop {
        let seq = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            next = rx.recv() => match next { Some(seq) => seq, None => break },
        };
        let permit = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        // Reap finished tasks so the set does not grow with the service's life.
        while running.try_join_next().is_some() {}
        let (store, announcer, pipeline) = (store.clone(), announcer.clone(), pipeline.clone());
        running.spawn(async move {
            let _permit = permit;
            run_one(&store, &announcer, pipeline, seq).await;
        });
    }
    let left = tokio::time::timeout(grace, async { while running.join_next().await.is_some() {} }).await;
    match left {
        Ok(()) => 0,
        Err(_) => {
            let n = running.len();
            tracing::warn!(running = n, "pipelines still running at shutdown; they resume at the next start");
            running.detach_all();
            n
        }
    }
}

async fn run_one(store: &EventStore, announcer: &Announcer, pipeline: Arc<dyn Pipeline>, seq: u64) {
    let event = match store.started(seq).await {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(seq, error = %e, "cannot record the start of a pipeline; it resumes at the next start");
            return;
        }
    };
    tracing::info!(seq, vm = %event.vm_name, attempt = event.attempts, "pipeline started");
    announcer.announce(store);
    let outcome = match tokio::task::spawn_blocking(move || pipeline.run(&event)).await {
        Ok(o) => o,
        Err(e) => Outcome { ok: false, run_id: None, detail: format!("the pipeline panicked: {e}") },
    };
    if outcome.ok {
        tracing::info!(seq, run = outcome.run_id.as_deref().unwrap_or("-"), "pipeline done");
    } else {
        tracing::warn!(seq, run = outcome.run_id.as_deref().unwrap_or("-"), error = %outcome.detail, "pipeline failed");
    }
    let ok = outcome.ok;
    if let Err(e) = store.finished(seq, ok, outcome.run_id, outcome.detail).await {
        tracing::error!(seq, error = %e, "cannot record the end of a pipeline; it runs again at the next start");
    }
    announcer.finished(ok);
    announcer.announce(store);
}
