//! Hand-written states for cradle's Proxmox resources, shaped like the real
//! Terraform 1.11.4 `terraform show -json` output in
//! `tests/fixtures/generated-terraform-1.11.4/state-*.json`.

use serde_json::{Value, json};

use super::{Difference, Owner, Ownership, OwnershipError, check};
use crate::Flavour;

const EMPTY: &str = r#"{"format_version":"1.0"}"#;

fn resource(flavour: Flavour, values: Value) -> Value {
    json!({
        "address": flavour.address(), "mode": "managed", "type": flavour.resource_type(), "name": "vm",
        "provider_name": flavour.provider_name(), "schema_version": 0, "values": values, "sensitive_values": {}
    })
}

fn telmate(name: &str, vmid: Value) -> Value {
    resource(Flavour::Telmate, json!({"id": "pve1/qemu/120", "name": name, "vmid": vmid, "target_node": "pve1"}))
}

fn bpg(name: &str, vm_id: Value) -> Value {
    resource(Flavour::Bpg, json!({"id": "120", "name": name, "vm_id": vm_id, "node_name": "pve1"}))
}

fn state(resources: Vec<Value>) -> String {
    json!({"format_version": "1.0", "terraform_version": "1.11.4", "values": {"root_module": {"resources": resources}}})
        .to_string()
}

fn web1(flavour: Flavour) -> Owner {
    Owner::for_flavour(flavour, "web-1", 120)
}

fn telmate_state() -> String {
    state(vec![telmate("web-1", json!(120))])
}

#[test]
fn new_guest_passes_when_neither_vm_nor_state_resource_exists() {
    let empty_root = r#"{"format_version":"1.0","values":{"root_module":{}}}"#;
    let no_resources = state(vec![]);
    for text in [None, Some(EMPTY), Some(empty_root), Some(no_resources.as_str())] {
        assert_eq!(check(text, &web1(Flavour::Telmate), false), Ok(Ownership::New), "{text:?}");
    }
}

#[test]
fn matching_telmate_state_is_owned() {
    assert_eq!(check(Some(&telmate_state()), &web1(Flavour::Telmate), true), Ok(Ownership::Owned));
}

#[test]
fn matching_bpg_state_is_owned_by_vm_id() {
    let text = state(vec![bpg("web-1", json!(120))]);
    assert_eq!(check(Some(&text), &web1(Flavour::Bpg), true), Ok(Ownership::Owned));
}

#[test]
fn existing_vm_without_a_state_resource_is_rejected() {
    for text in [None, Some(EMPTY)] {
        let err = check(text, &web1(Flavour::Telmate), true).unwrap_err();
        assert_eq!(
            err,
            OwnershipError::NotInState {
                address: "proxmox_vm_qemu.vm".to_owned(),
                name: "web-1".to_owned(),
                vmid: 120
            }
        );
    }
}

#[test]
fn state_resource_whose_vm_was_deleted_outside_terraform_is_rejected() {
    let err = check(Some(&telmate_state()), &web1(Flavour::Telmate), false).unwrap_err();
    assert!(matches!(err, OwnershipError::VmMissing { vmid: 120, .. }));
    assert!(err.to_string().contains("a plan would now create it again"), "{err}");
}

#[test]
fn name_mismatch_is_rejected() {
    let text = state(vec![telmate("web-2", json!(120))]);
    let err = check(Some(&text), &web1(Flavour::Telmate), true).unwrap_err();
    assert_eq!(
        err,
        OwnershipError::Mismatch {
            address: "proxmox_vm_qemu.vm".to_owned(),
            differences: vec![Difference::Name { in_state: "\"web-2\"".to_owned(), expected: "web-1".to_owned() }],
        }
    );
    assert!(err.to_string().contains("name is \"web-2\" in state, expected \"web-1\""), "{err}");
}

#[test]
fn vmid_mismatch_is_rejected_whether_or_not_the_vm_exists() {
    let text = state(vec![telmate("web-1", json!(121))]);
    for vm_exists in [true, false] {
        let err = check(Some(&text), &web1(Flavour::Telmate), vm_exists).unwrap_err();
        let OwnershipError::Mismatch { differences, .. } = err else { panic!("{err:?}") };
        assert_eq!(differences, [Difference::Vmid { attribute: "vmid", in_state: "121".to_owned(), expected: 120 }]);
    }
}

#[test]
fn both_differences_are_reported_together() {
    let text = state(vec![telmate("db-1", json!(300))]);
    let Err(OwnershipError::Mismatch { differences, .. }) = check(Some(&text), &web1(Flavour::Telmate), true) else {
        panic!("expected a mismatch")
    };
    assert_eq!(differences.len(), 2);
}

#[test]
fn vmid_that_is_absent_or_not_an_integer_is_a_mismatch() {
    for vmid in [json!("120"), json!(120.5), Value::Null, json!(-120)] {
        let text = state(vec![telmate("web-1", vmid.clone())]);
        assert!(
            matches!(check(Some(&text), &web1(Flavour::Telmate), true), Err(OwnershipError::Mismatch { .. })),
            "{vmid}"
        );
    }
    let no_name = state(vec![resource(Flavour::Telmate, json!({"vmid": 120}))]);
    let Err(OwnershipError::Mismatch { differences, .. }) = check(Some(&no_name), &web1(Flavour::Telmate), true) else {
        panic!("expected a mismatch")
    };
    assert_eq!(differences, [Difference::Name { in_state: "(absent)".to_owned(), expected: "web-1".to_owned() }]);
}

