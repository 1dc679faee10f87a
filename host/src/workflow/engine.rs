//! The compiled, immutable set of workflow scripts and how it is run.
//!
//! [`WorkflowSet::load`] compiles every `*.rhai` at the top of the workflows
//! directory and every module under `lib/` (recursively; `lib/net/ip.rhai` is
//! imported as `"lib/net/ip"`). Modules are compiled and evaluated once, at load,
//! into a `StaticModuleResolver`, and each script's literal imports are resolved
//! then too, so a missing module or a syntax error anywhere is reported by `load`
//! (and `cradle workflows check`) as `file:line:column: message`, never half-way
//! through a run. After `load` nothing in the set changes: hot reload builds a new
//! set and swaps an `Arc`; runs in flight keep the `Arc` they started with.
//!
//! The files come from a [`WorkflowSource`]: a directory, or the workflows
//! built into cradle ([`crate::builtin::WORKFLOWS`]), laid out the same way and
//! compiled by the same code; built-in files are named `built-in:provision.rhai`
//! in errors and listings. Imports resolve within the one source: a project
//! directory never imports a built-in module, nor the other way round.
//!
//! [`WorkflowSet::call`] is synchronous (Rhai has no async) and is meant for a
//! blocking thread; [`call_blocking`] does the `spawn_blocking` bridge. A script's
//! top-level statements run before each call, so keep them to `import`s and
//! constants.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rhai::module_resolvers::StaticModuleResolver;
use rhai::{AST, CallFnOptions, Dynamic, Engine, EvalAltResult, FnAccess, Scope};
use sha2::{Digest, Sha256};

use super::backend::{self, Backend};
use super::context::{self, CurrentRun, RunContext};
use super::errors::{WorkflowError, load_error, script_error};
use super::limits::WorkflowLimits;
use super::resolver::{LoadResolver, Sources, collect_modules, read, rhai_files};

/// A top-level script as read: (name, displayed file, text).
type ScriptSource = (String, String, String);

/// Where a [`WorkflowSet`]'s files come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkflowSource {
    /// `*.rhai` at the top of this directory, modules under its `lib/`.
    Dir(PathBuf),
    /// The workflows built into cradle ([`crate::builtin::WORKFLOWS`]).
    Builtin,
}

impl WorkflowSource {
    /// The prefix of built-in files' displayed names.
    pub const BUILTIN_PREFIX: &'static str = "built-in:";

    /// Whether this is the built-in set.
    pub fn is_builtin(&self) -> bool {
        matches!(self, WorkflowSource::Builtin)
    }

    /// The top-level scripts as (name, displayed file, text), in name order,
    /// and the modules under `lib/` by import path.
    fn read(&self) -> Result<(Vec<ScriptSource>, Sources), WorkflowError> {
        let mut scripts = Vec::new();
        let mut modules = Sources::new();
        match self {
            WorkflowSource::Dir(dir) => {
                let lib = dir.join("lib");
                if lib.is_dir() {
                    collect_modules(&lib, "lib", &mut modules)?;
                }
                for path in rhai_files(dir)? {
                    let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::to_string) else {
                        continue;
                    };
                    let text = read(&path)?;
                    scripts.push((name, path.display().to_string(), text));
                }
            }
            WorkflowSource::Builtin => {
                for (rel, text) in crate::builtin::WORKFLOWS {
                    let Some(stem) = rel.strip_suffix(".rhai") else { continue };
                    let file = format!("{}{rel}", Self::BUILTIN_PREFIX);
                    if stem.starts_with("lib/") {
                        modules.insert(stem.to_string(), (file, text.to_string()));
                    } else if !stem.contains('/') {
                        scripts.push((stem.to_string(), file, text.to_string()));
                    }
                }
                scripts.sort();
            }
        }
        Ok((scripts, modules))
    }
}

