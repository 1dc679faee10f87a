//! The `dns` capability's Technitium DNS Server provider (`[dns.NAME] kind =
//! "technitium"`): the records of [`super::DnsRecord`] kept through the
//! server's HTTP API, reached through a named endpoint (`auth = "bearer"`,
//! an API token; Technitium 15+) whose token the host attaches.
//!
//! Contract (the same as RFC 2136's, [`super::Rfc2136`]):
//! - [`Technitium::upsert`] makes the record the only one of its name and
//!   kind: it reads the name's records (`/api/zones/records/get`) and sends
//!   nothing when they already are exactly the wanted one (`false`); else one
//!   `/api/zones/records/add` with `overwrite=true` replaces the RRset
//!   (`true`). With `ptr` (default), an A/AAAA add carries `ptr=true` and
//!   `createPtrZone=true`, and since Technitium then leaves the PTR of a
//!   replaced address behind (DnsServer v15.2 WebServiceZonesApi.cs
//!   AddRecord: `SetRecord` on the new address's reverse name only), the old
//!   addresses' PTRs that point at the name are deleted after. A PTR record
//!   is written as `ptrName`.
//! - [`Technitium::delete`] deletes each record of the name and kind (an
//!   A/AAAA delete also deletes the PTR pointing back, as Technitium does);
//!   `false` when there was none.
//! - The zone must be one of the provider's `zones` and the name inside it
//!   (`invalid` otherwise, before anything is sent); `ttl = 0` is the
//!   provider's `ttl`.
//! - Technitium answers every error with HTTP 200 and `status: "error"` (or
//!   `"invalid-token"`, which is `denied`): the body's status is what counts.
//!   A transport failure is the endpoint's (`transient` for a timeout or a
//!   refused connection).

use std::net::IpAddr;
use std::time::Duration;

use serde_json::Value;

use super::config::{DnsProviderConfig, parse_name};
use super::{DnsRecord, RecordKind};
use crate::caps::http::{Endpoints, json_request};
use crate::contract::bindings::cradle::host::http::Method;
use crate::contract::bindings::cradle::host::types::Entry;
use crate::contract::{CapError, ErrorKind};

/// A Technitium DNS Server, reached through a named endpoint.
#[derive(Debug, Clone)]
pub struct Technitium {
    section: String,
    endpoint: String,
    zones: Vec<String>,
    ttl: u32,
    ptr: bool,
    http: Endpoints,
}

/// A zone or name as Technitium's parameters take it: no trailing dot, lower case.
fn bare(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn kind_name(kind: RecordKind) -> &'static str {
    match kind {
        RecordKind::A => "A",
        RecordKind::Aaaa => "AAAA",
        RecordKind::Ptr => "PTR",
    }
}

/// The reverse name of an address (`4.3.2.1.in-addr.arpa`, or the nibbles of an IPv6 one).
fn reverse_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            format!("{}.{}.{}.{}.in-addr.arpa", o[3], o[2], o[1], o[0])
        }
        IpAddr::V6(v6) => {
            let mut out = String::new();
            for b in v6.octets().iter().rev() {
                out.push_str(&format!("{:x}.{:x}.", b & 0xf, b >> 4));
            }
            out + "ip6.arpa"
        }
    }
}

impl Technitium {
    /// The provider `[dns.<name>]`, sending through `http` (the environment's endpoints).
    pub fn new(name: &str, cfg: &DnsProviderConfig, http: Endpoints) -> Result<Technitium, CapError> {
        let section = format!("dns.{name}");
        cfg.validate().map_err(|m| CapError::invalid(format!("{section}: {m}")))?;
        let Some(endpoint) = cfg.endpoint.clone() else {
            return Err(CapError::invalid(format!("{section}: kind = \"technitium\" needs endpoint")));
        };
        Ok(Technitium {
            section,
            endpoint,
            zones: cfg.zones.iter().map(|z| bare(z)).collect(),
            ttl: cfg.ttl,
            ptr: cfg.ptr,
            http,
        })
    }

    /// Whether this provider serves `zone`.
    pub fn serves(&self, zone: &str) -> bool {
        self.zones.contains(&bare(zone))
    }

