//! Plans that are approved, and their summaries.

use serde_json::{Value, json};

use super::*;
use crate::Flavour;
use crate::approve::{ApprovedAction, Expected, Mode};

#[test]
fn create_of_the_expected_vm_is_approved() {
    let approval = run(&plan(vec![create()]), &apply()).unwrap();
    assert_eq!(approval.action, ApprovedAction::Create);
    assert_eq!(approval.summary, ["create proxmox_vm_qemu.vm"]);
}

#[test]
fn bpg_create_is_approved_for_the_bpg_address() {
    let after = json!({"name": "web-1", "vm_id": 120, "node_name": "pve1", "started": false});
    let p = plan(vec![entry(
        "proxmox_virtual_environment_vm.vm",
        "proxmox_virtual_environment_vm",
        BPG,
        &["create"],
        Value::Null,
        after,
    )]);
    let approval = run(&p, &Expected::for_flavour(Flavour::Bpg, Mode::Apply, false)).unwrap();
    assert_eq!(approval.action, ApprovedAction::Create);
    assert_eq!(approval.summary, ["create proxmox_virtual_environment_vm.vm"]);
}

#[test]
fn update_is_approved_and_summary_lists_changed_top_level_attributes() {
    let p = plan(vec![vm(&["update"], telmate_vm(2048, 120), telmate_vm(4096, 120))]);
    let approval = run(&p, &apply()).unwrap();
    assert_eq!(approval.action, ApprovedAction::Update);
    assert_eq!(approval.summary, ["update proxmox_vm_qemu.vm: memory 2048 → 4096"]);
}

#[test]
fn update_summary_never_prints_sensitive_values() {
    let mut e = vm(&["update"], json!({"cipassword": "old-secret"}), json!({"cipassword": "new-secret"}));
    e["change"]["before_sensitive"] = json!({"cipassword": true});
    e["change"]["after_sensitive"] = json!({"cipassword": true});
    let approval = run(&plan(vec![e]), &apply()).unwrap();
    assert_eq!(approval.summary, ["update proxmox_vm_qemu.vm: cipassword (sensitive) → (sensitive)"]);
}

#[test]
fn no_op_plan_is_approved_even_when_terraform_says_not_applyable() {
    let mut p = plan(vec![vm(&["no-op"], telmate_vm(2048, 120), telmate_vm(2048, 120))]);
    p["applyable"] = json!(false);
    let approval = run(&p, &apply()).unwrap();
    assert_eq!(approval.action, ApprovedAction::NoOp);
    assert_eq!(approval.summary, ["no changes to proxmox_vm_qemu.vm"]);
}

#[test]
fn plan_without_applyable_complete_errored_keys_is_judged_by_its_changes() {
    let mut p = plan(vec![create()]);
    for key in ["applyable", "complete", "errored", "terraform_version", "timestamp"] {
        p.as_object_mut().unwrap().remove(key);
    }
    p["format_version"] = json!("1.0");
    assert_eq!(run(&p, &apply()).unwrap().action, ApprovedAction::Create);
}

#[test]
fn unknown_keys_are_ignored() {
    let mut p = plan(vec![create()]);
    p["some_future_key"] = json!({"x": 1});
    p["resource_changes"][0]["some_future_field"] = json!(true);
    assert_eq!(run(&p, &apply()).unwrap().action, ApprovedAction::Create);
}

#[test]
fn replacement_is_approved_only_when_allowed_and_summary_says_why() {
    let p = plan(vec![replace(&["delete", "create"], "replace_because_cannot_update")]);
    let approval = run(&p, &apply_allowing_replacement()).unwrap();
    assert_eq!(approval.action, ApprovedAction::Replace);
    assert_eq!(
        approval.summary,
        ["replace proxmox_vm_qemu.vm (the existing object is deleted first, then a new one created; \
          because an attribute cannot be updated in place: vmid): vmid 120 → 121"]
    );
}

#[test]
fn destroy_plan_is_approved_in_destroy_mode() {
    let p = plan(vec![vm(&["delete"], telmate_vm(2048, 120), Value::Null)]);
    let approval = run(&p, &destroy()).unwrap();
    assert_eq!(approval.action, ApprovedAction::Delete);
    assert_eq!(approval.summary, ["delete proxmox_vm_qemu.vm"]);
}

#[test]
fn drift_of_the_vm_is_summarised_not_rejected() {
    let mut moved = telmate_vm(2048, 120);
    moved["target_node"] = json!("pve2");
    moved["power_state"] = json!("running");
    let mut p = plan(vec![vm(&["no-op"], moved.clone(), moved.clone())]);
    p["resource_drift"] = json!([vm(&["update"], telmate_vm(2048, 120), moved)]);
    let approval = run(&p, &apply()).unwrap();
    assert_eq!(approval.action, ApprovedAction::NoOp);
    assert_eq!(
        approval.summary[1],
        "proxmox_vm_qemu.vm was changed outside Terraform (the plan above already accounts for it): \
         power_state \"stopped\" → \"running\", target_node \"pve1\" → \"pve2\""
    );
}

#[test]
fn output_changes_are_summarised_by_name_only() {
    let mut p = plan(vec![create()]);
    p["output_changes"] = json!({
        "ip": {"actions": ["create"], "before": null, "after": "192.0.2.1", "after_unknown": false,
               "before_sensitive": false, "after_sensitive": false},
        "same": {"actions": ["no-op"], "before": 1, "after": 1, "after_unknown": false,
                 "before_sensitive": false, "after_sensitive": false}
    });
    let approval = run(&p, &apply()).unwrap();
    assert_eq!(approval.summary, ["create proxmox_vm_qemu.vm", "output ip: create (no infrastructure change)"]);
}
