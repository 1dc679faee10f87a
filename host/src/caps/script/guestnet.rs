//! `guestnet::verify(vm, timeout_ms)` for workflow scripts: after cloud-init
//! reported `done`, prove on the guest that its network is what the network-data
//! asked for — each static address on its interface, the default route via the
//! gateway, the nameservers in effect — and throw `failed` naming what is missing
//! ([`crate::cloudinit::verify`] holds the rules and the messages).
//!
//! It runs [`COMMANDS`] over the VM's existing SSH target (`vm.ssh`) as one
//! `&&` chain (one round trip; `resolvectl` in a second one only when
//! resolv.conf points at systemd-resolved's stub), with `timeout_ms`, through
//! the `ssh` adapter (checked against `[workflow.grants.ssh]` and journaled). A
//! command that fails (e.g. `ip` missing) throws naming it, with its stderr. Returns `#{addresses, routes, nameservers}` (what was checked, as text)
//! on success.

use rhai::{FuncRegistration, Map, Module, NativeCallContext};
use serde::Serialize;

use crate::caps::creation::script_args::interfaces;
use crate::caps::script_glue::{Res, throw, to_map};
use crate::caps::script_run::{caps, wit_throw};
use crate::caps::ssh::script_args::target;
use crate::cloudinit::verify::{
    COMMANDS, Observed, ResolverSource, check, expects_ipv6_route, expects_nameservers, parse_links, parse_resolv_conf,
    parse_resolvectl_dns, parse_routes, uses_resolved_stub,
};
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::ssh;

/// Printed between the outputs of the commands of one chain.
const MARK: &str = "@@cradle-net@@";

/// Run `commands` as one `&&` chain with [`MARK`] between their outputs: one
/// SSH round trip, not one per command.
fn run(
    ctx: &NativeCallContext,
    t: &ssh::Target,
    vm: &str,
    commands: &[&'static str],
    timeout: u64,
) -> Res<Vec<String>> {
    let line = commands.join(&format!(" && echo {MARK} && "));
    let out = ssh::Host::exec(&mut caps(ctx)?, t.clone(), line, None, timeout).map_err(wit_throw)?;
    split_outputs(vm, commands, &out).map_err(|e| throw(CapError::failed(e.to_string())))
}

/// Why the outputs of a chain cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ChainError {
    /// A command of the chain failed (the markers before it say which).
    #[error(
        "{vm}: `{command}` failed on the guest (exit {code}): {stderr}; the network check needs iproute2's `ip` and a readable /etc/resolv.conf"
    )]
    Failed { vm: String, command: &'static str, code: String, stderr: String },
    /// The outputs are not one per command.
    #[error("{vm}: could not read the output of `{chain}` on the guest: {parts} parts instead of {expected}")]
    Unreadable { vm: String, chain: String, parts: usize, expected: usize },
}

