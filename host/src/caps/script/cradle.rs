//! The `cradle` script module: the run's helpers (`cradle::backend()`,
//! `cradle::plugin(role)` (the environment's integration plugin of that role,
//! called like a backend), `environment()`, `run_id()`, `lock_key(name)`, `nodes()`,
//! `node_login(node)`, `guest_keys()`, `sleep(ms)`) and the preflight checks
//! `cradle::check_inputs(vm)` (`inputs.rs`) and `cradle::check_grants(vm[,
//! opts])` (`grants.rs`).
//!
//! Its own file so the registry, which lists it, and `script/mod.rs`, which
//! lists the registry's modules, import no file that imports them back.

use rhai::{Dynamic, FuncRegistration, ImmutableString, Map, Module, NativeCallContext};

use crate::caps::script_glue::{Res, throw, to_map};
use crate::caps::script_run::with_run;
use crate::contract::CapError;

/// The longest `cradle::sleep`.
const MAX_SLEEP_MS: i64 = 60_000;

/// `cradle::backend()`, `cradle::environment()`, `cradle::run_id()`,
/// `cradle::check_inputs(vm)`, `cradle::check_grants(vm[, opts])`, `cradle::sleep(ms)`.
pub(crate) fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("backend").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<Dynamic> {
        let handle = with_run(&ctx, |d| d.backend.clone())?;
        handle
            .map(Dynamic::from)
            .ok_or_else(|| throw(CapError::failed("this environment's backend plugin is not loaded")))
    });
    // An integration plugin, by the role the workflow gives it; the
    // environment says which plugin plays it (caps/run.rs, PluginRoles).
    FuncRegistration::new("plugin").set_into_module(
        &mut m,
        |ctx: NativeCallContext, role: ImmutableString| -> Res<Dynamic> {
            with_run(&ctx, |d| d.plugins.get(&d.environment, &role))?
                .map(Dynamic::from)
                .map_err(|message| throw(CapError::not_found(message)))
        },
    );
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
    FuncRegistration::new("check_inputs").set_into_module(&mut m, |ctx: NativeCallContext, vm: Map| -> Res<()> {
        let guest_keys = with_run(&ctx, |d| d.services.guest_keys.clone())?;
        super::inputs::check_inputs(&vm, &guest_keys)
    });
    // The VM's VMID, node, storages and template against the proxmox grants
    // of the backend and the workflow, before any side effect (grants.rs).
    FuncRegistration::new("check_grants").set_into_module(&mut m, |ctx: NativeCallContext, vm: Map| -> Res<()> {
        super::grants::check_grants(&ctx, &vm, &Map::new())
    });
    FuncRegistration::new("check_grants")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map, opts: Map| -> Res<()> {
            super::grants::check_grants(&ctx, &vm, &opts)
        });
    FuncRegistration::new("run_id").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<ImmutableString> {
        with_run(&ctx, |d| d.run.run_id.as_str().into())
    });
    m
}
