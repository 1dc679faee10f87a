//! The plugin host: one wasmtime engine, one linker with every capability, the
//! component cache, and loaded plugins ready to instantiate.
//!
//! Loading a plugin ([`PluginHost::load`]) reads its manifest, compiles it (or
//! loads the verified cached compilation), admits it against the manifest, the
//! WIT version and the operator's grants, and pre-instantiates it. Each call
//! ([`LoadedPlugin::invoke`]) gets a fresh store bound to the caller's
//! capability context, with the plugin's memory limit, epoch deadline and call
//! budget (wall clock, host calls, journal bytes; see [`limits`]). A trap
//! (panic, timeout, memory limit, exhausted budget, malformed value) fails that
//! call only, with the plugin's stderr attached; the host and other calls are
//! unaffected.
//!
//! A component comes from a `.wasm` file or from the binary itself
//! ([`PluginSource`], [`crate::builtin`]); both take the same path from the
//! bytes on — manifest, SHA-256, cache, admission under the operator's grants.

pub mod admission;
pub mod backend;
pub mod cache;
pub mod lifecycle;
pub mod limits;
pub mod manifest;
pub mod store;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker, Val};
use wasmtime::{Config, Engine, Store};

use self::admission::{AdmissionError, Admitted};
use self::cache::{CacheOutcome, ComponentCache};
use self::limits::{EPOCH_TICK, Limits};
use self::manifest::{Manifest, ManifestError};
use self::store::{Caps, StoreState, new_store};
use crate::builtin::catalogue::PluginKind;
use crate::caps::Grants;
use crate::caps::budget::GuestClock;
use crate::caps::context::CapCtx;
use crate::contract::bindings::BackendPre;
use crate::contract::bindings::exports::cradle::host::lifecycle::Guest as Lifecycle;

/// Why a plugin could not be loaded or called.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The file could not be read.
    #[error(
        "plugin `{name}`: cannot read {path}: {source} (build the plugins as the README says, or fix plugins.{name}.path in cradle.toml)"
    )]
    Read {
        /// The plugin.
        name: String,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Not a component, or no/bad manifest.
    #[error("plugin `{name}`: {source}")]
    Manifest {
        /// The plugin.
        name: String,
        /// What is wrong.
        source: ManifestError,
    },
    /// wasmtime could not compile it.
    #[error("plugin `{name}` ({path}): cannot be compiled: {message}")]
    Compile {
        /// The plugin.
        name: String,
        /// The file.
        path: PathBuf,
        /// wasmtime's message.
        message: String,
    },
    /// Refused by admission.
    #[error(transparent)]
    Admission(#[from] AdmissionError),
    /// Its imports could not be satisfied by the linker.
    #[error("plugin `{name}`: cannot be linked: {message}")]
    Link {
        /// The plugin.
        name: String,
        /// wasmtime's message.
        message: String,
    },
    /// No such export.
    #[error("plugin `{name}` has no function `{func}` (it exports: {available})")]
    NoExport {
        /// The plugin.
        name: String,
        /// The function asked for.
        func: String,
        /// What it exports.
        available: String,
    },
    /// The call trapped: a panic, a limit, or a malformed value.
    #[error("plugin `{name}`, function `{func}`: {message}{}", stderr_suffix(.stderr))]
    Trap {
        /// The plugin.
        name: String,
        /// The function.
        func: String,
        /// The trap.
        message: String,
        /// The tail of what the plugin wrote to stderr.
        stderr: String,
    },
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() { String::new() } else { format!(" (plugin stderr: {stderr})") }
}

/// Where a plugin's component comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSource {
    /// A `.wasm` file (`[plugins.NAME] path`).
    File(PathBuf),
    /// The component of that name built into cradle ([`crate::builtin::PLUGINS`]).
    Builtin(&'static str),
}

impl PluginSource {
    /// The file, or `built-in:NAME` — how messages and listings name it.
    pub fn display_path(&self) -> PathBuf {
        match self {
            PluginSource::File(path) => path.clone(),
            PluginSource::Builtin(name) => PathBuf::from(format!("built-in:{name}")),
        }
    }

    /// Whether the component is built into cradle.
    pub fn is_builtin(&self) -> bool {
        matches!(self, PluginSource::Builtin(_))
    }

    fn bytes(&self, plugin: &str) -> Result<Cow<'static, [u8]>, PluginError> {
        match self {
            PluginSource::File(path) => std::fs::read(path).map(Cow::Owned).map_err(|source| PluginError::Read {
                name: plugin.into(),
                path: path.clone(),
                source,
            }),
            PluginSource::Builtin(name) => {
                crate::builtin::plugin(name).map(|p| Cow::Borrowed(p.wasm)).ok_or_else(|| PluginError::Read {
                    name: plugin.into(),
                    path: self.display_path(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!(
                            "cradle has no built-in plugin `{name}` (built-in: {})",
                            crate::builtin::plugin_names()
                        ),
                    ),
                })
            }
        }
    }
}

