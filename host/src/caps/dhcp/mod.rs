//! The `dhcp` capability: reservations (a fixed IPv4 address for a MAC) in a
//! network, kept by a UniFi Network controller (classic, or UniFi OS under
//! `/proxy/network`).
//!
//! Contract:
//! - [`Unifi::reserve`] finds the network (`rest/networkconf`) whose subnet
//!   is the call's (or, for an empty network, holds the address), refuses an
//!   address outside that subnet (`invalid`), looks the MAC up (`GET
//!   stat/user/{mac}`, as go-unifi's GetUserByMAC and Terraform's
//!   `allow_existing`; `rest/user` need not list a client the controller has
//!   only seen; `api.err.UnknownUser` is "none") and: returns an existing
//!   reservation of that MAC, address and network unchanged; refuses a MAC
//!   the controller knows otherwise (another address, network or none) as a
//!   `conflict` naming what it knows; else creates the client with
//!   `POST group/user` (go-unifi's CreateUser). `api.err.MacUsed` (the MAC
//!   became known meanwhile) is a `conflict`, `api.err.InvalidFixedIP` is
//!   `invalid`; an ok answer without the client is `failed`.
//! - [`Unifi::release`] deletes the client of a MAC reserved in the network
//!   (`DELETE rest/user/{_id}`); `false` when the MAC has no reservation
//!   there. [`Unifi::lookup`] reads it.
//! - UniFi answers errors with `meta.rc = "error"` and `meta.msg`, sometimes
//!   under HTTP 200: every answer is judged by `meta.rc`, not only its
//!   status. A `401` is `denied`.
//! - The controller is reached through the named endpoint of
//!   `[dhcp.NAME].endpoint` ([`super::http::Endpoints`]): the host attaches
//!   the API key, or keeps the UniFi login session and its CSRF token
//!   (`http/unifi.rs`); no credential reaches the caller.
//!
//! The subnet math is [`cidr`], the grant [`scope`].

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::{Value, json};

use self::cidr::Subnet;
use super::http::{Endpoints, json_request};
use crate::contract::bindings::cradle::host::http::Method;
use crate::contract::{CapError, ErrorKind};

pub use self::config::{DhcpProviderConfig, DhcpProviderKind};
pub use crate::contract::bindings::cradle::host::dhcp::Reservation;

pub mod cidr;
mod config;
mod host;
pub(crate) mod rhai;
pub mod scope;

#[cfg(test)]
mod tests;

/// A UniFi controller's site, reached through a named endpoint.
#[derive(Debug, Clone)]
pub struct Unifi {
    section: String,
    endpoint: String,
    site: String,
    http: Endpoints,
}

/// A network of the site, as `rest/networkconf` lists it.
#[derive(Debug, Clone)]
struct Network {
    id: String,
    name: String,
    subnet: Subnet,
}

impl Network {
    fn label(&self) -> String {
        format!("{} ({})", self.name, self.subnet)
    }
}

/// An answer's `meta.msg` when `meta.rc` is `error`.
fn error_msg(doc: &Value) -> Option<String> {
    (doc["meta"]["rc"] == "error").then(|| doc["meta"]["msg"].as_str().unwrap_or("no reason given").to_string())
}

/// What the controller knows about a client, for a message.
fn describe(c: &Value) -> String {
    let name = c["name"].as_str().or(c["hostname"].as_str()).unwrap_or("unnamed");
    if c["use_fixedip"] == true {
        format!(
            "{name}, reserved {} on network {}",
            c["fixed_ip"].as_str().unwrap_or("no address"),
            c["network_id"].as_str().unwrap_or("none")
        )
    } else {
        format!("{name}, no reservation")
    }
}

impl Unifi {
    /// The provider `[dhcp.<name>]`, sending through `http` (the
    /// environment's endpoints, so the UniFi session is shared).
    pub fn new(name: &str, cfg: &DhcpProviderConfig, http: Endpoints) -> Result<Unifi, CapError> {
        let section = format!("dhcp.{name}");
        cfg.validate().map_err(|m| CapError::invalid(format!("{section}: {m}")))?;
        Ok(Unifi { section, endpoint: cfg.endpoint.clone(), site: cfg.site.clone(), http })
    }

