//! Maintenance plans (`check_update`): update and no-op approved, a
//! replacement only when allowed, a create or a delete refused.

use serde_json::{Value, json};

use super::*;
use crate::Flavour;
use crate::approve::ApprovedAction;
use crate::approve::update::{UpdateRefusal, check_update};

fn text(p: &Value) -> String {
    p.to_string()
}

fn grown(disk: &str) -> Value {
    let mut v = telmate_vm(4096, 120);
    v["disk"] = json!([{"slot": "scsi1", "type": "disk", "storage": "local-lvm", "size": disk}]);
    v
}

#[test]
fn an_in_place_update_of_memory_and_a_data_disk_is_approved_with_its_summary() {
    let mut before = telmate_vm(2048, 120);
    before["disk"] = json!([{"slot": "scsi1", "type": "disk", "storage": "local-lvm", "size": "10G"}]);
    let p = plan(vec![vm(&["update"], before, grown("20G"))]);
    let approval = check_update(&text(&p), Flavour::Telmate, false, "web-1").expect("approved");
    assert_eq!(approval.action, ApprovedAction::Update);
    assert!(approval.summary.iter().any(|l| l.contains("memory 2048 → 4096")), "{:?}", approval.summary);
    let noop = plan(vec![vm(&["no-op"], telmate_vm(2048, 120), telmate_vm(2048, 120))]);
    let approval = check_update(&text(&noop), Flavour::Telmate, false, "web-1").expect("no-op");
    assert_eq!(approval.action, ApprovedAction::NoOp);
}

#[test]
fn a_replacement_is_refused_naming_the_vm_and_the_flag_unless_the_inventory_allows_it() {
    let p = plan(vec![replace(&["delete", "create"], "replace_because_cannot_update")]);
    let err = check_update(&text(&p), Flavour::Telmate, false, "web-1").expect_err("refused").to_string();
    assert!(err.starts_with("web-1: refusing the plan for proxmox_vm_qemu.vm"), "{err}");
    assert!(err.contains("vms_terraform_allow_replacement"), "{err}");
    let approval = check_update(&text(&p), Flavour::Telmate, true, "web-1").expect("allowed");
    assert_eq!(approval.action, ApprovedAction::Replace);
}

#[test]
fn a_create_or_a_delete_is_refused() {
    let err = check_update(&text(&plan(vec![create()])), Flavour::Telmate, true, "web-1").expect_err("create");
    assert!(matches!(err, UpdateRefusal::WouldCreate { .. }), "{err:?}");
    assert!(err.to_string().contains("not in its module's terraform state"), "{err}");
    let delete = plan(vec![vm(&["delete"], telmate_vm(2048, 120), Value::Null)]);
    let err = check_update(&text(&delete), Flavour::Telmate, true, "web-1").expect_err("delete");
    let UpdateRefusal::Rejected { rejection, .. } = &err else { panic!("{err:?}") };
    assert!(matches!(**rejection, Rejection::DeleteWhileProvisioning { .. }), "{err:?}");
}
