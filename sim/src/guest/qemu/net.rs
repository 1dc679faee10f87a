//! How a qemu guest's network-data address becomes something cradle can reach.
//!
//! The guest gets qemu's user-mode network (slirp) with `restrict=on`: it can reach
//! nothing outside, yet sees the network its network-data describes. The slirp network
//! is the guest's own subnet, slirp's host address is the guest's gateway (so the
//! default route of network-data is real), and guest port 22 is forwarded from
//! `127.B.C.D:<guest_ssh_port>` on the host, where `B.C.D` are the last three octets of
//! the guest's address: a guest configured as `10.77.0.10/24` is reached at
//! `127.77.0.10`. Several guests may share one subnet (each has its own slirp stack).
//!
//! Failure modes: no IPv4 address on the interface, a loopback address (it would
//! shadow the host's loopback inside the guest), or a prefix slirp cannot host
//! (shorter than /8, longer than /30) — each an error naming the address.

use std::net::Ipv4Addr;

use crate::model::GuestNet;

/// The user-mode network of one guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlirpNet {
    /// The guest's address (network-data).
    pub guest: Ipv4Addr,
    /// Its prefix length.
    pub prefix: u8,
    /// Slirp's own address: the guest's gateway.
    pub host: Ipv4Addr,
    /// Slirp's DNS address (answers nothing useful under `restrict=on`).
    pub dns: Ipv4Addr,
    /// The host address guest port 22 is forwarded from.
    pub forward: Ipv4Addr,
}

impl SlirpNet {
    /// The `-netdev user,...` options (without the forward port).
    pub fn netdev(&self, id: &str, forward_port: u16) -> String {
        let net = Ipv4Addr::from(u32::from(self.guest) & mask(self.prefix));
        format!(
            "user,id={id},restrict=on,ipv6=off,net={net}/{},host={},dns={},hostfwd=tcp:{}:{forward_port}-{}:22",
            self.prefix, self.host, self.dns, self.forward, self.guest
        )
    }
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) }
}

/// The forward address of a guest address: `127.B.C.D`.
pub fn forward_address(guest: Ipv4Addr) -> Ipv4Addr {
    let [_, b, c, d] = guest.octets();
    Ipv4Addr::new(127, b, c, d)
}

/// Plan the user-mode network for the interface `iface` (ens18, the NIC in net0's
/// slot) of what cloud-init installed from network-data; network-data that renames
/// the NIC (PVE's generated `eth0` with its MAC) names it otherwise, so without
/// `iface` the first configured interface is net0's.
pub fn plan(net: &GuestNet, iface: &str) -> Result<SlirpNet, String> {
    let link = net
        .links
        .iter()
        .find(|l| l.name == iface)
        .or_else(|| net.links.first())
        .ok_or_else(|| format!("network-data configures no interface ({iface} is net0's)"))?;
    let iface = link.name.as_str();
    let (guest, prefix) = link
        .addresses
        .iter()
        .find_map(|a| {
            let (ip, p) = a.split_once('/')?;
            Some((ip.parse::<Ipv4Addr>().ok()?, p.parse::<u8>().ok()?))
        })
        .ok_or_else(|| format!("{iface} has no static IPv4 address in network-data"))?;
    if guest.is_loopback() || guest.is_unspecified() {
        return Err(format!(
            "{guest} cannot be a qemu guest's address (it would shadow the loopback network); give it a \
             private address such as 10.{}.{}.{} (reached at {})",
            guest.octets()[1],
            guest.octets()[2],
            guest.octets()[3],
            forward_address(guest)
        ));
    }
    if !(8..=30).contains(&prefix) {
        return Err(format!("{guest}/{prefix}: the user-mode network needs a prefix between /8 and /30"));
    }
    let base = u32::from(guest) & mask(prefix);
    let inside = |a: Ipv4Addr| (u32::from(a) & mask(prefix)) == base;
    let gateway = net.routes.iter().filter(|r| r.dev == iface).find_map(|r| match r.gateway {
        std::net::IpAddr::V4(g) if inside(g) && g != guest => Some(g),
        _ => None,
    });
    // Without a gateway slirp still needs an address of its own: the first free one.
    let mut free = (base + 1..).map(Ipv4Addr::from).filter(|a| *a != guest);
    let host = match gateway {
        Some(g) => g,
        None => free.next().ok_or("no free address")?,
    };
    let dns = free.find(|a| *a != host).ok_or("no free address")?;
    Ok(SlirpNet { guest, prefix, host, dns, forward: forward_address(guest) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GuestLink, GuestRoute};

    fn net(addr: &str, gw: Option<&str>) -> GuestNet {
        GuestNet {
            links: vec![GuestLink { name: "ens18".into(), addresses: vec![addr.into()] }],
            routes: gw
                .map(|g| vec![GuestRoute { gateway: g.parse().expect("gw"), dev: "ens18".into() }])
                .unwrap_or_default(),
            files: Default::default(),
        }
    }

    #[test]
    fn the_gateway_of_network_data_is_slirps_own_address_and_port_22_is_forwarded_from_127_b_c_d() {
        let p = plan(&net("10.77.0.10/24", Some("10.77.0.1")), "ens18").expect("plan");
        assert_eq!(p.host, Ipv4Addr::new(10, 77, 0, 1));
        assert_eq!(p.forward, Ipv4Addr::new(127, 77, 0, 10));
        assert_eq!(
            p.netdev("net0", 2222),
            "user,id=net0,restrict=on,ipv6=off,net=10.77.0.0/24,host=10.77.0.1,dns=10.77.0.2,\
             hostfwd=tcp:127.77.0.10:2222-10.77.0.10:22"
        );
    }

    #[test]
    fn without_a_gateway_slirp_takes_a_free_address_that_is_not_the_guests() {
        let p = plan(&net("192.168.5.1/24", None), "ens18").expect("plan");
        assert_eq!((p.host, p.dns), (Ipv4Addr::new(192, 168, 5, 2), Ipv4Addr::new(192, 168, 5, 3)));
    }

    #[test]
    fn a_loopback_address_or_a_missing_interface_is_refused_with_the_fix() {
        let e = plan(&net("127.40.0.5/8", None), "ens18").expect_err("loopback");
        assert!(e.contains("10.40.0.5") && e.contains("127.40.0.5"), "{e}");
        let e = plan(&GuestNet::default(), "ens18").expect_err("no iface");
        assert!(e.contains("ens18"), "{e}");
        let e = plan(&net("10.0.0.5/31", None), "ens18").expect_err("prefix");
        assert!(e.contains("/31"), "{e}");
    }
}
