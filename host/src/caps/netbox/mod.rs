//! The `netbox` capability: NetBox's REST API, typed (`wit/netbox.wit`).
//!
//! [`NetboxClient`] sends every request through the named endpoint of
//! `[endpoints]` the grant's `endpoint` names ([`super::http::Endpoints`]):
//! the host resolves and attaches that endpoint's token (`auth = "bearer"`
//! for a v2 `nbt_` token, `"token"` for a v1 one), keeps paths below its
//! base URL and follows no redirect to another origin; the caller names
//! objects by id and never sees the URL or the token.
//!
//! Contract of each call: one or a few requests (a read of a VM also reads
//! its primary IPv4; a MAC write reads the version when `auto`, writes, then
//! reads the interface back); NetBox's answer maps to `not-found` (404),
//! `denied` (401, 403), `conflict` (409), `transient` (5xx; a connection
//! that failed, from the endpoint) or `failed`, the message
//! `NetBox: <object>: HTTP <status>: <NetBox's answer>`. The MAC write picks
//! its path by the server's version (docs/NETBOX.md): `mac_address` on the
//! interface on 4.7+ and before 4.2, the MACAddress object then
//! `primary_mac_address` on 4.2–4.6 (an existing MACAddress of the interface
//! with that MAC is reused, so a repeated write makes no second object); the
//! MAC NetBox then reports (upper case) is compared without case, and a MAC
//! it did not keep is `failed`.

use std::time::Duration;

use serde_json::{Value, json};

use super::http::{Endpoints, json_request};
use crate::contract::bindings::cradle::host::http::Method;
use crate::contract::bindings::cradle::host::netbox::{IpAddress, JournalKind, MacWrite, Vm, VmInterface, VmSummary};
use crate::contract::bindings::cradle::host::types::Entry;
use crate::contract::{CapError, ErrorKind};

mod answers;
mod host;
pub(crate) mod rhai;
pub mod scope;
pub(crate) mod script_args;
#[cfg(test)]
mod tests;

/// Query keys `list-vms` sets itself, so a filter may not.
const RESERVED_FILTERS: &[&str] = &["status", "limit", "offset", "ordering", "format", "brief", "fields", "exclude"];

/// Most VMs one `list-vms` returns.
pub const MAX_LIST: u32 = 1000;

/// NetBox at one named endpoint.
#[derive(Debug, Clone)]
pub struct NetboxClient {
    endpoints: Endpoints,
    endpoint: String,
    timeout: Duration,
}

impl NetboxClient {
    /// NetBox at `endpoint` of `endpoints`; each request bounded by `timeout`.
    pub fn new(endpoints: Endpoints, endpoint: &str, timeout: Duration) -> NetboxClient {
        NetboxClient { endpoints, endpoint: endpoint.to_string(), timeout }
    }

    /// One request; the answer's JSON (`null` for an empty body) when 2xx,
    /// else the error for its status naming `what`.
    async fn request(
        &self,
        method: Method,
        path: &str,
        query: Vec<Entry>,
        body: Option<Value>,
        what: &str,
    ) -> Result<Value, CapError> {
        let req = json_request(&self.endpoint, method, path.to_string(), query, body.as_ref(), true);
        let resp = self.endpoints.send(req, self.timeout).await?;
        let text = String::from_utf8_lossy(&resp.body);
        if !(200..300).contains(&resp.status) {
            return Err(status_error(resp.status, what, text.trim()));
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| {
            CapError::failed(format!("NetBox: {what}: HTTP {}: the answer is not JSON ({e})", resp.status))
        })
    }

    async fn get(&self, path: &str, query: Vec<Entry>, what: &str) -> Result<Value, CapError> {
        self.request(Method::Get, path, query, None, what).await
    }

    /// The server's version as `(major, minor)` (`GET /api/status/`).
    pub async fn version(&self) -> Result<(u32, u32), CapError> {
        answers::version(&self.get("/api/status/", vec![], "status").await?)
    }

