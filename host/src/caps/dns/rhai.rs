//! `dns::*` for workflow scripts, through the same adapter as a plugin's call
//! (checked against `[workflow.grants.dns]`, journaled):
//!
//! - `dns::upsert(#{zone, name, kind, value, ttl})` → `true` when something
//!   changed. `kind` is `"a"`, `"aaaa"` or `"ptr"`; `ttl` may be left out (or
//!   `0`) for the provider's `ttl`. Unknown keys are an error, so a typo does
//!   not silently drop a field.
//! - `dns::delete(zone, name, kind)` → `true` when something was deleted.
//!
//! The maps and kinds are read by [`super::script_args`]. Failures throw
//! `#{kind, message}` like every host module.

use rhai::{FuncRegistration, ImmutableString, Map, Module, NativeCallContext};

use super::script_args::{record, record_kind};
use crate::caps::script_glue::Res;
use crate::caps::script_run::{caps, wit_throw};
use crate::contract::bindings::cradle::host::dns::Host;

/// The `dns` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("upsert").set_into_module(&mut m, |ctx: NativeCallContext, rec: Map| -> Res<bool> {
        let rec = record(&rec)?;
        Host::upsert(&mut caps(&ctx)?, rec).map_err(wit_throw)
    });
    FuncRegistration::new("delete").set_into_module(
        &mut m,
        |ctx: NativeCallContext, zone: ImmutableString, name: ImmutableString, kind: ImmutableString| -> Res<bool> {
            let kind = record_kind("dns::delete", &kind)?;
            Host::delete(&mut caps(&ctx)?, zone.to_string(), name.to_string(), kind).map_err(wit_throw)
        },
    );
    m
}
