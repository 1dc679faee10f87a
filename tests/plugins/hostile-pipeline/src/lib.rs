//! A hostile NetBox-pipeline plugin for the hardening tests (never shipped):
//! the integration world's imports (`log`, `netbox`, `dhcp`, `dns`,
//! `proxmox`, and `http` to try an endpoint raw) and one export,
//! `attack(name, arg)`, that tries one thing outside the plugin's grants.
//! Each attack returns what it achieved, so a test sees both a denial and an
//! unexpected success (tests/e2e/hardening/integration.rs).

#![allow(unsafe_code, reason = "generated ABI glue")]

mod bindings {
    #![allow(missing_docs, reason = "generated code; the WIT carries the docs")]
    wit_bindgen::generate!({
        path: "wit",
        world: "cradle:host/hostile-integration",
        generate_all,
    });
    use super::Hostile;
    export!(Hostile);
}

cradle_guest::manifest! {
    name: "hostile-pipeline",
    version: env!("CARGO_PKG_VERSION"),
    description: "Tries NetBox statuses, DHCP networks, DNS zones, HA rules and endpoints outside its grants",
    needs: ["log", "netbox", "dhcp", "dns", "proxmox", "http"],
}

use bindings::cradle::host::types::Error;
use bindings::cradle::host::{dhcp, dns, http, netbox, proxmox};
use bindings::exports::cradle::host::hostile_pipeline::Guest;

struct Hostile;

fn number<T: std::str::FromStr>(arg: &str) -> Result<T, Error> {
    arg.parse().map_err(|_| Error::Invalid(format!("not a number: {arg}")))
}

impl Guest for Hostile {
    fn attack(name: String, arg: String) -> Result<String, Error> {
        match name.as_str() {
            // A status the grant does not list (`decommissioning`).
            "status" => netbox::set_status(1, &arg).map(|()| format!("set VM 1 {arg}")),
            // A reservation in a network the grant does not list.
            // `arg`: `NETWORK IP`, e.g. `10.9.0.0/24 10.9.0.5`.
            "network" => {
                let (network, ip) = arg.split_once(' ').unwrap_or((arg.as_str(), ""));
                dhcp::reserve(network, "bc:24:11:00:00:99", ip, "intruder").map(|r| format!("reserved {}", r.ip))
            }
            // A record in a zone the grant does not list.
            "zone" => {
                let rec = dns::DnsRecord {
                    zone: arg.clone(),
                    name: format!("intruder.{arg}"),
                    kind: dns::RecordKind::A,
                    value: "10.0.10.66".into(),
                    ttl: 60,
                };
                dns::upsert(&rec).map(|changed| format!("wrote intruder.{arg}: {changed}"))
            }
            // An HA node-affinity rule for a VMID outside the grant.
            "ha-rule" => {
                let rule = proxmox::HaRule {
                    rule: "intruder".into(),
                    kind: "node-affinity".into(),
                    resources: format!("vm:{arg}"),
                    nodes: Some("pve1".into()),
                    strict: false,
                    digest: None,
                };
                proxmox::put_ha_rule(&rule).map(|()| format!("rule for vm:{arg}"))
            }
            // An HA rule pinning a granted VMID to a node outside the grant.
            "ha-node" => {
                let rule = proxmox::HaRule {
                    rule: "intruder-node".into(),
                    kind: "node-affinity".into(),
                    resources: "vm:150".into(),
                    nodes: Some(arg.clone()),
                    strict: true,
                    digest: None,
                };
                proxmox::put_ha_rule(&rule).map(|()| format!("vm:150 pinned to {arg}"))
            }
            // An HA resource for a VMID outside the grant.
            "ha-resource" => {
                proxmox::add_ha_resource(number(&arg)?, Some("started"), None).map(|()| format!("managed {arg}"))
            }
            // An endpoint reached raw, not through the typed capability.
            "endpoint" => {
                let req = http::Request {
                    endpoint: arg.clone(),
                    method: http::Method::Get,
                    path: "/api/virtualization/virtual-machines/".into(),
                    query: Vec::new(),
                    headers: Vec::new(),
                    body: None,
                };
                http::send(&req).map(|r| format!("{arg} answered {}", r.status))
            }
            // A granted endpoint with a method or path its `limit` does not
            // list. `arg`: `ENDPOINT METHOD PATH`, e.g. `api DELETE /ipam/x/`.
            "method" => {
                let mut parts = arg.splitn(3, ' ');
                let (endpoint, method, path) =
                    (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
                let method = match method {
                    "GET" => http::Method::Get,
                    "POST" => http::Method::Post,
                    "PUT" => http::Method::Put,
                    "PATCH" => http::Method::Patch,
                    "DELETE" => http::Method::Delete,
                    other => return Err(Error::Invalid(format!("unknown method {other}"))),
                };
                let req = http::Request {
                    endpoint: endpoint.into(),
                    method,
                    path: path.into(),
                    query: Vec::new(),
                    headers: Vec::new(),
                    body: None,
                };
                http::send(&req).map(|r| format!("{arg} answered {}", r.status))
            }
            other => Err(Error::Invalid(format!("unknown attack {other}"))),
        }
    }
}
