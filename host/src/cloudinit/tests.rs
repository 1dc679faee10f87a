//! Rendering and validation of the snippets, without cloud-init: every
//! user-data key, YAML-special values, refused inputs, the private key kept out
//! of Debug and errors, static, DHCP, MAC-matched and VLAN network-data, the
//! instance id, the snippet names and `cicustom`, and resolv.conf through
//! `write_files`.

use super::*;
use crate::secrets::Secret;
use serde_yaml_ng::Value;

pub(super) const PRIVATE: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\n\
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n\
QyNTUxOQAAACBjb2ZmZWVjb2ZmZWVjb2ZmZWVjb2ZmZWVjb2ZmZWVjb2ZmAAAAkPAKEKEY\n\
-----END OPENSSH PRIVATE KEY-----";
pub(super) const HOST_PUB: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGNvZmZlZWNvZmZlZQ root@test-0";
pub(super) const OPS_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOpsKey ops: #1 \"laptop\" 'x'";

pub(super) fn user() -> UserData {
    let mut u = ManagementUser::new("ops", vec![OPS_KEY.to_string()]);
    u.groups = vec!["adm".into()];
    UserData {
        vm_name: "test-0".into(),
        hostname: "test-0".into(),
        fqdn: Some("test-0.lab.example".into()),
        user: u,
        keep_default_user: false,
        packages: vec!["qemu-guest-agent".into(), "nginx=1.22*".into()],
        package_update: true,
        timezone: Some("Europe/Berlin".into()),
        host_key: Some(HostKey { ed25519_private: Secret::new(PRIVATE.into()), ed25519_public: HOST_PUB.into() }),
    }
}

pub(super) fn nic(addr: &str, gw: &str) -> Interface {
    Interface {
        address: Some(addr.parse().unwrap()),
        gateway: Some(gw.parse().unwrap()),
        nameservers: vec!["192.0.2.53".parse().unwrap(), "2001:db8::53".parse().unwrap()],
        search: vec!["lab.example".into()],
        ..Interface::default()
    }
}

pub(super) fn net(interfaces: Vec<Interface>) -> NetworkData {
    NetworkData { vm_name: "test-0".into(), interfaces }
}

fn parse(s: &Snippet) -> Value {
    serde_yaml_ng::from_str(s.content.expose()).unwrap()
}

type Mutation = Box<dyn Fn(&mut UserData)>;

fn err_text(e: CloudInitError) -> String {
    e.to_string()
}

#[test]
fn user_data_has_the_header_and_every_key() {
    let s = render_user_data(&user()).unwrap();
    assert_eq!(s.file_name, "test-0-user.yaml");
    assert!(s.content.expose().starts_with("#cloud-config\n{"));
    assert_eq!(s.sha256, hex::encode(<sha2::Sha256 as sha2::Digest>::digest(s.content.as_bytes())));
    let v = parse(&s);
    assert_eq!(v["hostname"], "test-0");
    assert_eq!(v["fqdn"], "test-0.lab.example");
    assert_eq!(v["manage_etc_hosts"], true);
    assert_eq!(v["disable_root"], true);
    assert_eq!(v["ssh_pwauth"], false);
    assert_eq!(v["ssh_deletekeys"], true);
    assert!(v.get("ssh_genkeytypes").is_none());
    assert_eq!(v["package_update"], true);
    assert_eq!(v["packages"][1], "nginx=1.22*");
    assert_eq!(v["timezone"], "Europe/Berlin");
    let users = v["users"].as_sequence().unwrap();
    assert_eq!(users.len(), 1, "no `default` user unless asked");
    let ops = &users[0];
    assert_eq!(ops["name"], "ops");
    assert_eq!(ops["sudo"], "ALL=(ALL) NOPASSWD:ALL");
    assert_eq!(ops["shell"], "/bin/bash");
    assert_eq!(ops["lock_passwd"], true);
    assert_eq!(ops["groups"][0], "adm");
    assert_eq!(ops["ssh_authorized_keys"][0], OPS_KEY);
    assert_eq!(v["ssh_keys"]["ed25519_private"], format!("{PRIVATE}\n").as_str());
    assert_eq!(v["ssh_keys"]["ed25519_public"], HOST_PUB);
}

