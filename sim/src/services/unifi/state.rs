//! The UniFi Network controller's data: sites, networks (`networkconf`), known clients
//! (`user`: reservations and clients the DHCP server has seen), sessions (with their
//! age, for the session lifetime), the login count and the login rate limiter. Pure data plus the validation rules of `rest/user` writes.
//!
//! Contract: every write goes through [`State::create_user`] / [`State::replace_user`],
//! which enforce `api.err.InvalidPayload` (shape), `api.err.MacUsed` (one client per MAC
//! and site) and `api.err.FixedIpAlreadyUsedByClient` (one fixed IP per network), and
//! stamp the time a client became (or changed as) a reservation. MACs are stored
//! lower-case. Nothing here panics on client input.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::Ipv4Addr;

use serde_json::{Map, Value, json};

use super::{NetworkSpec, UnifiClient, UnifiNetwork};
use crate::services::{Stamp, random_hex};

/// An error answer: HTTP status and `api.err.X` code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ApiErr {
    pub status: u16,
    pub msg: &'static str,
}

impl ApiErr {
    pub const fn new(status: u16, msg: &'static str) -> Self {
        ApiErr { status, msg }
    }
}

pub(super) const INVALID_PAYLOAD: ApiErr = ApiErr::new(400, "api.err.InvalidPayload");
pub(super) const MAC_USED: ApiErr = ApiErr::new(400, "api.err.MacUsed");
pub(super) const FIXED_IP_USED: ApiErr = ApiErr::new(400, "api.err.FixedIpAlreadyUsedByClient");
pub(super) const ID_INVALID: ApiErr = ApiErr::new(400, "api.err.IdInvalid");
pub(super) const UNKNOWN_USER: ApiErr = ApiErr::new(400, "api.err.UnknownUser");
/// `use_fixedip` without a `fixed_ip`, or one outside the client's network
/// (measured by `jamesbraid/go-unifi` 6b108c1
/// `unifi/behavior_probe_batch1_integration_test.go:17-22`).
pub(super) const INVALID_FIXED_IP: ApiErr = ApiErr::new(400, "api.err.InvalidFixedIP");

/// A site.
#[derive(Debug, Clone)]
pub(super) struct Site {
    pub id: String,
    pub name: String,
}

/// A network with its DHCP settings.
#[derive(Debug, Clone)]
pub(super) struct Net {
    pub id: String,
    pub site: String,
    pub name: String,
    pub gateway: Ipv4Addr,
    pub prefix: u8,
    pub vlan: Option<u16>,
    pub dhcp_enabled: bool,
    pub dhcp_start: Ipv4Addr,
    pub dhcp_stop: Ipv4Addr,
}

impl Net {
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(self.prefix)) };
        u32::from(ip) & mask == u32::from(self.gateway) & mask
    }

    pub fn json(&self, site_id: &str) -> Value {
        let mut v = json!({
            "_id": self.id, "site_id": site_id, "name": self.name, "purpose": "corporate",
            "networkgroup": "LAN", "enabled": true,
            "ip_subnet": format!("{}/{}", self.gateway, self.prefix),
            "vlan_enabled": self.vlan.is_some(),
            "dhcpd_enabled": self.dhcp_enabled,
            "dhcpd_start": self.dhcp_start.to_string(), "dhcpd_stop": self.dhcp_stop.to_string(),
        });
        if let (Some(vlan), Some(o)) = (self.vlan, v.as_object_mut()) {
            o.insert("vlan".into(), json!(vlan));
        }
        v
    }

    pub fn public(&self) -> UnifiNetwork {
        UnifiNetwork {
            id: self.id.clone(),
            site: self.site.clone(),
            name: self.name.clone(),
            ip_subnet: format!("{}/{}", self.gateway, self.prefix),
            gateway: self.gateway,
            prefix: self.prefix,
            vlan: self.vlan,
            dhcpd_enabled: self.dhcp_enabled,
            dhcp_start: self.dhcp_start,
            dhcp_stop: self.dhcp_stop,
        }
    }
}

/// What the DHCP server saw of a client.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub ip: Ipv4Addr,
    pub first_unix: u64,
    pub last_unix: u64,
    pub hostname: Option<String>,
}

