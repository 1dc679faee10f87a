//! The per-run context and the script-level `step` function.
//!
//! One [`rhai::Engine`] serves many concurrent runs, so nothing run-specific lives
//! in the engine: a [`RunContext`] is passed as the call's *tag* and host functions
//! reach it with [`run_context`]. `print`/`debug` callbacks get no call context from
//! Rhai, so the context of the run executing on the current thread is also kept in a
//! thread-local while a call is in flight (runs are synchronous on their thread).
//!
//! `step(name, || ...)` and `step(vm, name, || ...)` tell the run's
//! [`RunObserver`] when a step starts and finishes (with the error message if it
//! failed) and re-throw the error wrapped so the final [`WorkflowError`] can name
//! the innermost step. The wrapping is Rhai's own "error in function call" frame,
//! so `try { } catch (e)` in scripts still sees the original thrown value; as
//! the caught value has no frames, `failed_step()` gives a `catch` block the
//! innermost step of the latest failure (what the host would report), or `()`.
//!
//! [`WorkflowError`]: super::WorkflowError

use std::any::Any;
use std::cell::RefCell;
use std::sync::{Arc, Mutex};

use rhai::{Dynamic, Engine, EvalAltResult, FnPtr, ImmutableString, NativeCallContext};

use super::errors::STEP_FRAME;

/// Receives the progress of one workflow run (the journal and the progress display).
/// Called from the run's blocking thread; implementations must not block for long.
pub trait RunObserver: Send + Sync {
    /// A `step(...)` began. `vm` is the VM name given to `step(vm, name, ...)`.
    fn step_started(&self, vm: Option<&str>, step: &str);
    /// A `step(...)` ended; `error` is the failure message if it failed.
    fn step_finished(&self, vm: Option<&str>, step: &str, error: Option<&str>);
    /// A script `print` (INFO) or `debug` (DEBUG) line.
    fn log(&self, level: tracing::Level, message: &str);
}

/// An observer that ignores everything, for `workflows check` and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopObserver;

impl RunObserver for NoopObserver {
    fn step_started(&self, _vm: Option<&str>, _step: &str) {}
    fn step_finished(&self, _vm: Option<&str>, _step: &str, _error: Option<&str>) {}
    fn log(&self, _level: tracing::Level, _message: &str) {}
}

/// Everything one run carries into host functions: the observer and opaque host
/// data (the lead's per-run state: grants, VM bindings, journal handle).
#[derive(Clone)]
pub struct RunContext {
    observer: Arc<dyn RunObserver>,
    data: Arc<dyn Any + Send + Sync>,
    /// The innermost step of the run's latest failure (`failed_step()`).
    failed_step: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for RunContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext").finish_non_exhaustive()
    }
}

impl RunContext {
    /// A context reporting to `observer` and carrying `data` for host modules.
    pub fn new(observer: Arc<dyn RunObserver>, data: Arc<dyn Any + Send + Sync>) -> Self {
        Self { observer, data, failed_step: Arc::default() }
    }

    /// A context with no observer and no host data.
    pub fn detached() -> Self {
        Self::new(Arc::new(NoopObserver), Arc::new(()))
    }

    /// The run's observer.
    pub fn observer(&self) -> &dyn RunObserver {
        self.observer.as_ref()
    }

    /// The host data, if it is a `T`.
    pub fn data<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.data.downcast_ref::<T>()
    }

    /// The host data as given to [`RunContext::new`].
    pub fn data_arc(&self) -> &Arc<dyn Any + Send + Sync> {
        &self.data
    }
}

/// The [`RunContext`] of the run that is calling a host function; `None` only when
/// the engine is used outside [`WorkflowSet::call`](super::WorkflowSet::call).
pub fn run_context(ctx: &NativeCallContext) -> Option<RunContext> {
    ctx.tag().and_then(|tag| tag.clone().try_cast::<RunContext>())
}

thread_local! {
    static CURRENT: RefCell<Option<RunContext>> = const { RefCell::new(None) };
}

/// Marks `run` as the run executing on this thread until dropped; restores the
/// previous one so nested calls on one thread stay correct.
pub(crate) struct CurrentRun(Option<RunContext>);