    /// VM `id`, its primary IPv4 read in full.
    pub async fn read_vm(&self, id: u64) -> Result<Vm, CapError> {
        let v = self.get(&vm_path(id), vec![], &format!("virtual machine {id}")).await?;
        let ip = match answers::primary_ip4_id(&v) {
            Some(ip) => Some(self.read_ip(ip).await?),
            None => None,
        };
        answers::vm(&v, ip)
    }

    /// The name of VM `id`'s cluster, if it has one (for the grant's `clusters`).
    pub async fn vm_cluster(&self, id: u64) -> Result<Option<String>, CapError> {
        let v = self.get(&vm_path(id), vec![], &format!("virtual machine {id}")).await?;
        Ok(v.get("cluster").and_then(|c| c.get("name")).and_then(Value::as_str).map(str::to_string))
    }

    /// The VM of VM interface `iface`.
    pub async fn interface_vm(&self, iface: u64) -> Result<u64, CapError> {
        let what = format!("VM interface {iface}");
        let v = self.get(&interface_path(iface), vec![], &what).await?;
        v.get("virtual_machine").and_then(|vm| vm.get("id")).and_then(Value::as_u64).ok_or_else(|| {
            CapError::failed(format!("NetBox: {what}: the answer names no virtual machine: {}", answers::short(&v)))
        })
    }

    /// IP address `id`.
    pub async fn read_ip(&self, id: u64) -> Result<IpAddress, CapError> {
        answers::ip_address(
            &self.get(&format!("/api/ipam/ip-addresses/{id}/"), vec![], &format!("IP address {id}")).await?,
        )
    }

    /// VM interface `id`.
    pub async fn read_interface(&self, id: u64) -> Result<VmInterface, CapError> {
        answers::interface(&self.get(&interface_path(id), vec![], &format!("VM interface {id}")).await?)
    }

    /// The interfaces of VM `vm` (one page of up to 1000: a VM has a handful).
    pub async fn interfaces(&self, vm: u64) -> Result<Vec<VmInterface>, CapError> {
        let what = format!("interfaces of VM {vm}");
        let query = vec![entry("virtual_machine_id", &vm.to_string()), entry("limit", "1000")];
        let page = self.get("/api/virtualization/interfaces/", query, &what).await?;
        answers::results(&page, &what)?.iter().map(answers::interface).collect()
    }

