//! The seam between workflows and backend plugins.
//!
//! The plugin runtime implements [`Backend`] for each loaded plugin; scripts get a
//! [`BackendHandle`] and call the plugin's exports as methods, snake_case:
//! `backend.check_ownership(vm, found)` calls `check-ownership`. Arguments are
//! converted with [`to_val`] against the export's parameter types (errors name the
//! parameter and field path). A `result<T, E>` return becomes `T` on `ok` and a
//! thrown error on `err`: cradle's `error` variant (and any variant whose payload is
//! a string) is thrown as `#{kind: "conflict", message: "..."}` so scripts can
//! `try { } catch (e) { if e.kind == "conflict" { ... } }`; other error payloads
//! are thrown as their converted value. A failure of the call itself (a trap, a
//! timeout) is thrown as `#{kind: "failed", message: ...}`.
//!
//! A backend with typed bindings for an export (the plugin host's `lifecycle`,
//! [`Backend::call_typed`]) gets the checked arguments as canonical script
//! values and converts them itself; the by-name [`Val`] path
//! ([`Backend::call`]) is for the exports it has no bindings for. Both report
//! to scripts the same way.
//!
//! `backend.functions` lists the exports' snake_case names, so a workflow can
//! ask for an optional one before calling it (`"plan_update" in
//! backend.functions`: the backend exports wit/maintenance.wit).
//!
//! An integration plugin (`cradle::plugin("ROLE")`) is the same handle over
//! the same trait: its exports are methods as a backend's are, reported the
//! same way, with `plugin 'NAME'` in messages ([`Backend::kind`]).
//!
//! Methods are registered when the engine is built, for every export name of every
//! plugin in `EngineOptions::backends` (backends and integration plugins), at every arity up to a few more than the
//! export declares, so a wrong argument count gets an error naming the export's
//! parameters instead of Rhai's "function not found".

use std::collections::BTreeMap;
use std::sync::Arc;

use rhai::{Dynamic, Engine, EvalAltResult, Map, NativeCallContext};
use wasmtime::component::types::ComponentFunc;
use wasmtime::component::{Type, Val};

use super::bridge::{from_val_typed, snake, to_val, type_name};
use super::context::{RunContext, run_context};

/// One export of a backend: its WIT name and types.
#[derive(Debug, Clone)]
pub struct ExportSig {
    /// The WIT (kebab-case) name, e.g. `check-ownership`.
    pub name: String,
    /// Parameter names and types, in order.
    pub params: Vec<(String, Type)>,
    /// The result type; `None` for a function without a result.
    pub result: Option<Type>,
}

impl ExportSig {
    /// The signature of a component function type named `name`.
    pub fn from_func(name: &str, func: &ComponentFunc) -> Self {
        Self {
            name: name.to_string(),
            params: func.params().map(|(n, t)| (n.to_string(), t)).collect(),
            result: func.results().next(),
        }
    }

    /// `check-ownership(vm: record {...}, found: option<...>)`, for error messages.
    pub fn describe(&self) -> String {
        let params: Vec<String> = self.params.iter().map(|(n, t)| format!("{}: {}", snake(n), short_type(t))).collect();
        format!("{}({})", snake(&self.name), params.join(", "))
    }
}

fn short_type(ty: &Type) -> String {
    match ty {
        Type::Record(_) => "record".to_string(),
        Type::Variant(_) => "variant".to_string(),
        Type::Enum(_) => "enum".to_string(),
        Type::Flags(_) => "flags".to_string(),
        Type::Option(o) => format!("option<{}>", short_type(&o.ty())),
        Type::List(l) => format!("list<{}>", short_type(&l.ty())),
        other => type_name(other),
    }
}

