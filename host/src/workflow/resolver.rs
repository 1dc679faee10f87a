//! Loading the `lib/` modules of a workflow set, at load time only.
//!
//! While a [`WorkflowSet`](super::WorkflowSet) is being loaded, the engine's module
//! resolver is a [`LoadResolver`]: it compiles and evaluates a module the first
//! time it is imported (by another module or by the loader), detects import
//! cycles, and keeps the structured error of the innermost failing module so the
//! report names that file rather than the importer. The loaded modules then go
//! into an immutable `StaticModuleResolver` and this resolver is dropped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rhai::{Engine, EvalAltResult, Module, Position, Scope, Shared};

use super::errors::{WorkflowError, compile_error, load_error};
use super::limits::WorkflowLimits;

/// `import path` → (displayed file, source text).
pub(crate) type Sources = BTreeMap<String, (String, String)>;

#[derive(Clone)]
pub(crate) struct LoadResolver(Arc<Inner>);

struct Inner {
    sources: Sources,
    limits: WorkflowLimits,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    done: BTreeMap<String, Shared<Module>>,
    loading: Vec<String>,
    failed: Option<WorkflowError>,
}

impl LoadResolver {
    pub(crate) fn new(sources: Sources, limits: WorkflowLimits) -> Self {
        Self(Arc::new(Inner { sources, limits, state: Mutex::new(State::default()) }))
    }

    pub(crate) fn sources(&self) -> &Sources {
        &self.0.sources
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another load panicked; the maps are still valid.
        self.0.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Compiles and evaluates module `name` (once), loading its imports first.
    pub(crate) fn load(&self, engine: &Engine, name: &str) -> Result<Shared<Module>, WorkflowError> {
        if let Some(done) = self.state().done.get(name) {
            return Ok(done.clone());
        }
        let Some((file, text)) = self.0.sources.get(name) else {
            return Err(WorkflowError::Compile {
                file: name.to_string(),
                line: 0,
                column: 0,
                message: format!("no such module; the modules are: {}", self.names()),
            });
        };
        {
            let mut state = self.state();
            if let Some(at) = state.loading.iter().position(|n| n == name) {
                let mut cycle = state.loading[at..].to_vec();
                cycle.push(name.to_string());
                return Err(WorkflowError::Compile {
                    file: file.clone(),
                    line: 0,
                    column: 0,
                    message: format!("import cycle: {}; move the shared part into its own module", cycle.join(" → ")),
                });
            }
            state.loading.push(name.to_string());
        }
        let result = self.compile_and_eval(engine, file, text);
        let mut state = self.state();
        state.loading.retain(|n| n != name);
        let module = match result {
            Ok(module) => Shared::new(module),
            // The innermost module's own error says more than "import failed" here.
            Err(err) => return Err(state.failed.take().unwrap_or(err)),
        };
        state.done.insert(name.to_string(), module.clone());
        Ok(module)
    }

    fn compile_and_eval(&self, engine: &Engine, file: &str, text: &str) -> Result<Module, WorkflowError> {
        let mut ast = engine.compile(text).map_err(|e| compile_error(file, e.err_type(), e.position()))?;
        ast.set_source(file);
        Module::eval_ast_as_new(Scope::new(), &ast, engine).map_err(|e| load_error(file, &e, &self.0.limits))
    }

    fn names(&self) -> String {
        let names: Vec<&str> = self.0.sources.keys().map(String::as_str).collect();
        if names.is_empty() { "(none; put modules in lib/)".to_string() } else { names.join(", ") }
    }
}

impl rhai::ModuleResolver for LoadResolver {
    fn resolve(
        &self,
        engine: &Engine,
        _source: Option<&str>,
        path: &str,
        pos: Position,
    ) -> Result<Shared<Module>, Box<EvalAltResult>> {
        let name = path.strip_suffix(".rhai").unwrap_or(path);
        if !self.0.sources.contains_key(name) {
            let message = format!("{path} (the modules are: {})", self.names());
            return Err(EvalAltResult::ErrorModuleNotFound(message, pos).into());
        }
        self.load(engine, name).map_err(|err| {
            let message = err.to_string();
            self.state().failed.get_or_insert(err);
            EvalAltResult::ErrorInModule(path.to_string(), message.into(), pos).into()
        })
    }
}

pub(crate) fn read(path: &Path) -> Result<String, WorkflowError> {
    std::fs::read_to_string(path).map_err(|source| WorkflowError::Io { path: path.to_path_buf(), source })
}

pub(crate) fn rhai_files(dir: &Path) -> Result<Vec<PathBuf>, WorkflowError> {
    let io = |source| WorkflowError::Io { path: dir.to_path_buf(), source };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "rhai") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Collects `dir`'s modules, recursively, keyed by import path (`lib/net/ip`).
pub(crate) fn collect_modules(
    dir: &Path,
    prefix: &str,
    out: &mut BTreeMap<String, (String, String)>,
) -> Result<(), WorkflowError> {
    for path in rhai_files(dir)? {
        if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
            let text = read(&path)?;
            out.insert(format!("{prefix}/{stem}"), (path.display().to_string(), text));
        }
    }
    let io = |source| WorkflowError::Io { path: dir.to_path_buf(), source };
    let mut subdirs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_dir() {
            subdirs.push(path);
        }
    }
    subdirs.sort();
    for sub in subdirs {
        if let Some(name) = sub.file_name().and_then(|s| s.to_str()) {
            collect_modules(&sub, &format!("{prefix}/{name}"), out)?;
        }
    }
    Ok(())
}
