//! Hand-made plans a hostile module directory could produce (issue 32, §3): each
//! was approved before the approval required exactly the rendered resource, with
//! its address made of its own parts, and no data source anywhere.

use serde_json::{Value, json};

use super::*;
use crate::approve::{Action, Rejection};

#[test]
fn data_read_of_the_vm_resource_type_beside_the_create_is_rejected() {
    let read = entry("data.proxmox_vm_qemu.vm", "proxmox_vm_qemu", TELMATE, &["read"], Value::Null, json!({}));
    assert_eq!(
        run(&plan(vec![create(), read]), &apply()),
        Err(Rejection::DataSource {
            address: VM.to_owned(),
            found: "data.proxmox_vm_qemu.vm".to_owned(),
            action: Action::Read
        })
    );
}

#[test]
fn data_mode_change_of_type_terraform_data_is_rejected() {
    let read = entry("data.terraform_data.x", "terraform_data", TELMATE, &["read"], Value::Null, json!({}));
    assert!(matches!(run(&plan(vec![create(), read]), &apply()), Err(Rejection::DataSource { .. })));
}

#[test]
fn change_whose_address_is_the_vm_but_whose_name_is_another_is_rejected() {
    let mut evil = create();
    evil["name"] = json!("evil");
    let err = run(&plan(vec![evil]), &apply()).unwrap_err();
    assert!(
        matches!(&err, Rejection::Inconsistent { found, detail, .. }
            if found == VM && detail.contains("`proxmox_vm_qemu.evil`")),
        "{err}"
    );
}

#[test]
fn change_whose_mode_or_index_does_not_make_its_address_is_rejected() {
    let mut data_mode = create();
    data_mode["mode"] = json!("data");
    let mut indexed = create();
    indexed["index"] = json!(0);
    for e in [data_mode, indexed] {
        assert!(matches!(run(&plan(vec![e]), &apply()), Err(Rejection::Inconsistent { .. })));
    }
}

#[test]
fn planned_values_holding_anything_but_the_vm_are_rejected() {
    let resource = |address: &str, name: &str| {
        json!({"address": address, "mode": "managed", "type": "proxmox_vm_qemu", "name": name,
               "provider_name": TELMATE, "schema_version": 0, "values": {}, "sensitive_values": {}})
    };
    let with_planned = |resources: Value| {
        let mut p = plan(vec![create()]);
        p["planned_values"] = json!({"root_module": {"resources": resources}});
        p
    };
    assert!(run(&with_planned(json!([resource(VM, "vm")])), &apply()).is_ok());
    for resources in [json!([resource(VM, "evil")]), json!([resource(VM, "vm"), resource("proxmox_vm_qemu.b", "b")])] {
        assert!(
            matches!(
                run(&with_planned(resources.clone()), &apply()),
                Err(Rejection::NotRendered { part: "planned_values", .. })
            ),
            "{resources}"
        );
    }
}

#[test]
fn configuration_with_a_provisioner_or_another_block_is_rejected() {
    let vm_block = json!({"address": VM, "mode": "managed", "type": "proxmox_vm_qemu", "name": "vm",
                          "provider_config_key": "proxmox", "schema_version": 0});
    let with_config = |root: Value| {
        let mut p = plan(vec![create()]);
        p["configuration"] = json!({"root_module": root});
        p
    };
    assert!(run(&with_config(json!({"resources": [vm_block.clone()]})), &apply()).is_ok());
    let mut provisioned = vm_block.clone();
    provisioned["provisioners"] = json!([{"type": "local-exec", "expressions": {"command": {"constant_value": "id"}}}]);
    let data = json!({"address": "data.proxmox_vm_qemu.vm", "mode": "data", "type": "proxmox_vm_qemu", "name": "vm"});
    let cases = [
        (json!({"resources": [provisioned]}), "provisioner \"local-exec\" of proxmox_vm_qemu.vm"),
        (json!({"resources": [vm_block.clone(), data]}), "data.proxmox_vm_qemu.vm"),
        (json!({"resources": [vm_block], "module_calls": {"m": {"source": "./m"}}}), "module.m"),
    ];
    for (root, what) in cases {
        assert_eq!(
            run(&with_config(root), &apply()),
            Err(Rejection::NotRendered { address: VM.to_owned(), found: what.to_owned(), part: "configuration" })
        );
    }
}
