//! `/nodes/{node}/qemu/{vmid}/agent/*`: the QEMU guest agent (qemu-server
//! `PVE/API2/Qemu/Agent.pm`, `PVE/QemuServer/Agent.pm`).
//!
//! Contract: `assert_agent_available`'s checks in its order (HTTP 500 each), then the
//! guest's answer: `ping` → `{}`, `get-host-name` → the guest's host name (an appliance
//! without cloud-init: the VM's `name`), `info` → a version, `network-get-interfaces`
//! → `lo` plus the guest's cloud-init address when it has one. The agent answers while
//! the simulated guest is up (from `boot_ssh` after power-on, not during a reboot, not
//! when hung). Other commands are 501.

use std::sync::Arc;

use serde_json::{Value, json};

use super::qemu::vm_on;
use super::{ApiError, ApiResult, Reply};
use crate::model::{Power, Vm, props};
use crate::sim::{Sim, lock};

/// Whether the config enables the agent (`agent: 1`, `agent: enabled=1,...`; the
/// default key of the property string is `enabled`).
pub fn agent_configured(vm: &Vm) -> bool {
    vm.config.get("agent").is_some_and(|a| {
        let enabled = props::split_props(a).into_iter().find(|(k, _)| k.is_empty() || k == "enabled");
        enabled.is_some_and(|(_, v)| matches!(v.as_str(), "1" | "yes" | "on" | "true"))
    })
}

pub fn agent_index() -> ApiResult {
    let names = ["ping", "network-get-interfaces", "get-host-name", "info", "get-osinfo"];
    Ok(Reply::data(Value::Array(names.iter().map(|n| json!({ "name": n })).collect())))
}

/// `assert_agent_available` (qemu-server `PVE/QemuServer/Agent.pm`), in its order: no
/// `agent` key at all → `No QEMU guest agent configured`; not running → `VM N is not
/// running`; then `guest-ping`, which fails when the agent is disabled (`agent: 0`:
/// qemu has no agent channel) or the guest's agent is not up yet.
pub fn agent(sim: &Arc<Sim>, node: &str, vmid: u32, cmd: &str) -> ApiResult {
    let enabled = {
        let st = lock(&sim.state);
        let vm = vm_on(&st, node, vmid)?;
        if !vm.config.contains_key("agent") {
            return Err(ApiError::die("No QEMU guest agent configured"));
        }
        if vm.power != Power::Running {
            return Err(ApiError::die(format!("VM {vmid} is not running")));
        }
        agent_configured(vm)
    };
    let Some(view) = crate::guest::agent_view(sim, vmid).filter(|_| enabled) else {
        return Err(ApiError::die("QEMU guest agent is not running"));
    };
    let (hostname, addr) = (view.hostname, view.address);
    match cmd {
        "get-osinfo" => Ok(Reply::data(json!({ "result": osinfo(view.windows) }))),
        "ping" => Ok(Reply::data(json!({ "result": {} }))),
        "get-host-name" => Ok(Reply::data(json!({ "result": { "host-name": hostname } }))),
        "info" => Ok(Reply::data(json!({ "result": { "version": "7.2.19", "supported_commands": [] } }))),
        "network-get-interfaces" => {
            let mut ifs = vec![json!({
                "name": "lo", "hardware-address": "00:00:00:00:00:00",
                "ip-addresses": [{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8}],
            })];
            if let Some(a) = addr {
                ifs.push(json!({
                    "name": "eth0",
                    "ip-addresses": [{"ip-address": a.to_string(), "ip-address-type": "ipv4", "prefix": 8}],
                }));
            }
            Ok(Reply::data(json!({ "result": ifs })))
        }
        other => Err(ApiError::status(501, format!("Method 'agent/{other}' not implemented"))),
    }
}

/// `guest-get-osinfo` (QEMU `qga/qapi-schema.json`, `GuestOSInfo`): Windows Server 2022
/// as its agent reports it, or the Debian 12 image of the simulated Linux guests.
fn osinfo(windows: bool) -> Value {
    if windows {
        return json!({
            "id": "mswindows", "name": "Microsoft Windows",
            "pretty-name": "Microsoft Windows Server 2022 Standard",
            "version": "Microsoft Windows Server 2022", "version-id": "2022",
            "kernel-release": "20348", "kernel-version": "10.0", "machine": "x86_64",
        });
    }
    json!({
        "id": "debian", "name": "Debian GNU/Linux", "pretty-name": "Debian GNU/Linux 12 (bookworm)",
        "version": "12 (bookworm)", "version-id": "12",
        "kernel-release": "6.1.0-28-cloud-amd64",
        "kernel-version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)", "machine": "x86_64",
    })
}
