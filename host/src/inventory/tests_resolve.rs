//! Resolving hosts into plans: identity, hardware, NICs, bad values.

use std::net::IpAddr;
use std::path::Path;

use serde_json::json;

use super::*;

fn homelab(file: &str) -> Inventory {
    Inventory::load(&fixtures().join("homelab").join(file)).expect("fixture loads")
}

fn opts() -> ResolveOptions {
    ResolveOptions { environment: "test".into(), ..ResolveOptions::default() }
}

fn plan(inv: &Inventory, host: &str) -> VmPlan {
    resolve(inv, host, &opts()).unwrap_or_else(|e| panic!("{host}: {e}"))
}

/// An in-memory inventory whose `[all:vars]` make every host a valid VM;
/// `extra` adds sections or overrides.
fn inv(extra: &str) -> Inventory {
    let text = format!(
        "{extra}\n[all:vars]\nvms_os=debian12\ntarget_node=pve1\n\
         global_os={{'debian12': {{'template': 'debian-12-cloud', 'storage': 'local-lvm', 'cores': 1, 'memory': 1024}}}}\n\
         vms_config={{'nic0': {{'bridge': 'vmbr0', 'ip': 'dhcp'}}}}\n"
    );
    Inventory::from_ini(&text, Path::new("hosts.ini")).expect("valid INI")
}