    /// Reserve `ip` for `mac` in `network` (a subnet, or empty: the network
    /// holding `ip`), named `name`.
    pub async fn reserve(
        &self,
        network: &str,
        mac: &str,
        ip: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<Reservation, CapError> {
        // Messages name the MAC as the caller wrote it; paths and bodies
        // carry it in lower case, as UniFi stores it.
        let given = mac;
        let mac = mac.to_ascii_lowercase();
        check_mac(&mac)?;
        let addr: Ipv4Addr = cidr::parse_ip("ip", ip).map_err(CapError::invalid)?;
        let net = self.network(network, Some(addr), timeout).await?;
        let made = |c: &Value| Reservation {
            network: net.subnet.to_string(),
            mac: mac.clone(),
            ip: ip.to_string(),
            name: c["name"].as_str().unwrap_or(name).to_string(),
        };
        if let Some(existing) = self.client(&mac, timeout).await? {
            if existing["use_fixedip"] == true && existing["fixed_ip"] == ip && existing["network_id"] == net.id {
                return Ok(made(&existing));
            }
            return Err(CapError::new(
                ErrorKind::Conflict,
                format!(
                    "UniFi already knows {given} ({}), not reserved {ip} on network {}; remove that client in UniFi, or fix the VM's MAC or address",
                    describe(&existing),
                    net.label()
                ),
            ));
        }
        let what = format!("reservation of {ip} for {given}");
        let body = json!({ "objects": [{ "data": {
            "mac": mac, "name": name, "use_fixedip": true, "fixed_ip": ip, "network_id": net.id, "note": "cradle",
        } }] });
        let (status, doc) = self.send(Method::Post, "group/user", Some(body), timeout).await?;
        // A refusal is in the object's own `meta` or the envelope's (go-unifi
        // reads `data[0].meta` first), with HTTP 200 or 400.
        let one = doc["data"].get(0).filter(|o| o.is_object());
        let msg = one.and_then(error_msg).or_else(|| error_msg(&doc));
        match msg.as_deref() {
            Some("api.err.MacUsed") => {
                let who = match self.client(&mac, timeout).await? {
                    Some(c) => describe(&c),
                    None => "a client UniFi does not show".into(),
                };
                return Err(CapError::new(
                    ErrorKind::Conflict,
                    format!(
                        "UniFi already knows {given} ({who}; api.err.MacUsed), not reserved {ip}; remove that client in UniFi, or fix the VM's MAC"
                    ),
                ));
            }
            Some("api.err.InvalidFixedIP") => {
                return Err(CapError::invalid(format!(
                    "UniFi refused {ip} for {given}: api.err.InvalidFixedIP (not an address of network {}); fix the VM's address",
                    net.label()
                )));
            }
            _ => {}
        }
        self.judge(status, &doc, &what)?;
        match one.and_then(|o| o["data"].get(0)) {
            Some(c) => Ok(made(c)),
            None => Err(CapError::failed(format!(
                "UniFi: {what}: the controller answered ok without the client (empty data); check the client {given} in UniFi ({})",
                self.section
            ))),
        }
    }

    /// Remove the reservation of `mac` in `network`; `false` when it has none there.
    pub async fn release(&self, network: &str, mac: &str, timeout: Duration) -> Result<bool, CapError> {
        let mac = mac.to_ascii_lowercase();
        check_mac(&mac)?;
        let net = self.network(network, None, timeout).await?;
        let Some(c) = self.client(&mac, timeout).await? else { return Ok(false) };
        if c["use_fixedip"] != true || c["network_id"] != net.id {
            return Ok(false);
        }
        let id = c["_id"].as_str().unwrap_or_default();
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(CapError::failed(format!(
                "{}: UniFi answered client {mac} without a usable _id",
                self.section
            )));
        }
        let (status, doc) = self.send(Method::Delete, &format!("rest/user/{id}"), None, timeout).await?;
        self.judge(status, &doc, &format!("release of {mac}"))?;
        tracing::info!(provider = %self.section, mac = %mac, network = %net.subnet, "dhcp reservation released");
        Ok(true)
    }

    /// The reservation of `mac` in `network`, if it has one there.
    pub async fn lookup(&self, network: &str, mac: &str, timeout: Duration) -> Result<Option<Reservation>, CapError> {
        let mac = mac.to_ascii_lowercase();
        check_mac(&mac)?;
        let net = self.network(network, None, timeout).await?;
        let Some(c) = self.client(&mac, timeout).await? else { return Ok(None) };
        if c["use_fixedip"] != true || c["network_id"] != net.id {
            return Ok(None);
        }
        Ok(Some(Reservation {
            network: net.subnet.to_string(),
            mac,
            ip: c["fixed_ip"].as_str().unwrap_or_default().to_string(),
            name: c["name"].as_str().or(c["hostname"].as_str()).unwrap_or_default().to_string(),
        }))
    }