#[test]
fn optional_parts_are_left_out_and_default_user_is_kept_when_asked() {
    let mut d = user();
    d.fqdn = None;
    d.timezone = None;
    d.packages.clear();
    d.host_key = None;
    d.keep_default_user = true;
    d.user.sudo = SudoPolicy::None;
    d.user.groups.clear();
    let v = parse(&render_user_data(&d).unwrap());
    for key in ["fqdn", "timezone", "packages", "ssh_keys"] {
        assert!(v.get(key).is_none(), "{key} should be absent");
    }
    assert_eq!(v["ssh_deletekeys"], true, "the template's shared host keys are always deleted");
    assert_eq!(v["users"][0], "default");
    assert!(v["users"][1].get("sudo").is_none());
    assert!(v["users"][1].get("groups").is_none());
}

#[test]
fn yaml_special_and_quoted_values_survive_the_round_trip() {
    let mut d = user();
    // Plain `no`/`on`/dates change type in YAML 1.1 (PyYAML); see schema_tests for PyYAML itself.
    d.vm_name = "no".into();
    d.hostname = "no".into();
    d.fqdn = Some("no.on".into());
    d.packages = vec!["on".into(), "0755".into(), "2024-01-01".into(), "x:#y".into(), "a\"b'c".into()];
    d.user.ssh_authorized_keys.push("ssh-rsa AAAAB3Nz key: with # and \"quotes\" and 'single' {x} [y] &z *w".into());
    let s = render_user_data(&d).unwrap();
    let v = parse(&s);
    assert_eq!(v["hostname"], "no");
    assert_eq!(v["fqdn"], "no.on");
    let pkgs: Vec<&str> = v["packages"].as_sequence().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert_eq!(pkgs, ["on", "0755", "2024-01-01", "x:#y", "a\"b'c"]);
    assert_eq!(v["users"][0]["ssh_authorized_keys"][0], OPS_KEY);
    assert_eq!(v["users"][0]["ssh_authorized_keys"][1].as_str().unwrap(), d.user.ssh_authorized_keys[1]);
    // Why the documents are JSON: serde_yaml_ng would emit `no` plain, a boolean to YAML 1.1.
    assert_eq!(serde_yaml_ng::to_string("no").unwrap(), "no\n");
}

#[test]
fn values_that_would_break_the_document_or_login_are_refused() {
    let cases: Vec<(&str, Mutation)> = vec![
        ("hostname", Box::new(|d| d.hostname = "test-0\"\nruncmd: [x]".into())),
        ("hostname", Box::new(|d| d.hostname = "a:b".into())),
        ("fqdn", Box::new(|d| d.fqdn = Some("other.lab.example".into()))),
        ("ssh_authorized_keys entry", Box::new(|d| d.user.ssh_authorized_keys[0].push_str("\nssh-rsa AAAA evil"))),
        ("ssh_authorized_keys entry", Box::new(|d| d.user.ssh_authorized_keys[0] = "not a key".into())),
        ("management user", Box::new(|d| d.user.ssh_authorized_keys.clear())),
        ("management user name", Box::new(|d| d.user.name = "Ops Team".into())),
        ("management user name", Box::new(|d| d.user.name = "root".into())),
        ("package", Box::new(|d| d.packages.push("vim; rm -rf /".into()))),
        ("timezone", Box::new(|d| d.timezone = Some("../../etc/passwd".into()))),
        ("VM name", Box::new(|d| d.vm_name = "test-0,meta=local:snippets/x".into())),
        ("host key ed25519_public", Box::new(|d| d.host_key.as_mut().unwrap().ed25519_public = "ssh-rsa AAAA".into())),
    ];
    for (field, mutate) in cases {
        let mut d = user();
        mutate(&mut d);
        let msg = err_text(render_user_data(&d).unwrap_err());
        assert!(msg.contains(field) && msg.contains("VM "), "{field}: {msg}");
    }
}