/// How to build the engine of a [`WorkflowSet`].
#[derive(Default)]
pub struct EngineOptions {
    /// Script limits (the `[workflow]` section of `cradle.toml`).
    pub limits: WorkflowLimits,
    /// Host capability modules, registered as static modules under their names
    /// (`lock` → `lock::acquire(key)` in scripts).
    pub host_modules: Vec<(String, rhai::Shared<rhai::Module>)>,
    /// Backends whose exports become methods of `BackendHandle` values.
    pub backends: Vec<Arc<dyn Backend>>,
}

/// A script or module of the set: its name, file and content hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptInfo {
    /// `provision` for a script, `lib/steps` for a module.
    pub name: String,
    /// The file as displayed in errors (`workflows/provision.rhai`).
    pub file: String,
    /// SHA-256 of the file's bytes, lowercase hex.
    pub hash: String,
}

/// A public function of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionInfo {
    pub name: String,
    pub params: Vec<String>,
}

struct Script {
    info: ScriptInfo,
    ast: AST,
}

/// The compiled workflows: immutable once loaded, shareable behind an `Arc`.
pub struct WorkflowSet {
    source: WorkflowSource,
    engine: Engine,
    scripts: BTreeMap<String, Script>,
    modules: Vec<ScriptInfo>,
    hash: String,
    limits: WorkflowLimits,
}

impl std::fmt::Debug for WorkflowSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowSet")
            .field("scripts", &self.scripts.keys().collect::<Vec<_>>())
            .field("modules", &self.modules)
            .field("hash", &self.hash)
            .finish_non_exhaustive()
    }
}

impl WorkflowSet {
    /// Compiles the workflows in `dir` (see the module docs); the first broken file
    /// fails the load.
    pub fn load(dir: &Path, opts: &EngineOptions) -> Result<WorkflowSet, WorkflowError> {
        Self::load_from(&WorkflowSource::Dir(dir.to_path_buf()), opts)
    }

    /// Compiles the workflows of `source`; the first broken file fails the load.
    pub fn load_from(source: &WorkflowSource, opts: &EngineOptions) -> Result<WorkflowSet, WorkflowError> {
        let mut errors = Vec::new();
        let set = Self::build(source, opts, &mut errors)?;
        match errors.into_iter().next() {
            Some(first) => Err(first),
            None => Ok(set),
        }
    }

    /// Like [`WorkflowSet::load`], but reports every broken file (for
    /// `cradle workflows check`). A file importing a broken module is not reported
    /// again for it.
    pub fn check(dir: &Path, opts: &EngineOptions) -> Result<WorkflowSet, Vec<WorkflowError>> {
        Self::check_from(&WorkflowSource::Dir(dir.to_path_buf()), opts)
    }

    /// [`WorkflowSet::check`] for any source.
    pub fn check_from(source: &WorkflowSource, opts: &EngineOptions) -> Result<WorkflowSet, Vec<WorkflowError>> {
        let mut errors = Vec::new();
        match Self::build(source, opts, &mut errors) {
            Err(unreadable) => Err(vec![unreadable]),
            Ok(set) if errors.is_empty() => Ok(set),
            Ok(_) => Err(errors),
        }
    }

