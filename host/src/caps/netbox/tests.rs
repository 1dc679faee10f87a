//! The `netbox` adapter end to end: against the real NetBox 4.7.3 the tests
//! share (`cradle_testkit::netbox::NetBox::shared`, started by `scripts/netbox`
//! when it is not running; CI installs it), through [`CapCtx`] and its guard
//! like a plugin's or a workflow's call, with the endpoint's token held by the
//! host; and the denials, which never reach the network.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cradle_testkit::netbox::{self as nb, NetBox, unique_name};
use serde_json::{Value, json};

use crate::caps::Grants;
use crate::caps::context::{CapCtx, Services};
use crate::caps::http::{EndpointAuth, EndpointConfig, Endpoints};
use crate::caps::policy::RunScope;
use crate::contract::bindings::cradle::host::netbox::{Host, JournalKind, MacWrite};
use crate::contract::bindings::cradle::host::types::{Entry, Error as WitError};
use crate::secrets::SecretRef;

/// The workflow grant the pipeline uses.
fn grants() -> Grants {
    toml::from_str("[netbox]\nendpoint = \"netbox\"\nstatuses = [\"active\", \"failed\"]").expect("grants")
}

/// `[endpoints.netbox]` at `url` with `token` in an owner-only file under `dir`.
fn endpoints(dir: &Path, url: &str, token: &str) -> Endpoints {
    let file = dir.join("netbox.token");
    std::fs::write(&file, token).expect("write token");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod token");
    let config = EndpointConfig {
        url: url.to_string(),
        token: Some(SecretRef::File(file)),
        auth: EndpointAuth::Bearer,
        ca_file: None,
        username: None,
    };
    Endpoints::new(&BTreeMap::from([("netbox".to_string(), config)]))
}

/// A test's context: its state directory, runtime and the workflow's caps.
struct Ctx {
    _dir: tempfile::TempDir,
    _rt: tokio::runtime::Runtime,
    caps: CapCtx,
}

fn ctx_at(grants: Grants, url: &str, token: &str) -> Ctx {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let services = Services { http: endpoints(dir.path(), url, token), ..Services::for_tests(dir.path(), &rt) };
    let caps = CapCtx::for_tests(grants, RunScope::default(), services, "netbox-test");
    Ctx { _dir: dir, _rt: rt, caps }
}

/// The shared real NetBox, under the pipeline's grant.
fn real() -> (NetBox, Ctx) {
    let netbox = NetBox::shared();
    let ctx = ctx_at(grants(), &netbox.url, &netbox.token);
    (netbox, ctx)
}

/// A context whose endpoint refuses connections: a call that reached the
/// network would fail `transient`, so a denial proves none was made.
fn offline(grants: Grants) -> Ctx {
    ctx_at(grants, "http://127.0.0.1:1", "nbt_000000000000.0000")
}

/// A MAC of QEMU's prefix unique to this call.
fn unique_mac() -> String {
    let name = unique_name("mac");
    let sum = name.bytes().fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
    format!("52:54:01:{:02x}:{:02x}:{:02x}", (sum >> 16) & 0xff, (sum >> 8) & 0xff, sum & 0xff)
}

/// A VM of a cluster of its own, named after `prefix`, and one interface `eth0`.
fn vm_with_interface(netbox: &NetBox, prefix: &str, status: &str, fields: &Value) -> (Value, Value) {
    let name = unique_name(prefix);
    let cluster = netbox.create_cluster(&name);
    let vm = netbox.create_vm(&name, &cluster, status, fields);
    let iface = netbox.create_vm_interface(&vm, "eth0");
    (vm, iface)
}

fn message(e: WitError) -> String {
    match e {
        WitError::Denied(m)
        | WitError::NotFound(m)
        | WitError::Conflict(m)
        | WitError::Invalid(m)
        | WitError::Transient(m)
        | WitError::Failed(m) => m,
    }
}

#[test]
fn read_vm_gives_status_cluster_custom_fields_and_the_primary_ip_with_its_interface() {
    let (netbox, mut ctx) = real();
    netbox.vm_custom_field("proxmox_node", "text");
    netbox.vm_custom_field("proxmox_vmid", "integer");
    let fields = json!({"proxmox_node": "pve1", "proxmox_vmid": 4242});
    let (vm, iface) = vm_with_interface(&netbox, "nbread", "staged", &fields);
    let ip = netbox.allocate_ip(&iface, "nbread.lab.example");
    netbox.patch_vm(&vm, &json!({"primary_ip4": nb::id(&ip)}));

    let read = ctx.caps.read_vm(nb::id(&vm)).expect("read-vm");
    assert_eq!(
        (read.id, read.name.as_str(), read.status.as_str()),
        (nb::id(&vm), vm["name"].as_str().unwrap_or(""), "staged")
    );
    assert_eq!(read.cluster.as_deref(), vm["name"].as_str(), "the cluster is named like the VM");
    assert_eq!(read.custom_fields.proxmox_node.as_deref(), Some("pve1"));
    assert_eq!(read.custom_fields.proxmox_vmid, Some(4242));
    let primary = read.primary_ip4.expect("primary IPv4");
    assert_eq!((primary.id, primary.address.as_str()), (nb::id(&ip), ip["address"].as_str().unwrap_or("")));
    assert_eq!(primary.vm_interface, Some(nb::id(&iface)));
    assert_eq!(primary.dns_name, "nbread.lab.example");
    assert_eq!(format!("{:?}", ctx.caps.read_ip(nb::id(&ip)).expect("read-ip")), format!("{primary:?}"));
}

