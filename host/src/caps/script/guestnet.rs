//! `guestnet::verify(vm, timeout_ms)` for workflow scripts: after cloud-init
//! reported `done`, prove on the guest that its network is what the network-data
//! asked for — each static address on its interface, the default route via the
//! gateway, the nameservers in effect — and throw `failed` naming what is missing
//! ([`crate::cloudinit::verify`] holds the rules and the messages).
//!
//! It runs [`COMMANDS`] over the VM's existing SSH target (`vm.ssh`), each with
//! `timeout_ms`, through the `ssh` adapter (checked against `[workflow.grants.ssh]`
//! and journaled). A command that fails (e.g. `ip` missing) throws with its
//! stderr. Returns `#{addresses, routes, nameservers}` (what was checked, as text)
//! on success.

use rhai::{FuncRegistration, Map, Module, NativeCallContext};

use super::ssh::target;
use super::{Res, caps, throw, wit_throw};
use crate::caps::context::CapError;
use crate::cloudinit::verify::{
    COMMANDS, Observed, ResolverSource, check, expects_ipv6_route, expects_nameservers, parse_links, parse_resolv_conf,
    parse_resolvectl_dns, parse_routes, uses_resolved_stub,
};
use crate::plugin::bindings::cradle::host::ssh;

fn run(ctx: &NativeCallContext, t: &ssh::Target, vm: &str, command: &str, timeout: u64) -> Res<String> {
    let out = ssh::Host::exec(&mut caps(ctx)?, t.clone(), command.to_string(), None, timeout).map_err(wit_throw)?;
    if out.exit_code != Some(0) {
        let code = out.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "none".into());
        return Err(throw(CapError::failed(format!(
            "{vm}: `{command}` failed on the guest (exit {code}): {}; the network check needs iproute2's `ip` and a readable /etc/resolv.conf",
            out.stderr.trim()
        ))));
    }
    Ok(out.stdout)
}

fn verify(ctx: &NativeCallContext, vm: &Map, timeout_ms: i64) -> Res<Map> {
    let name = vm
        .get("name")
        .and_then(|n| n.clone().into_string().ok())
        .ok_or_else(|| throw(CapError::invalid("guestnet::verify: the VM has no `name`")))?;
    let login = vm
        .get("ssh")
        .and_then(|s| s.clone().try_cast::<Map>())
        .ok_or_else(|| throw(CapError::invalid(format!("guestnet::verify: {name} has no `ssh` target"))))?;
    let t = target(&login, "guestnet::verify")?;
    let timeout = u64::try_from(timeout_ms)
        .map_err(|_| throw(CapError::invalid(format!("guestnet::verify: timeout {timeout_ms} ms is negative"))))?;
    let nics = super::cloudinit::interfaces(vm, &name)?;
    let bad = |e: crate::cloudinit::verify::NetVerifyError| throw(CapError::failed(e.to_string()));

    let links = parse_links(&name, &run(ctx, &t, &name, COMMANDS.addresses, timeout)?).map_err(bad)?;
    let mut routes =
        parse_routes(&name, COMMANDS.routes4, &run(ctx, &t, &name, COMMANDS.routes4, timeout)?).map_err(bad)?;
    if expects_ipv6_route(&nics) {
        let v6 = run(ctx, &t, &name, COMMANDS.routes6, timeout)?;
        routes.extend(parse_routes(&name, COMMANDS.routes6, &v6).map_err(bad)?);
    }
    let nameservers = if expects_nameservers(&nics) {
        let servers = parse_resolv_conf(&run(ctx, &t, &name, COMMANDS.resolv_conf, timeout)?);
        let all_listed = nics.iter().flat_map(|n| n.nameservers.iter()).all(|ns| servers.contains(ns));
        // Only a stub that does not already list what was asked sends us to resolved
        // (an inventory may name 127.0.0.53 itself).
        if !all_listed && uses_resolved_stub(&servers) {
            let dns = run(ctx, &t, &name, COMMANDS.resolvectl, timeout)?;
            Some((ResolverSource::Resolved, parse_resolvectl_dns(&dns)))
        } else {
            Some((ResolverSource::ResolvConf, servers))
        }
    } else {
        None
    };
    let seen = Observed { links, routes, nameservers };
    check(&name, &nics, &seen).map_err(bad)?;

    let mut out = Map::new();
    let addresses: Vec<String> = nics.iter().filter_map(|n| n.address.map(|a| format!("{} {a}", n.name))).collect();
    let gateways: Vec<String> = nics.iter().filter_map(|n| n.gateway.map(|g| format!("default via {g}"))).collect();
    let dns: Vec<String> = nics.iter().flat_map(|n| n.nameservers.iter().map(ToString::to_string)).collect();
    out.insert("addresses".into(), addresses.join(", ").into());
    out.insert("routes".into(), gateways.join(", ").into());
    out.insert("nameservers".into(), dns.join(", ").into());
    Ok(out)
}

/// The `guestnet` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("verify")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map, timeout_ms: i64| -> Res<Map> {
            verify(&ctx, &vm, timeout_ms)
        });
    m
}
