//! `ssh::*` for workflow scripts: run commands on guests and nodes, wait for a
//! guest to answer, pin and forget host keys. A target is `#{host, port, user}`,
//! read by [`super::script_args::target`].
//! Calls go through the `ssh` adapter: checked against `[workflow.grants.ssh]`
//! (`"guests"` are the run's VMs, `"nodes"` the cluster's) and journaled.
//! `exec` returns the WIT `exec-output` record (`#{exit_code, stdout, stderr}`,
//! `exit_code` `()` when a signal killed the command).
//! `playbook(target, path, vars, timeout_ms)` runs the project's Ansible
//! playbook against the target (`playbook.rs`), returning the host's recap
//! `#{ok, changed, unreachable, failed, skipped, rescued, ignored, log}`.

use rhai::{FuncRegistration, ImmutableString, Map, Module, NativeCallContext};

use super::script_args::target;
use crate::caps::script_glue::{Res, throw, to_map};
use crate::caps::script_run::{caps, wit_throw};
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::ssh::Host;

fn millis(v: i64, function: &str) -> Res<u64> {
    u64::try_from(v).map_err(|_| throw(CapError::invalid(format!("{function}: timeout {v} ms is negative"))))
}

/// The `ssh` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("exec").set_into_module(
        &mut m,
        |ctx: NativeCallContext, t: Map, command: ImmutableString, timeout_ms: i64| -> Res<Map> {
            let target = target(&t, "ssh::exec")?;
            let out = Host::exec(&mut caps(&ctx)?, target, command.to_string(), None, millis(timeout_ms, "ssh::exec")?)
                .map_err(wit_throw)?;
            to_map(&out)
        },
    );
    FuncRegistration::new("wait_for").set_into_module(
        &mut m,
        |ctx: NativeCallContext, t: Map, timeout_ms: i64| -> Res<()> {
            let target = target(&t, "ssh::wait_for")?;
            Host::wait_for(&mut caps(&ctx)?, target, millis(timeout_ms, "ssh::wait_for")?).map_err(wit_throw)
        },
    );
    FuncRegistration::new("trust_host_key").set_into_module(
        &mut m,
        |ctx: NativeCallContext, t: Map, key: ImmutableString| -> Res<()> {
            let target = target(&t, "ssh::trust_host_key")?;
            Host::trust_host_key(&mut caps(&ctx)?, target.host, target.port, key.to_string()).map_err(wit_throw)
        },
    );
    // `trust_host_key_fingerprint(target, "ssh-ed25519", "SHA256:...", timeout_ms)`:
    // pin the key the target presents only if it has that fingerprint.
    FuncRegistration::new("trust_host_key_fingerprint").set_into_module(
        &mut m,
        |ctx: NativeCallContext,
         t: Map,
         kind: ImmutableString,
         fp: ImmutableString,
         timeout_ms: i64|
         -> Res<ImmutableString> {
            let target = target(&t, "ssh::trust_host_key_fingerprint")?;
            let timeout = millis(timeout_ms, "ssh::trust_host_key_fingerprint")?;
            Host::trust_host_key_fingerprint(
                &mut caps(&ctx)?,
                target.host,
                target.port,
                kind.into(),
                fp.into(),
                timeout,
            )
            .map(Into::into)
            .map_err(wit_throw)
        },
    );
    FuncRegistration::new("playbook").set_into_module(
        &mut m,
        |ctx: NativeCallContext, t: Map, path: ImmutableString, vars: Map, timeout_ms: i64| -> Res<Map> {
            let target = target(&t, "ssh::playbook")?;
            let vars = crate::workflow::values::to_json(&rhai::Dynamic::from_map(vars));
            let recap =
                caps(&ctx)?.playbook(&target, &path, &vars, millis(timeout_ms, "ssh::playbook")?).map_err(throw)?;
            to_map(&recap)
        },
    );
    // `check_playbook(target, path)`: what `playbook` checks first, running nothing.
    FuncRegistration::new("check_playbook").set_into_module(
        &mut m,
        |ctx: NativeCallContext, t: Map, path: ImmutableString| -> Res<()> {
            let target = target(&t, "ssh::check_playbook")?;
            caps(&ctx)?.check_playbook(&target, &path).map_err(throw)
        },
    );
    FuncRegistration::new("forget_host_key").set_into_module(&mut m, |ctx: NativeCallContext, t: Map| -> Res<()> {
        let target = target(&t, "ssh::forget_host_key")?;
        Host::forget_host_key(&mut caps(&ctx)?, target.host, target.port).map_err(wit_throw)
    });
    m
}
