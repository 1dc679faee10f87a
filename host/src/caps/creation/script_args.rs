//! The script's `vm` map as the creation service's typed inputs: the guest
//! settings ([`guest_settings`]), the network-data interfaces
//! ([`interfaces`]), the VMID ([`vmid_of`]) and the snippet storage
//! ([`snippet_storage`]), and the field readers the other script modules
//! share ([`str_of`], [`opt_str`]).
//!
//! They are the only reading of these values: `cloudinit::*` (`rhai.rs`)
//! renders from them, `cradle::check_inputs` checks what they return and
//! `guestnet::verify` verifies it, so the preflight accepts exactly what the
//! upload renders. A refused value throws `#{kind: "invalid", message}`
//! naming the VM and the field (``web-1: missing `ssh` target``,
//! ``web-1: `spec.vmid` must be a VMID ...``, `web-1: nics[0].address ...`).
//!
//! Contract: depends only on `rhai`, the value glue
//! ([`crate::caps::script_glue`]), `cloudinit`'s types and
//! [`super::guest`]; no run, no I/O (so `fuzz/` compiles it: target
//! `script_args`). They read shapes and parse addresses; what a name, key or
//! package may contain is `cloudinit`'s rendering's check.

use std::net::IpAddr;

use rhai::Map;

use super::guest::{DEFAULT_SNIPPET_STORAGE, GuestSettings};
use crate::caps::script_glue::{Res, invalid};
use crate::cloudinit::{Cidr, Interface};

/// The string `map.key`; `what` names the caller and the map in messages.
pub fn str_of(map: &Map, key: &str, what: &str) -> Res<String> {
    map.get(key)
        .ok_or_else(|| invalid(format!("{what}: missing `{key}`")))?
        .clone()
        .into_string()
        .map_err(|t| invalid(format!("{what}: `{key}` must be a string, got {t}")))
}

/// The string `map.key`, or `None` when it is absent or no string.
pub fn opt_str(map: &Map, key: &str) -> Option<String> {
    map.get(key).and_then(|v| v.clone().into_string().ok())
}

/// The strings of the array `map.key` (other items and a non-array: none).
fn strings(map: &Map, key: &str) -> Vec<String> {
    map.get(key)
        .and_then(|v| v.clone().into_array().ok())
        .map(|a| a.into_iter().filter_map(|v| v.into_string().ok()).collect())
        .unwrap_or_default()
}

/// `vm.snippet_storage`, or [`DEFAULT_SNIPPET_STORAGE`].
pub fn snippet_storage(vm: &Map) -> String {
    opt_str(vm, "snippet_storage").unwrap_or_else(|| DEFAULT_SNIPPET_STORAGE.into())
}

/// `vm.spec.vmid` as a VMID.
pub fn vmid_of(vm: &Map, name: &str) -> Res<u32> {
    vm.get("spec")
        .and_then(|s| s.clone().try_cast::<Map>())
        .and_then(|s| s.get("vmid").and_then(|v| v.as_int().ok()))
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| {
            invalid(format!("{name}: `spec.vmid` must be a VMID (the inventory's vms_vmid or base + index)"))
        })
}

/// The user-data settings of `vm` (its `ssh.user` is the management user).
pub fn guest_settings(vm: &Map, name: &str) -> Res<GuestSettings> {
    let login = vm
        .get("ssh")
        .and_then(|s| s.clone().try_cast::<Map>())
        .ok_or_else(|| invalid(format!("{name}: missing `ssh` target")))?;
    Ok(GuestSettings {
        login_user: str_of(&login, "user", &format!("{name}: ssh"))?,
        authorized_keys: strings(vm, "authorized_keys"),
        hostname: opt_str(vm, "hostname").unwrap_or_else(|| name.to_string()),
        fqdn: opt_str(vm, "fqdn"),
        packages: strings(vm, "packages"),
        timezone: opt_str(vm, "timezone"),
    })
}

/// The network-data interfaces of `vm.nics` (none: no interface).
pub fn interfaces(vm: &Map, name: &str) -> Res<Vec<Interface>> {
    let nics = vm.get("nics").and_then(|n| n.clone().into_array().ok()).unwrap_or_default();
    let mut out = Vec::new();
    for (i, nic) in nics.into_iter().enumerate() {
        let nic = nic.try_cast::<Map>().ok_or_else(|| invalid(format!("{name}: nics[{i}] must be a map")))?;
        let what = format!("{name}: nics[{i}]");
        let address = match opt_str(&nic, "address") {
            None => None,
            Some(a) => Some(a.parse::<Cidr>().map_err(|e| invalid(format!("{what}.address `{a}`: {e}")))?),
        };
        let ip = |s: String, field: &str| {
            s.parse::<IpAddr>().map_err(|_| invalid(format!("{what}.{field} `{s}` is not an IP address")))
        };
        let gateway = opt_str(&nic, "gateway").map(|g| ip(g, "gateway")).transpose()?;
        let nameservers =
            strings(&nic, "nameservers").into_iter().map(|n| ip(n, "nameservers")).collect::<Res<Vec<_>>>()?;
        out.push(Interface {
            name: opt_str(&nic, "guest_interface").unwrap_or_else(|| crate::cloudinit::DEFAULT_INTERFACE.to_string()),
            address,
            gateway,
            nameservers,
            search: strings(&nic, "search"),
            ..Interface::default()
        });
    }
    Ok(out)
}