/// A known client (`rest/user` object).
#[derive(Debug, Clone)]
pub(super) struct User {
    pub id: String,
    pub site: String,
    /// The stored object without `_id`/`site_id` (added when rendered).
    pub doc: Map<String, Value>,
    pub created: Stamp,
    pub updated: Stamp,
    pub reserved: Option<Stamp>,
    pub seen: Option<Seen>,
    /// Written over the API (created or replaced), not only seen by the DHCP server.
    pub configured: bool,
}

impl User {
    pub fn mac(&self) -> &str {
        self.doc.get("mac").and_then(Value::as_str).unwrap_or_default()
    }

    /// `(fixed_ip, network_id)` when this client is a reservation.
    pub fn reservation(&self) -> Option<(Ipv4Addr, Option<&str>)> {
        if self.doc.get("use_fixedip") != Some(&Value::Bool(true)) {
            return None;
        }
        let ip = self.doc.get("fixed_ip")?.as_str()?.parse().ok()?;
        Some((ip, self.doc.get("network_id").and_then(Value::as_str).filter(|s| !s.is_empty())))
    }

    /// The `rest/user` rendering; `stat` adds the current `ip`.
    pub fn json(&self, site_id: &str, stat: bool) -> Value {
        let mut o = self.doc.clone();
        o.insert("_id".into(), json!(self.id));
        o.insert("site_id".into(), json!(site_id));
        if let Some(s) = &self.seen {
            o.insert("first_seen".into(), json!(s.first_unix));
            o.insert("last_seen".into(), json!(s.last_unix));
            if let Some(h) = s.hostname.as_ref().filter(|_| !o.contains_key("hostname")) {
                o.insert("hostname".into(), json!(h));
            }
            if stat {
                o.insert("ip".into(), json!(s.ip.to_string()));
            }
        }
        Value::Object(o)
    }

    pub fn public(&self) -> UnifiClient {
        let s = |k: &str| self.doc.get(k).and_then(Value::as_str).map(str::to_string);
        UnifiClient {
            id: self.id.clone(),
            site: self.site.clone(),
            mac: self.mac().to_string(),
            name: s("name"),
            note: s("note"),
            use_fixedip: self.doc.get("use_fixedip") == Some(&Value::Bool(true)),
            fixed_ip: s("fixed_ip").and_then(|i| i.parse().ok()),
            network_id: s("network_id").filter(|n| !n.is_empty()),
            created: self.created,
            updated: self.updated,
            reserved_at: self.reserved,
            ip: self.seen.as_ref().map(|s| s.ip),
            json: Value::Object(self.doc.clone()),
        }
    }
}

/// A login session.
#[derive(Debug, Clone)]
pub(super) struct Session {
    pub csrf: String,
    /// When the login made it (the lifetime counts from here, as a JWT's `exp` does
    /// from its `iat`).
    pub created: tokio::time::Instant,
}

impl Session {
    pub fn new(csrf: String) -> Self {
        Session { csrf, created: tokio::time::Instant::now() }
    }

    /// Whether the session has outlived `ttl` at `now` (`None` = it never expires).
    pub fn expired(&self, ttl: Option<std::time::Duration>, now: tokio::time::Instant) -> bool {
        ttl.is_some_and(|ttl| now.saturating_duration_since(self.created) >= ttl)
    }
}

/// Everything the controller holds.
#[derive(Debug, Default)]
pub(super) struct State {
    pub sites: Vec<Site>,
    pub nets: Vec<Net>,
    pub users: Vec<User>,
    /// Pool leases: (network id, MAC) → address.
    pub pool: BTreeMap<(String, String), Ipv4Addr>,
    /// Sessions by cookie value.
    pub sessions: HashMap<String, Session>,
    /// Recent login attempts (for the rate limit).
    pub login_attempts: VecDeque<tokio::time::Instant>,
    /// Successful logins (sessions made) so far.
    pub logins: u64,
    /// Login attempts still to refuse with 429 (a test's lever).
    pub forced_429: u32,
    /// `METHOD path` of every request under the API prefix, in order.
    pub calls: Vec<String>,
}

/// A new Mongo-style object id (24 hex digits).
pub(super) fn object_id() -> String {
    random_hex(12)
}