#[test]
fn a_vm_that_does_not_exist_is_not_found_and_the_message_names_it() {
    let (_netbox, mut ctx) = real();
    let e = ctx.caps.read_vm(2_000_000_000).expect_err("no such VM");
    assert!(matches!(e, WitError::NotFound(_)), "{e:?}");
    assert!(message(e).contains("NetBox: virtual machine 2000000000: HTTP 404"));
}

#[test]
fn interfaces_list_the_vms_interfaces_with_their_macs() {
    let (netbox, mut ctx) = real();
    let (vm, iface) = vm_with_interface(&netbox, "nbifs", "planned", &json!({}));
    let second = netbox.create_vm_interface(&vm, "eth1");
    let mac = unique_mac();
    netbox.patch(&format!("/api/virtualization/interfaces/{}/", nb::id(&second)), &json!({"mac_address": mac}));

    let found = ctx.caps.interfaces(nb::id(&vm)).expect("interfaces");
    let got: Vec<(u64, &str, Option<&str>)> = found.iter().map(|i| (i.id, i.name.as_str(), i.mac.as_deref())).collect();
    let upper = mac.to_uppercase();
    assert_eq!(got, [(nb::id(&iface), "eth0", None), (nb::id(&second), "eth1", Some(upper.as_str()))]);
}

#[test]
fn set_mac_by_the_interface_field_reads_it_back() {
    let (netbox, mut ctx) = real();
    let (_, iface) = vm_with_interface(&netbox, "nbmacf", "staged", &json!({}));
    let mac = unique_mac();
    ctx.caps.set_mac(nb::id(&iface), mac.clone(), MacWrite::Field).expect("set-mac field");
    let read = netbox.interface_mac(&iface);
    assert_eq!(read.mac_address.as_deref(), Some(mac.to_uppercase().as_str()));
    // Again, in another case: NetBox already has it, nothing new is made.
    ctx.caps.set_mac(nb::id(&iface), mac.to_uppercase(), MacWrite::Auto).expect("set-mac auto (4.7: field)");
    assert_eq!(netbox.interface_mac(&iface).mac_addresses, vec![mac.to_uppercase()]);
}

#[test]
fn set_mac_by_the_mac_address_object_makes_it_primary_and_reuses_it_when_repeated() {
    let (netbox, mut ctx) = real();
    let (_, iface) = vm_with_interface(&netbox, "nbmaco", "staged", &json!({}));
    let mac = unique_mac();
    ctx.caps.set_mac(nb::id(&iface), mac.clone(), MacWrite::Objects).expect("set-mac objects");
    let read = netbox.interface_mac(&iface);
    assert_eq!(read.mac_address.as_deref(), Some(mac.to_uppercase().as_str()));
    let primary = read.primary_mac_address_id.expect("primary_mac_address");
    ctx.caps.set_mac(nb::id(&iface), mac.clone(), MacWrite::Objects).expect("repeated");
    let again = netbox.interface_mac(&iface);
    assert_eq!((again.primary_mac_address_id, again.mac_addresses.len()), (Some(primary), 1), "the object is reused");
}

#[test]
fn set_mac_refuses_a_malformed_mac_before_sending() {
    let mut ctx = offline(grants());
    let e = ctx.caps.set_mac(7, "52:54:00:12:34".into(), MacWrite::Field).expect_err("short");
    assert!(matches!(&e, WitError::Invalid(m) if m.contains("is not a MAC address")), "{e:?}");
}

#[test]
fn set_status_writes_a_granted_status() {
    let (netbox, mut ctx) = real();
    let (vm, _) = vm_with_interface(&netbox, "nbstatus", "staged", &json!({}));
    ctx.caps.set_status(nb::id(&vm), "active".into()).expect("set-status active");
    assert_eq!(netbox.vm(&vm)["status"]["value"], "active");
}

#[test]
fn journal_writes_an_entry_of_its_kind() {
    let (netbox, mut ctx) = real();
    let (vm, _) = vm_with_interface(&netbox, "nbjournal", "staged", &json!({}));
    ctx.caps.journal(nb::id(&vm), JournalKind::Warning, "cradle: careful".into()).expect("journal");
    ctx.caps.journal(nb::id(&vm), JournalKind::Success, "cradle: done".into()).expect("journal");
    let read: Vec<(String, String)> = netbox
        .vm_journal(&vm)
        .iter()
        .map(|e| (e["kind"]["value"].as_str().unwrap_or("").into(), e["comments"].as_str().unwrap_or("").into()))
        .collect();
    let want = [("warning", "cradle: careful"), ("success", "cradle: done")];
    assert_eq!(read, want.map(|(k, c)| (k.to_string(), c.to_string())));
}

