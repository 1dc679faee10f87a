//! The `vm` a workflow receives: its keys and the script type of each value.

use std::path::Path;

use rhai::{Dynamic, Map};

use super::vm_value;
use crate::inventory::{Inventory, ResolveOptions, resolve};

const INVENTORY: &str = "\
all:
  vars:
    vms_os: debian12
    target_node: pve1
    global_os:
      debian12: { template: debian-12-cloud, storage: local-lvm, cores: 2, memory: 2048 }
  hosts:
    web-0:
      vms_vmid: 9100
      ansible_host: 10.0.20.10
      ansible_user: ops
      vms_config:
        disk: 40
        disks: [{ size: 20, storage: data }]
        tags: [web]
        startup_order: 3
        nic0: { bridge: vmbr0, vlan: 20, ip: 10.0.20.10/24, gateway: 10.0.20.1, nameservers: [10.0.0.53], search: lab.example }
        nic1: { bridge: vmbr1, ip: dhcp, interface: ens19 }
      vms_packages: [vim]
      vms_fqdn: web-0.lab.example
      ansible_become_password: canary-not-for-scripts
      vms_ssh_authorized_keys: [ssh-ed25519 AAAA ops]
      vms_dns_record: { zone: lab.example., name: web-0.lab.example., kind: a, value: 10.0.20.10 }
      vms_wait: { task_ms: 60000, reboot_interval_s: 0.5 }
    db-0:
      vms_config: { nic0: { bridge: vmbr0, ip: dhcp } }
";

fn vm(host: &str) -> Map {
    let inv = Inventory::from_yaml(INVENTORY, Path::new("hosts.yml")).expect("inventory");
    let opts = ResolveOptions { environment: "test".into(), ..ResolveOptions::default() };
    let plan = resolve(&inv, host, &opts).unwrap_or_else(|e| panic!("{host}: {e}"));
    vm_value(&plan, &inv).expect("vm value").cast::<Map>()
}

fn map(d: &Dynamic) -> Map {
    d.clone().try_cast::<Map>().unwrap_or_else(|| panic!("a map, got {}", d.type_name()))
}

fn keys(m: &Map) -> Vec<&str> {
    m.keys().map(|k| k.as_str()).collect()
}

/// Each key of `m` with the script type of its value (`()` for unit).
fn types(m: &Map) -> Vec<(&str, &str)> {
    m.iter().map(|(k, v)| (k.as_str(), if v.is_unit() { "()" } else { v.type_name() })).collect()
}

#[test]
fn the_vm_value_has_the_documented_keys_and_types() {
    let vm = vm("web-0");
    assert_eq!(
        types(&vm),
        [
            ("authorized_keys", "array"),
            ("dns", "map"),
            ("fqdn", "string"),
            ("hostname", "string"),
            ("name", "string"),
            ("nics", "array"),
            ("node", "string"),
            ("packages", "array"),
            ("snippet_storage", "()"),
            ("spec", "map"),
            ("ssh", "map"),
            ("timezone", "()"),
            ("vars", "map"),
            ("vm_type", "()"),
            ("wait", "map"),
        ]
    );
    assert_eq!(vm["hostname"].to_string(), "web-0");
    // The host's own variables, credentials left out.
    let vars = map(&vm["vars"]);
    assert_eq!(vars["vms_fqdn"].to_string(), "web-0.lab.example");
    assert!(vars.keys().all(|k| !k.contains("pass")), "{:?}", keys(&vars));
    assert_eq!(types(&map(&vm["ssh"])), [("host", "string"), ("port", "i64"), ("user", "string")]);
    assert_eq!(map(&vm["ssh"])["user"].to_string(), "ops");

    let nics = vm["nics"].clone().into_array().expect("nics");
    let nic0 = map(&nics[0]);
    assert_eq!(
        types(&nic0),
        [
            ("address", "string"),
            ("bridge", "string"),
            ("gateway", "string"),
            ("guest_interface", "string"),
            ("nameservers", "array"),
            ("search", "array"),
            ("slot", "string"),
            ("vlan", "i64"),
        ]
    );
    assert_eq!(nic0["address"].to_string(), "10.0.20.10/24");
    assert_eq!(nic0["nameservers"].clone().into_array().expect("list")[0].to_string(), "10.0.0.53");
    let nic1 = map(&nics[1]);
    assert!(nic1["address"].is_unit() && nic1["gateway"].is_unit() && nic1["vlan"].is_unit(), "{nic1:?}");
    assert_eq!(nic1["nameservers"].clone().into_array().expect("list").len(), 0);

    let spec = map(&vm["spec"]);
    assert_eq!(
        types(&spec),
        [
            ("allow_replacement", "bool"),
            ("cores", "i64"),
            ("disk_gib", "i64"),
            ("disks", "array"),
            ("environment", "string"),
            ("memory_mib", "i64"),
            ("name", "string"),
            ("nics", "array"),
            ("node", "string"),
            ("startup_order", "i64"),
            ("storage", "string"),
            ("tags", "array"),
            ("template", "string"),
            ("vmid", "i64"),
        ]
    );
    assert_eq!(spec["vmid"].as_int(), Ok(9100));
    let disk = map(&spec["disks"].clone().into_array().expect("disks")[0]);
    assert_eq!(types(&disk), [("size_gib", "i64"), ("slot", "string"), ("storage", "string")]);
    let spec_nic = map(&spec["nics"].clone().into_array().expect("nics")[0]);
    assert_eq!(keys(&spec_nic), ["address", "bridge", "gateway", "guest_interface", "slot", "vlan"]);

    let wait = map(&vm["wait"]);
    assert_eq!(wait["task_ms"].as_int(), Ok(60000));
    assert!(wait["reboot_interval_s"].is_float(), "a FLOAT stays a FLOAT");
    assert_eq!(map(&vm["dns"])["kind"].to_string(), "a");
}

#[test]
fn unset_settings_are_empty_lists_and_units_and_an_unallocated_vmid_is_unit() {
    let vm = vm("db-0");
    for key in ["timezone", "fqdn", "snippet_storage", "dns", "wait"] {
        assert!(vm[key].is_unit(), "{key}: {:?}", vm[key]);
    }
    for key in ["packages", "authorized_keys"] {
        assert_eq!(vm[key].clone().into_array().expect(key).len(), 0, "{key}");
    }
    assert_eq!(map(&vm["ssh"])["user"].to_string(), super::DEFAULT_USER);
    let spec = map(&vm["spec"]);
    assert!(spec["vmid"].is_unit() && spec["disk_gib"].is_unit() && spec["startup_order"].is_unit(), "{spec:?}");
}
