//! The capabilities as Rhai modules for workflow scripts: `log`, `lock`,
//! `checkpoint`, `cradle` (run helpers: `cradle::backend()`, `cradle::lock_key`,
//! `cradle::check_inputs`), `proxmox`, `ssh`, `cloudinit` (snippets and creation
//! records), `dns` and `guestnet` (the guest's network, verified on the guest).
//!
//! Scripts are trusted operator code, but they go through the same
//! [`CapCtx::guard`] as plugins, under `[workflow.grants]`, and are journaled
//! the same way. A failed call throws `#{kind, message}` — the shape backend
//! errors have — so `try { } catch (e) { if e.kind == "conflict" { ... } }`
//! works for both.

use rhai::{Dynamic, EvalAltResult, FuncRegistration, ImmutableString, Map, Module, NativeCallContext, Shared};

use super::context::CapCtx;
use crate::caps::run::RunData;
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::checkpoint::Finalization;
use crate::contract::bindings::cradle::host::lock::Holder;
use crate::journal::LogLevel;
use crate::workflow::run_context;

mod cloudinit;
mod dns;
mod guestnet;
mod inputs;
mod proxmox;
mod ssh;

type Res<T> = Result<T, Box<EvalAltResult>>;

/// Every capability module, named as scripts use them.
pub fn modules() -> Vec<(String, Shared<Module>)> {
    vec![
        ("log".into(), Shared::new(log_module())),
        ("lock".into(), Shared::new(lock_module())),
        ("checkpoint".into(), Shared::new(checkpoint_module())),
        ("cradle".into(), Shared::new(cradle_module())),
        ("proxmox".into(), Shared::new(proxmox::module())),
        ("ssh".into(), Shared::new(ssh::module())),
        ("cloudinit".into(), Shared::new(cloudinit::module())),
        ("dns".into(), Shared::new(dns::module())),
        ("guestnet".into(), Shared::new(guestnet::module())),
    ]
}

fn with_run<T>(ctx: &NativeCallContext, f: impl FnOnce(&RunData) -> T) -> Res<T> {
    let outside = || Box::<EvalAltResult>::from("host modules are only available inside a cradle run");
    let run = run_context(ctx).ok_or_else(outside)?;
    let data = run.data::<RunData>().ok_or_else(outside)?;
    Ok(f(data))
}

fn caps(ctx: &NativeCallContext) -> Res<CapCtx> {
    with_run(ctx, |data| data.workflow_caps(None))
}

/// `cradle::backend()`, `cradle::environment()`, `cradle::run_id()`,
/// `cradle::check_inputs(vm)`.
fn cradle_module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("backend").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<Dynamic> {
        let handle = with_run(&ctx, |d| d.backend.clone())?;
        handle
            .map(Dynamic::from)
            .ok_or_else(|| throw(CapError::failed("this environment's backend plugin is not loaded")))
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
    // Every inventory value a later step passes on, checked before any side
    // effect (inputs.rs).
    FuncRegistration::new("check_inputs")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map| -> Res<()> { inputs::check_inputs(&ctx, &vm) });
    FuncRegistration::new("run_id").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<ImmutableString> {
        with_run(&ctx, |d| d.run.run_id.as_str().into())
    });
    m
}

/// Throw a WIT error as `#{kind, message}`.
fn wit_throw(e: crate::contract::bindings::cradle::host::types::Error) -> Box<EvalAltResult> {
    throw(CapError::from_wit(e))
}

/// A VMID (or other u32) argument from a script integer.
fn int_arg(v: i64, what: &str) -> Res<u32> {
    u32::try_from(v).map_err(|_| throw(CapError::invalid(format!("{what} {v} is out of range"))))
}

/// Throw `e` as `#{kind, message}`.
pub fn throw(e: CapError) -> Box<EvalAltResult> {
    let mut map = Map::new();
    map.insert("kind".into(), e.kind.as_str().into());
    map.insert("message".into(), e.message.into());
    Box::new(EvalAltResult::ErrorRuntime(map.into(), rhai::Position::NONE))
}