impl CurrentRun {
    pub(crate) fn enter(run: &RunContext) -> Self {
        Self(CURRENT.with(|c| c.replace(Some(run.clone()))))
    }
}

impl Drop for CurrentRun {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

fn log_to_current(level: tracing::Level, message: &str) {
    CURRENT.with(|c| {
        if let Some(run) = c.borrow().as_ref() {
            run.observer().log(level, message);
        }
    });
}

/// Registers `step(name, f)`, `step(vm, name, f)` and routes `print`/`debug` to
/// tracing and the current run's observer instead of stdout.
pub(crate) fn register(engine: &mut Engine) {
    engine.register_fn("step", |ctx: NativeCallContext, name: ImmutableString, body: FnPtr| {
        run_step(&ctx, None, &name, &body)
    });
    engine.register_fn("step", |ctx: NativeCallContext, vm: ImmutableString, name: ImmutableString, body: FnPtr| {
        run_step(&ctx, Some(&vm), &name, &body)
    });
    engine.register_fn("failed_step", |ctx: NativeCallContext| -> Dynamic {
        let step = run_context(&ctx).and_then(|run| run.failed_step.lock().ok().and_then(|s| s.clone()));
        step.map_or(Dynamic::UNIT, Dynamic::from)
    });
    engine.on_print(|text| {
        tracing::info!(target: "cradle::workflow::script", "{text}");
        log_to_current(tracing::Level::INFO, text);
    });
    engine.on_debug(|text, source, pos| {
        let line = match (source, pos.line()) {
            (Some(src), Some(line)) => format!("{src}:{line}: {text}"),
            _ => text.to_string(),
        };
        tracing::debug!(target: "cradle::workflow::script", "{line}");
        log_to_current(tracing::Level::DEBUG, &line);
    });
}

fn run_step(
    ctx: &NativeCallContext,
    vm: Option<&str>,
    name: &str,
    body: &FnPtr,
) -> Result<Dynamic, Box<EvalAltResult>> {
    let run = run_context(ctx);
    if let Some(run) = &run {
        run.observer().step_started(vm, name);
        // A failure before this step, caught by the script, is not the latest.
        if let Ok(mut last) = run.failed_step.lock() {
            *last = None;
        }
    } else {
        // With a run, its observer logs the step (`project::JournalObserver`,
        // `-v`); logging here too printed every step twice.
        tracing::debug!(target: "cradle::workflow", step = name, vm, "step started");
    }
    super::crashpoint::at(super::crashpoint::Edge::Before, vm, name);
    let result = body.call_within_context::<Dynamic>(ctx, ());
    if result.is_ok() {
        super::crashpoint::at(super::crashpoint::Edge::After, vm, name);
    }
    let message = result.as_ref().err().map(|e| super::errors::innermost_message(e));
    if let Some(run) = &run {
        run.observer().step_finished(vm, name, message.as_deref());
    }
    match result {
        Ok(value) => Ok(value),
        // Limits and `exit` must pass through untouched: they are not catchable and
        // the engine treats them specially.
        Err(err) if err.is_system_exception() || matches!(*err, EvalAltResult::Exit(..)) => Err(err),
        Err(err) => {
            // The innermost failing step: its error holds no step frame yet
            // (the steps around it, failing with it, keep its name).
            if let Some(run) = &run
                && !has_step_frame(&err)
                && let Ok(mut last) = run.failed_step.lock()
            {
                *last = Some(name.to_string());
            }
            let label = match vm {
                Some(vm) => format!("{STEP_FRAME}{name}' for VM '{vm}'"),
                None => format!("{STEP_FRAME}{name}'"),
            };
            let source = ctx.call_source().unwrap_or("").to_string();
            Err(EvalAltResult::ErrorInFunctionCall(label, source, err, ctx.call_position()).into())
        }
    }
}

/// Whether `err` already passed through a `step` (holds its frame).
fn has_step_frame(err: &EvalAltResult) -> bool {
    let mut cur = err;
    loop {
        match cur {
            EvalAltResult::ErrorInFunctionCall(name, _, inner, _) => {
                if name.starts_with(STEP_FRAME) {
                    return true;
                }
                cur = inner;
            }
            EvalAltResult::ErrorInModule(_, inner, _) => cur = inner,
            _ => return false,
        }
    }
}