/// Advances the engine's epoch every [`EPOCH_TICK`] so deadlines fire.
struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    fn start(engine: &Engine) -> EpochTicker {
        let stop = Arc::new(AtomicBool::new(false));
        let weak = engine.weak();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("cradle-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .ok();
        EpochTicker { stop, thread }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The engine, linker and cache shared by every plugin of a process.
pub struct PluginHost {
    engine: Engine,
    linker: Linker<StoreState>,
    cache: ComponentCache,
    _ticker: EpochTicker,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost").field("cache", &self.cache).finish_non_exhaustive()
    }
}

/// A component compiled and inspected, before grants are applied.
#[derive(Debug)]
pub struct Compiled {
    /// Its manifest.
    pub manifest: Manifest,
    /// SHA-256 of the file, hex.
    pub hash: String,
    /// The compiled component.
    pub component: Component,
    /// Whether it came from the cache.
    pub cache: CacheOutcome,
}

impl PluginHost {
    /// An engine with epoch interruption, a linker with WASI and every cradle
    /// capability, and a component cache in `cache_dir`.
    pub fn new(cache_dir: &Path) -> wasmtime::Result<PluginHost> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        let engine = Engine::new(&config)?;
        let mut linker = Linker::<StoreState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        crate::contract::bindings::Backend::add_to_linker::<StoreState, Caps>(&mut linker, |s| &mut s.caps)?;
        let ticker = EpochTicker::start(&engine);
        Ok(PluginHost { engine, linker, cache: ComponentCache::new(cache_dir), _ticker: ticker })
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Read, check and compile (or load from cache) the component at `path`.
    pub fn compile(&self, name: &str, path: &Path) -> Result<Compiled, PluginError> {
        self.compile_source(name, &PluginSource::File(path.to_path_buf()))
    }

    /// Read, check and compile (or load from cache) the component of `source`.
    pub fn compile_source(&self, name: &str, source: &PluginSource) -> Result<Compiled, PluginError> {
        let bytes = source.bytes(name)?;
        let path = source.display_path();
        let path = path.as_path();
        let manifest =
            Manifest::read(&bytes, path).map_err(|source| PluginError::Manifest { name: name.into(), source })?;
        let hash = hex::encode(Sha256::digest(&bytes));
        let (component, cache) = self
            .cache
            .load_or_compile(&self.engine, &bytes)
            .map_err(|e| PluginError::Compile { name: name.into(), path: path.into(), message: format!("{e:#}") })?;
        Ok(Compiled { manifest, hash, component, cache })
    }

    /// Compile, admit under `grants` and pre-instantiate the plugin `name` from the file `path`.
    pub fn load(&self, name: &str, path: &Path, grants: Grants, limits: Limits) -> Result<LoadedPlugin, PluginError> {
        self.load_source(name, &PluginSource::File(path.to_path_buf()), grants, limits)
    }

    /// Compile, admit under `grants` and pre-instantiate the backend `name` from `source`.
    pub fn load_source(
        &self,
        name: &str,
        source: &PluginSource,
        grants: Grants,
        limits: Limits,
    ) -> Result<LoadedPlugin, PluginError> {
        self.load_kind(name, source, PluginKind::Backend, grants, limits)
    }

    /// Compile, admit as a plugin of `kind` under `grants` and pre-instantiate
    /// the plugin `name` from `source`. Both kinds share the engine, linker,
    /// cache, admission and call path; only the exports checked differ.
    pub fn load_kind(
        &self,
        name: &str,
        source: &PluginSource,
        kind: PluginKind,
        grants: Grants,
        limits: Limits,
    ) -> Result<LoadedPlugin, PluginError> {
        let compiled = self.compile_source(name, source)?;
        let admitted = admission::admit(&self.engine, &compiled.component, name, kind, &compiled.manifest, &grants)?;
        let pre = self
            .linker
            .instantiate_pre(&compiled.component)
            .map_err(|e| PluginError::Link { name: name.into(), message: format!("{e:#}") })?;
        // The optional maintenance export against wit/maintenance.wit, when a
        // backend has one (before the lifecycle, so its own message names it).
        if kind == PluginKind::Backend && admitted.interfaces.contains(&admission::maintenance_export()) {
            crate::contract::bindings::maintainer::exports::cradle::host::maintenance::GuestIndices::new(&pre)
                .map_err(|e| AdmissionError::MaintenanceSignature { plugin: name.into(), message: format!("{e:#}") })?;
        }
        // A backend's lifecycle exports' signatures against wit/backend.wit,
        // checked now: a plugin built against another lifecycle is refused at
        // load, naming what differs, not at its first call. An integration
        // plugin has no lifecycle; its functions are called by name only.
        let typed = match kind {
            PluginKind::Backend => Some(
                crate::contract::bindings::BackendPre::new(pre.clone())
                    .map_err(|e| AdmissionError::Signature { plugin: name.into(), message: format!("{e:#}") })?,
            ),
            PluginKind::Integration => None,
        };
        let mut funcs = HashMap::new();
        for interface in &admitted.interfaces {
            let iface = compiled.component.get_export_index(None, interface);
            for sig in &admitted.exports {
                if funcs.contains_key(&sig.name) {
                    continue;
                }
                if let Some(idx) = compiled.component.get_export_index(iface.as_ref(), &sig.name) {
                    funcs.insert(sig.name.clone(), idx);
                }
            }
        }
        Ok(LoadedPlugin {
            name: name.to_string(),
            path: source.display_path(),
            source: source.clone(),
            manifest: compiled.manifest,
            hash: compiled.hash,
            cache: compiled.cache,
            admitted,
            grants: Arc::new(grants),
            limits,
            engine: self.engine.clone(),
            pre,
            typed,
            funcs,
        })
    }
}

/// A plugin ready to be called.
pub struct LoadedPlugin {
    /// The name it has in cradle.toml.
    pub name: String,
    /// The component file, or `built-in:NAME`.
    pub path: PathBuf,
    /// Where the component came from.
    pub source: PluginSource,
    /// Its manifest.
    pub manifest: Manifest,
    /// SHA-256 of the component file, hex (recorded in journals).
    pub hash: String,
    /// Whether its compilation came from the cache.
    pub cache: CacheOutcome,
    /// Its imports and exports.
    pub admitted: Admitted,
    /// What the operator granted it.
    pub grants: Arc<Grants>,
    /// Its limits.
    pub limits: Limits,
    engine: Engine,
    pre: InstancePre<StoreState>,
    /// The same pre-instance with the `lifecycle` exports typed
    /// ([`LoadedPlugin::lifecycle`]); `None` for an integration plugin.
    typed: Option<BackendPre<StoreState>>,
    funcs: HashMap<String, ComponentExportIndex>,
}

/// Why a call in a fresh store did not finish.
enum CallFailure {
    Trap(wasmtime::Error),
    NoExport,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin").field("name", &self.name).field("hash", &self.hash).finish_non_exhaustive()
    }
}