/// A loaded backend plugin, as the workflow engine sees it.
pub trait Backend: Send + Sync + 'static {
    /// The backend's name (`direct`, `terraform`, `netbox`).
    fn name(&self) -> &str;
    /// `backend`, or `plugin` for an integration plugin: how messages name it.
    fn kind(&self) -> &'static str {
        "backend"
    }
    /// The functions the plugin exports from `cradle:host/lifecycle` (a
    /// backend) or from its own interfaces (an integration plugin).
    fn exports(&self) -> Vec<ExportSig>;
    /// Calls export `func` (kebab name) with converted arguments. Called on a
    /// blocking thread; `run` is the context of the run making the call.
    fn call(&self, run: &RunContext, func: &str, args: Vec<Val>) -> Result<Option<Val>, anyhow::Error>;
    /// Calls export `func` through the backend's typed bindings, when it has
    /// them for `func` (a plugin's `lifecycle`); `None` sends the call by name
    /// through [`Backend::call`]. `args` have been checked against the export's
    /// parameter types already and are in their canonical shape (what
    /// [`from_val_typed`] makes of the checked value: snake_case keys, every
    /// `option` field present, `()` for none). The result is the script value
    /// of the export's `ok` payload.
    fn call_typed(&self, _run: &RunContext, _func: &str, _args: &[Dynamic]) -> Option<Result<Dynamic, CallError>> {
        None
    }
}

/// How a typed backend call failed; the script method reports each case as its doc says.
#[derive(Debug)]
pub enum CallError {
    /// An argument does not fit the typed parameter; the message names the
    /// parameter and field path. Raised as a plain script error.
    Argument(String),
    /// The call itself failed (a trap, a timeout, an exhausted budget):
    /// thrown as `#{kind: "failed", message}`.
    Failed(anyhow::Error),
    /// The export returned its `error` variant: thrown as
    /// `#{kind: <case, WIT spelling>, message}`.
    Returned {
        /// The case, e.g. `not-found`.
        kind: String,
        /// The plugin's message.
        message: String,
    },
    /// The returned value could not become a script value.
    Result(String),
}

/// A backend as a Rhai value. Cheap to clone.
#[derive(Clone)]
pub struct BackendHandle {
    backend: Arc<dyn Backend>,
    // Looked up per call, so computed once per handle.
    exports: Arc<BTreeMap<String, ExportSig>>,
}

impl std::fmt::Debug for BackendHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendHandle")
            .field("name", &self.name())
            .field("exports", &self.exports.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl BackendHandle {
    /// Wraps `backend` for scripts.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        let exports = backend.exports().into_iter().map(|e| (snake(&e.name), e)).collect();
        Self { backend, exports: Arc::new(exports) }
    }

    /// The backend's name.
    pub fn name(&self) -> &str {
        self.backend.name()
    }
}

/// Extra arities registered beyond each export's own, so that scripts passing too
/// many arguments get our message rather than "function not found".
const EXTRA_ARITY: usize = 3;

/// Registers the `BackendHandle` type, its `name` property, and a method per export
/// name of `backends`.
pub(crate) fn register(engine: &mut Engine, backends: &[Arc<dyn Backend>]) {
    engine.register_type_with_name::<BackendHandle>("Backend");
    engine.register_get("name", |h: &mut BackendHandle| h.name().to_string());
    // What this backend exports, snake_case: `"plan_update" in backend.functions`
    // asks for an optional export (wit/maintenance.wit). A property, so it can
    // never shadow an export of that name (a method).
    engine.register_get("functions", |h: &mut BackendHandle| {
        h.exports.keys().map(|k| Dynamic::from(k.clone())).collect::<rhai::Array>()
    });
    engine.register_fn("to_string", |h: &mut BackendHandle| format!("{} '{}'", h.backend.kind(), h.name()));
    let mut max_arity: BTreeMap<String, usize> = BTreeMap::new();
    for backend in backends {
        for export in backend.exports() {
            let entry = max_arity.entry(snake(&export.name)).or_default();
            *entry = (*entry).max(export.params.len());
        }
    }
    for (method, arity) in max_arity {
        for n in 0..=arity + EXTRA_ARITY {
            let mut types = vec![std::any::TypeId::of::<BackendHandle>()];
            types.extend(std::iter::repeat_n(std::any::TypeId::of::<Dynamic>(), n));
            let name = method.clone();
            engine.register_raw_fn(&method, types, move |ctx, args| call_export(&ctx, &name, args));
        }
    }
}