    /// Builds the set, collecting compile errors in `errors`; fails only when the
    /// files cannot be read.
    fn build(
        source: &WorkflowSource,
        opts: &EngineOptions,
        errors: &mut Vec<WorkflowError>,
    ) -> Result<WorkflowSet, WorkflowError> {
        let mut engine = Engine::new();
        opts.limits.apply(&mut engine);
        context::register(&mut engine);
        backend::register(&mut engine, &opts.backends);
        for (name, module) in &opts.host_modules {
            engine.register_static_module(name, module.clone());
        }
        let mut report = |err: WorkflowError| {
            // One broken module surfaces through each importer; report it once.
            let text = err.to_string();
            if !errors.iter().any(|e| e.to_string() == text) {
                errors.push(err);
            }
        };

        let (files, sources) = source.read()?;
        let resolver = LoadResolver::new(sources, opts.limits.clone());
        engine.set_module_resolver(resolver.clone());
        // Modules are loaded in name order; one importing another loads it first,
        // through the resolver.
        let mut modules = Vec::new();
        let mut resolved = StaticModuleResolver::new();
        for (name, (file, text)) in resolver.sources() {
            match resolver.load(&engine, name) {
                Ok(module) => {
                    resolved.insert(name.as_str(), module.as_ref().clone());
                    modules.push(info(name, file, text));
                }
                Err(err) => report(err),
            }
        }
        let module_names = list_or_none(modules.iter().map(|m| m.name.clone()).collect());
        engine.set_module_resolver(resolved);

        let mut scripts = BTreeMap::new();
        for (name, file, text) in files {
            match engine.compile_into_self_contained(&Scope::new(), &text) {
                Ok(mut ast) => {
                    ast.set_source(file.as_str());
                    let info = info(&name, &file, &text);
                    if let Some(err) = shadowed_backend_method(&ast, &file, &text, &opts.backends) {
                        report(err);
                    }
                    scripts.insert(name, Script { info, ast });
                }
                Err(err) => match &*err {
                    EvalAltResult::ErrorModuleNotFound(path, _)
                        if resolver.sources().contains_key(path.trim_end_matches(".rhai")) => {}
                    _ => report(script_load_error(&file, &text, &err, &opts.limits, &module_names)),
                },
            }
        }

        let mut set_hash = Sha256::new();
        for entry in modules.iter().chain(scripts.values().map(|s| &s.info)) {
            set_hash.update(format!("{}\0{}\n", entry.name, entry.hash));
        }
        Ok(WorkflowSet {
            source: source.clone(),
            engine,
            scripts,
            modules,
            hash: hex::encode(set_hash.finalize()),
            limits: opts.limits.clone(),
        })
    }

    /// Where the files came from.
    pub fn source(&self) -> &WorkflowSource {
        &self.source
    }

    /// The top-level scripts, by name.
    pub fn scripts(&self) -> Vec<ScriptInfo> {
        self.scripts.values().map(|s| s.info.clone()).collect()
    }

    /// The modules under `lib/`, by import path.
    pub fn modules(&self) -> &[ScriptInfo] {
        &self.modules
    }

    /// SHA-256 over every script's and module's name and hash: changes when any file does.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The limits the set was built with.
    pub fn limits(&self) -> &WorkflowLimits {
        &self.limits
    }

    /// The public functions of `script` (for `cradle run <workflow> --fn NAME`).
    pub fn functions(&self, script: &str) -> Result<Vec<FunctionInfo>, WorkflowError> {
        let script = self.script(script)?;
        Ok(public_functions(&script.ast))
    }

    /// Calls `func` of `script` with `args` for the run `run`. Blocks until the
    /// script returns; run it on a blocking thread (see [`call_blocking`]).
    pub fn call(
        &self,
        script: &str,
        func: &str,
        args: Vec<Dynamic>,
        run: RunContext,
    ) -> Result<Dynamic, WorkflowError> {
        let script = self.script(script)?;
        let functions = public_functions(&script.ast);
        if !functions.iter().any(|f| f.name == func && f.params.len() == args.len()) {
            let mut available: Vec<String> =
                functions.iter().map(|f| format!("{}({})", f.name, f.params.join(", "))).collect();
            available.sort();
            return Err(WorkflowError::UnknownFunction {
                file: script.info.file.clone(),
                function: func.to_string(),
                arity: args.len(),
                available: list_or_none(available),
            });
        }
        let _current = CurrentRun::enter(&run);
        let options = CallFnOptions::new().with_tag(run).eval_ast(true).rewind_scope(true);
        self.engine
            .call_fn_with_options::<Dynamic>(options, &mut Scope::new(), &script.ast, func, args)
            .map_err(|e| script_error(&script.info.file, &e, &self.limits))
    }

