//! The validator against the fixture: each test names the failure it proves is caught.

use std::collections::BTreeMap;

use serde_json::json;

use super::Schema;

fn params(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn problems(method: &str, path: &str, kv: &[(&str, &str)]) -> Vec<String> {
    Schema::pve().check_request(method, path, &params(kv)).iter().map(ToString::to_string).collect()
}

const CLONE: &str = "/nodes/pve1/qemu/9000/clone";

#[test]
fn a_conforming_clone_request_passes() {
    assert_eq!(problems("POST", CLONE, &[("newid", "100"), ("name", "test-0"), ("full", "0")]), Vec::<String>::new());
}

#[test]
fn a_renamed_parameter_is_not_in_the_schema() {
    // `newid` renamed `new_id`: unknown, and the required `newid` is missing.
    let p = problems("POST", CLONE, &[("new_id", "100")]);
    assert!(p.iter().any(|x| x.contains("new_id: property is not defined in schema")), "{p:?}");
    assert!(p.iter().any(|x| x.contains("newid: property is missing and it is not optional")), "{p:?}");
}

#[test]
fn a_mistyped_parameter_fails_its_type_check() {
    let p = problems("POST", CLONE, &[("newid", "one hundred")]);
    assert!(p.iter().any(|x| x.contains("newid: type check ('integer') failed")), "{p:?}");
    let p = problems("POST", CLONE, &[("newid", "100"), ("full", "true")]);
    assert!(p.iter().any(|x| x.contains("full: type check ('boolean') failed - got 'true'")), "{p:?}");
    let p = problems("POST", CLONE, &[("newid", "42")]);
    // PVE checks the format before the range: `pve-vmid` is `[1-9][0-9]{2,8}`.
    assert!(p.iter().any(|x| x.contains("newid: invalid format - value does not look like a valid pve-vmid")), "{p:?}");
}

#[test]
fn a_dropped_required_parameter_is_missing() {
    let p = problems("POST", CLONE, &[("name", "x")]);
    assert_eq!(p, ["POST /nodes/{node}/qemu/{vmid}/clone: newid: property is missing and it is not optional"]);
    let p = problems("PUT", "/nodes/pve1/qemu/100/resize", &[("disk", "scsi0")]);
    assert!(p.iter().any(|x| x.contains("size: property is missing")), "{p:?}");
}

#[test]
fn enums_and_path_parameters_are_checked() {
    let p = problems("GET", "/cluster/resources", &[("type", "vms")]);
    assert!(p.iter().any(|x| x.contains("type: value 'vms' does not have a value in the enumeration")), "{p:?}");
    let p = problems("GET", "/nodes/pve_1/qemu/100/config", &[]);
    assert!(p.iter().any(|x| x.contains("node: invalid format")), "{p:?}");
}

#[test]
fn unknown_paths_and_methods_are_named() {
    let p = problems("POST", "/nodes/pve1/qemu/100/agent/get-osinfo", &[]);
    assert_eq!(p, ["POST /nodes/{node}/qemu/{vmid}/agent/get-osinfo: PVE has no POST on this path (it has GET)"]);
    let p = problems("GET", "/nodes/pve1/qemu/100/nonsense", &[]);
    assert_eq!(p, ["GET /nodes/pve1/qemu/100/nonsense: no such path in the PVE API"]);
}

#[test]
fn property_strings_are_parsed_per_their_format() {
    let cfg = "/nodes/pve1/qemu/100/config";
    let ok = [
        ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=20"),
        ("net1", "model=virtio,bridge=vmbr0,firewall=1"),
        ("ide2", "local-lvm:cloudinit,media=cdrom"),
        ("scsi0", "local-lvm:vm-100-disk-0,size=3G,discard=on"),
        ("cicustom", "user=local:snippets/u.yaml,network=local:snippets/n.yaml"),
        ("startup", "order=2,up=30"),
        ("ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1"),
        ("agent", "enabled=1,fstrim_cloned_disks=1"),
        ("boot", "order=scsi0;ide2"),
    ];
    for (k, v) in ok {
        assert_eq!(problems("PUT", cfg, &[(k, v)]), Vec::<String>::new(), "{k}={v}");
    }
    let bad = [
        ("net0", "bridge=vmbr0", "net0.model: property is missing"),
        ("net0", "virtio=BC:24:11:00:00:01,vlan=20", "invalid key in comma-separated list property: vlan"),
        ("net0", "virtio,tag=5000", "net0.tag: value must have a maximum value of 4094"),
        ("ide2", "local-lvm:cloudinit,media=dvd", "ide2.media: value 'dvd' does not have a value"),
        ("cicustom", "user=snippets/u.yaml", "cicustom.user: invalid format"),
        ("cicustom", "users=local:snippets/u.yaml", "invalid key in comma-separated list property: users"),
        ("startup", "order=first", "startup.order: type check ('integer') failed"),
        ("ipconfig0", "ip=10.0.0.5", "ipconfig0.ip: invalid format"),
        ("ipconfig0", "gw=10.0.0.1", "ipconfig0.ip: missing property required by 'gw'"),
        ("scsi0", "local-lvm:vm-100-disk-0,size=3X", "scsi0.size: invalid format"),
    ];
    for (k, v, want) in bad {
        let p = problems("PUT", cfg, &[(k, v)]);
        assert!(p.iter().any(|x| x.contains(want)), "{k}={v}: want {want:?}, got {p:?}");
    }
}

#[test]
fn an_answer_of_the_wrong_shape_fails_returns() {
    let s = Schema::pve();
    let tasks = "/nodes/pve1/tasks";
    let good = json!([{"upid": "UPID:pve1:1:2:3:qmstart:100:root@pam:", "node": "pve1", "pid": 1, "pstart": 2,
        "starttime": 3, "type": "qmstart", "id": "100", "user": "root@pam", "status": "OK"}]);
    assert_eq!(s.check_answer("GET", tasks, &good), []);
    // An object where a list is due.
    let v = s.check_answer("GET", tasks, &json!({"upid": "x"}));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].problem, "type check ('array') failed - got an object");
    // An item without a required property, and one mistyped.
    let mut item = good[0].clone();
    item.as_object_mut().unwrap().remove("upid");
    item["pid"] = json!("not a number");
    let v: Vec<String> = s.check_answer("GET", tasks, &json!([item])).iter().map(ToString::to_string).collect();
    assert!(v.iter().any(|x| x.contains("data[0].upid: property is missing")), "{v:?}");
    assert!(v.iter().any(|x| x.contains("data[0].pid: type check ('integer') failed")), "{v:?}");
    // A task status outside its enum.
    let st = "/nodes/pve1/tasks/UPID:pve1:1:2:3:qmstart:100:root@pam:/status";
    let v = s.check_answer(
        "GET",
        st,
        &json!({"status": "done", "upid": "u", "node": "pve1", "pid": 1,
        "pstart": 2, "starttime": 3, "type": "qmstart", "id": "100", "user": "root@pam"}),
    );
    assert!(v.iter().any(|x| x.param == "data.status" && x.problem.contains("enumeration")), "{v:?}");
}

#[test]
fn every_fixture_pattern_compiles() {
    let doc: serde_json::Value = serde_json::from_str(super::FIXTURE).unwrap();
    let mut bad = Vec::new();
    fn walk(v: &serde_json::Value, bad: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(o) => {
                if let Some(p) = o.get("pattern").and_then(|p| p.as_str())
                    && let Err(e) = super::value::perl_to_regex(p)
                {
                    bad.push(format!("{p}: {e}"));
                }
                o.values().for_each(|x| walk(x, bad));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, bad)),
            _ => {}
        }
    }
    walk(&doc, &mut bad);
    assert_eq!(bad, Vec::<String>::new());
}
