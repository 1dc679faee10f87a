//! `cloudinit::*` for workflow scripts: the script face of the creation
//! service ([`super::service`], [`super::snippets`]). Each function reads the
//! script's `vm` map into the service's typed input, calls the service and
//! hands its typed output back through `rhai::serde::to_dynamic`.
//!
//! - `cloudinit::upload_snippets(vm, node)` → `#{user, network, meta,
//!   host_key, node}`: the snippets rendered and uploaded to `node` (the node
//!   that will start the VM), volume ids for `cicustom` and the PUBLIC host
//!   key to pin. The private key never enters the script. The VM's creation
//!   record is written before the first upload; while it exists a rerun
//!   reuses its key, so the snippets are byte-identical and the pinned key
//!   stays valid.
//! - `cloudinit::reserve(vm, node)` writes that record for `vm.spec.vmid`
//!   and returns it as `cloudinit::creation` does; `cloudinit::reserved_vmids()`
//!   is the array of VMIDs every record on this control node holds (PVE's
//!   nextid reserves nothing, so allocators skip them);
//!   `cloudinit::release(vm)` drops a reservation no VM has taken (a creation
//!   that failed its preflight).
//! - `cloudinit::creation(vm)` is the record without the private key
//!   (`#{vmid, node, host_key, written}`), or `()`: "the creation stage of this
//!   VM started and did not finish".
//! - `cloudinit::delete_snippets(vm, node)` removes the snippets from the node,
//!   then the creation record (end of finalization).
//! - `cloudinit::wait_done(target, timeout_ms, attempts, interval_ms)` →
//!   `#{status: "done", attempts}`, or throws unless cloud-init ends `done`.
//!
//! A failure throws `#{kind, message}` ([`throw`]). The `vm` map is read by
//! the typed parsers of [`super::script_args`] (the only reading of it for
//! snippets, so their messages are the ones scripts see); `cradle::check_inputs`
//! (`caps/script/inputs.rs`) and `guestnet::verify` read the same values
//! through them, so the preflight accepts exactly what the upload renders.
//! Everything past the parse (the checks, adapter calls, records and their
//! journal entries) is the service's, described there.

use std::num::NonZeroU32;
use std::time::Duration;

use rhai::serde::to_dynamic;
use rhai::{Dynamic, FuncRegistration, ImmutableString, Map, Module, NativeCallContext};

use super::script_args::{guest_settings, interfaces, snippet_storage, str_of, vmid_of};
use super::service;
use super::snippets::{self, VmCreation, WaitBounds};
use crate::caps::script_glue::{Res, invalid, throw, to_map};
use crate::caps::script_run::caps;
use crate::caps::ssh::script_args::target;

/// `vm` as the creation service's input for `node`.
fn vm_creation(vm: &Map, name: String, node: &str) -> Res<VmCreation> {
    let guest = guest_settings(vm, &name)?;
    let vmid = vmid_of(vm, &name)?;
    let interfaces = interfaces(vm, &name)?;
    Ok(VmCreation { vmid, node: node.to_string(), snippet_storage: snippet_storage(vm), guest, interfaces, name })
}

fn upload_snippets(ctx: &NativeCallContext, vm: &Map, node: &str) -> Res<Map> {
    let name = str_of(vm, "name", "cloudinit::upload_snippets")?;
    let mut c = caps(ctx)?;
    let input = vm_creation(vm, name, node)?;
    to_map(&snippets::upload_snippets(&mut c, &input).map_err(throw)?)
}

fn delete_snippets(ctx: &NativeCallContext, vm: &Map, node: &str) -> Res<()> {
    let name = str_of(vm, "name", "cloudinit::delete_snippets")?;
    let storage = snippet_storage(vm);
    let mut c = caps(ctx)?;
    snippets::delete_snippets(&mut c, &name, &storage, node).map_err(throw)
}

fn creation(ctx: &NativeCallContext, vm: &Map) -> Res<Dynamic> {
    let name = str_of(vm, "name", "cloudinit::creation")?;
    to_dynamic(service::creation(&caps(ctx)?, &name).map_err(throw)?)
}

fn reserve(ctx: &NativeCallContext, vm: &Map, node: &str) -> Res<Dynamic> {
    let name = str_of(vm, "name", "cloudinit::reserve")?;
    let mut c = caps(ctx)?;
    let vmid = vmid_of(vm, &name)?;
    to_dynamic(service::reserve(&mut c, &name, vmid, node).map_err(throw)?)
}

fn release(ctx: &NativeCallContext, vm: &Map) -> Res<()> {
    let name = str_of(vm, "name", "cloudinit::release")?;
    service::release(&mut caps(ctx)?, &name).map_err(throw)
}

fn reserved_vmids(ctx: &NativeCallContext) -> Res<Dynamic> {
    to_dynamic(service::reserved_vmids(&caps(ctx)?).map_err(throw)?)
}