    fn script(&self, name: &str) -> Result<&Script, WorkflowError> {
        self.scripts.get(name).ok_or_else(|| WorkflowError::UnknownScript {
            script: name.to_string(),
            available: list_or_none(self.scripts.keys().cloned().collect()),
        })
    }
}

/// Runs [`WorkflowSet::call`] on tokio's blocking pool.
pub async fn call_blocking(
    set: Arc<WorkflowSet>,
    script: String,
    func: String,
    args: Vec<Dynamic>,
    run: RunContext,
) -> Result<Dynamic, WorkflowError> {
    let (s, f) = (script.clone(), func.clone());
    tokio::task::spawn_blocking(move || set.call(&s, &f, args, run)).await.map_err(|e| WorkflowError::Task {
        script,
        function: func,
        message: e.to_string(),
    })?
}

fn public_functions(ast: &AST) -> Vec<FunctionInfo> {
    ast.iter_functions()
        .filter(|f| f.access != FnAccess::Private)
        .map(|f| FunctionInfo { name: f.name.to_string(), params: f.params.iter().map(|p| p.to_string()).collect() })
        .collect()
}

/// A failure to compile a top-level script; a missing module also lists the
/// modules there are.
fn script_load_error(
    file: &str,
    text: &str,
    err: &EvalAltResult,
    limits: &WorkflowLimits,
    module_names: &str,
) -> WorkflowError {
    match (load_error(file, err, limits), err) {
        (WorkflowError::Compile { file, line, column, message }, EvalAltResult::ErrorModuleNotFound(path, _)) => {
            // Rhai resolves self-contained imports without a position; the import's
            // path literal is what the operator must fix, so point at it.
            let (line, column) = match line {
                0 => find_literal(text, path).unwrap_or((line, column)),
                _ => (line, column),
            };
            WorkflowError::Compile {
                file,
                line,
                column,
                message: format!("{message}; the modules under lib/ are: {module_names}"),
            }
        }
        (other, _) => other,
    }
}

/// The 1-based line and column of the first `"literal"` in `text`.
fn find_literal(text: &str, literal: &str) -> Option<(usize, usize)> {
    let quoted = format!("\"{literal}\"");
    text.lines().enumerate().find_map(|(i, line)| {
        let byte = line.find(&quoted)?;
        Some((i + 1, line[..byte].chars().count() + 1))
    })
}

fn list_or_none(items: Vec<String>) -> String {
    if items.is_empty() { "(none)".to_string() } else { items.join(", ") }
}

fn info(name: &str, file: &str, text: &str) -> ScriptInfo {
    ScriptInfo { name: name.to_string(), file: file.to_string(), hash: hex::encode(Sha256::digest(text.as_bytes())) }
}

/// A script function with the name and arity of a backend export would be
/// called instead of the export by `backend.<name>(...)` (Rhai resolves script
/// functions first and binds the receiver as `this`), recursing forever.
/// Refuse it at load time, naming the function and what to do.
fn shadowed_backend_method(
    ast: &rhai::AST,
    file: &str,
    text: &str,
    backends: &[std::sync::Arc<dyn super::Backend>],
) -> Option<WorkflowError> {
    for f in ast.iter_functions() {
        for b in backends {
            for export in b.exports() {
                if super::bridge::snake(&export.name) == f.name && export.params.len() == f.params.len() {
                    let needle = format!("fn {}(", f.name);
                    let (line, column) = text
                        .lines()
                        .enumerate()
                        .find_map(|(i, l)| l.find(&needle).map(|c| (i + 1, c + 1)))
                        .unwrap_or((0, 0));
                    return Some(WorkflowError::Compile {
                        file: file.to_string(),
                        line,
                        column,
                        message: format!(
                            "function `{}` has the name and arity of backend method `backend.{}(...)` of `{}`, so `backend.{}(...)` would call this function instead of the backend; rename it",
                            f.name,
                            f.name,
                            b.name(),
                            f.name
                        ),
                    });
                }
            }
        }
    }
    None
}
