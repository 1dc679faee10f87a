//! The real NetBox 4.7.3 the NetBox tests share (`scripts/netbox`,
//! `cradle_testkit::netbox`, docs/NETBOX.md) does what cradle relies on: its
//! v2 token works and it is the expected version; a VM interface's MAC can be
//! written both ways (4.7's writable `mac_address`, and ≥ 4.2's MACAddress
//! object plus `primary_mac_address`); a PATCH of a VM's status from planned to
//! staged makes the RQ worker deliver a webhook to a listener on 127.0.0.1,
//! signed with HMAC-SHA512 of its raw body, with 4.7's payload keys and both
//! snapshots; VMs carry custom fields and IPs; journal entries read back.
//!
//! Every test makes its own objects with unique names; the event rule fires
//! only for its own VM's name. Started (once, under a lock) when no instance
//! answers; `scripts/netbox install` must have run (the test says so if not).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::sync::mpsc;
use std::time::Duration;

use cradle_testkit::netbox::ring::{digest, hmac};
use cradle_testkit::netbox::{self, NetBox, unique_name};
use serde_json::{Value, json};

/// How long a webhook may take to arrive before the test gives up (a bound on
/// a hang, not a measurement: the worker delivers within seconds).
const DELIVERY_BOUND: Duration = Duration::from_secs(300);

/// A MAC address of QEMU's prefix, different for every call of every test process.
fn unique_mac() -> String {
    let name = unique_name("mac");
    let digest = digest::digest(&digest::SHA256, name.as_bytes());
    let b = digest.as_ref();
    format!("52:54:00:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2])
}

/// Lower-case hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A cluster, and in it a VM with `status`, both named after `prefix`.
fn vm(nb: &NetBox, prefix: &str, status: &str) -> (String, Value) {
    let name = unique_name(prefix);
    let cluster = nb.create_cluster(&name);
    let vm = nb.create_vm(&name, &cluster, status, &json!({}));
    (name, vm)
}

#[test]
fn v2_token_authenticates_and_status_reports_netbox_4_7_3() {
    let nb = NetBox::shared();
    let status = nb.status();
    assert_eq!(status["netbox-version"], netbox::VERSION, "{status}");
    assert!(status["rq-workers-running"].as_u64().unwrap_or(0) >= 1, "no RQ worker, no webhooks: {status}");
    assert!(nb.token.starts_with("nbt_"), "a v2 token is nbt_<key>.<token>");

    // The token is what lets the request in.
    let wrong = NetBox::new(&nb.url, "nbt_000000000000.0000000000000000000000000000000000000000");
    let refused = wrong.request("GET", "/api/status/", None);
    assert_eq!(refused.status, 403, "{}", refused.body);
}

#[test]
fn patching_mac_address_creates_the_primary_mac_address_object() {
    let nb = NetBox::shared();
    let (_, vm) = vm(&nb, "mac47", "planned");
    let iface = nb.create_vm_interface(&vm, "eth0");
    let mac = unique_mac();

    let patched =
        nb.patch(&format!("/api/virtualization/interfaces/{}/", netbox::id(&iface)), &json!({"mac_address": mac}));
    assert_eq!(patched["mac_address"], mac.to_uppercase(), "{patched}");

    let read = nb.interface_mac(&iface);
    assert_eq!(read.mac_address.as_deref(), Some(mac.to_uppercase().as_str()));
    assert_eq!(read.mac_addresses, vec![mac.to_uppercase()]);
    let primary = read.primary_mac_address_id.expect("4.7 sets primary_mac_address");
    let object = nb.get(&format!("/api/dcim/mac-addresses/{primary}/"));
    assert_eq!(object["assigned_object_type"], netbox::VM_INTERFACE_OBJECT_TYPE, "{object}");
    assert_eq!(object["assigned_object_id"], netbox::id(&iface), "{object}");
    assert_eq!(object["is_primary"], true, "{object}");
}

#[test]
fn mac_address_object_then_primary_mac_address_sets_the_interface_mac() {
    let nb = NetBox::shared();
    let (_, vm) = vm(&nb, "mac42", "planned");
    let iface = nb.create_vm_interface(&vm, "eth0");
    let mac = unique_mac();

    let object = nb.post(
        "/api/dcim/mac-addresses/",
        &json!({
            "mac_address": mac,
            "assigned_object_type": netbox::VM_INTERFACE_OBJECT_TYPE,
            "assigned_object_id": netbox::id(&iface),
        }),
    );
    // Assigned, not yet primary: the interface's mac_address follows the primary only.
    assert_eq!(nb.interface_mac(&iface).mac_address, None);

    nb.patch(
        &format!("/api/virtualization/interfaces/{}/", netbox::id(&iface)),
        &json!({"primary_mac_address": netbox::id(&object)}),
    );
    let read = nb.interface_mac(&iface);
    assert_eq!(read.mac_address.as_deref(), Some(mac.to_uppercase().as_str()));
    assert_eq!(read.primary_mac_address_id, Some(netbox::id(&object)));
    assert_eq!(read.mac_addresses, vec![mac.to_uppercase()]);
}

/// One HTTP request as the listener received it.
struct Delivery {
    request_line: String,
    /// Header names lower-cased.
    headers: Vec<(String, String)>,
    raw_body: Vec<u8>,
}

impl Delivery {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// An HTTP/1.1 listener on 127.0.0.1 (a free port) that answers every request
/// 204 and sends it on the channel; runs until the test process ends.
fn listen() -> (u16, mpsc::Receiver<Delivery>) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1");
    let port = listener.local_addr().expect("local addr").port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut headers = Vec::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim_end().is_empty() {
                    break;
                }
                if let Some((name, value)) = line.trim_end().split_once(':') {
                    headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
                }
            }
            let length = headers
                .iter()
                .find(|(n, _)| n == "content-length")
                .and_then(|(_, v)| v.parse::<usize>().ok())
                .unwrap_or(0);
            let mut raw_body = vec![0; length];
            if reader.read_exact(&mut raw_body).is_err() {
                continue;
            }
            let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
            let _ = tx.send(Delivery { request_line: request_line.trim_end().to_string(), headers, raw_body });
        }
    });
    (port, rx)
}