#[test]
fn bpg_vmid_is_read_from_vm_id_not_vmid() {
    let wrong_key = state(vec![resource(Flavour::Bpg, json!({"name": "web-1", "vmid": 120}))]);
    let Err(OwnershipError::Mismatch { differences, .. }) = check(Some(&wrong_key), &web1(Flavour::Bpg), true) else {
        panic!("expected a mismatch")
    };
    assert_eq!(differences, [Difference::Vmid { attribute: "vm_id", in_state: "(absent)".to_owned(), expected: 120 }]);
}

#[test]
fn resource_type_or_provider_differs_is_rejected() {
    // A bpg owner looking at the telmate address (the flavour was switched) ...
    let owner = Owner { address: "proxmox_vm_qemu.vm".to_owned(), ..web1(Flavour::Bpg) };
    assert!(matches!(check(Some(&telmate_state()), &owner, true), Err(OwnershipError::WrongResource { .. })));
    // ... or the right type from another provider source.
    let mut forked = telmate("web-1", json!(120));
    forked["provider_name"] = json!("registry.terraform.io/someone/proxmox");
    let err = check(Some(&state(vec![forked])), &web1(Flavour::Telmate), true).unwrap_err();
    assert!(matches!(err, OwnershipError::WrongResource { .. }), "{err}");
}

#[test]
fn state_holding_other_resources_is_rejected() {
    let other = json!({"address": "terraform_data.x", "mode": "managed", "type": "terraform_data", "name": "x",
                       "provider_name": "terraform.io/builtin/terraform", "values": {}});
    let data = json!({"address": "data.http.x", "mode": "data", "type": "http", "name": "x",
                      "provider_name": "registry.terraform.io/hashicorp/http", "values": {}});
    let mut deposed = telmate("web-1", json!(119));
    deposed["deposed_key"] = json!("00000001");
    let in_module = json!({"format_version": "1.0", "values": {"root_module": {
        "resources": [telmate("web-1", json!(120))],
        "child_modules": [{"address": "module.m", "resources": [{"address": "module.m.terraform_data.x",
            "mode": "managed", "type": "terraform_data", "name": "x",
            "provider_name": "terraform.io/builtin/terraform", "values": {}}]}]}}})
    .to_string();
    let cases = [
        (state(vec![telmate("web-1", json!(120)), other.clone()]), "terraform_data.x"),
        (state(vec![other]), "terraform_data.x"),
        (state(vec![telmate("web-1", json!(120)), data]), "data.http.x (data resource)"),
        (state(vec![telmate("web-1", json!(120)), deposed]), "proxmox_vm_qemu.vm (deposed object 00000001)"),
        (in_module, "module.m.terraform_data.x"),
    ];
    for (text, found) in cases {
        for vm_exists in [true, false] {
            let err = check(Some(&text), &web1(Flavour::Telmate), vm_exists).unwrap_err();
            assert_eq!(
                err,
                OwnershipError::OtherResources {
                    address: "proxmox_vm_qemu.vm".to_owned(),
                    found: vec![found.to_owned()]
                }
            );
        }
    }
}

#[test]
fn unreadable_state_is_rejected() {
    let cases = [
        "",
        "not json",
        "[]",
        r#"{"format_version":"1.0","values":"none"}"#,
        r#"{"format_version":"1.0","values":{"root_module":{"resources":[{"address":"x"}]}}}"#,
    ];
    for text in cases {
        assert!(
            matches!(check(Some(text), &web1(Flavour::Telmate), false), Err(OwnershipError::Unparseable { .. })),
            "{text}"
        );
    }
}

#[test]
fn plan_passed_instead_of_a_state_is_rejected() {
    let plan = r#"{"format_version":"1.2","resource_changes":[],"applyable":false}"#;
    let err = check(Some(plan), &web1(Flavour::Telmate), false).unwrap_err();
    assert!(matches!(err, OwnershipError::Unparseable { .. }), "{err}");
}

#[test]
fn missing_or_unknown_major_format_version_is_rejected() {
    for text in ["{}", r#"{"format_version":"2.0"}"#, r#"{"format_version":1}"#] {
        assert!(
            matches!(check(Some(text), &web1(Flavour::Telmate), false), Err(OwnershipError::UnsupportedFormat { .. })),
            "{text}"
        );
    }
}

#[test]
fn every_error_says_what_differs_and_not_to_delete_state_or_import() {
    let errors = [
        check(Some("nope"), &web1(Flavour::Telmate), false),
        check(Some("{}"), &web1(Flavour::Telmate), false),
        check(None, &web1(Flavour::Telmate), true),
        check(Some(&telmate_state()), &web1(Flavour::Telmate), false),
        check(Some(&state(vec![telmate("web-2", json!(121))])), &web1(Flavour::Telmate), true),
        check(
            Some(&state(vec![bpg("web-1", json!(120))])),
            &Owner { address: "proxmox_virtual_environment_vm.vm".to_owned(), ..web1(Flavour::Telmate) },
            true,
        ),
        check(
            Some(&state(vec![telmate("web-1", json!(120)), bpg("web-1", json!(120))])),
            &web1(Flavour::Telmate),
            true,
        ),
    ];
    for result in errors {
        let message = result.unwrap_err().to_string();
        assert!(message.contains("do not delete the state or `terraform import`"), "{message}");
        assert!(
            message.contains("proxmox_vm_qemu.vm") || message.contains("proxmox_virtual_environment_vm.vm"),
            "{message}"
        );
    }
}