/// Each command's output of a chain [`run`] ran. On a failure, the markers
/// printed before it say which command failed.
fn split_outputs(vm: &str, commands: &[&'static str], out: &ssh::ExecOutput) -> Result<Vec<String>, ChainError> {
    let parts: Vec<String> = out.stdout.split(MARK).map(|p| p.strip_prefix('\n').unwrap_or(p).to_string()).collect();
    if out.exit_code != Some(0) {
        let failed = commands.get(parts.len().saturating_sub(1)).or(commands.last()).copied().unwrap_or_default();
        let code = out.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "none".into());
        return Err(ChainError::Failed {
            vm: vm.to_string(),
            command: failed,
            code,
            stderr: out.stderr.trim().to_string(),
        });
    }
    if parts.len() != commands.len() {
        return Err(ChainError::Unreadable {
            vm: vm.to_string(),
            chain: commands.join(" && "),
            parts: parts.len(),
            expected: commands.len(),
        });
    }
    Ok(parts)
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
    let nics = interfaces(vm, &name)?;
    let bad = |e: crate::cloudinit::verify::NetVerifyError| throw(CapError::failed(e.to_string()));

    let mut commands = vec![COMMANDS.addresses, COMMANDS.routes4];
    if expects_ipv6_route(&nics) {
        commands.push(COMMANDS.routes6);
    }
    if expects_nameservers(&nics) {
        commands.push(COMMANDS.resolv_conf);
    }
    let outputs = run(ctx, &t, &name, &commands, timeout)?;
    let output = |command: &str| commands.iter().position(|c| *c == command).map(|i| outputs[i].as_str());
    let links = parse_links(&name, output(COMMANDS.addresses).unwrap_or_default()).map_err(bad)?;
    let mut routes =
        parse_routes(&name, COMMANDS.routes4, output(COMMANDS.routes4).unwrap_or_default()).map_err(bad)?;
    if let Some(v6) = output(COMMANDS.routes6) {
        routes.extend(parse_routes(&name, COMMANDS.routes6, v6).map_err(bad)?);
    }
    let nameservers = match output(COMMANDS.resolv_conf) {
        Some(text) => {
            let servers = parse_resolv_conf(text);
            let all_listed = nics.iter().flat_map(|n| n.nameservers.iter()).all(|ns| servers.contains(ns));
            // Only a stub that does not already list what was asked sends us to resolved
            // (an inventory may name 127.0.0.53 itself).
            if !all_listed && uses_resolved_stub(&servers) {
                let dns = run(ctx, &t, &name, &[COMMANDS.resolvectl], timeout)?;
                Some((ResolverSource::Resolved, parse_resolvectl_dns(&dns[0])))
            } else {
                Some((ResolverSource::ResolvConf, servers))
            }
        }
        None => None,
    };
    let seen = Observed { links, routes, nameservers };
    check(&name, &nics, &seen).map_err(bad)?;

    let addresses: Vec<String> = nics.iter().filter_map(|n| n.address.map(|a| format!("{} {a}", n.name))).collect();
    let gateways: Vec<String> = nics.iter().filter_map(|n| n.gateway.map(|g| format!("default via {g}"))).collect();
    let dns: Vec<String> = nics.iter().flat_map(|n| n.nameservers.iter().map(ToString::to_string)).collect();
    to_map(&Verified { addresses: addresses.join(", "), routes: gateways.join(", "), nameservers: dns.join(", ") })
}

/// What `guestnet::verify` checked, as text.
#[derive(Serialize)]
struct Verified {
    addresses: String,
    routes: String,
    nameservers: String,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn out(stdout: &str, code: i32, stderr: &str) -> ssh::ExecOutput {
        ssh::ExecOutput { exit_code: Some(code), stdout: stdout.into(), stderr: stderr.into() }
    }

    #[test]
    fn a_chains_outputs_are_split_at_the_markers() {
        let cmds = [COMMANDS.addresses, COMMANDS.routes4, COMMANDS.resolv_conf];
        let stdout = format!("[{{}}]\n{MARK}\n[]{MARK}\nnameserver 10.0.0.53\n");
        let parts = split_outputs("test-0", &cmds, &out(&stdout, 0, "")).expect("parts");
        assert_eq!(parts, ["[{}]\n", "[]", "nameserver 10.0.0.53\n"]);
        let short = split_outputs("test-0", &cmds, &out("[]\n", 0, "")).expect_err("one part of three").to_string();
        assert!(short.contains("1 parts instead of 3"), "{short}");
    }

    #[test]
    fn the_failed_command_of_a_chain_is_named() {
        let cmds = [COMMANDS.addresses, COMMANDS.routes4, COMMANDS.resolv_conf];
        let e = split_outputs("test-0", &cmds, &out("", 127, "sh: 1: ip: not found")).expect_err("failed").to_string();
        assert!(e.starts_with("test-0: `ip -j addr show` failed on the guest (exit 127): sh: 1: ip: not found"), "{e}");
        let stdout = format!("[]\n{MARK}\n[]\n{MARK}\n");
        let e = split_outputs("test-0", &cmds, &out(&stdout, 1, "cat: /etc/resolv.conf: Permission denied"))
            .expect_err("failed")
            .to_string();
        assert!(e.contains("`cat /etc/resolv.conf` failed on the guest (exit 1)"), "{e}");
    }
}