#[test]
fn the_private_key_never_shows_in_debug_or_errors() {
    let d = user();
    let s = render_user_data(&d).unwrap();
    assert!(s.content.expose().contains("PAKEKEY"));
    for text in [format!("{d:?}"), format!("{s:?}")] {
        assert!(!text.contains("PAKEKEY") && !text.contains("BEGIN OPENSSH"), "{text}");
    }
    let mut bad = user();
    bad.host_key.as_mut().unwrap().ed25519_private = Secret::new("PAKEKEY-not-a-key-file".into());
    let msg = err_text(render_user_data(&bad).unwrap_err());
    assert!(msg.contains("ed25519_private") && msg.contains("secret") && !msg.contains("PAKEKEY"), "{msg}");
}

#[test]
fn static_network_keeps_the_prefix_and_sets_the_gateway_as_gateway4_not_a_route() {
    let s = render_network_data(&net(vec![nic("10.20.3.7/23", "10.20.2.1")])).unwrap();
    assert_eq!(s.file_name, "test-0-network.yaml");
    let v = parse(&s);
    assert_eq!(v["version"], 2);
    assert!(v.get("network").is_none(), "top-level `version: 2`, as the NoCloud docs show");
    let e = &v["ethernets"]["ens18"];
    assert_eq!(e["addresses"][0], "10.20.3.7/23");
    assert_eq!(e["dhcp4"], false);
    assert_eq!(e["gateway4"], "10.20.2.1");
    assert!(e.get("routes").is_none(), "ENI renders routes as `post-up route add` (net-tools): {e:?}");
    assert!(e.get("gateway6").is_none() && e.get("match").is_none());
    let v6 = parse(&render_network_data(&net(vec![nic("2001:db8:1::5/64", "2001:db8:1::1")])).unwrap());
    assert_eq!(v6["ethernets"]["ens18"]["gateway6"], "2001:db8:1::1");
    assert_eq!(e["nameservers"]["addresses"][1], "2001:db8::53");
    assert_eq!(e["nameservers"]["search"][0], "lab.example");
    assert!(v.get("vlans").is_none());
}

#[test]
fn gateway_outside_the_subnet_is_refused_naming_vm_and_both_values() {
    let e = render_network_data(&net(vec![nic("10.20.3.7/24", "10.20.2.1")])).unwrap_err();
    assert!(matches!(e, CloudInitError::GatewayOutsideSubnet { .. }));
    let msg = e.to_string();
    assert!(msg.contains("test-0") && msg.contains("10.20.2.1") && msg.contains("10.20.3.7/24"), "{msg}");
    // The same pair is fine once the inventory's prefix is /23: no hard-coded /24.
    render_network_data(&net(vec![nic("10.20.3.7/23", "10.20.2.1")])).unwrap();
    let v6 = render_network_data(&net(vec![nic("2001:db8:1::5/64", "2001:db8:2::1")])).unwrap_err();
    assert!(matches!(v6, CloudInitError::GatewayOutsideSubnet { .. }));
}

#[test]
fn dhcp_is_the_default_and_refuses_a_gateway() {
    let v = parse(&render_network_data(&net(vec![Interface::default()])).unwrap());
    let e = &v["ethernets"]["ens18"];
    assert_eq!(e["dhcp4"], true);
    assert!(e.get("addresses").is_none() && e.get("routes").is_none() && e.get("nameservers").is_none());
    let gw_only = Interface { gateway: Some("192.0.2.1".parse().unwrap()), ..Interface::default() };
    let msg = err_text(render_network_data(&net(vec![gw_only])).unwrap_err());
    assert!(msg.contains("DHCP"), "{msg}");
}