#[test]
fn list_vms_finds_the_vms_of_a_status_by_filter() {
    let (netbox, mut ctx) = real();
    let (vm, _) = vm_with_interface(&netbox, "nblist", "staged", &json!({}));
    let name = vm["name"].as_str().unwrap_or("").to_string();
    let filters = vec![Entry { key: "name".into(), value: name.clone() }];
    let found = ctx.caps.list_vms("staged".into(), filters.clone(), 10).expect("list-vms");
    assert_eq!(found.iter().map(|v| (v.id, v.name.as_str())).collect::<Vec<_>>(), [(nb::id(&vm), name.as_str())]);
    assert!(ctx.caps.list_vms("active".into(), filters, 10).expect("list-vms").is_empty());
    let reserved = vec![Entry { key: "status".into(), value: "active".into() }];
    let e = ctx.caps.list_vms("staged".into(), reserved, 10).expect_err("reserved");
    assert!(message(e).contains("filter `status` is set by cradle itself"));
}

#[test]
fn a_refused_token_is_denied_and_never_named() {
    let netbox = NetBox::shared();
    let token = "nbt_000000000000.0000000000000000000000000000000000000000";
    let mut ctx = ctx_at(grants(), &netbox.url, token);
    let e = ctx.caps.read_vm(1).expect_err("refused");
    assert!(matches!(e, WitError::Denied(_)), "{e:?}");
    let m = message(e);
    assert!(m.contains("HTTP 403") && !m.contains(token) && !m.contains("0000000000000000"), "{m}");
}

#[test]
fn every_call_without_a_netbox_grant_is_denied_before_any_request() {
    let mut ctx = offline(Grants::default());
    let results = [
        ctx.caps.read_vm(1).map(drop),
        ctx.caps.read_ip(1).map(drop),
        ctx.caps.interfaces(1).map(drop),
        ctx.caps.list_vms("staged".into(), vec![], 10).map(drop),
        ctx.caps.set_mac(1, "52:54:00:12:34:56".into(), MacWrite::Auto),
        ctx.caps.set_status(1, "active".into()),
        ctx.caps.journal(1, JournalKind::Info, "x".into()),
    ];
    for r in results {
        let e = r.expect_err("no grant");
        assert!(matches!(&e, WitError::Denied(m) if m.contains("add [workflow.grants.netbox]")), "{e:?}");
    }
}

#[test]
fn a_status_the_grant_does_not_list_is_denied_before_any_request() {
    let mut ctx = offline(grants());
    let e = ctx.caps.set_status(1, "decommissioning".into()).expect_err("not listed");
    assert!(
        matches!(&e, WitError::Denied(m) if m.contains("VM status `decommissioning` is not in workflow.grants.netbox.statuses")),
        "{e:?}"
    );
    // A listed one is sent (and fails at the network: nothing listens there).
    let e = ctx.caps.set_status(1, "failed".into()).expect_err("offline");
    assert!(!matches!(e, WitError::Denied(_)), "{e:?}");
}

#[test]
fn with_clusters_granted_a_vm_of_another_cluster_is_denied_and_left_unchanged() {
    let netbox = NetBox::shared();
    let (mine, mine_iface) = vm_with_interface(&netbox, "nbmine", "staged", &json!({}));
    let (other, other_iface) = vm_with_interface(&netbox, "nbother", "staged", &json!({}));
    // Each VM has a cluster of its own, named like it.
    let granted = mine["name"].as_str().unwrap_or("").to_string();
    let g: Grants = toml::from_str(&format!(
        "[netbox]\nendpoint = \"netbox\"\nstatuses = [\"active\"]\nclusters = [\"{granted}\"]"
    ))
    .expect("grants");
    let mut ctx = ctx_at(g, &netbox.url, &netbox.token);

    let denied = |e: WitError| matches!(&e, WitError::Denied(m) if m.contains("which is not in workflow.grants.netbox.clusters"));
    let other_id = nb::id(&other);
    assert!(denied(ctx.caps.set_status(other_id, "active".into()).expect_err("status")));
    assert!(denied(ctx.caps.set_mac(nb::id(&other_iface), unique_mac(), MacWrite::Field).expect_err("mac")));
    assert!(denied(ctx.caps.journal(other_id, JournalKind::Info, "x".into()).expect_err("journal")));
    assert!(denied(ctx.caps.read_vm(other_id).map(drop).expect_err("read")));
    assert!(denied(ctx.caps.interfaces(other_id).map(drop).expect_err("interfaces")));
    assert_eq!(netbox.vm(&other)["status"]["value"], "staged", "no status written");
    assert_eq!(netbox.interface_mac(&other_iface).mac_address, None, "no MAC written");
    assert!(netbox.vm_journal(&other).is_empty(), "no journal entry");

    // The granted cluster's VM goes through.
    ctx.caps.set_mac(nb::id(&mine_iface), unique_mac(), MacWrite::Field).expect("granted cluster");
    ctx.caps.set_status(nb::id(&mine), "active".into()).expect("granted cluster");
    assert_eq!(netbox.vm(&mine)["status"]["value"], "active");
}
