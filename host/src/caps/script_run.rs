//! The script glue that needs the run: [`with_run`] (the run's [`RunData`]
//! from a native call's context), [`caps`] (the workflow's [`CapCtx`]) and
//! [`wit_throw`].
//!
//! Contract: imports nothing from the capabilities' `rhai.rs` files,
//! `caps/script/` or the registry, so every script module can use it
//! without an import circle. The value glue is [`super::script_glue`].

use rhai::{EvalAltResult, NativeCallContext};

use super::context::CapCtx;
use super::script_glue::{Res, throw};
use crate::caps::run::RunData;
use crate::contract::CapError;
use crate::workflow::run_context;

/// `f` of the run's data; an error outside a cradle run.
pub(crate) fn with_run<T>(ctx: &NativeCallContext, f: impl FnOnce(&RunData) -> T) -> Res<T> {
    let outside = || Box::<EvalAltResult>::from("host modules are only available inside a cradle run");
    let run = run_context(ctx).ok_or_else(outside)?;
    let data = run.data::<RunData>().ok_or_else(outside)?;
    Ok(f(data))
}

/// The workflow's capability context (its grants, journal, budget).
pub(crate) fn caps(ctx: &NativeCallContext) -> Res<CapCtx> {
    with_run(ctx, |data| data.workflow_caps(None))
}

/// Throw a WIT error as `#{kind, message}`.
pub(crate) fn wit_throw(e: crate::contract::bindings::cradle::host::types::Error) -> Box<EvalAltResult> {
    throw(CapError::from_wit(e))
}