#[test]
fn two_nics_matched_by_mac_with_one_gateway() {
    let mut a = nic("192.0.2.10/24", "192.0.2.1");
    a.name = "lan".into();
    a.mac = Some("BC:24:11:00:00:01".into());
    let b = Interface {
        name: "storage".into(),
        mac: Some("bc:24:11:00:00:02".into()),
        address: Some("198.51.100.10/27".parse().unwrap()),
        mtu: Some(9000),
        ..Interface::default()
    };
    let v = parse(&render_network_data(&net(vec![a.clone(), b.clone()])).unwrap());
    assert_eq!(v["ethernets"]["lan"]["match"]["macaddress"], "bc:24:11:00:00:01");
    assert_eq!(v["ethernets"]["lan"]["set-name"], "lan");
    assert_eq!(v["ethernets"]["storage"]["addresses"][0], "198.51.100.10/27");
    assert_eq!(v["ethernets"]["storage"]["mtu"], 9000);
    assert!(v["ethernets"]["storage"].get("routes").is_none());
    let mut two_gw = b.clone();
    two_gw.gateway = Some("198.51.100.1".parse().unwrap());
    let msg = err_text(render_network_data(&net(vec![a.clone(), two_gw])).unwrap_err());
    assert!(msg.contains("one NIC only"), "{msg}");
    let mut same_name = b.clone();
    same_name.name = "lan".into();
    assert!(err_text(render_network_data(&net(vec![a.clone(), same_name])).unwrap_err()).contains("twice"));
    let mut same_mac = b;
    same_mac.mac = a.mac.clone();
    assert!(err_text(render_network_data(&net(vec![a, same_mac])).unwrap_err()).contains("two interfaces"));
}

#[test]
fn vlan_in_guest_moves_the_address_onto_a_vlan_entry() {
    let mut i = nic("192.0.2.10/24", "192.0.2.1");
    i.vlan_in_guest = Some(20);
    let v = parse(&render_network_data(&net(vec![i.clone()])).unwrap());
    let parent = &v["ethernets"]["ens18"];
    assert_eq!(parent["dhcp4"], false);
    assert!(parent.get("addresses").is_none() && parent.get("routes").is_none());
    let vlan = &v["vlans"]["ens18.20"];
    assert_eq!(vlan["id"], 20);
    assert_eq!(vlan["link"], "ens18");
    assert_eq!(vlan["addresses"][0], "192.0.2.10/24");
    assert_eq!(vlan["gateway4"], "192.0.2.1");
    i.vlan_in_guest = Some(4095);
    assert!(err_text(render_network_data(&net(vec![i])).unwrap_err()).contains("1-4094"));
}

#[test]
fn bad_network_inputs_are_refused() {
    assert!("10.0.0.1".parse::<Cidr>().is_err());
    assert!("10.0.0.1/33".parse::<Cidr>().is_err());
    assert!("10.0.0.1/0".parse::<Cidr>().is_err());
    assert_eq!("2001:db8::1/64".parse::<Cidr>().unwrap().to_string(), "2001:db8::1/64");
    assert!(err_text(render_network_data(&net(vec![])).unwrap_err()).contains("at least one NIC"));
    let network_addr = nic("10.0.0.0/24", "10.0.0.1");
    assert!(err_text(render_network_data(&net(vec![network_addr])).unwrap_err()).contains("network or broadcast"));
    let bad_mac = Interface { mac: Some("bc:24:11:00:00".into()), ..Interface::default() };
    assert!(err_text(render_network_data(&net(vec![bad_mac])).unwrap_err()).contains("MAC"));
    let bad_name = Interface { name: "ens18: {}".into(), ..Interface::default() };
    assert!(err_text(render_network_data(&net(vec![bad_name])).unwrap_err()).contains("interface name"));
    let mut bad_search = nic("10.0.0.5/24", "10.0.0.1");
    bad_search.search = vec!["lab example".into()];
    assert!(err_text(render_network_data(&net(vec![bad_search])).unwrap_err()).contains("search domain"));
    // A /31 point-to-point link has no network/broadcast address.
    render_network_data(&net(vec![nic("10.0.0.0/31", "10.0.0.1")])).unwrap();
}