fn err(inv: &Inventory, host: &str) -> String {
    resolve(inv, host, &opts()).expect_err(host).to_string()
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

#[test]
fn a_shared_test_host_resolves_from_groups_files_and_templates() {
    let p = plan(&homelab("hosts.ini"), "test-0");
    assert_eq!((p.name.as_str(), p.vmid, p.node.as_str()), ("test-0", Some(9100), "pve1"));
    assert_eq!(p.vmid_source, VmidSource::BaseIndex { group: "test".into(), base: 9100, index: 0 });
    assert_eq!((p.os.key.as_str(), p.os.template.as_str()), ("debian12", "debian-12-cloud"));
    assert_eq!((p.cores, p.memory_mib, p.disk_gib, p.storage.as_str()), (2, 2048, Some(20), "local-lvm"));
    let nic = &p.nics[0];
    assert_eq!((nic.slot.as_str(), nic.bridge.as_str()), ("net0", "vmbr0"), "flat nic0 keys are kept");
    assert_eq!(nic.vlan, Some(20), "network.nic0 wins over nic0");
    assert_eq!(nic.address.map(|a| a.to_string()).as_deref(), Some("10.0.20.10/24"));
    assert_eq!(nic.gateway, Some(ip("10.0.20.1")));
    assert_eq!(nic.nameservers, vec![ip("10.0.10.1"), ip("10.0.10.2")]);
    assert_eq!((nic.search.clone(), nic.guest_interface.as_str()), (vec!["lab.example".to_string()], "ens18"));
    assert_eq!((p.tags.clone(), p.startup_order), (vec!["test".to_string(), "shared".into()], Some(20)));
    assert_eq!(p.ssh, SshTarget { host: "10.0.20.10".into(), user: None, port: 22 });
    assert_eq!((p.state, p.use_terraform, p.terraform_allow_replacement), (VmState::Present, false, false));
    assert_eq!(p.finalization_state_dir, Some("/var/lib/cradle/finalization".into()));
    assert_eq!(p.environment, "test");
}

#[test]
fn host_vars_pick_another_os_and_its_template_settings() {
    let p = plan(&homelab("hosts.ini"), "test-2");
    assert_eq!((p.os.template.as_str(), p.vmid), ("ubuntu-24.04-cloud", Some(9102)));
    assert_eq!(p.nics[0].guest_interface, "enp6s18");
    assert_eq!(p.memory_mib, 2048, "vms_config.memory wins over global_os");
}

#[test]
fn production_hosts_use_explicit_vmids_and_their_group_settings() {
    let inv = homelab("hosts.ini");
    let web1 = plan(&inv, "web-1");
    assert_eq!((web1.vmid, web1.node.as_str()), (Some(3021), "pve1"));
    assert_eq!(web1.vmid_source, VmidSource::Explicit { variable: "vms_vmid".into() });
    assert_eq!((web1.memory_mib, web1.storage.as_str(), web1.use_terraform), (8192, "ceph-vm", true));
    assert_eq!(web1.nics[0].address.map(|a| a.to_string()).as_deref(), Some("10.0.30.21/23"), "from netmask");
    assert_eq!(web1.nics[0].nameservers.len(), 2);
    assert_eq!(web1.terraform_lock_root, Some("/var/lib/cradle/terraform-locks".into()));
    assert_eq!(plan(&inv, "web-2").node, "pve2", "inline host vars beat group_vars");
    let db = plan(&inv, "db-1");
    assert_eq!((db.name.as_str(), db.vmid, db.node.as_str(), db.cores), ("pg-primary", Some(3031), "pve3", 8));
    assert_eq!(db.disks, vec![Disk { slot: "scsi1".into(), storage: "ceph-data".into(), size_gib: 200 }]);
    assert_eq!(db.nics[0].vlan, Some(30));
}

#[test]
fn ini_and_yaml_resolve_to_identical_plans() {
    let (a, b) = (homelab("hosts.ini"), homelab("hosts.yml"));
    let vms = a.select(Some("vms")).expect("vms");
    assert_eq!(resolve_selected(&a, &vms, &opts()).expect("ini"), resolve_selected(&b, &vms, &opts()).expect("yaml"));
}

#[test]
fn vmid_base_plus_index_does_not_depend_on_the_limit() {
    let lab = homelab("hosts.ini");
    let all = resolve_selected(&lab, &lab.select(Some("test")).expect("test"), &opts()).expect("all");
    let ids: Vec<Option<u32>> = all.iter().map(|p| p.vmid).collect();
    assert_eq!(ids, [Some(9100), Some(9101), Some(9102), Some(9103)]);
    for (limit, want) in [("test-2", 9102), ("test-3:!test-0", 9103), ("test-?:&test-1", 9101)] {
        let hosts = lab.select(Some(limit)).expect("limit");
        let plans = resolve_selected(&lab, &hosts, &opts()).expect("plans");
        assert!(plans.iter().any(|p| p.vmid == Some(want)), "{limit}");
    }
    // A base on a parent group counts the hosts of all its children, in order.
    let app = inv("[web]\nw1\nw2\n[db]\nd1\n[app:children]\nweb\ndb\n[app:vars]\nvms_vmid_base=500\n");
    let ids: Vec<_> = ["w1", "w2", "d1"].iter().map(|h| plan(&app, h).vmid).collect();
    assert_eq!(ids, [Some(500), Some(501), Some(502)]);
}

#[test]
fn a_host_without_vmid_is_left_to_nextid() {
    let p = plan(&inv("[g]\nh1\n"), "h1");
    assert_eq!((p.vmid, &p.vmid_source), (None, &VmidSource::Nextid));
    assert!(p.vm_spec(None).is_err());
    assert_eq!(p.vm_spec(Some(123)).expect("spec").vmid, Some(123));
}

#[test]
fn vmid_rules_refuse_ambiguity() {
    let e = err(&inv("[g]\nh1 vms_vmid_base=900\n"), "h1");
    assert!(e.contains("vms_vmid_base") && e.contains("set vms_vmid instead"), "{e}");
    let e = err(&inv("[g]\nh1 vms_vmid=900 vmid=901\n"), "h1");
    assert!(e.contains("the same value as vms_vmid (900)"), "{e}");
    let e = err(&inv("[g]\nh1 vms_vmid=99\n"), "h1");
    assert!(e.contains("vms_vmid = 99") && e.contains("100..999999999"), "{e}");
}

#[test]
fn derived_values_say_what_they_were_derived_from() {
    // A name taken from an FQDN hostname was never set: no "set in not set".
    let e = err(&inv("[g]\nweb.lab.example\n"), "web.lab.example");
    assert!(e.contains("vms_name = \"web.lab.example\" (derived from the inventory hostname"), "{e}");
    assert!(!e.contains("set in"), "{e}");
    // base + index past Proxmox's range names both terms and the group.
    let e = err(&inv("[g]\nh0\nh1\n[g:vars]\nvms_vmid_base=999999999\n"), "h1");
    assert!(
        e.contains(
            "vms_vmid = 1000000000 (derived from vms_vmid_base + index: 999999999 (set in [g:vars] in hosts.ini:"
        ) && e.contains("+ 1, the host's position in group `g`)")
            && e.contains("lower vms_vmid_base"),
        "{e}"
    );
}

#[test]
fn resolving_a_large_group_walks_it_once_not_once_per_host() {
    let walks = || super::build::GROUP_WALKS.with(std::cell::Cell::get);
    let hosts: String = (0..3000).map(|i| format!("vm-{i}\n")).collect();
    let i = inv(&format!("[big]\n{hosts}[big:vars]\nvms_vmid_base=10000\n"));
    let before = walks();
    for (host, want) in [("vm-0", 10000), ("vm-1234", 11234), ("vm-2999", 12999)] {
        assert_eq!(plan(&i, host).vmid, Some(want), "{host}");
    }
    // `--limit vm-7` still checks every host's identity (invariant 6).
    let one = resolve_selected(&i, &i.select(Some("vm-7")).expect("vm-7"), &opts()).expect("one host");
    assert_eq!(one[0].vmid, Some(10007));
    let all = resolve_selected(&i, &i.select(None).expect("all"), &opts()).expect("all hosts");
    assert_eq!(all.len(), 3000);
    assert!(all.iter().enumerate().all(|(n, p)| p.vmid == Some(10000 + n as u32)));
    // One walk builds the group's position table; a walk per host (the
    // quadratic loading of 10,000 hosts) would be thousands.
    assert_eq!(walks() - before, 1, "walks of group `big`");
}

#[test]
fn two_hosts_on_one_vmid_or_name_are_refused() {
    let i = inv("[g]\nh1 vms_vmid=900\nh2 vms_vmid=900\n");
    let e = resolve_selected(&i, &i.select(None).expect("all"), &opts()).expect_err("dup").to_string();
    assert!(e.contains("`h1` and `h2` both resolve to VMID 900"), "{e}");
    // The collision is found even when --limit selects only one of the two.
    let i = inv("[test]\nt0\nt1\n[test:vars]\nvms_vmid_base=700\n[prod]\np1 vms_vmid=701\n");
    let e = resolve_selected(&i, &i.select(Some("t1")).expect("t1"), &opts()).expect_err("dup").to_string();
    assert!(e.contains("`t1` and `p1` both resolve to VMID 701"), "{e}");
    let i = inv("[g]\nh1 vms_name=db\nh2 vms_name=DB\n");
    let e = resolve_selected(&i, &i.select(None).expect("all"), &opts()).expect_err("dup").to_string();
    assert!(e.contains("`h1` and `h2` both resolve to the VM name `DB`"), "{e}");
}

#[test]
fn an_unknown_os_key_names_the_available_ones() {
    let e = err(&inv("[g]\nh1 vms_os=centos7\n"), "h1");
    assert!(
        e.contains("host `h1`: vms_os = \"centos7\"") && e.contains("one of the keys of global_os: debian12"),
        "{e}"
    );
    let e = err(&homelab("hosts.ini"), "pve1");
    assert!(e.contains("target_node is not set"), "a node is not a VM: {e}");
}

#[test]
fn bad_values_name_host_variable_value_and_form() {
    let nic = |extra: &str| format!("[g]\nh1 vms_config=\"{{'nic0': {{'bridge': 'vmbr0', {extra}}}}}\"\n");
    let cases: Vec<(String, &str)> = vec![
        (
            "[g]\nh1 vms_config=\"{'memory': 'lots', 'nic0': {'bridge': 'b', 'ip': 'dhcp'}}\"".into(),
            "vms_config.memory = \"lots\"",
        ),
        (
            "[g]\nh1 vms_config=\"{'cores': 0, 'nic0': {'bridge': 'b', 'ip': 'dhcp'}}\"".into(),
            "a number of cores, 1..512",
        ),
        (nic("'ip': '10.0.20.300/24'"), "vms_config.nic0.ip = \"10.0.20.300/24\""),
        (nic("'ip': '10.0.20.5/33'"), "the prefix must be 1..32"),
        (nic("'ip': '10.0.20.5'"), "cradle never assumes /24"),
        (nic("'ip': '10.0.20.5', 'netmask': '255.0.255.0'"), "contiguous netmask"),
        (nic("'ip': '10.0.20.5/24', 'prefix': 16"), "the same prefix"),
        (nic("'ip': 'dhcp', 'vlan': 4095"), "vms_config.nic0.vlan = 4095"),
        (nic("'ip': 'dhcp', 'gateway': '10.0.0.1'"), "no gateway with ip: dhcp"),
        (nic("'ip': 'dhcp', 'nameservers': ['ns1']"), "an IP address"),
        ("[g]\nh1 vm_state=running".into(), "vm_state = \"running\""),
        ("[g]\nh1 ansible_port=70000".into(), "a TCP port"),
        ("[g]\nh1 vms_use_terraform=maybe".into(), "a boolean"),
        ("[g]\nh1 vms_name=db.lab.example".into(), "a DNS label"),
        // pve_verify_dns_name refuses these too (pve-common JSONSchema.pm:678-681).
        ("[g]\nh1 vms_name=web-".into(), "vms_name = \"web-\""),
        ("[g]\nh1 vms_name=-web".into(), "no hyphen first or last"),
        ("[g]\nh1 target_node=''".into(), "target_node = \"\""),
        ("[g]\nh1 vms_config=\"{'tags': ['Bad Tag!'], 'nic0': {'bridge': 'b', 'ip': 'dhcp'}}\"".into(), "Proxmox tags"),
        (
            "[g]\nh1 vms_config=\"{'disks': [{'size': 'huge'}], 'nic0': {'bridge': 'b', 'ip': 'dhcp'}}\"".into(),
            "vms_config.disks[0].size",
        ),
        // Written into the NIC and drive values: a `,` would add options (pve-bridge-id, pve-storage-id).
        (
            "[g]\nh1 vms_config=\"{'nic0': {'bridge': 'vmbr0,firewall=0', 'ip': 'dhcp'}}\"".into(),
            "a Proxmox bridge name",
        ),
        (
            "[g]\nh1 vms_config=\"{'disks': [{'size': 8, 'storage': 'local,cache=unsafe'}], 'nic0': {'bridge': 'b', 'ip': 'dhcp'}}\"".into(),
            "a Proxmox storage id",
        ),
        ("[g]\nh1 vms_config=\"{'storage': 'local-', 'nic0': {'bridge': 'b', 'ip': 'dhcp'}}\"".into(), "storage id"),
    ];
    for (text, needle) in cases {
        let e = err(&inv(&text), "h1");
        assert!(e.starts_with("host `h1`: ") && e.contains(needle) && e.contains("expected"), "{text}\n{e}");
        assert!(e.contains("hosts.ini:2"), "the origin is named: {e}");
    }
    let e = err(&inv("[g]\nh1 vms_config=\"{'nic0': {'ip': 'dhcp'}}\"\n"), "h1");
    assert!(e.contains("vms_config.nic0.bridge is not set"), "{e}");
}

#[test]
fn jinja_expressions_other_than_plain_references_are_refused() {
    let e = err(&inv("[g]\nh1 target_node=\"{{ node | default('pve1') }}\"\n"), "h1");
    assert!(e.contains("host `h1`: target_node") && e.contains("only plain variable references"), "{e}");
    let e = err(&inv("[g]\nh1 vms_name=\"{{ nope }}\"\n"), "h1");
    assert!(e.contains("vms_name") && e.contains("`nope`, which is not defined"), "{e}");
    let p = plan(&inv("[g]\nh1 site=lab vms_name=\"{{ site }}-{{ inventory_hostname }}\"\n"), "h1");
    assert_eq!(p.name, "lab-h1");
}

#[test]
fn vault_values_are_never_used() {
    let text = "all:\n  hosts:\n    h1:\n      target_node: !vault |\n        $ANSIBLE_VAULT;1.1;AES256\n";
    let i = Inventory::from_yaml(text, Path::new("h.yml")).expect("yaml");
    let e = resolve(&i, "h1", &opts()).expect_err("vault").to_string();
    assert!(e.contains("<vault-encrypted>") && e.contains("does not decrypt Ansible Vault"), "{e}");
}

#[test]
fn the_vm_spec_matches_the_wit_record() {
    let p = plan(&homelab("hosts.yml"), "db-1");
    let spec = serde_json::to_value(p.vm_spec(None).expect("spec")).expect("json");
    let mut keys: Vec<&str> = spec.as_object().expect("map").keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "allow_replacement",
            "cores",
            "disk_gib",
            "disks",
            "environment",
            "memory_mib",
            "name",
            "nics",
            "node",
            "startup_order",
            "storage",
            "tags",
            "template",
            "vmid"
        ]
    );
    assert_eq!(
        spec["nics"][0],
        json!({"slot": "net0", "bridge": "vmbr1", "vlan": 30, "address": "10.0.30.31/23", "gateway": "10.0.30.1", "guest_interface": "ens18"})
    );
    assert!(p.vm_spec(Some(1)).is_err(), "a probed VMID must not replace the inventory's");
}