/// Whether `s` is a MAC address `aa:bb:cc:dd:ee:ff` (either case).
pub(super) fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6 && parts.iter().all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Parse `a.b.c.d/n` into (address, prefix).
pub(super) fn parse_subnet(s: &str) -> Option<(Ipv4Addr, u8)> {
    let (a, p) = s.split_once('/')?;
    let prefix: u8 = p.parse().ok().filter(|p| *p <= 32)?;
    Some((a.parse().ok()?, prefix))
}

impl State {
    /// Sites and networks from the configuration.
    pub fn new(sites: &[String], nets: &[NetworkSpec]) -> Result<State, String> {
        let mut st = State {
            sites: sites.iter().map(|n| Site { id: object_id(), name: n.clone() }).collect(),
            ..State::default()
        };
        for n in nets {
            if !st.sites.iter().any(|s| s.name == n.site) {
                return Err(format!("network '{}' is in unknown site '{}'", n.name, n.site));
            }
            let (gateway, prefix) = parse_subnet(&n.ip_subnet)
                .ok_or_else(|| format!("network '{}': ip_subnet '{}' is not a.b.c.d/n", n.name, n.ip_subnet))?;
            let net = Net {
                id: object_id(),
                site: n.site.clone(),
                name: n.name.clone(),
                gateway,
                prefix,
                vlan: n.vlan,
                dhcp_enabled: n.dhcpd_enabled,
                dhcp_start: n.dhcp_start,
                dhcp_stop: n.dhcp_stop,
            };
            if !net.contains(n.dhcp_start) || !net.contains(n.dhcp_stop) || n.dhcp_start > n.dhcp_stop {
                return Err(format!(
                    "network '{}': DHCP range {}-{} is not inside {}",
                    n.name, n.dhcp_start, n.dhcp_stop, n.ip_subnet
                ));
            }
            st.nets.push(net);
        }
        Ok(st)
    }

    /// The live session of cookie value `token` at `now`; an expired one is dropped
    /// (its cookie then is as unknown as a made-up one).
    pub fn session(
        &mut self,
        token: &str,
        ttl: Option<std::time::Duration>,
        now: tokio::time::Instant,
    ) -> Option<&mut Session> {
        if self.sessions.get(token).is_some_and(|s| s.expired(ttl, now)) {
            self.sessions.remove(token);
        }
        self.sessions.get_mut(token)
    }

    /// A new session under cookie value `token`, counted as a login.
    pub fn add_session(&mut self, token: String, csrf: String) {
        self.sessions.insert(token, Session::new(csrf));
        self.logins += 1;
    }

    pub fn site(&self, name: &str) -> Option<&Site> {
        self.sites.iter().find(|s| s.name == name)
    }

    pub fn user_by_mac(&self, site: &str, mac: &str) -> Option<&User> {
        self.users.iter().find(|u| u.site == site && u.mac().eq_ignore_ascii_case(mac))
    }

