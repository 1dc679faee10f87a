//! The `lifecycle` exports called through the generated bindings: script
//! values in, typed records across, script values out.
//!
//! Arguments arrive checked and canonical (see
//! [`crate::workflow::Backend::call_typed`]) and become the bindgen records
//! with `rhai::serde::from_dynamic`; results go back with `to_dynamic`. The
//! records' serde names are their Rust field names, the WIT names in
//! snake_case, which is what scripts use; `option` none is `()` both ways. The
//! one enum of the interface, `plan-action`, is spelt by hand in WIT spelling
//! (`no-op`), since serde would give the Rust variant name (`NoOp`). A WIT
//! rename of a field or case these records have is a compile error here or in
//! [`super::backend`], never a silent miss of a lookup by name.
//!
//! The shapes scripts see are those of the by-name bridge
//! (`crate::workflow::bridge`); the tests compare both on the real `vm-spec`,
//! `vm-state`, `snippets` and `plan-outcome`.

use rhai::Dynamic;
use rhai::serde::{from_dynamic, to_dynamic};
use wasmtime::Store;

use super::store::StoreState;
use crate::contract::CapError;
use crate::contract::bindings::WitError;
use crate::contract::bindings::cradle::host::types::{Snippets, VmSpec, VmState};
use crate::contract::bindings::exports::cradle::host::lifecycle::{Guest, PlanAction, PlanOutcome};
use crate::workflow::CallError;

/// One `lifecycle` call with its typed arguments.
#[derive(Debug, Clone)]
pub enum LifecycleCall {
    /// `discover(vm)`.
    Discover(VmSpec),
    /// `check-ownership(vm, found)`.
    CheckOwnership(VmSpec, Option<VmState>),
    /// `plan(vm)`.
    Plan(VmSpec),
    /// `create(vm, snippets)`.
    Create(VmSpec, Snippets),
    /// `reconcile(vm, found)`.
    Reconcile(VmSpec, VmState),
    /// `remove(vm)`.
    Remove(VmSpec),
}

impl LifecycleCall {
    /// The typed call of export `func` (kebab name) with canonical script
    /// arguments; `None` when `func` is not a `lifecycle` function.
    pub fn parse(func: &str, args: &[Dynamic]) -> Option<Result<LifecycleCall, CallError>> {
        let parsed = match func {
            "discover" => arg(args, 0, "vm").map(LifecycleCall::Discover),
            "check-ownership" => {
                arg(args, 0, "vm").and_then(|vm| Ok(LifecycleCall::CheckOwnership(vm, arg(args, 1, "found")?)))
            }
            "plan" => arg(args, 0, "vm").map(LifecycleCall::Plan),
            "create" => arg(args, 0, "vm").and_then(|vm| Ok(LifecycleCall::Create(vm, arg(args, 1, "snippets")?))),
            "reconcile" => arg(args, 0, "vm").and_then(|vm| Ok(LifecycleCall::Reconcile(vm, arg(args, 1, "found")?))),
            "remove" => arg(args, 0, "vm").map(LifecycleCall::Remove),
            _ => return None,
        };
        Some(parsed)
    }

    /// The VM the call is about: every `lifecycle` function's first argument.
    pub fn vm(&self) -> &VmSpec {
        match self {
            LifecycleCall::Discover(vm)
            | LifecycleCall::CheckOwnership(vm, _)
            | LifecycleCall::Plan(vm)
            | LifecycleCall::Create(vm, _)
            | LifecycleCall::Reconcile(vm, _)
            | LifecycleCall::Remove(vm) => vm,
        }
    }

    /// Calls the export on a fresh instance's bindings. The outer error is a
    /// trap; the inner one what the export returned.
    pub fn invoke(&self, guest: &Guest, store: &mut Store<StoreState>) -> wasmtime::Result<Result<Returned, WitError>> {
        Ok(match self {
            LifecycleCall::Discover(vm) => guest.call_discover(store, vm)?.map(Returned::Found),
            LifecycleCall::CheckOwnership(vm, found) => {
                guest.call_check_ownership(store, vm, found.as_ref())?.map(|()| Returned::Nothing)
            }
            LifecycleCall::Plan(vm) => guest.call_plan(store, vm)?.map(Returned::Plan),
            LifecycleCall::Create(vm, snippets) => {
                guest.call_create(store, vm, snippets)?.map(|s| Returned::Found(Some(s)))
            }
            LifecycleCall::Reconcile(vm, found) => guest.call_reconcile(store, vm, found)?.map(Returned::Lines),
            LifecycleCall::Remove(vm) => guest.call_remove(store, vm)?.map(|()| Returned::Nothing),
        })
    }
}

/// What a `lifecycle` export returned on success.
#[derive(Debug, Clone)]
pub enum Returned {
    /// `result<_, error>`.
    Nothing,
    /// A `vm-state` or none (`discover`; `create`, always some).
    Found(Option<VmState>),
    /// `plan-outcome`.
    Plan(PlanOutcome),
    /// `list<string>` (`reconcile`).
    Lines(Vec<String>),
}

impl Returned {
    /// The script value, as the bridge table says.
    pub fn to_script(&self) -> Result<Dynamic, CallError> {
        let result = |e: Box<rhai::EvalAltResult>| CallError::Result(format!("ok: {e}"));
        match self {
            Returned::Nothing => Ok(Dynamic::UNIT),
            Returned::Found(found) => to_dynamic(found).map_err(result),
            Returned::Lines(lines) => to_dynamic(lines).map_err(result),
            Returned::Plan(outcome) => {
                let mut value = to_dynamic(outcome).map_err(result)?;
                let mut map = value.as_map_mut().map_err(|_| CallError::Result("ok: not a record".into()))?;
                map.insert("action".into(), Dynamic::from(plan_action_name(outcome.action)));
                drop(map);
                Ok(value)
            }
        }
    }
}

/// The `error` variant as scripts catch it: its case in WIT spelling and the message.
pub fn returned_error(e: WitError) -> CallError {
    let e = CapError::from_wit(e);
    CallError::Returned { kind: e.kind.as_str().to_string(), message: e.message }
}

/// `plan-action` in WIT spelling.
pub fn plan_action_name(action: PlanAction) -> &'static str {
    match action {
        PlanAction::Create => "create",
        PlanAction::Update => "update",
        PlanAction::NoOp => "no-op",
        PlanAction::Replace => "replace",
    }
}

/// Argument `i` (named `param`) as its typed record. The bridge has checked it
/// against the export's type, so a failure here means the bindings and the
/// plugin's types disagree; the message names the parameter all the same.
fn arg<T: serde::de::DeserializeOwned>(args: &[Dynamic], i: usize, param: &str) -> Result<T, CallError> {
    let value = args.get(i).ok_or_else(|| CallError::Argument(format!("{param}: missing argument")))?;
    from_dynamic(value).map_err(|e| CallError::Argument(format!("{param}: {e}")))
}

#[cfg(test)]
#[path = "lifecycle_tests.rs"]
mod tests;