fn wait_done(ctx: &NativeCallContext, t: &Map, timeout_ms: i64, attempts: i64, interval_ms: i64) -> Res<Map> {
    let target = target(t, "cloudinit::wait_done")?;
    let attempts = u32::try_from(attempts).ok().and_then(NonZeroU32::new);
    let bounds = match (u64::try_from(timeout_ms), attempts, u64::try_from(interval_ms)) {
        (Ok(timeout_ms), Some(attempts), Ok(i)) => {
            WaitBounds { timeout_ms, attempts, interval: Duration::from_millis(i) }
        }
        _ => {
            return Err(invalid("cloudinit::wait_done: timeout, attempts (≥ 1) and interval must be positive"));
        }
    };
    to_map(&snippets::wait_done(&mut caps(ctx)?, &target, bounds).map_err(throw)?)
}

/// The `cloudinit` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("upload_snippets")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map, node: ImmutableString| -> Res<Map> {
            upload_snippets(&ctx, &vm, &node)
        });
    FuncRegistration::new("reserve")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map, node: ImmutableString| -> Res<Dynamic> {
            reserve(&ctx, &vm, &node)
        });
    FuncRegistration::new("release")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map| -> Res<()> { release(&ctx, &vm) });
    FuncRegistration::new("reserved_vmids")
        .set_into_module(&mut m, |ctx: NativeCallContext| -> Res<Dynamic> { reserved_vmids(&ctx) });
    FuncRegistration::new("creation")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map| -> Res<Dynamic> { creation(&ctx, &vm) });
    FuncRegistration::new("delete_snippets")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map, node: ImmutableString| -> Res<()> {
            delete_snippets(&ctx, &vm, &node)
        });
    FuncRegistration::new("wait_done").set_into_module(
        &mut m,
        |ctx: NativeCallContext, t: Map, timeout_ms: i64, attempts: i64, interval_ms: i64| -> Res<Map> {
            wait_done(&ctx, &t, timeout_ms, attempts, interval_ms)
        },
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(e: &rhai::EvalAltResult) -> String {
        match e {
            rhai::EvalAltResult::ErrorRuntime(v, _) => v.clone().cast::<Map>()["message"].to_string(),
            other => panic!("not a thrown error: {other}"),
        }
    }

    fn vm(extra: &str) -> Map {
        let engine = rhai::Engine::new();
        let script = format!(
            r#"#{{ name: "web-1", ssh: #{{ host: "10.0.0.5", user: "ops" }}, spec: #{{ vmid: 150 }}, {extra} }}"#
        );
        engine.eval::<Map>(&script).unwrap()
    }

    #[test]
    fn a_vm_map_becomes_the_typed_creation_input() {
        let m = vm(r#"authorized_keys: ["ssh-ed25519 VM"], nics: [#{ address: "10.0.0.5/24", gateway: "10.0.0.1" }]"#);
        let input = vm_creation(&m, "web-1".into(), "pve2").unwrap();
        assert_eq!((input.vmid, input.node.as_str(), input.snippet_storage.as_str()), (150, "pve2", "local"));
        assert_eq!(input.guest.hostname, "web-1", "the hostname defaults to the VM name");
        assert_eq!(input.interfaces[0].gateway, Some("10.0.0.1".parse().unwrap()));
        let user = input.guest.user_data("web-1", &["ssh-ed25519 RUN".into()], None);
        assert_eq!(user.user.ssh_authorized_keys, ["ssh-ed25519 RUN", "ssh-ed25519 VM"], "run keys first");
    }

    #[test]
    fn bad_vm_values_fail_with_the_messages_scripts_see() {
        let mut no_ssh = vm("");
        no_ssh.remove("ssh");
        let mut bad_vmid = vm("");
        bad_vmid.insert("spec".into(), vm("").remove("ssh").unwrap());
        let cases = [
            (no_ssh, "web-1: missing `ssh` target"),
            (bad_vmid, "web-1: `spec.vmid` must be a VMID"),
            (vm(r#"nics: [#{ address: "10.0.0.300/24" }]"#), "web-1: nics[0].address `10.0.0.300/24`"),
            (vm(r#"nics: [#{ gateway: "gw" }]"#), "web-1: nics[0].gateway `gw` is not an IP address"),
        ];
        for (m, want) in cases {
            let err = message(&vm_creation(&m, "web-1".into(), "pve2").unwrap_err());
            assert!(err.starts_with(want), "{err}");
        }
    }

    #[test]
    fn typed_outputs_reach_scripts_as_before() {
        let none = to_dynamic(None::<service::CreationView>).unwrap();
        assert!(none.is_unit(), "no record is ()");
        let vmids = to_dynamic(vec![150u32, 151]).unwrap().into_array().unwrap();
        assert_eq!(vmids[0].as_int(), Ok(150), "VMIDs are script integers");
    }
}
