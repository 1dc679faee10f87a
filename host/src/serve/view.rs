//! The operator's view that `[serve.status]` opens on the listener: who may
//! read it (`status`), the journals `/metrics` counts (`scan`), the status
//! page's runs (`page::board`) and its live updates (`page::live`), and the
//! task ([`watch`]) that keeps the page's runs current while `cradle serve`
//! runs. The listener and the page take a [`View`]; the parts it holds know
//! nothing of it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use notify::Watcher as _;
use tokio::sync::mpsc;

use super::page::board::Board;
use super::page::live::{COALESCE, Live, RECHECK};
use super::scan::Journals;
use super::status::Access;

/// The operator's view as the listener serves it: who may read, the
/// journals `/metrics` counts, and the runs the status page shows.
pub struct View {
    /// Who may read.
    pub access: Access,
    /// The run journals, read incrementally; one scrape at a time.
    pub journals: Mutex<Journals>,
    /// The status page's runs.
    pub board: Mutex<Board>,
    /// The status page's live updates.
    pub live: Live,
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View").field("access", &self.access).finish_non_exhaustive()
    }
}

impl View {
    /// The view of `access` over `journals` (for `/metrics`) and `board`
    /// (for the page).
    pub fn new(access: Access, journals: Journals, board: Board) -> View {
        View { access, journals: Mutex::new(journals), board: Mutex::new(board), live: Live::new() }
    }
}

/// Keep `view`'s board current and its pages told, until `stop` turns true.
pub async fn watch(view: Arc<View>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let dir = view.board.lock().unwrap_or_else(|e| e.into_inner()).dir().to_path_buf();
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<PathBuf>>();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event {
            let _ = tx.send(event.paths);
        }
    })
    .and_then(|mut w| w.watch(&dir, notify::RecursiveMode::NonRecursive).map(|()| w));
    // Kept for the life of the task: dropping it stops the watching.
    let watcher = match watcher {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e,
                "cannot watch the run journals; the status page updates every {}s instead", RECHECK.as_secs());
            None
        }
    };
    refresh(&view, None).await;
    let mut tick = tokio::time::interval(RECHECK);
    // A refresh that took longer than the period is not followed by a burst.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    // Without a watcher (or once it is gone) the tick alone keeps the board.
    let mut watching = watcher.is_some();
    loop {
        let paths = tokio::select! {
            _ = stop.changed() => return,
            // The whole directory: running runs, and anything the watcher missed.
            _ = tick.tick() => None,
            got = rx.recv(), if watching => {
                let Some(mut paths) = got else {
                    watching = false;
                    continue;
                };
                tokio::time::sleep(COALESCE).await;
                while let Ok(more) = rx.try_recv() {
                    paths.extend(more);
                }
                paths.sort();
                paths.dedup();
                Some(paths)
            }
        };
        refresh(&view, paths).await;
    }
}

/// Read the journals at `paths`, or (`None`) the whole directory with the
/// running runs.
async fn refresh(view: &Arc<View>, paths: Option<Vec<PathBuf>>) {
    let v = view.clone();
    // Reading journals is file work: off the async threads.
    let done = tokio::task::spawn_blocking(move || {
        let mut board = v.board.lock().unwrap_or_else(|e| e.into_inner());
        let changes = match &paths {
            Some(paths) => board.refresh_paths(paths.iter().map(PathBuf::as_path)),
            None => board.refresh(true),
        };
        drop(board);
        v.live.publish(changes);
    })
    .await;
    if let Err(e) = done {
        tracing::warn!(error = %e, "reading the run journals for the status page failed");
    }
}
