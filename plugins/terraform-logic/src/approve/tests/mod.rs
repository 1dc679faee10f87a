//! Hand-written plans for cradle's own Proxmox addresses, shaped like the real
//! Terraform 1.11.4 output in `tests/fixtures/generated-terraform-1.11.4/`.
//! (The real plans themselves are exercised in `tests/real_plans.rs`.) Shared builders
//! live here; the rules are tested by topic in the submodules.

use serde_json::{Value, json};

use super::{Approval, Expected, Mode, Rejection, check};
use crate::Flavour;

pub(super) const TELMATE: &str = "registry.terraform.io/telmate/proxmox";
pub(super) const BPG: &str = "registry.terraform.io/bpg/proxmox";
pub(super) const VM: &str = "proxmox_vm_qemu.vm";

pub(super) fn telmate_vm(memory: u32, vmid: u32) -> Value {
    json!({
        "name": "web-1", "vmid": vmid, "target_node": "pve1", "clone": "debian-12-template",
        "full_clone": true, "os_type": "cloud-init", "memory": memory,
        "cpu": [{"cores": 2, "sockets": 1}], "power_state": "stopped",
        "disk": [{"slot": "ide2", "type": "cloudinit", "storage": "local-lvm"}],
        "network": [{"id": 0, "model": "virtio", "bridge": "vmbr0", "tag": 20}],
        "cicustom": "user=local:snippets/web-1-user.yaml", "tags": "env-test;web",
        "id": "pve1/qemu/120"
    })
}

/// A resource change like Terraform prints it (`mode`, `type`, `name` split out).
pub(super) fn entry(
    address: &str,
    resource_type: &str,
    provider: &str,
    actions: &[&str],
    before: Value,
    after: Value,
) -> Value {
    let mode = if address.starts_with("data.") { "data" } else { "managed" };
    let name = address.rsplit('.').next().unwrap_or_default();
    json!({
        "address": address, "mode": mode, "type": resource_type, "name": name, "provider_name": provider,
        "change": {
            "actions": actions, "before": before, "after": after, "after_unknown": {},
            "before_sensitive": if before.is_null() { json!(false) } else { json!({}) },
            "after_sensitive": if after.is_null() { json!(false) } else { json!({}) }
        }
    })
}

pub(super) fn vm(actions: &[&str], before: Value, after: Value) -> Value {
    entry(VM, "proxmox_vm_qemu", TELMATE, actions, before, after)
}

pub(super) fn create() -> Value {
    let mut e = vm(&["create"], Value::Null, telmate_vm(2048, 120));
    e["change"]["after_unknown"] = json!({"id": true});
    e
}

pub(super) fn plan(changes: Vec<Value>) -> Value {
    json!({
        "format_version": "1.2", "terraform_version": "1.11.4", "resource_changes": changes,
        "timestamp": "2026-11-30T07:05:27Z", "applyable": true, "complete": true, "errored": false
    })
}

pub(super) fn apply() -> Expected {
    Expected::for_flavour(Flavour::Telmate, Mode::Apply, false)
}

pub(super) fn apply_allowing_replacement() -> Expected {
    Expected::for_flavour(Flavour::Telmate, Mode::Apply, true)
}

pub(super) fn destroy() -> Expected {
    Expected::for_flavour(Flavour::Telmate, Mode::Destroy, false)
}

pub(super) fn run(plan: &Value, expected: &Expected) -> Result<Approval, Rejection> {
    check(&plan.to_string(), expected)
}

pub(super) fn replace(actions: &[&str], reason: &str) -> Value {
    let mut e = vm(actions, telmate_vm(2048, 120), telmate_vm(2048, 121));
    e["action_reason"] = json!(reason);
    if reason == "replace_because_cannot_update" {
        e["change"]["replace_paths"] = json!([["vmid"]]);
    }
    e
}

mod adversarial;
mod approved;
mod destroy;
mod expected_address;
mod other_objects;
mod update;
mod whole_plan;