    /// Make `rec` the only record of its name and kind; `true` when something changed.
    pub async fn upsert(&self, rec: &DnsRecord, timeout: Duration) -> Result<bool, CapError> {
        let (zone, name) = self.target(&rec.zone, &rec.name)?;
        let kind = kind_name(rec.kind);
        let value = self.value(rec, &name)?;
        let ttl = if rec.ttl == 0 { self.ttl } else { rec.ttl };
        let current = self.records(&zone, &name, rec.kind, timeout).await?;
        if let [(only, only_ttl)] = current.as_slice()
            && *only == value
            && *only_ttl == ttl
        {
            return Ok(false);
        }
        let mut query = vec![
            ("domain", name.clone()),
            ("zone", zone.clone()),
            ("type", kind.to_string()),
            ("ttl", ttl.to_string()),
            ("overwrite", "true".into()),
        ];
        let address = matches!(rec.kind, RecordKind::A | RecordKind::Aaaa);
        if address {
            query.push(("ipAddress", value.clone()));
            if self.ptr {
                query.push(("ptr", "true".into()));
                query.push(("createPtrZone", "true".into()));
            }
        } else {
            query.push(("ptrName", value.clone()));
        }
        self.call("/api/zones/records/add", query, &format!("{kind} record {name} → {value}"), timeout).await?;
        if address && self.ptr {
            for (old, _) in current.iter().filter(|(old, _)| *old != value) {
                self.delete_ptr(old, &name, timeout).await?;
            }
        }
        tracing::info!(provider = %self.section, zone = %zone, name = %name, kind, value = %value, ttl, "dns record set");
        Ok(true)
    }

    /// Delete every record of `name` and `kind` in `zone`; `true` when something was deleted.
    pub async fn delete(&self, zone: &str, name: &str, kind: RecordKind, timeout: Duration) -> Result<bool, CapError> {
        let (zone, name) = self.target(zone, name)?;
        let current = self.records(&zone, &name, kind, timeout).await?;
        let k = kind_name(kind);
        for (value, _) in &current {
            let key = if kind == RecordKind::Ptr { "ptrName" } else { "ipAddress" };
            let query =
                vec![("domain", name.clone()), ("zone", zone.clone()), ("type", k.to_string()), (key, value.clone())];
            self.call("/api/zones/records/delete", query, &format!("delete {k} record {name} → {value}"), timeout)
                .await?;
        }
        Ok(!current.is_empty())
    }

    /// The zone and name as Technitium takes them, after checking the zone is
    /// this provider's and the name inside it.
    fn target(&self, zone: &str, name: &str) -> Result<(String, String), CapError> {
        let s = &self.section;
        let (z, n) = (bare(zone), bare(name));
        parse_name(zone).map_err(|m| CapError::invalid(format!("{s}: zone {m}")))?;
        parse_name(name).map_err(|m| CapError::invalid(format!("{s}: name {m}")))?;
        if !self.zones.contains(&z) {
            return Err(CapError::invalid(format!(
                "{s}: zone `{zone}` is not one of {s}.zones ({}); add it there if the server holds it",
                self.zones.join(", ")
            )));
        }
        if !(n == z || n.ends_with(&format!(".{z}"))) {
            return Err(CapError::invalid(format!("{s}: name `{name}` is not inside zone `{zone}`")));
        }
        Ok((z, n))
    }

    /// The record's value as Technitium writes it back (an address in its
    /// canonical form, a name without its trailing dot).
    fn value(&self, rec: &DnsRecord, name: &str) -> Result<String, CapError> {
        let bad = |what: &str| {
            CapError::invalid(format!(
                "{}: value `{}` of the {} record `{name}` is not {what}",
                self.section,
                rec.value,
                kind_name(rec.kind)
            ))
        };
        match rec.kind {
            RecordKind::A => {
                rec.value.parse::<std::net::Ipv4Addr>().map(|ip| ip.to_string()).map_err(|_| bad("an IPv4 address"))
            }
            RecordKind::Aaaa => {
                rec.value.parse::<std::net::Ipv6Addr>().map(|ip| ip.to_string()).map_err(|_| bad("an IPv6 address"))
            }
            RecordKind::Ptr => parse_name(&rec.value).map(|_| bare(&rec.value)).map_err(|_| bad("a domain name")),
        }
    }