    /// The network named by `network` (its subnet), or holding `ip` when
    /// `network` is empty; `ip`, when given, must lie in its subnet.
    async fn network(&self, network: &str, ip: Option<Ipv4Addr>, timeout: Duration) -> Result<Network, CapError> {
        let (s, site) = (&self.section, &self.site);
        let wanted = match network {
            "" => None,
            text => Some(Subnet::parse(text).map_err(|e| CapError::invalid(format!("{s}: network: {e}")))?),
        };
        let (status, doc) = self.send(Method::Get, "rest/networkconf", None, timeout).await?;
        let data = self.judge(status, &doc, &format!("networks of site {site}"))?;
        let nets: Vec<Network> = data
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| {
                Some(Network {
                    id: n["_id"].as_str()?.to_string(),
                    name: n["name"].as_str().unwrap_or("unnamed").to_string(),
                    subnet: Subnet::parse(n["ip_subnet"].as_str()?).ok()?,
                })
            })
            .collect();
        let found = match (wanted, ip) {
            (Some(w), _) => nets.into_iter().find(|n| n.subnet == w).ok_or_else(|| {
                CapError::invalid(format!(
                    "{s}: no network of site {site} has the subnet {w}; add it in UniFi, or fix the network"
                ))
            })?,
            (None, Some(addr)) => nets.into_iter().find(|n| n.subnet.contains(addr)).ok_or_else(|| {
                CapError::invalid(format!(
                    "{s}: no network of site {site} holds {addr}; add it in UniFi, or fix the VM's address"
                ))
            })?,
            (None, None) => return Err(CapError::invalid(format!("{s}: name the network (its subnet in CIDR form)"))),
        };
        if let Some(addr) = ip
            && !found.subnet.contains(addr)
        {
            return Err(CapError::invalid(format!(
                "{s}: {addr} is outside network {} of site {site}; fix the VM's address",
                found.label()
            )));
        }
        Ok(found)
    }

    /// The client the controller knows by `mac` (`GET stat/user/{mac}`), or none.
    async fn client(&self, mac: &str, timeout: Duration) -> Result<Option<Value>, CapError> {
        let (status, doc) = self.send(Method::Get, &format!("stat/user/{mac}"), None, timeout).await?;
        if doc["meta"]["msg"] == "api.err.UnknownUser" {
            return Ok(None);
        }
        let data = self.judge(status, &doc, &format!("client {mac} of site {}", self.site))?;
        Ok(data.get(0).cloned())
    }

    /// `data` of an answer, or the error it carries.
    fn judge<'a>(&self, status: u16, doc: &'a Value, what: &str) -> Result<&'a Value, CapError> {
        if (200..300).contains(&status) && doc["meta"]["rc"] == "ok" {
            return Ok(&doc["data"]);
        }
        let msg = doc["meta"]["msg"].as_str().map(str::to_string).unwrap_or_else(|| "no meta.msg".into());
        let kind = if status == 401 { ErrorKind::Denied } else { ErrorKind::Failed };
        Err(CapError::new(kind, format!("UniFi: {what}: HTTP {status}: {msg} ({})", self.section)))
    }

    /// One request below `/api/s/{site}/`; the status and the body as JSON
    /// (`null` when it is none).
    async fn send(
        &self,
        method: Method,
        tail: &str,
        body: Option<Value>,
        timeout: Duration,
    ) -> Result<(u16, Value), CapError> {
        let path = format!("/api/s/{}/{tail}", self.site);
        let req = json_request(&self.endpoint, method, path, Vec::new(), body.as_ref(), false);
        let resp = self.http.send_for(&self.section, req, timeout).await?;
        Ok((resp.status, serde_json::from_slice(&resp.body).unwrap_or(Value::Null)))
    }
}

/// A MAC as `aa:bb:cc:dd:ee:ff` (lower case), the only form put in a path.
fn check_mac(mac: &str) -> Result<(), CapError> {
    let parts: Vec<&str> = mac.split(':').collect();
    let ok = parts.len() == 6 && parts.iter().all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
    if ok { Ok(()) } else { Err(CapError::invalid(format!("mac `{mac}` is not a MAC address (aa:bb:cc:dd:ee:ff)"))) }
}