    /// The VMs of `status` that match `filters`, by id, at most `limit`.
    pub async fn list_vms(&self, status: &str, filters: &[Entry], limit: u32) -> Result<Vec<VmSummary>, CapError> {
        if let Some(f) = filters.iter().find(|f| RESERVED_FILTERS.contains(&f.key.as_str())) {
            return Err(CapError::invalid(format!("netbox list-vms: filter `{}` is set by cradle itself", f.key)));
        }
        if let Some(f) =
            filters.iter().find(|f| f.key.is_empty() || !f.key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        {
            return Err(CapError::invalid(format!("netbox list-vms: `{}` is not a NetBox filter name", f.key)));
        }
        if limit == 0 || limit > MAX_LIST {
            return Err(CapError::invalid(format!("netbox list-vms: limit {limit} is not within 1-{MAX_LIST}")));
        }
        let mut query = filters.to_vec();
        query.extend([entry("status", status), entry("limit", &limit.to_string()), entry("ordering", "id")]);
        let what = format!("{status} VMs");
        let page = self.get("/api/virtualization/virtual-machines/", query, &what).await?;
        answers::results(&page, &what)?.iter().map(answers::vm_summary).collect()
    }

    /// Set VM `vm`'s status.
    pub async fn set_status(&self, vm: u64, status: &str) -> Result<(), CapError> {
        let what = format!("status of VM {vm}");
        self.request(Method::Patch, &vm_path(vm), vec![], Some(json!({ "status": status })), &what).await?;
        Ok(())
    }

    /// A journal entry on VM `vm`.
    pub async fn journal(&self, vm: u64, kind: JournalKind, comments: &str) -> Result<(), CapError> {
        let entry = json!({
            "assigned_object_type": "virtualization.virtualmachine",
            "assigned_object_id": vm,
            "kind": journal_kind(kind),
            "comments": comments,
        });
        let what = format!("journal entry on VM {vm}");
        self.request(Method::Post, "/api/extras/journal-entries/", vec![], Some(entry), &what).await?;
        Ok(())
    }

    /// Make `mac` the primary MAC of VM interface `iface` (module doc).
    pub async fn set_mac(&self, iface: u64, mac: &str, how: MacWrite) -> Result<(), CapError> {
        check_mac(mac)?;
        let field = match how {
            MacWrite::Field => true,
            MacWrite::Objects => false,
            MacWrite::Auto => answers::takes_mac_field(self.version().await?),
        };
        let path = interface_path(iface);
        if field {
            let body = json!({ "mac_address": mac });
            self.request(Method::Patch, &path, vec![], Some(body), &format!("MAC of interface {iface}")).await?;
        } else {
            let assigned = [
                entry("assigned_object_type", answers::VM_INTERFACE_OBJECT_TYPE),
                entry("assigned_object_id", &iface.to_string()),
            ];
            let mut query = assigned.to_vec();
            query.push(entry("mac_address", mac));
            let what = format!("MAC addresses of interface {iface}");
            let found = self.get("/api/dcim/mac-addresses/", query, &what).await?;
            let existing = answers::results(&found, &what)?.first().and_then(|m| m.get("id")).and_then(Value::as_u64);
            let id = match existing {
                Some(id) => id,
                None => {
                    let made = json!({
                        "mac_address": mac,
                        "assigned_object_type": answers::VM_INTERFACE_OBJECT_TYPE,
                        "assigned_object_id": iface,
                    });
                    let what = format!("MAC address {mac}");
                    let answer =
                        self.request(Method::Post, "/api/dcim/mac-addresses/", vec![], Some(made), &what).await?;
                    answer.get("id").and_then(Value::as_u64).ok_or_else(|| {
                        CapError::failed(format!("NetBox: {what}: the answer has no id: {}", answers::short(&answer)))
                    })?
                }
            };
            let body = json!({ "primary_mac_address": id });
            self.request(Method::Patch, &path, vec![], Some(body), &format!("primary MAC of interface {iface}"))
                .await?;
        }
        let now = self.read_interface(iface).await?.mac;
        if !now.as_deref().is_some_and(|m| m.eq_ignore_ascii_case(mac)) {
            let kept = now.as_deref().unwrap_or("none");
            return Err(CapError::failed(format!("NetBox kept MAC {kept} on interface {iface}, not {mac}")));
        }
        Ok(())
    }
}

fn entry(key: &str, value: &str) -> Entry {
    Entry { key: key.into(), value: value.into() }
}

fn vm_path(id: u64) -> String {
    format!("/api/virtualization/virtual-machines/{id}/")
}

fn interface_path(id: u64) -> String {
    format!("/api/virtualization/interfaces/{id}/")
}

/// The value NetBox takes for a journal kind.
pub(crate) fn journal_kind(kind: JournalKind) -> &'static str {
    match kind {
        JournalKind::Info => "info",
        JournalKind::Success => "success",
        JournalKind::Warning => "warning",
        JournalKind::Danger => "danger",
    }
}

/// A MAC as NetBox takes it: six pairs of hex digits separated by `:`.
fn check_mac(mac: &str) -> Result<(), CapError> {
    let pairs: Vec<&str> = mac.split(':').collect();
    if pairs.len() == 6 && pairs.iter().all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit())) {
        Ok(())
    } else {
        Err(CapError::invalid(format!("netbox set-mac: `{mac}` is not a MAC address (52:54:00:12:34:56)")))
    }
}

/// The error for a NetBox answer of `status` (not 2xx) about `what`.
fn status_error(status: u16, what: &str, text: &str) -> CapError {
    let message = format!("NetBox: {what}: HTTP {status}: {text}");
    let kind = match status {
        404 => ErrorKind::NotFound,
        401 | 403 => ErrorKind::Denied,
        409 => ErrorKind::Conflict,
        500..=599 => ErrorKind::Transient,
        _ => ErrorKind::Failed,
    };
    CapError::new(kind, message)
}
