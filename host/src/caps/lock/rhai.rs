//! `lock::acquire(key)`, `lock::release(key)`, `lock::holder(key)`,
//! `lock::holder_gone(key)`, `lock::reclaim(key)` for workflow
//! scripts, through the same adapter as plugins ([`super::host`]). A holder is
//! the WIT `holder` record (serde: `#{host, pid, started, run_id}`); `holder`
//! gives `()` for a free lock.

use rhai::serde::to_dynamic;
use rhai::{Dynamic, FuncRegistration, ImmutableString, Module, NativeCallContext};

use crate::caps::script_glue::{Res, throw};
use crate::caps::script_run::caps;

/// The `lock` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("acquire").set_into_module(
        &mut m,
        |ctx: NativeCallContext, key: ImmutableString| -> Res<Dynamic> {
            to_dynamic(caps(&ctx)?.lock_acquire(&key).map_err(throw)?)
        },
    );
    FuncRegistration::new("release")
        .set_into_module(&mut m, |ctx: NativeCallContext, key: ImmutableString| -> Res<()> {
            caps(&ctx)?.lock_release(&key).map_err(throw)
        });
    // `true` when the lock's holder is a process that is gone (a killed run),
    // `false` when it runs or cannot be told, `()` when the lock is free.
    FuncRegistration::new("holder_gone").set_into_module(
        &mut m,
        |ctx: NativeCallContext, key: ImmutableString| -> Res<Dynamic> {
            Ok(caps(&ctx)?.lock_holder_gone(&key).map_err(throw)?.map_or(Dynamic::UNIT, Dynamic::from))
        },
    );
    // Remove a lock whose holder is a process shown to be gone (`cradle
    // unlock`): `true` when one was removed, `false` when it was free.
    FuncRegistration::new("reclaim")
        .set_into_module(&mut m, |ctx: NativeCallContext, key: ImmutableString| -> Res<bool> {
            caps(&ctx)?.lock_reclaim(&key).map_err(throw)
        });
    FuncRegistration::new("holder").set_into_module(
        &mut m,
        |ctx: NativeCallContext, key: ImmutableString| -> Res<Dynamic> {
            to_dynamic(caps(&ctx)?.lock_holder(&key).map_err(throw)?)
        },
    );
    m
}