impl LoadedPlugin {
    /// Instantiate a fresh instance bound to `caps` and call `func` (kebab-case
    /// name of a lifecycle export) with `args`; the single result, if any. The
    /// by-name path, for exports beyond the typed [`LoadedPlugin::lifecycle`].
    pub fn invoke(&self, caps: CapCtx, func: &str, args: &[Val]) -> Result<Option<Val>, PluginError> {
        let idx = self.funcs.get(func).ok_or_else(|| PluginError::NoExport {
            name: self.name.clone(),
            func: func.to_string(),
            available: self.admitted.exports.iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(", "),
        })?;
        let n = self.admitted.exports.iter().find(|e| e.name == func).map_or(0, |e| usize::from(e.result.is_some()));
        self.in_fresh_store(caps, func, |store| {
            let instance = self.pre.instantiate(&mut *store).map_err(CallFailure::Trap)?;
            let f = instance.get_func(&mut *store, idx).ok_or(CallFailure::NoExport)?;
            let mut results = vec![Val::Bool(false); n];
            f.call(&mut *store, args, &mut results).map_err(CallFailure::Trap)?;
            Ok(results.into_iter().next())
        })
    }

    /// Instantiate a fresh instance bound to `caps` and call the typed
    /// `lifecycle` export `func` (its kebab name, for messages) through
    /// `call`; limits, traps and stderr as for [`LoadedPlugin::invoke`].
    pub fn lifecycle<R>(
        &self,
        caps: CapCtx,
        func: &str,
        call: impl FnOnce(&Lifecycle, &mut Store<StoreState>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginError> {
        self.in_fresh_store(caps, func, |store| {
            let typed = self.typed.as_ref().ok_or(CallFailure::NoExport)?;
            let bindings = typed.instantiate(&mut *store).map_err(CallFailure::Trap)?;
            call(bindings.cradle_host_lifecycle(), store).map_err(CallFailure::Trap)
        })
    }

    /// A store for one call of `func` with the plugin's limits and a fresh
    /// budget; a trap comes back with the plugin's stderr attached.
    fn in_fresh_store<R>(
        &self,
        caps: CapCtx,
        func: &str,
        body: impl FnOnce(&mut Store<StoreState>) -> Result<R, CallFailure>,
    ) -> Result<R, PluginError> {
        let clock = GuestClock::start(&self.name, self.limits.budget());
        let caps = CapCtx { clock: Some(clock.clone()), caller: self.name.clone(), ..caps };
        let mut store = new_store(&self.engine, &self.name, caps, self.limits, clock);
        let out = match body(&mut store) {
            Ok(out) => out,
            Err(CallFailure::Trap(e)) => {
                return Err(PluginError::Trap {
                    name: self.name.clone(),
                    func: func.to_string(),
                    message: e.root_cause().to_string(),
                    stderr: tail(&store.data().stderr(), 1024),
                });
            }
            Err(CallFailure::NoExport) => {
                return Err(PluginError::NoExport {
                    name: self.name.clone(),
                    func: func.to_string(),
                    available: String::new(),
                });
            }
        };
        let stdout = store.data().stdout();
        if !stdout.is_empty() {
            tracing::debug!(plugin = %self.name, func, stdout = %tail(&stdout, 4096), "plugin wrote to stdout");
        }
        Ok(out)
    }
}

/// The last `max` bytes of `s`, on a char boundary.
fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}

#[cfg(test)]
#[path = "maintenance_tests.rs"]
mod maintenance_tests;