fn log_module() -> Module {
    let mut m = Module::new();
    for (name, level) in [
        ("trace", LogLevel::Trace),
        ("debug", LogLevel::Debug),
        ("info", LogLevel::Info),
        ("warn", LogLevel::Warn),
        ("error", LogLevel::Error),
    ] {
        FuncRegistration::new(name).set_into_module(
            &mut m,
            move |ctx: NativeCallContext, msg: ImmutableString| -> Res<()> {
                caps(&ctx)?.log_event(level, &msg, Vec::new());
                Ok(())
            },
        );
        FuncRegistration::new(name).set_into_module(
            &mut m,
            move |ctx: NativeCallContext, msg: ImmutableString, fields: Map| -> Res<()> {
                let fields = fields.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
                caps(&ctx)?.log_event(level, &msg, fields);
                Ok(())
            },
        );
    }
    FuncRegistration::new("progress").set_into_module(
        &mut m,
        |ctx: NativeCallContext, step: ImmutableString, detail: ImmutableString| -> Res<()> {
            caps(&ctx)?.log_event(
                LogLevel::Info,
                &format!("progress: {step}"),
                vec![("detail".into(), detail.to_string())],
            );
            Ok(())
        },
    );
    m
}

fn holder_map(h: Holder) -> Dynamic {
    let mut map = Map::new();
    map.insert("host".into(), h.host.into());
    map.insert("pid".into(), i64::from(h.pid).into());
    map.insert("started".into(), h.started.into());
    map.insert("run_id".into(), h.run_id.into());
    map.into()
}

fn lock_module() -> Module {
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

fn finalization_map(f: Finalization) -> Dynamic {
    let mut map = Map::new();
    map.insert("vm_name".into(), f.vm_name.into());
    map.insert("vmid".into(), i64::from(f.vmid).into());
    map.insert("node".into(), f.node.into());
    map.insert("stage".into(), f.stage.into());
    map.insert("written".into(), f.written.into());
    map.into()
}

fn field<'a>(map: &'a Map, key: &str) -> Res<&'a Dynamic> {
    map.get(key).ok_or_else(|| throw(CapError::invalid(format!("checkpoint::write: missing field `{key}`"))))
}

fn string_field(map: &Map, key: &str) -> Res<String> {
    field(map, key)?
        .clone()
        .into_string()
        .map_err(|t| throw(CapError::invalid(format!("checkpoint::write: `{key}` must be a string, got {t}"))))
}

fn checkpoint_module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("read").set_into_module(
        &mut m,
        |ctx: NativeCallContext, vm: ImmutableString| -> Res<Dynamic> {
            Ok(caps(&ctx)?.checkpoint_read(&vm).map_err(throw)?.map(finalization_map).unwrap_or(Dynamic::UNIT))
        },
    );
    FuncRegistration::new("write").set_into_module(&mut m, |ctx: NativeCallContext, cp: Map| -> Res<()> {
        let vmid = field(&cp, "vmid")?
            .as_int()
            .map_err(|t| throw(CapError::invalid(format!("checkpoint::write: `vmid` must be an integer, got {t}"))))?;
        let fin = Finalization {
            vm_name: string_field(&cp, "vm_name")?,
            vmid: int_arg(vmid, "checkpoint::write: vmid")?,
            node: string_field(&cp, "node")?,
            stage: string_field(&cp, "stage")?,
            written: String::new(),
        };
        caps(&ctx)?.checkpoint_write(fin).map_err(throw)
    });
    FuncRegistration::new("clear").set_into_module(
        &mut m,
        |ctx: NativeCallContext, vm: ImmutableString, vmid: i64| -> Res<()> {
            caps(&ctx)?.checkpoint_clear(&vm, int_arg(vmid, "checkpoint::clear: vmid")?).map_err(throw)
        },
    );
    m
}