/// The worked example of docs/VM-TYPES.md: a VM type needs no `global_os`,
/// and its VMID base may come from the type's own variable through a template.
const TYPED: &str = "\
all:
  children:
    homeassistant:
      vars:
        vms_type: homeassistant
        target_node: pve1
        homeassistant_vm_id: 200
        vms_vmid_base: '{{ homeassistant_vm_id }}'
        vms_config: { cores: 2, memory: 2048, disk: 32G, storage: local-lvm, nic0: { bridge: vmbr0, ip: dhcp } }
      hosts:
        ha-1: {}
        ha-2: {}
";

#[test]
fn a_vm_type_needs_no_os_template_and_takes_its_vmid_from_its_own_variable() {
    let typed = Inventory::from_yaml(TYPED, Path::new("hosts.yml")).expect("inventory");
    let a = plan(&typed, "ha-1");
    let b = plan(&typed, "ha-2");
    assert_eq!((a.vm_type.as_deref(), a.vmid, b.vmid), (Some("homeassistant"), Some(200), Some(201)));
    assert_eq!((a.os.template.as_str(), a.disk_gib, a.memory_mib), ("", Some(32), 2048));
    // A host without vms_type still needs its OS.
    let plain = inv("[lab]\nweb-0\n");
    assert_eq!(plan(&plain, "web-0").vm_type, None);
}

#[test]
fn a_vms_type_that_is_no_workflow_name_is_refused() {
    for bad in ["Home Assistant", "provision", "../x"] {
        let text = TYPED.replace("vms_type: homeassistant", &format!("vms_type: '{bad}'"));
        let inv = Inventory::from_yaml(&text, Path::new("hosts.yml")).expect("inventory");
        let e = resolve(&inv, "ha-1", &opts()).expect_err(bad).to_string();
        assert!(e.contains("vms_type") && e.contains("workflows/<type>.rhai"), "{bad}: {e}");
    }
}
