//! Rejections of anything besides the expected address.

use serde_json::{Value, json};

use super::*;
use crate::Flavour;
use crate::approve::{Action, Expected, Mode, Rejection};

#[test]
fn other_resource_is_rejected_even_when_unchanged() {
    for actions in [&["create"][..], &["no-op"], &["update"], &["delete"]] {
        let other = entry("proxmox_vm_qemu.other", "proxmox_vm_qemu", TELMATE, actions, json!({}), json!({}));
        let err = run(&plan(vec![create(), other]), &apply()).unwrap_err();
        assert!(
            matches!(&err, Rejection::OtherResource { found, .. } if found == "proxmox_vm_qemu.other"),
            "{actions:?}: {err}"
        );
    }
}

#[test]
fn flavour_switch_plan_is_rejected() {
    let old = vm(&["delete"], telmate_vm(2048, 120), Value::Null);
    let new = entry(
        "proxmox_virtual_environment_vm.vm",
        "proxmox_virtual_environment_vm",
        BPG,
        &["create"],
        Value::Null,
        json!({}),
    );
    let err = run(&plan(vec![old, new]), &Expected::for_flavour(Flavour::Bpg, Mode::Apply, true)).unwrap_err();
    assert_eq!(
        err,
        Rejection::OtherResource {
            address: "proxmox_virtual_environment_vm.vm".to_owned(),
            found: VM.to_owned(),
            action: Action::Delete
        }
    );
}

#[test]
fn child_module_resource_is_rejected() {
    let mut e =
        entry("module.dhcp[0].proxmox_vm_qemu.vm", "proxmox_vm_qemu", TELMATE, &["create"], Value::Null, json!({}));
    e["module_address"] = json!("module.dhcp[0]");
    assert!(matches!(run(&plan(vec![create(), e]), &apply()), Err(Rejection::ChildModule { .. })));
}

#[test]
fn data_source_read_of_another_provider_is_rejected() {
    let read =
        entry("data.http.meta", "http", "registry.terraform.io/hashicorp/http", &["read"], Value::Null, json!({}));
    assert_eq!(
        run(&plan(vec![create(), read]), &apply()),
        Err(Rejection::ForeignDataSource {
            address: VM.to_owned(),
            found: "data.http.meta".to_owned(),
            provider: "registry.terraform.io/hashicorp/http".to_owned(),
            action: Action::Read,
        })
    );
}

#[test]
fn read_action_on_a_managed_resource_or_non_read_data_change_is_rejected() {
    let managed_read = entry("proxmox_vm_qemu.x", "proxmox_vm_qemu", TELMATE, &["read"], Value::Null, json!({}));
    let data_create = entry("data.proxmox_vm_qemu.x", "proxmox_vm_qemu", TELMATE, &["create"], Value::Null, json!({}));
    for e in [managed_read, data_create] {
        assert!(matches!(run(&plan(vec![create(), e]), &apply()), Err(Rejection::Inconsistent { .. })));
    }
    let own_read = vm(&["read"], Value::Null, json!({}));
    assert!(matches!(run(&plan(vec![own_read]), &apply()), Err(Rejection::Inconsistent { .. })));
}

#[test]
fn data_source_read_of_the_vm_provider_is_rejected() {
    // cradle renders no data source, so even the VM provider's own came from elsewhere.
    let read = entry(
        "data.proxmox_virtual_environment_vms.all",
        "proxmox_virtual_environment_vms",
        BPG,
        &["read"],
        Value::Null,
        json!({}),
    );
    let own = entry(
        "proxmox_virtual_environment_vm.vm",
        "proxmox_virtual_environment_vm",
        BPG,
        &["create"],
        Value::Null,
        json!({"name": "web-1", "vm_id": 120}),
    );
    assert_eq!(
        run(&plan(vec![read, own]), &Expected::for_flavour(Flavour::Bpg, Mode::Apply, false)),
        Err(Rejection::DataSource {
            address: "proxmox_virtual_environment_vm.vm".to_owned(),
            found: "data.proxmox_virtual_environment_vms.all".to_owned(),
            action: Action::Read,
        })
    );
}

#[test]
fn data_source_read_while_planning_is_checked_in_prior_state() {
    let data = |provider: &str| {
        json!({"address": "data.x.y", "mode": "data", "type": "x", "name": "y", "provider_name": provider,
               "schema_version": 0, "values": {}, "sensitive_values": {}})
    };
    let with_prior = |root: Value| {
        let mut p = plan(vec![create()]);
        p["prior_state"] =
            json!({"format_version": "1.0", "terraform_version": "1.11.4", "values": {"root_module": root}});
        p
    };
    let own = with_prior(json!({"resources": [data(TELMATE)]}));
    assert!(matches!(run(&own, &apply()), Err(Rejection::DataSource { found, .. }) if found == "data.x.y"));
    let foreign = with_prior(json!({"resources": [data("registry.terraform.io/hashicorp/http")]}));
    assert!(matches!(run(&foreign, &apply()), Err(Rejection::ForeignDataSource { action: Action::Read, .. })));
    let in_module = with_prior(json!({"child_modules": [{"address": "module.m", "resources": [data(TELMATE)]}]}));
    assert!(matches!(run(&in_module, &apply()), Err(Rejection::ChildModule { .. })));
    let mut odd = data(TELMATE);
    odd["mode"] = json!("ephemeral");
    assert!(matches!(run(&with_prior(json!({"resources": [odd]})), &apply()), Err(Rejection::UnknownMode { .. })));
}

#[test]
fn drift_of_another_resource_is_rejected() {
    let mut p = plan(vec![create()]);
    p["resource_drift"] =
        json!([entry("proxmox_vm_qemu.other", "proxmox_vm_qemu", TELMATE, &["update"], json!({}), json!({"a": 1}))]);
    assert!(
        matches!(run(&p, &apply()), Err(Rejection::OtherResourceDrift { found, .. }) if found == "proxmox_vm_qemu.other")
    );
}
