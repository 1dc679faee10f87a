//! Rhai workflows: the operator-editable playbooks that sequence a VM's steps.
//!
//! Contract:
//! - [`WorkflowSet::load`] compiles `workflows/*.rhai` and the shared modules under
//!   `workflows/lib/` into an immutable set (hot reload swaps it behind an `Arc`).
//!   [`WorkflowSet::load_from`] does the same for the workflows built into cradle
//!   ([`WorkflowSource::Builtin`]).
//!   Any compile error, missing import or import cycle fails the load with
//!   [`WorkflowError::Compile`] naming `file:line:column`.
//! - [`WorkflowSet::call`] runs one function of one script for one run, on the
//!   calling (blocking) thread; [`call_blocking`] bridges it to tokio. The run's
//!   [`RunContext`] reaches host functions through [`run_context`], so one engine
//!   serves concurrent runs.
//! - Scripts reach the world only through host modules ([`EngineOptions::host_modules`])
//!   and backend plugins ([`BackendHandle`], converted by [`bridge`]).
//! - Failures: a script error is [`WorkflowError::Script`] with `file:line:column`
//!   and the innermost `step`; a runaway script is stopped with
//!   [`WorkflowError::Limit`] naming the `[workflow]` key to raise. Nothing panics.
//! - JSON crosses into scripts and back through [`values`] only (`cradle run`
//!   arguments and results, the inventory values of a provisioning run's `vm`).

pub mod backend;
pub mod bridge;
mod context;
pub(crate) mod crashpoint;
mod engine;
mod errors;
mod limits;
mod resolver;
pub mod values;

pub use backend::{Backend, BackendHandle, CallError, ExportSig};
pub use bridge::{BridgeError, from_val, from_val_typed, to_val};
pub use context::{NoopObserver, RunContext, RunObserver, run_context};
pub use engine::{EngineOptions, FunctionInfo, ScriptInfo, WorkflowSet, WorkflowSource, call_blocking};
pub use errors::WorkflowError;
pub use limits::WorkflowLimits;

#[cfg(test)]
mod backend_tests;
#[cfg(test)]
mod engine_tests;
