//! Rejections of the change at the expected address.

use serde_json::{Value, json};

use super::*;
use crate::approve::{Action, ActionReason, ApprovedAction, Expected, Rejection};

#[test]
fn delete_only_is_rejected_in_apply_mode() {
    let p = plan(vec![vm(&["delete"], telmate_vm(2048, 120), Value::Null)]);
    assert_eq!(
        run(&p, &apply_allowing_replacement()),
        Err(Rejection::DeleteWhileProvisioning { address: VM.to_owned() })
    );
}

#[test]
fn replacement_is_rejected_unless_allowed() {
    let err = run(&plan(vec![replace(&["delete", "create"], "replace_because_cannot_update")]), &apply()).unwrap_err();
    assert_eq!(
        err,
        Rejection::ReplacementNotAllowed {
            address: VM.to_owned(),
            action: Action::DeleteThenCreate,
            reason: Some(ActionReason::ReplaceBecauseCannotUpdate),
            replace_paths: vec!["vmid".to_owned()],
        }
    );
    assert!(err.to_string().contains("because an attribute cannot be updated in place (vmid)"), "{err}");
}

#[test]
fn create_before_destroy_replacement_is_rejected_unless_allowed() {
    let p = plan(vec![replace(&["create", "delete"], "replace_because_cannot_update")]);
    assert!(matches!(
        run(&p, &apply()),
        Err(Rejection::ReplacementNotAllowed { action: Action::CreateThenDelete, .. })
    ));
    assert_eq!(run(&p, &apply_allowing_replacement()).unwrap().action, ApprovedAction::Replace);
}

#[test]
fn tainted_requested_and_triggered_replacements_are_rejected_unless_allowed() {
    for (reason, want) in [
        ("replace_because_tainted", ActionReason::ReplaceBecauseTainted),
        ("replace_by_request", ActionReason::ReplaceByRequest),
        ("replace_by_triggers", ActionReason::ReplaceByTriggers),
    ] {
        let p = plan(vec![replace(&["delete", "create"], reason)]);
        match run(&p, &apply()) {
            Err(Rejection::ReplacementNotAllowed { reason: Some(got), replace_paths, .. }) => {
                assert_eq!(got, want);
                assert!(replace_paths.is_empty());
            }
            other => panic!("{reason}: {other:?}"),
        }
        assert_eq!(run(&p, &apply_allowing_replacement()).unwrap().action, ApprovedAction::Replace);
    }
}

#[test]
fn replace_reason_on_a_non_replacing_action_is_rejected() {
    let mut e = vm(&["update"], telmate_vm(2048, 120), telmate_vm(4096, 120));
    e["action_reason"] = json!("replace_because_tainted");
    assert!(matches!(run(&plan(vec![e]), &apply_allowing_replacement()), Err(Rejection::Inconsistent { .. })));
}

#[test]
fn changed_resource_type_or_provider_at_the_address_is_rejected() {
    // A type that does not make the address is an inconsistent entry, not the VM.
    let other_type = entry(VM, "proxmox_lxc", TELMATE, &["create"], Value::Null, json!({}));
    assert!(matches!(run(&plan(vec![other_type]), &apply()), Err(Rejection::Inconsistent { .. })));
    let other_provider =
        entry(VM, "proxmox_vm_qemu", "registry.terraform.io/someone/proxmox", &["create"], Value::Null, json!({}));
    assert!(matches!(run(&plan(vec![other_provider]), &apply()), Err(Rejection::WrongResource { .. })));
}

#[test]
fn import_is_rejected() {
    let mut by_id = vm(&["no-op"], telmate_vm(2048, 120), telmate_vm(2048, 120));
    by_id["change"]["importing"] = json!({"id": "pve1/qemu/120"});
    let mut by_identity = vm(&["update"], telmate_vm(2048, 120), telmate_vm(4096, 120));
    by_identity["change"]["importing"] = json!({"identity": {"id": 120}});
    let mut generated = create();
    generated["change"]["generated_config"] = json!("resource \"proxmox_vm_qemu\" \"vm\" {}");
    for e in [by_id, by_identity, generated] {
        assert!(matches!(run(&plan(vec![e]), &apply()), Err(Rejection::Import { .. })));
    }
}

#[test]
fn moved_state_is_rejected() {
    let mut e = vm(&["no-op"], telmate_vm(2048, 120), telmate_vm(2048, 120));
    e["previous_address"] = json!("proxmox_vm_qemu.old");
    assert_eq!(
        run(&plan(vec![e]), &apply()),
        Err(Rejection::Moved {
            address: VM.to_owned(),
            previous_address: "proxmox_vm_qemu.old".to_owned(),
            action: Action::NoOp
        })
    );
}