    /// Check a `rest/user` object for `site`; `own_id` is the object being replaced.
    /// Returns the object to store (MAC lower-cased, `_id`/`site_id` dropped).
    fn checked(&self, site: &str, body: &Value, own_id: Option<&str>) -> Result<Map<String, Value>, ApiErr> {
        let Some(obj) = body.as_object() else { return Err(INVALID_PAYLOAD) };
        let mut doc = obj.clone();
        doc.remove("_id");
        doc.remove("site_id");
        let mac = match doc.get("mac") {
            Some(Value::String(m)) if is_mac(m) => m.to_ascii_lowercase(),
            _ => return Err(INVALID_PAYLOAD),
        };
        doc.insert("mac".into(), json!(mac));
        for k in ["name", "note", "hostname", "network_id", "usergroup_id", "local_dns_record"] {
            if doc.get(k).is_some_and(|v| !v.is_string() && !v.is_null()) {
                return Err(INVALID_PAYLOAD);
            }
        }
        for k in ["use_fixedip", "blocked", "local_dns_record_enabled"] {
            if doc.get(k).is_some_and(|v| !v.is_boolean()) {
                return Err(INVALID_PAYLOAD);
            }
        }
        let fixed: Option<Ipv4Addr> = match doc.get("fixed_ip") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.parse().map_err(|_| INVALID_FIXED_IP)?),
            Some(_) => return Err(INVALID_PAYLOAD),
        };
        let use_fixed = doc.get("use_fixedip") == Some(&Value::Bool(true));
        let network_id = doc.get("network_id").and_then(Value::as_str).filter(|s| !s.is_empty());
        let net = match network_id {
            Some(nid) => Some(self.nets.iter().find(|n| n.site == site && n.id == nid).ok_or(INVALID_PAYLOAD)?),
            None => None,
        };
        if use_fixed {
            // The client's network: the one named, else (the stand-in cannot tell
            // which LAN an unseen client is on) any network of the site.
            let Some(ip) = fixed else { return Err(INVALID_FIXED_IP) };
            let inside = match net {
                Some(n) => n.contains(ip),
                None => self.nets.iter().any(|n| n.site == site && n.contains(ip)),
            };
            if !inside {
                return Err(INVALID_FIXED_IP);
            }
        }
        if self.users.iter().any(|u| u.site == site && Some(u.id.as_str()) != own_id && u.mac() == mac) {
            return Err(MAC_USED);
        }
        if let (true, Some(ip)) = (use_fixed, fixed) {
            let taken = self.users.iter().any(|u| {
                u.site == site
                    && Some(u.id.as_str()) != own_id
                    && u.reservation().is_some_and(|(other, other_net)| other == ip && other_net == network_id)
            });
            if taken {
                return Err(FIXED_IP_USED);
            }
        }
        Ok(doc)
    }

    /// `POST rest/user`: a new client (usually a reservation).
    pub fn create_user(&mut self, site: &str, body: &Value) -> Result<&User, ApiErr> {
        let doc = self.checked(site, body, None)?;
        let now = Stamp::now();
        let mut user = User {
            id: object_id(),
            site: site.to_string(),
            doc,
            created: now,
            updated: now,
            reserved: None,
            seen: None,
            configured: true,
        };
        if user.reservation().is_some() {
            user.reserved = Some(now);
        }
        self.users.push(user);
        Ok(&self.users[self.users.len() - 1])
    }

    /// `PUT rest/user/{id}`: replace the object (what the DHCP server saw stays).
    pub fn replace_user(&mut self, site: &str, id: &str, body: &Value) -> Result<&User, ApiErr> {
        let idx = self.users.iter().position(|u| u.site == site && u.id == id).ok_or(ID_INVALID)?;
        let doc = self.checked(site, body, Some(id))?;
        let now = Stamp::now();
        let user = &mut self.users[idx];
        let before = user.reservation().map(|(ip, n)| (ip, n.map(str::to_string)));
        user.doc = doc;
        user.updated = now;
        user.configured = true;
        let after = user.reservation().map(|(ip, n)| (ip, n.map(str::to_string)));
        if after.is_none() {
            user.reserved = None;
        } else if after != before {
            user.reserved = Some(now);
        }
        Ok(&self.users[idx])
    }

    /// `DELETE rest/user/{id}`.
    pub fn delete_user(&mut self, site: &str, id: &str) -> Result<(), ApiErr> {
        let idx = self.users.iter().position(|u| u.site == site && u.id == id).ok_or(ID_INVALID)?;
        let user = self.users.remove(idx);
        self.pool.retain(|(_, mac), _| mac != user.mac());
        Ok(())
    }

    /// `cmd/stamgr forget-sta`: remove the clients with these MACs; returns them.
    pub fn forget(&mut self, site: &str, macs: &[String]) -> Vec<User> {
        let (gone, kept): (Vec<User>, Vec<User>) = std::mem::take(&mut self.users)
            .into_iter()
            .partition(|u| u.site == site && macs.iter().any(|m| m.eq_ignore_ascii_case(u.mac())));
        self.users = kept;
        for u in &gone {
            self.pool.retain(|(_, mac), _| mac != u.mac());
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State::new(&["default".into()], &[NetworkSpec::default()]).unwrap()
    }

    #[test]
    fn a_reservation_is_checked_stamped_and_unique_per_mac_and_fixed_ip() {
        let mut st = state();
        let nid = st.nets[0].id.clone();
        let body = json!({"mac": "BC:24:11:AA:BB:CC", "name": "vm01", "use_fixedip": true,
            "fixed_ip": "127.77.0.10", "network_id": nid, "note": "n"});
        let u = st.create_user("default", &body).unwrap().clone();
        assert_eq!(u.mac(), "bc:24:11:aa:bb:cc");
        assert_eq!(u.reserved, Some(u.created));
        assert_eq!(st.create_user("default", &body).unwrap_err(), MAC_USED);
        let other_ip =
            json!({"mac": "bc:24:11:aa:bb:cc", "use_fixedip": true, "fixed_ip": "127.77.0.11", "network_id": nid});
        assert_eq!(st.create_user("default", &other_ip).unwrap_err(), MAC_USED);
        let clash =
            json!({"mac": "bc:24:11:00:00:01", "use_fixedip": true, "fixed_ip": "127.77.0.10", "network_id": nid});
        assert_eq!(st.create_user("default", &clash).unwrap_err(), FIXED_IP_USED);
        for bad in [
            json!([]),
            json!({"mac": "nope"}),
            json!({"mac": "bc:24:11:00:00:02", "use_fixedip": "yes"}),
            json!({"mac": "bc:24:11:00:00:02", "use_fixedip": true, "fixed_ip": "127.77.0.12", "network_id": "nope"}),
        ] {
            assert_eq!(st.create_user("default", &bad).unwrap_err(), INVALID_PAYLOAD, "{bad}");
        }
        // jamesbraid/go-unifi 6b108c1 unifi/behavior_probe_batch1_integration_test.go:17-22
        // and the use_fixedip sweep: no fixed_ip, or one outside the client's LAN.
        for bad in [
            json!({"mac": "bc:24:11:00:00:02", "use_fixedip": true, "network_id": nid}),
            json!({"mac": "bc:24:11:00:00:02", "use_fixedip": true, "fixed_ip": "x", "network_id": nid}),
            json!({"mac": "bc:24:11:00:00:02", "use_fixedip": true, "fixed_ip": "192.0.2.50", "network_id": nid}),
            json!({"mac": "bc:24:11:00:00:02", "use_fixedip": true, "fixed_ip": "192.0.2.50"}),
            // Checked before the MAC: a known MAC with a bad address is still InvalidFixedIP.
            json!({"mac": "bc:24:11:aa:bb:cc", "use_fixedip": true, "fixed_ip": "127.78.0.10", "network_id": nid}),
        ] {
            assert_eq!(st.create_user("default", &bad).unwrap_err(), INVALID_FIXED_IP, "{bad}");
        }
        let no_network = json!({"mac": "bc:24:11:00:00:03", "use_fixedip": true, "fixed_ip": "127.77.0.50"});
        assert!(
            st.create_user("default", &no_network).is_ok(),
            "network_id is optional (the probe's in-subnet create)"
        );
        // A PUT that moves the fixed IP re-stamps the reservation; one that drops it clears it.
        let moved =
            json!({"mac": "bc:24:11:aa:bb:cc", "use_fixedip": true, "fixed_ip": "127.77.0.20", "network_id": nid});
        let after = st.replace_user("default", &u.id, &moved).unwrap().clone();
        assert!(u.created.before(&after.reserved.unwrap()));
        let dropped = st.replace_user("default", &u.id, &json!({"mac": "bc:24:11:aa:bb:cc"})).unwrap();
        assert_eq!(dropped.reserved, None);
        assert_eq!(st.replace_user("default", "0", &moved).unwrap_err(), ID_INVALID);
        assert_eq!(st.forget("default", &["BC:24:11:AA:BB:CC".into(), "bc:24:11:00:00:03".into()]).len(), 2);
        assert!(st.users.is_empty());
    }

    #[test]
    fn a_session_lives_for_its_lifetime_from_the_login_and_is_then_gone() {
        let mut st = state();
        let (ttl, secs) = (Some(std::time::Duration::from_secs(7200)), std::time::Duration::from_secs);
        st.add_session("t".into(), "c".into());
        assert_eq!(st.logins, 1);
        let iat = st.sessions["t"].created;
        assert!(st.session("t", ttl, iat + secs(7199)).is_some(), "still inside its lifetime");
        assert!(st.session("t", None, iat + secs(1 << 30)).is_some(), "no lifetime: it never expires");
        assert!(st.session("t", ttl, iat + secs(7200)).is_none(), "expired at iat + lifetime");
        assert!(st.session("t", None, iat).is_none(), "and dropped, not only hidden");
        st.add_session("u".into(), "c".into());
        let now = st.sessions["u"].created;
        assert!(st.session("u", Some(std::time::Duration::ZERO), now).is_none(), "a zero lifetime refuses every one");
        assert_eq!(st.logins, 2);
    }
}
