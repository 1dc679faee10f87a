//! The controller's DHCP server, as a simulated cluster's guests reach it.
//!
//! Contract: [`UnifiDhcp::request`] is one DHCP exchange (DISCOVER … ACK) of a MAC on
//! the network whose VLAN matches the NIC's tag (untagged = the network without a
//! VLAN). If the site has a client with that MAC whose `use_fixedip` is true, whose
//! `fixed_ip` is set and whose `network_id` is that network, the offer is that fixed
//! IP ([`DhcpOffer::Reserved`]); otherwise a free pool address between `dhcpd_start`
//! and `dhcpd_stop` (the one the MAC already holds if still free, else a random one),
//! never a reserved address, another MAC's lease or the gateway ([`DhcpOffer::Pool`]).
//! No network, DHCP off or an exhausted pool give [`DhcpOffer::NoOffer`]. Either
//! offer records the client as seen (`ip`, `first_seen`/`last_seen`, the host name it
//! sent), creating a client object for an unknown MAC as a real controller does.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use serde_json::{Map, json};

use super::state::{Net, Seen, State, User, is_mac, object_id};
use crate::services::Stamp;
use crate::sim::lock;

/// What the DHCP server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DhcpOffer {
    /// The client's reservation.
    Reserved {
        /// The fixed IP.
        ip: Ipv4Addr,
        /// The network's prefix length.
        prefix: u8,
        /// The network's gateway (DHCP option 3).
        gateway: Ipv4Addr,
        /// The network's `_id`.
        network_id: String,
        /// The reservation's `_id`.
        client_id: String,
        /// When the reservation was set.
        reserved_at: Stamp,
    },
    /// A pool address.
    Pool {
        /// The address.
        ip: Ipv4Addr,
        /// The network's prefix length.
        prefix: u8,
        /// The network's gateway.
        gateway: Ipv4Addr,
        /// The network's `_id`.
        network_id: String,
    },
    /// No address (the reason says why); the client keeps asking, unconfigured.
    NoOffer {
        /// Why.
        reason: String,
    },
}

impl DhcpOffer {
    /// The offered address.
    pub fn ip(&self) -> Option<Ipv4Addr> {
        match self {
            DhcpOffer::Reserved { ip, .. } | DhcpOffer::Pool { ip, .. } => Some(*ip),
            DhcpOffer::NoOffer { .. } => None,
        }
    }

    /// `(address, prefix, gateway)` of an offer.
    pub fn lease(&self) -> Option<(Ipv4Addr, u8, Ipv4Addr)> {
        match self {
            DhcpOffer::Reserved { ip, prefix, gateway, .. } | DhcpOffer::Pool { ip, prefix, gateway, .. } => {
                Some((*ip, *prefix, *gateway))
            }
            DhcpOffer::NoOffer { .. } => None,
        }
    }

    /// Whether the address came from a reservation.
    pub fn is_reserved(&self) -> bool {
        matches!(self, DhcpOffer::Reserved { .. })
    }
}

/// The DHCP server of one site of a UniFi stand-in (cheap to clone; it shares the
/// controller's state, so it sees reservations as they are written).
#[derive(Clone)]
pub struct UnifiDhcp {
    state: Arc<Mutex<State>>,
    site: String,
}

impl std::fmt::Debug for UnifiDhcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnifiDhcp").field("site", &self.site).finish_non_exhaustive()
    }
}

fn allocate(st: &mut State, net: &Net, mac: &str) -> Option<Ipv4Addr> {
    let mut taken: HashSet<Ipv4Addr> = st
        .users
        .iter()
        .filter(|u| u.site == net.site)
        .filter_map(User::reservation)
        .filter(|(_, n)| *n == Some(net.id.as_str()))
        .map(|(ip, _)| ip)
        .collect();
    taken.insert(net.gateway);
    taken.extend(st.pool.iter().filter(|((n, m), _)| *n == net.id && m != mac).map(|(_, ip)| *ip));
    let key = (net.id.clone(), mac.to_string());
    if let Some(ip) = st.pool.get(&key).filter(|ip| !taken.contains(ip)) {
        return Some(*ip);
    }
    let (start, stop) = (u32::from(net.dhcp_start), u32::from(net.dhcp_stop));
    let size = stop.checked_sub(start)?.checked_add(1)?;
    let r: [u8; 4] = crate::model::ids::random_bytes();
    let offset = u32::from_le_bytes(r) % size;
    let free = (0..size).map(|i| Ipv4Addr::from(start + (offset + i) % size)).find(|ip| !taken.contains(ip))?;
    st.pool.insert(key, free);
    Some(free)
}

impl UnifiDhcp {
    pub(super) fn new(state: Arc<Mutex<State>>, site: &str) -> Self {
        UnifiDhcp { state, site: site.to_string() }
    }

    /// The site this server serves.
    pub fn site(&self) -> &str {
        &self.site
    }