#[test]
fn instance_id_is_sha1_of_user_then_network_and_meta_carries_it() {
    let u = render_user_data(&user()).unwrap();
    let n = render_network_data(&net(vec![nic("192.0.2.10/24", "192.0.2.1")])).unwrap();
    let id = instance_id(&u, &n);
    let mut joined = u.content.expose().to_string();
    joined.push_str(n.content.expose());
    assert_eq!(id, hex::encode(<sha1::Sha1 as sha1::Digest>::digest(joined.as_bytes())));
    assert_eq!(id.len(), 40);
    assert_ne!(id, instance_id(&n, &u), "order matters, as in PVE");
    let all = render_all(&user(), &net(vec![nic("192.0.2.10/24", "192.0.2.1")])).unwrap();
    assert_eq!(all.meta.file_name, "test-0-meta.yaml");
    let meta = parse(&all.meta);
    // render_all's user-data carries the resolv.conf write_files: the id is of what it rendered.
    assert_eq!(meta["instance-id"], instance_id(&all.user, &all.network).as_str());
    assert_eq!(meta["local-hostname"], "test-0");
    // Known vector: sha1("abc").
    let s = |t: &str| Snippet::new("x".into(), t.into());
    assert_eq!(instance_id(&s("a"), &s("bc")), "a9993e364706816aba3e25717850c26c9cd0d89d");
    let mut other = net(vec![Interface::default()]);
    other.vm_name = "test-1".into();
    assert!(err_text(render_all(&user(), &other).unwrap_err()).contains("same VM"));
}

#[test]
fn names_and_cicustom_use_only_the_canonical_vm_name() {
    let names = snippet_names("test-0").unwrap();
    assert_eq!(
        (names.user.as_str(), names.network.as_str(), names.meta.as_str()),
        ("test-0-user.yaml", "test-0-network.yaml", "test-0-meta.yaml")
    );
    assert_eq!(
        cicustom("local", &names).unwrap(),
        "user=local:snippets/test-0-user.yaml,network=local:snippets/test-0-network.yaml,meta=local:snippets/test-0-meta.yaml"
    );
    for bad in ["", "../etc", "a/b", "a,b", "a b", "-x"] {
        assert!(snippet_names(bad).is_err(), "{bad:?}");
    }
    for bad in ["Local", "local,x=y", "l", "local:", "local-"] {
        let msg = err_text(cicustom(bad, &names).unwrap_err());
        assert!(msg.contains("test-0") && msg.contains("storage"), "{msg}");
    }
}

#[test]
fn render_all_writes_the_nameservers_to_resolv_conf_through_write_files() {
    let all = render_all(&user(), &net(vec![nic("192.0.2.10/24", "192.0.2.1")])).unwrap();
    let v = parse(&all.user);
    let f = &v["write_files"][0];
    assert_eq!(f["path"], "/etc/resolv.conf");
    assert_eq!(f["permissions"], "0644");
    assert_eq!(
        f["content"].as_str().unwrap().lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>(),
        ["nameserver 192.0.2.53", "nameserver 2001:db8::53", "search lab.example"]
    );
    // No nameservers, no search: nothing is written (DHCP supplies them).
    let dhcp = render_all(&user(), &net(vec![Interface::default()])).unwrap();
    assert!(parse(&dhcp.user).get("write_files").is_none());
    // glibc reads three nameservers: a fourth is refused, naming the VM.
    let mut many = nic("192.0.2.10/24", "192.0.2.1");
    many.nameservers =
        ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"].iter().map(|a| a.parse().unwrap()).collect();
    let msg = err_text(render_all(&user(), &net(vec![many])).unwrap_err());
    assert!(msg.contains("test-0") && msg.contains("at most 3"), "{msg}");
}