fn call_export(
    ctx: &NativeCallContext,
    method: &str,
    args: &mut [&mut Dynamic],
) -> Result<Dynamic, Box<EvalAltResult>> {
    let pos = ctx.call_position();
    let fail = |msg: String| -> Box<EvalAltResult> { EvalAltResult::ErrorRuntime(msg.into(), pos).into() };
    let (first, rest) = args.split_first_mut().ok_or_else(|| fail(format!("{method}: missing backend")))?;
    let handle = first
        .read_lock::<BackendHandle>()
        .map(|h| h.clone())
        .ok_or_else(|| fail(format!("{method}: not called on a backend")))?;
    // "backend 'direct'" or "plugin 'netbox'": what the script called.
    let who = format!("{} '{}'", handle.backend.kind(), handle.name());
    let Some(sig) = handle.exports.get(method) else {
        let known: Vec<&str> = handle.exports.keys().map(String::as_str).collect();
        return Err(fail(format!("{who} has no function '{method}'; it exports: {}", known.join(", "))));
    };
    if rest.len() != sig.params.len() {
        return Err(fail(format!(
            "{who}: {method} takes {} argument(s), got {}: {}",
            sig.params.len(),
            rest.len(),
            sig.describe()
        )));
    }
    // Every argument is checked by the bridge, typed call or not: its errors
    // name the parameter and the field path.
    let mut vals = Vec::with_capacity(rest.len());
    for ((param, ty), arg) in sig.params.iter().zip(rest.iter()) {
        let val = to_val(arg, ty, &snake(param)).map_err(|e| fail(format!("{who}: {method}: {e}")))?;
        vals.push(val);
    }
    let run = run_context(ctx).ok_or_else(|| {
        fail(format!(
            "{who}: {method}: no run context; backends are called only \
             from a workflow run (WorkflowSet::call)"
        ))
    })?;
    let thrown = |kind: &str, message: String| -> Box<EvalAltResult> {
        EvalAltResult::ErrorRuntime(error_map(kind, message), pos).into()
    };
    let canonical = sig
        .params
        .iter()
        .zip(&vals)
        .map(|((param, ty), val)| from_val_typed(val, ty, &snake(param)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(format!("{who}: {method}: {e}")))?;
    if let Some(outcome) = handle.backend.call_typed(&run, &sig.name, &canonical) {
        return outcome.map_err(|e| match e {
            CallError::Argument(msg) => fail(format!("{who}: {method}: {msg}")),
            CallError::Failed(e) => thrown("failed", format!("{who}: {method}: {e:#}")),
            CallError::Returned { kind, message } => thrown(&kind, message),
            CallError::Result(msg) => fail(format!("{who}: {method} returned {msg}")),
        });
    }
    let returned =
        handle.backend.call(&run, &sig.name, vals).map_err(|e| thrown("failed", format!("{who}: {method}: {e:#}")))?;
    let convert = |val: &Val, ty: &Type, path: &str| {
        from_val_typed(val, ty, path).map_err(|e| fail(format!("{who}: {method} returned {e}")))
    };
    match (returned, &sig.result) {
        (None, _) | (Some(_), None) => Ok(Dynamic::UNIT),
        (Some(Val::Result(Ok(value))), Some(Type::Result(rt))) => match (value, rt.ok()) {
            (Some(v), Some(ty)) => convert(&v, &ty, "ok"),
            _ => Ok(Dynamic::UNIT),
        },
        (Some(Val::Result(Err(value))), Some(Type::Result(rt))) => match (value, rt.err()) {
            (Some(v), Some(ty)) => Err(match *v {
                Val::Variant(kind, payload) => match payload.map(|p| *p) {
                    Some(Val::String(message)) => thrown(&kind, message),
                    None => thrown(&kind, format!("{who}: {method} failed")),
                    Some(other) => {
                        let variant = Val::Variant(kind, Some(Box::new(other)));
                        EvalAltResult::ErrorRuntime(convert(&variant, &ty, "err")?, pos).into()
                    }
                },
                other => EvalAltResult::ErrorRuntime(convert(&other, &ty, "err")?, pos).into(),
            }),
            _ => Err(thrown("failed", format!("{who}: {method} failed"))),
        },
        (Some(v), Some(ty)) => convert(&v, ty, "result"),
    }
}

/// `#{kind: ..., message: ...}`: what scripts catch from a failed backend call.
pub(crate) fn error_map(kind: &str, message: String) -> Dynamic {
    let mut map = Map::new();
    map.insert("kind".into(), kind.into());
    map.insert("message".into(), message.into());
    Dynamic::from_map(map)
}
