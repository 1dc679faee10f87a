//! The capabilities as Rhai modules for workflow scripts: [`modules`] (the
//! list comes from the registry, [`crate::caps::registry`]: `log`, `lock`,
//! `checkpoint`, `proxmox`, `ssh`, `dns`, each from its capability's
//! `rhai.rs`, and `cloudinit`, snippets and creation records, from
//! `creation/rhai.rs`), the glue they share (the run's [`CapCtx`], `throw`),
//! and the script-only modules: `cradle` (run helpers: `cradle::backend()`,
//! `cradle::lock_key`, `cradle::check_inputs`, `cradle::check_grants`) and `guestnet` (the guest's
//! network, verified on the guest).
//!
//! Scripts are trusted operator code, but they go through the same
//! [`CapCtx::guard`] as plugins, under `[workflow.grants]`, and are journaled
//! the same way. A failed call throws `#{kind, message}` — the shape backend
//! errors have — so `try { } catch (e) { if e.kind == "conflict" { ... } }`
//! works for both. Records go to scripts through serde (`to_map`).

use rhai::{Dynamic, EvalAltResult, FuncRegistration, ImmutableString, Map, Module, NativeCallContext, Shared};

use super::context::CapCtx;
use crate::caps::run::RunData;
use crate::contract::CapError;
use crate::workflow::run_context;

mod grants;
pub(crate) mod guestnet;
mod inputs;

pub(crate) type Res<T> = Result<T, Box<EvalAltResult>>;

/// Every host module, named as scripts use them (the registry's list).
pub fn modules() -> Vec<(String, Shared<Module>)> {
    super::registry::script_modules()
}

pub(crate) fn with_run<T>(ctx: &NativeCallContext, f: impl FnOnce(&RunData) -> T) -> Res<T> {
    let outside = || Box::<EvalAltResult>::from("host modules are only available inside a cradle run");
    let run = run_context(ctx).ok_or_else(outside)?;
    let data = run.data::<RunData>().ok_or_else(outside)?;
    Ok(f(data))
}

pub(crate) fn caps(ctx: &NativeCallContext) -> Res<CapCtx> {
    with_run(ctx, |data| data.workflow_caps(None))
}

/// The longest `cradle::sleep`.
const MAX_SLEEP_MS: i64 = 60_000;

/// `cradle::backend()`, `cradle::environment()`, `cradle::run_id()`,
/// `cradle::check_inputs(vm)`, `cradle::check_grants(vm[, opts])`, `cradle::sleep(ms)`.
pub(crate) fn cradle_module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("backend").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<Dynamic> {
        let handle = with_run(&ctx, |d| d.backend.clone())?;
        handle
            .map(Dynamic::from)
            .ok_or_else(|| throw(CapError::failed("this environment's backend plugin is not loaded")))
    });
    // Waiting between polls of a service that has no wait of its own (a
    // Semaphore task); bounded so a typo cannot park a run for hours.
    FuncRegistration::new("sleep").set_into_module(&mut m, |ms: i64| -> Res<()> {
        if !(0..=MAX_SLEEP_MS).contains(&ms) {
            return Err(throw(CapError::invalid(format!(
                "cradle::sleep({ms}): between 0 and {MAX_SLEEP_MS} ms; loop for longer waits"
            ))));
        }
        std::thread::sleep(std::time::Duration::from_millis(ms as u64));
        Ok(())
    });
    FuncRegistration::new("environment").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<ImmutableString> {
        with_run(&ctx, |d| d.environment.as_str().into())
    });
    // The per-VM lock key: (cluster identity, canonical VM name), invariant 1.
    // The identity is the stable one `cradle unlock` uses too (`sim://NAME`
    // for a simulator, whose API port changes per process).
    FuncRegistration::new("lock_key").set_into_module(
        &mut m,
        |ctx: NativeCallContext, vm_name: ImmutableString| -> Res<ImmutableString> {
            with_run(&ctx, |d| crate::caps::lock::lock_key(&d.services.cluster_id, &vm_name).into())
        },
    );
    // The cluster's node names (those cradle can reach over SSH).
    FuncRegistration::new("nodes").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<rhai::Array> {
        with_run(&ctx, |d| d.services.nodes.keys().map(|n| Dynamic::from(n.clone())).collect())
    });
    // The SSH login of a node (cradle.toml's node_ssh) as an `ssh::` target,
    // for node-side steps such as `qm disk import`.
    FuncRegistration::new("node_login").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString| -> Res<Map> {
            let t = with_run(&ctx, |d| crate::caps::creation::snippets::node_target_of(&d.services, &node))?
                .map_err(throw)?;
            to_map(&t)
        },
    );
    // The public keys every guest authorizes for its management login (the
    // run's own SSH identity and [ssh] authorized_keys), e.g. for a container's
    // `ssh-public-keys`.
    FuncRegistration::new("guest_keys").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<rhai::Array> {
        with_run(&ctx, |d| d.services.guest_keys.iter().map(|k| Dynamic::from(k.clone())).collect())
    });
    // Every inventory value a later step passes on, checked before any side
    // effect (inputs.rs).
    FuncRegistration::new("check_inputs")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map| -> Res<()> { inputs::check_inputs(&ctx, &vm) });
    // The VM's VMID, node, storages and template against the proxmox grants
    // of the backend and the workflow, before any side effect (grants.rs).
    FuncRegistration::new("check_grants").set_into_module(&mut m, |ctx: NativeCallContext, vm: Map| -> Res<()> {
        grants::check_grants(&ctx, &vm, &Map::new())
    });
    FuncRegistration::new("check_grants")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map, opts: Map| -> Res<()> {
            grants::check_grants(&ctx, &vm, &opts)
        });
    FuncRegistration::new("run_id").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<ImmutableString> {
        with_run(&ctx, |d| d.run.run_id.as_str().into())
    });
    m
}

/// `value` (a WIT record or a view struct) as a script map, through serde:
/// fields by their Rust names, `()` for a none, INT for integers.
pub(crate) fn to_map<T: serde::Serialize>(value: &T) -> Res<Map> {
    let d = rhai::serde::to_dynamic(value)?;
    let kind = d.type_name();
    d.try_cast::<Map>().ok_or_else(|| format!("a record became a script {kind}, not a map").into())
}

/// Throw a WIT error as `#{kind, message}`.
pub(crate) fn wit_throw(e: crate::contract::bindings::cradle::host::types::Error) -> Box<EvalAltResult> {
    throw(CapError::from_wit(e))
}

/// A VMID (or other u32) argument from a script integer.
pub(crate) fn int_arg(v: i64, what: &str) -> Res<u32> {
    u32::try_from(v).map_err(|_| throw(CapError::invalid(format!("{what} {v} is out of range"))))
}

/// Throw `e` as `#{kind, message}`.
pub fn throw(e: CapError) -> Box<EvalAltResult> {
    let mut map = Map::new();
    map.insert("kind".into(), e.kind.as_str().into());
    map.insert("message".into(), e.message.into());
    Box::new(EvalAltResult::ErrorRuntime(map.into(), rhai::Position::NONE))
}