    /// One DHCP exchange of `mac` on the network of VLAN `vlan` (`None` = untagged),
    /// sending `hostname` (option 12) when given.
    pub fn request(&self, mac: &str, vlan: Option<u16>, hostname: Option<&str>) -> DhcpOffer {
        let mac = mac.to_ascii_lowercase();
        if !is_mac(&mac) {
            return DhcpOffer::NoOffer { reason: format!("'{mac}' is not a MAC address") };
        }
        let mut st = lock(&self.state);
        let Some(net) = st.nets.iter().find(|n| n.site == self.site && n.vlan == vlan).cloned() else {
            let vlan = vlan.map_or_else(|| "untagged".to_string(), |v| format!("VLAN {v}"));
            return DhcpOffer::NoOffer { reason: format!("site '{}' has no {vlan} network", self.site) };
        };
        if !net.dhcp_enabled {
            return DhcpOffer::NoOffer { reason: format!("the DHCP server of network '{}' is off", net.name) };
        }
        let reserved = st.user_by_mac(&self.site, &mac).and_then(|u| {
            let (ip, nid) = u.reservation()?;
            (nid == Some(net.id.as_str())).then(|| (ip, u.id.clone(), u.reserved.unwrap_or(u.created)))
        });
        let offer = match reserved {
            Some((ip, client_id, reserved_at)) => {
                st.pool.remove(&(net.id.clone(), mac.clone()));
                DhcpOffer::Reserved {
                    ip,
                    prefix: net.prefix,
                    gateway: net.gateway,
                    network_id: net.id.clone(),
                    client_id,
                    reserved_at,
                }
            }
            None => match allocate(&mut st, &net, &mac) {
                Some(ip) => {
                    DhcpOffer::Pool { ip, prefix: net.prefix, gateway: net.gateway, network_id: net.id.clone() }
                }
                None => {
                    return DhcpOffer::NoOffer { reason: format!("the pool of network '{}' is exhausted", net.name) };
                }
            },
        };
        let now = crate::model::ids::now_unix();
        let ip = offer.ip().unwrap_or(net.gateway);
        let site = self.site.clone();
        let user = match st.users.iter_mut().find(|u| u.site == site && u.mac() == mac) {
            Some(u) => u,
            None => {
                let stamp = Stamp::now();
                let mut doc = Map::new();
                doc.insert("mac".into(), json!(mac));
                st.users.push(User {
                    id: object_id(),
                    site,
                    doc,
                    created: stamp,
                    updated: stamp,
                    reserved: None,
                    seen: None,
                    configured: false,
                });
                let last = st.users.len() - 1;
                &mut st.users[last]
            }
        };
        let first_unix = user.seen.as_ref().map_or(now, |s| s.first_unix);
        let hostname = hostname.map(str::to_string).or_else(|| user.seen.as_ref().and_then(|s| s.hostname.clone()));
        user.seen = Some(Seen { ip, first_unix, last_unix: now, hostname });
        offer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::unifi::NetworkSpec;
    use serde_json::json;

    fn server() -> (UnifiDhcp, Arc<Mutex<State>>, String) {
        let vlan = NetworkSpec {
            name: "Lab".into(),
            ip_subnet: "127.78.0.1/30".into(),
            vlan: Some(20),
            dhcp_start: Ipv4Addr::new(127, 78, 0, 2),
            dhcp_stop: Ipv4Addr::new(127, 78, 0, 2),
            ..NetworkSpec::default()
        };
        let st = State::new(&["default".into()], &[NetworkSpec::default(), vlan]).unwrap();
        let nid = st.nets[0].id.clone();
        let st = Arc::new(Mutex::new(st));
        (UnifiDhcp::new(st.clone(), "default"), st, nid)
    }

    #[test]
    fn a_reserved_mac_gets_its_fixed_ip_and_others_a_stable_pool_address() {
        let (dhcp, st, nid) = server();
        let body =
            json!({"mac": "bc:24:11:00:00:01", "use_fixedip": true, "fixed_ip": "127.77.0.10", "network_id": nid});
        let reserved_at = lock(&st).create_user("default", &body).unwrap().created;
        let offer = dhcp.request("BC:24:11:00:00:01", None, Some("vm01"));
        assert!(
            matches!(&offer, DhcpOffer::Reserved { ip, reserved_at: r, .. } if *ip == Ipv4Addr::new(127, 77, 0, 10) && *r == reserved_at)
        );
        let pool = dhcp.request("bc:24:11:00:00:02", None, None);
        let ip = pool.ip().unwrap();
        assert!(!pool.is_reserved() && ip != Ipv4Addr::new(127, 77, 0, 10) && ip >= Ipv4Addr::new(127, 77, 0, 6));
        assert_eq!(dhcp.request("bc:24:11:00:00:02", None, None).ip(), Some(ip), "the same MAC keeps its lease");
        // The server now knows that client: creating it over the API is MacUsed.
        let again =
            json!({"mac": "bc:24:11:00:00:02", "use_fixedip": true, "fixed_ip": "127.77.0.11", "network_id": nid});
        assert_eq!(lock(&st).create_user("default", &again).unwrap_err(), super::super::state::MAC_USED);
        let seen = lock(&st).user_by_mac("default", "bc:24:11:00:00:01").unwrap().seen.clone().unwrap();
        assert_eq!((seen.ip, seen.hostname.as_deref()), (Ipv4Addr::new(127, 77, 0, 10), Some("vm01")));
    }

    #[test]
    fn the_vlan_picks_the_network_and_a_full_pool_or_unknown_vlan_gives_nothing() {
        let (dhcp, _, _) = server();
        assert_eq!(dhcp.request("bc:24:11:00:00:03", Some(20), None).ip(), Some(Ipv4Addr::new(127, 78, 0, 2)));
        assert!(matches!(dhcp.request("bc:24:11:00:00:04", Some(20), None), DhcpOffer::NoOffer { .. }));
        assert!(matches!(dhcp.request("bc:24:11:00:00:04", Some(30), None), DhcpOffer::NoOffer { .. }));
        assert!(matches!(dhcp.request("nope", None, None), DhcpOffer::NoOffer { .. }));
    }
}
