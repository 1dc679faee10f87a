//! `lock::acquire(key)`, `lock::release(key)`, `lock::holder(key)` for workflow
//! scripts, through the same adapter as plugins ([`super::host`]).

use rhai::{Dynamic, FuncRegistration, ImmutableString, Map, Module, NativeCallContext};

use crate::caps::script::{Res, caps, throw};
use crate::contract::bindings::cradle::host::lock::Holder;

fn holder_map(h: Holder) -> Dynamic {
    let mut map = Map::new();
    map.insert("host".into(), h.host.into());
    map.insert("pid".into(), i64::from(h.pid).into());
    map.insert("started".into(), h.started.into());
    map.insert("run_id".into(), h.run_id.into());
    map.into()
}

/// The `lock` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("acquire").set_into_module(
        &mut m,
        |ctx: NativeCallContext, key: ImmutableString| -> Res<Dynamic> {
            caps(&ctx)?.lock_acquire(&key).map(holder_map).map_err(throw)
        },
    );
    FuncRegistration::new("release")
        .set_into_module(&mut m, |ctx: NativeCallContext, key: ImmutableString| -> Res<()> {
            caps(&ctx)?.lock_release(&key).map_err(throw)
        });
    FuncRegistration::new("holder").set_into_module(
        &mut m,
        |ctx: NativeCallContext, key: ImmutableString| -> Res<Dynamic> {
            Ok(caps(&ctx)?.lock_holder(&key).map_err(throw)?.map(holder_map).unwrap_or(Dynamic::UNIT))
        },
    );
    m
}