    /// The values and TTLs of `name`'s records of `kind` (an empty list when there are none).
    async fn records(
        &self,
        zone: &str,
        name: &str,
        kind: RecordKind,
        timeout: Duration,
    ) -> Result<Vec<(String, u32)>, CapError> {
        let query = vec![("domain", name.to_string()), ("zone", zone.to_string())];
        let got = self.call("/api/zones/records/get", query, &format!("records of {name}"), timeout).await?;
        let k = kind_name(kind);
        let key = if kind == RecordKind::Ptr { "ptrName" } else { "ipAddress" };
        Ok(got["records"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["type"] == k && r["name"].as_str().is_some_and(|n| bare(n) == name))
            .filter_map(|r| {
                let v = r["rData"][key].as_str()?;
                let v = match v.parse::<IpAddr>() {
                    Ok(ip) => ip.to_string(),
                    Err(_) => bare(v),
                };
                Some((v, r["ttl"].as_u64().and_then(|t| u32::try_from(t).ok()).unwrap_or(0)))
            })
            .collect())
    }

    /// Delete the PTR of `ip` that points at `name`, if there is one (no
    /// reverse zone, or no such record: nothing to do; a PTR to another name
    /// is left).
    async fn delete_ptr(&self, ip: &str, name: &str, timeout: Duration) -> Result<(), CapError> {
        let Ok(addr) = ip.parse::<IpAddr>() else { return Ok(()) };
        let reverse = reverse_name(addr);
        let query = vec![("domain", reverse.clone()), ("type", "PTR".into()), ("ptrName", name.to_string())];
        let (status, doc) = self.send("/api/zones/records/delete", query, timeout).await?;
        let msg = doc["errorMessage"].as_str().unwrap_or_default();
        if msg.starts_with("No such zone was found") || msg == "Cannot delete record: no such record exists." {
            return Ok(());
        }
        self.judge(status, &doc, &format!("old PTR {reverse} → {name} (the address before {name} changed)")).map(|_| ())
    }

    /// One API call; its `response`, or the error it carries.
    async fn call(
        &self,
        path: &str,
        query: Vec<(&str, String)>,
        what: &str,
        timeout: Duration,
    ) -> Result<Value, CapError> {
        let (status, doc) = self.send(path, query, timeout).await?;
        self.judge(status, &doc, what).cloned()
    }

    fn judge<'a>(&self, status: u16, doc: &'a Value, what: &str) -> Result<&'a Value, CapError> {
        let said = doc["status"].as_str();
        if status == 200 && said == Some("ok") {
            return Ok(&doc["response"]);
        }
        let msg = doc["errorMessage"].as_str().map(str::to_string).unwrap_or_else(|| match said {
            Some(s) => s.to_string(),
            None => format!("HTTP {status}"),
        });
        let kind = if said == Some("invalid-token") || status == 401 { ErrorKind::Denied } else { ErrorKind::Failed };
        Err(CapError::new(kind, format!("Technitium: {what}: {msg} ({})", self.section)))
    }

    /// `path?query` (Technitium takes every parameter in the query);
    /// the status and the body as JSON (`null` when it is none).
    async fn send(&self, path: &str, query: Vec<(&str, String)>, timeout: Duration) -> Result<(u16, Value), CapError> {
        // Reads as the workflows made them (GET), changes as POST.
        let method = if path.ends_with("/get") { Method::Get } else { Method::Post };
        let query = query.into_iter().map(|(k, v)| Entry { key: k.to_string(), value: v }).collect();
        let req = json_request(&self.endpoint, method, path.to_string(), query, None, false);
        let resp = self.http.send_for(&self.section, req, timeout).await?;
        Ok((resp.status, serde_json::from_slice(&resp.body).unwrap_or(Value::Null)))
    }
}

#[cfg(test)]
#[path = "technitium_tests.rs"]
mod tests;
