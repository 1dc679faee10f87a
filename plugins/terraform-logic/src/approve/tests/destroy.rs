//! Destroy mode, and what rejection messages say.

use serde_json::{Value, json};

use super::*;
use crate::approve::{Expected, Rejection};

#[test]
fn destroy_plan_without_any_change_is_rejected() {
    assert_eq!(run(&plan(vec![]), &destroy()), Err(Rejection::NothingToDestroy { address: VM.to_owned() }));
}

#[test]
fn destroy_mode_rejects_anything_but_the_single_delete() {
    let delete = vm(&["delete"], telmate_vm(2048, 120), Value::Null);
    let cases = [
        plan(vec![create()]),
        plan(vec![vm(&["no-op"], telmate_vm(2048, 120), telmate_vm(2048, 120))]),
        plan(vec![vm(&["update"], telmate_vm(2048, 120), telmate_vm(4096, 120))]),
        plan(vec![replace(&["delete", "create"], "replace_because_tainted")]),
    ];
    for p in cases {
        let destroy_allowing_replacement = Expected { allow_replacement: true, ..destroy() };
        assert!(matches!(run(&p, &destroy_allowing_replacement), Err(Rejection::UnexpectedInDestroy { .. })), "{p}");
    }
    let read = entry("data.proxmox_vm_qemu.x", "proxmox_vm_qemu", TELMATE, &["read"], Value::Null, json!({}));
    assert!(matches!(run(&plan(vec![delete.clone(), read]), &destroy()), Err(Rejection::DataSource { .. })));
    let other = entry("proxmox_vm_qemu.other", "proxmox_vm_qemu", TELMATE, &["delete"], json!({}), Value::Null);
    assert!(matches!(run(&plan(vec![delete, other]), &destroy()), Err(Rejection::OtherResource { .. })));
}

// --- messages ---

#[test]
fn rejection_messages_name_the_address_the_action_and_what_to_do() {
    let cases = [
        (
            plan(vec![replace(&["delete", "create"], "replace_because_tainted")]),
            "replace (delete, then create)",
            "allow replacement",
        ),
        (plan(vec![vm(&["delete"], telmate_vm(2048, 120), Value::Null)]), "delete", "removal workflow"),
        (plan(vec![vm(&["forget"], telmate_vm(2048, 120), Value::Null)]), "forget", "review the module"),
    ];
    for (p, action, remedy) in cases {
        let message = run(&p, &apply()).unwrap_err().to_string();
        for part in [VM, action, remedy, "nothing was applied"] {
            assert!(message.contains(part), "{part:?} missing in: {message}");
        }
    }
}