#[test]
fn forget_is_rejected_even_when_replacement_is_allowed() {
    let forget = vm(&["forget"], telmate_vm(2048, 120), Value::Null);
    let mut create_forget = vm(&["create", "forget"], telmate_vm(2048, 120), telmate_vm(2048, 120));
    create_forget["action_reason"] = json!("replace_because_tainted");
    for (e, action) in [(forget, Action::Forget), (create_forget, Action::CreateThenForget)] {
        assert_eq!(
            run(&plan(vec![e]), &apply_allowing_replacement()),
            Err(Rejection::Forget { address: VM.to_owned(), action })
        );
    }
}

#[test]
fn unknown_action_is_rejected() {
    let own = vm(&["delete", "forget"], telmate_vm(2048, 120), Value::Null);
    let other = entry("proxmox_vm_qemu.x", "proxmox_vm_qemu", TELMATE, &["Open"], Value::Null, Value::Null);
    for p in [plan(vec![own]), plan(vec![create(), other])] {
        assert!(matches!(run(&p, &apply()), Err(Rejection::UnknownAction { .. })), "{p}");
    }
}

#[test]
fn unknown_output_action_is_rejected() {
    let mut p = plan(vec![create()]);
    p["output_changes"] = json!({"ip": {"actions": ["rename"], "before": null, "after": null}});
    assert!(matches!(run(&p, &apply()), Err(Rejection::UnknownAction { found, .. }) if found == "output.ip"));
}

#[test]
fn unknown_resource_mode_is_rejected() {
    let mut own = create();
    own["mode"] = json!("ephemeral");
    let mut other = entry("proxmox_vm_qemu.x", "proxmox_vm_qemu", TELMATE, &["no-op"], json!({}), json!({}));
    other["mode"] = json!("list");
    for p in [plan(vec![own]), plan(vec![create(), other])] {
        assert!(matches!(run(&p, &apply()), Err(Rejection::UnknownMode { .. })), "{p}");
    }
}

#[test]
fn data_source_at_the_expected_address_is_rejected() {
    let expected = Expected { address: "data.proxmox_vm_qemu.vm".to_owned(), ..apply() };
    let p = plan(vec![entry("data.proxmox_vm_qemu.vm", "proxmox_vm_qemu", TELMATE, &["read"], Value::Null, json!({}))]);
    assert!(matches!(run(&p, &expected), Err(Rejection::Inconsistent { .. })));
}

#[test]
fn two_entries_for_the_same_object_are_rejected() {
    assert!(matches!(run(&plan(vec![create(), create()]), &apply()), Err(Rejection::Inconsistent { .. })));
}

#[test]
fn deposed_object_of_the_vm_is_rejected() {
    let mut deposed = vm(&["delete"], telmate_vm(2048, 120), Value::Null);
    deposed["deposed"] = json!("00000001");
    // Provisioning: the current VM is unchanged, but the leftover one would be deleted.
    let no_op = vm(&["no-op"], telmate_vm(2048, 121), telmate_vm(2048, 121));
    // Removal: `terraform plan -destroy` deletes the current and the deposed object.
    let delete = vm(&["delete"], telmate_vm(2048, 121), Value::Null);
    for (current, expected) in [(no_op, apply()), (delete, destroy())] {
        let p = plan(vec![current, deposed.clone()]);
        assert_eq!(
            run(&p, &expected),
            Err(Rejection::DeposedObject {
                address: VM.to_owned(),
                deposed: "00000001".to_owned(),
                action: Action::Delete
            })
        );
    }
}

#[test]
fn vm_deleted_outside_terraform_is_rejected() {
    let mut p = plan(vec![create()]);
    p["resource_drift"] = json!([vm(&["delete"], telmate_vm(2048, 120), Value::Null)]);
    assert_eq!(run(&p, &apply()), Err(Rejection::DeletedOutsideTerraform { address: VM.to_owned() }));
}

#[test]
fn drift_with_an_unknown_or_impossible_action_is_rejected() {
    let mut p = plan(vec![create()]);
    p["resource_drift"] = json!([vm(&["warp"], Value::Null, Value::Null)]);
    assert!(matches!(run(&p, &apply()), Err(Rejection::UnknownAction { .. })));
    p["resource_drift"] = json!([vm(&["create"], Value::Null, json!({}))]);
    assert!(matches!(run(&p, &apply()), Err(Rejection::Inconsistent { .. })));
}