#[test]
fn status_planned_to_staged_delivers_a_webhook_signed_over_its_raw_body() {
    let nb = NetBox::shared();
    let (port, deliveries) = listen();
    let (name, vm) = vm(&nb, "hook", "planned");
    let secret = format!("secret-{}", unique_name("s"));
    let webhook = nb.create_webhook(&name, &format!("http://127.0.0.1:{port}/netbox-hook"), &secret);
    nb.create_vm_update_rule(&name, &webhook, &json!({"attr": "name", "value": name}));

    nb.patch_vm(&vm, &json!({"status": "staged"}));

    let delivery = deliveries.recv_timeout(DELIVERY_BOUND).unwrap_or_else(|_| {
        panic!(
            "no webhook reached 127.0.0.1:{port} within {DELIVERY_BOUND:?} of the PATCH \
             (is the rqworker of scripts/netbox running? see its log under target/netbox/state/logs)"
        )
    });
    assert_eq!(delivery.request_line, "POST /netbox-hook HTTP/1.1");
    assert_eq!(delivery.header("content-type"), Some("application/json"));

    // X-Hook-Signature: hex HMAC-SHA512(secret, raw body), 128 characters.
    let key = hmac::Key::new(hmac::HMAC_SHA512, secret.as_bytes());
    let expected = hex(hmac::sign(&key, &delivery.raw_body).as_ref());
    let signature = delivery.header("x-hook-signature").expect("X-Hook-Signature: the webhook has a secret");
    assert_eq!(signature.len(), 128);
    assert_eq!(signature, expected);

    let body: Value = serde_json::from_slice(&delivery.raw_body).expect("a JSON body");
    assert_eq!(body["event"], "updated");
    assert_eq!(body["object_type"], netbox::VM_OBJECT_TYPE);
    for gone in ["model", "username", "request_id"] {
        assert!(body.get(gone).is_none(), "4.7 sends no top-level {gone}: {body}");
    }
    assert_eq!(body["data"]["id"], netbox::id(&vm));
    assert_eq!(body["data"]["name"], name);
    assert_eq!(body["data"]["status"]["value"], "staged");
    assert_eq!(body["request"]["method"], "PATCH");
    assert_eq!(body["snapshots"]["prechange"]["status"], "planned");
    assert_eq!(body["snapshots"]["postchange"]["status"], "staged");
}

#[test]
fn a_vm_keeps_its_custom_fields_and_primary_ip() {
    let nb = NetBox::shared();
    // One field shared by every run (custom fields are global).
    nb.vm_custom_field("cradle_test_template", "text");
    let name = unique_name("cf");
    let cluster = nb.create_cluster(&name);
    let vm = nb.create_vm(&name, &cluster, "planned", &json!({"cradle_test_template": "debian-12"}));
    let iface = nb.create_vm_interface(&vm, "eth0");
    let ip = nb.allocate_ip(&iface, &format!("{name}.lab.example"));
    let address = ip["address"].as_str().expect("an address").to_string();
    assert!(address.starts_with("198.1"), "{ip}");
    nb.patch_vm(&vm, &json!({"primary_ip4": netbox::id(&ip)}));

    let read = nb.vm(&vm);
    assert_eq!(read["custom_fields"]["cradle_test_template"], "debian-12", "{read}");
    assert_eq!(read["status"]["value"], "planned");
    assert_eq!(read["primary_ip4"]["address"], address, "{read}");
    assert_eq!(read["primary_ip4"]["dns_name"], format!("{name}.lab.example"), "{read}");
}

#[test]
fn journal_entries_of_a_vm_read_back_oldest_first() {
    let nb = NetBox::shared();
    let (_, vm) = vm(&nb, "journal", "planned");
    for (kind, comments) in [("info", "provisioning started"), ("success", "VM 123 is up")] {
        nb.post(
            "/api/extras/journal-entries/",
            &json!({
                "assigned_object_type": netbox::VM_OBJECT_TYPE,
                "assigned_object_id": netbox::id(&vm),
                "kind": kind,
                "comments": comments,
            }),
        );
    }
    let journal = nb.vm_journal(&vm);
    let read: Vec<(&str, &str)> = journal
        .iter()
        .map(|e| (e["kind"]["value"].as_str().unwrap_or(""), e["comments"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(read, [("info", "provisioning started"), ("success", "VM 123 is up")]);
}
