//! Hot reload: watch the workflow directory and the plugin `.wasm` files,
//! rebuild in the background, swap atomically.
//!
//! [`Live`] holds the current [`Loaded`] behind an `Arc`; a run takes a clone
//! of that `Arc` when it starts and keeps it to the end, so runs in flight
//! finish on the version they started with. [`Watcher`] debounces file events
//! (editors write in bursts), rebuilds the whole [`Loaded`] on its own thread,
//! and swaps it in only if it built; a broken edit keeps the last good version
//! and is reported (with file:line for scripts) through the callback. Changes
//! to `cradle.toml` itself are not watched: grants change only on restart.
//!
//! Only the project's files are watched: the workflow directory when the
//! project has one (built-in workflows cannot change while cradle runs, and a
//! workflow directory created later is picked up on restart), and the `.wasm`
//! files of plugins configured with a `path`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};

use crate::project::{Loaded, Project, ProjectError};
use crate::workflow::WorkflowSource;

/// How long file events are gathered before a rebuild starts.
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// The current plugins and workflows.
#[derive(Debug)]
pub struct Live {
    current: RwLock<Arc<Loaded>>,
}

impl Live {
    /// Start with `loaded`.
    pub fn new(loaded: Loaded) -> Live {
        Live { current: RwLock::new(Arc::new(loaded)) }
    }

    /// The version a new run should use.
    pub fn current(&self) -> Arc<Loaded> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Make `loaded` current; runs holding the old one keep it.
    pub fn swap(&self, loaded: Loaded) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(loaded);
    }
}

/// What a reload did.
#[derive(Debug)]
pub enum ReloadEvent {
    /// A new version is current; the workflow set hash says which.
    Swapped {
        /// The files whose change triggered it.
        changed: Vec<PathBuf>,
        /// The new workflow set hash.
        workflows_hash: String,
    },
    /// The change did not build; the previous version stays current.
    Failed {
        /// The files whose change triggered it.
        changed: Vec<PathBuf>,
        /// Why (names file:line for scripts).
        error: ProjectError,
    },
}

/// A running watcher; dropping it stops watching.
pub struct Watcher {
    _debouncer: Debouncer<notify::RecommendedWatcher, RecommendedCache>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watcher")
    }
}

/// Rebuild now and swap if it built.
pub fn reload(project: &Project, live: &Live, changed: Vec<PathBuf>) -> ReloadEvent {
    match project.load() {
        Ok(loaded) => {
            let workflows_hash = loaded.workflows.hash().to_string();
            live.swap(loaded);
            ReloadEvent::Swapped { changed, workflows_hash }
        }
        Err(error) => ReloadEvent::Failed { changed, error },
    }
}

/// Watch `project`'s workflow directory and plugin files; call `on_event`
/// after every rebuild attempt (from the watcher's thread).
pub fn watch(
    project: Arc<Project>,
    live: Arc<Live>,
    on_event: impl Fn(ReloadEvent) + Send + 'static,
) -> Result<Watcher, notify::Error> {
    let workflow_dir = match project.workflow_source() {
        Ok(WorkflowSource::Dir(dir)) => Some(dir),
        _ => None,
    };
    let plugin_files = project.plugin_paths();
    let relevant = {
        let workflow_dir = workflow_dir.clone();
        let plugin_files = plugin_files.clone();
        move |p: &Path| {
            (workflow_dir.as_ref().is_some_and(|d| p.starts_with(d)) && p.extension().is_some_and(|e| e == "rhai"))
                || plugin_files.iter().any(|f| f == p)
        }
    };
    let handler_project = project.clone();
    let mut debouncer = new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
        let events = match result {
            Ok(events) => events,
            Err(errors) => {
                for e in errors {
                    tracing::warn!(error = %e, "file watcher error");
                }
                return;
            }
        };
        let mut changed: Vec<PathBuf> = events
            .iter()
            .filter(|e| !e.kind.is_access())
            .flat_map(|e| e.paths.iter().cloned())
            .filter(|p| relevant(p))
            .collect();
        changed.sort();
        changed.dedup();
        if changed.is_empty() {
            return;
        }
        on_event(reload(&handler_project, &live, changed));
    })?;
    if let Some(dir) = &workflow_dir {
        debouncer.watch(dir, RecursiveMode::Recursive)?;
    }
    let mut dirs: Vec<PathBuf> = plugin_files.iter().filter_map(|f| f.parent().map(Path::to_path_buf)).collect();
    dirs.sort();
    dirs.dedup();
    for dir in dirs {
        // A plugin directory that does not exist yet is not an error: the
        // plugin failed to load anyway and the operator is about to build it.
        if dir.is_dir() {
            debouncer.watch(&dir, RecursiveMode::NonRecursive)?;
        }
    }
    Ok(Watcher { _debouncer: debouncer })
}
