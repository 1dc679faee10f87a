//! `ip` (iproute2 6.1, Debian 12) on a simulated guest, answered from the network
//! cloud-init installed ([`GuestNet`]): `ip [-j] [-4|-6] addr|a|address [show|list]
//! [dev IF]` and `ip [-j] [-4|-6] route|r|ro [show|list] [default]`. JSON output has
//! the fields iproute2 prints (`ifname`, `addr_info[].family/local/prefixlen`;
//! `dst`, `gateway`, `dev`); the text output is iproute2's one-line form. Other
//! objects fail as iproute2 does (`Object "x" is unknown, try "ip help".`, exit 1).

use std::net::IpAddr;

use serde_json::{Value, json};

use super::commands::Outcome;
use crate::model::GuestNet;

/// Which address families a `-4` / `-6` flag leaves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Any,
    V4,
    V6,
}

impl Family {
    fn keeps(self, ip: IpAddr) -> bool {
        match self {
            Family::Any => true,
            Family::V4 => ip.is_ipv4(),
            Family::V6 => ip.is_ipv6(),
        }
    }
}

/// An interface name with its addresses (address, prefix, scope).
type LinkView<'a> = (&'a str, Vec<(IpAddr, u8, &'static str)>);

fn split_cidr(c: &str) -> Option<(IpAddr, u8)> {
    let (ip, p) = c.split_once('/')?;
    Some((ip.parse().ok()?, p.parse().ok()?))
}

/// Run `ip ARGS`.
pub fn ip(net: &GuestNet, args: &[&str]) -> Outcome {
    let mut json_out = false;
    let mut family = Family::Any;
    let mut rest: Vec<&str> = Vec::new();
    for a in args {
        match *a {
            "-j" | "-json" | "--json" => json_out = true,
            "-4" => family = Family::V4,
            "-6" => family = Family::V6,
            "-p" | "-pretty" | "-br" | "-brief" | "-c" | "-color" => {}
            other => rest.push(other),
        }
    }
    let Some((object, tail)) = rest.split_first() else {
        return Outcome::fail(255, "Usage: ip [ OPTIONS ] OBJECT { COMMAND | help }\n");
    };
    let tail: Vec<&str> = tail.iter().copied().filter(|w| !matches!(*w, "show" | "list" | "s" | "ls")).collect();
    match *object {
        "a" | "addr" | "address" => addresses(net, family, json_out, &tail),
        "r" | "ro" | "route" => routes(net, family, json_out, &tail),
        other => Outcome::fail(1, format!("Object \"{other}\" is unknown, try \"ip help\".\n")),
    }
}

fn addresses(net: &GuestNet, family: Family, json_out: bool, tail: &[&str]) -> Outcome {
    let dev = match tail {
        [] => None,
        ["dev", d] | [d] => Some(*d),
        _ => {
            return Outcome::fail(
                255,
                format!("Error: either \"dev\" is duplicate, or \"{}\" is a garbage.\n", tail.join(" ")),
            );
        }
    };
    let lo = (
        "lo",
        vec![(IpAddr::from([127, 0, 0, 1]), 8u8, "host"), (IpAddr::from(std::net::Ipv6Addr::LOCALHOST), 128, "host")],
    );
    let mut links: Vec<LinkView> = vec![lo];
    for l in &net.links {
        let addrs = l.addresses.iter().filter_map(|c| split_cidr(c)).map(|(ip, p)| (ip, p, "global")).collect();
        links.push((l.name.as_str(), addrs));
    }
    if let Some(d) = dev
        && !links.iter().any(|(n, _)| *n == d)
    {
        return Outcome::fail(1, format!("Device \"{d}\" does not exist.\n"));
    }
    let shown = links.iter().enumerate().filter(|(_, (n, _))| dev.is_none_or(|d| d == *n));
    if json_out {
        let out: Vec<Value> = shown
            .map(|(i, (name, addrs))| {
                let info: Vec<Value> = addrs
                    .iter()
                    .filter(|(ip, _, _)| family.keeps(*ip))
                    .map(|(ip, p, scope)| {
                        let fam = if ip.is_ipv4() { "inet" } else { "inet6" };
                        json!({"family": fam, "local": ip.to_string(), "prefixlen": p, "scope": scope, "valid_life_time": 4_294_967_295u64, "preferred_life_time": 4_294_967_295u64})
                    })
                    .collect();
                let flags = if *name == "lo" { json!(["LOOPBACK", "UP", "LOWER_UP"]) } else { json!(["BROADCAST", "MULTICAST", "UP", "LOWER_UP"]) };
                json!({"ifindex": i + 1, "ifname": name, "flags": flags, "mtu": if *name == "lo" { 65536 } else { 1500 }, "operstate": if *name == "lo" { "UNKNOWN" } else { "UP" }, "addr_info": info})
            })
            .collect();
        return Outcome::ok(format!("{}\n", Value::Array(out)));
    }
    let mut text = String::new();
    for (i, (name, addrs)) in shown {
        text.push_str(&format!("{}: {name}: <UP,LOWER_UP> mtu 1500 state UP\n", i + 1));
        for (ip, p, scope) in addrs.iter().filter(|(ip, _, _)| family.keeps(*ip)) {
            let fam = if ip.is_ipv4() { "inet" } else { "inet6" };
            text.push_str(&format!("    {fam} {ip}/{p} scope {scope} {name}\n"));
        }
    }
    Outcome::ok(text)
}

fn onlink(gateway: std::net::IpAddr) -> Value {
    if gateway.is_ipv4() { json!(["onlink"]) } else { json!([]) }
}

fn routes(net: &GuestNet, family: Family, json_out: bool, tail: &[&str]) -> Outcome {
    let only_default = match tail {
        [] => false,
        ["default"] | ["0/0"] | ["0.0.0.0/0"] | ["::/0"] => true,
        _ => return Outcome::fail(1, format!("Error: \"{}\" is not supported by this simulator.\n", tail.join(" "))),
    };
    // Without `-6`, `ip route` lists IPv4 only (as iproute2 does).
    let fam = if family == Family::Any { Family::V4 } else { family };
    let defaults: Vec<_> = net.routes.iter().filter(|r| fam.keeps(r.gateway)).collect();
    // Connected routes of the interfaces' subnets (not shown for `default`).
    let mut connected = Vec::new();
    if !only_default {
        for l in &net.links {
            for (ip, p) in l.addresses.iter().filter_map(|c| split_cidr(c)).filter(|(ip, _)| fam.keeps(*ip)) {
                connected.push((format!("{}/{p}", network(ip, p)), l.name.clone(), ip));
            }
        }
    }
    if json_out {
        let mut out: Vec<Value> = defaults
            .iter()
            // ifupdown installs an IPv4 gateway with `onlink` (seen on the real guest).
            .map(|r| json!({"dst": "default", "gateway": r.gateway.to_string(), "dev": r.dev, "flags": onlink(r.gateway)}))
            .collect();
        out.extend(connected.iter().map(|(dst, dev, src)| {
            json!({"dst": dst, "dev": dev, "protocol": "kernel", "scope": "link", "prefsrc": src.to_string(), "flags": []})
        }));
        return Outcome::ok(format!("{}\n", Value::Array(out)));
    }
    let mut text = String::new();
    for r in defaults {
        let flag = if r.gateway.is_ipv4() { " onlink" } else { "" };
        text.push_str(&format!("default via {} dev {}{flag}\n", r.gateway, r.dev));
    }
    for (dst, dev, src) in connected {
        text.push_str(&format!("{dst} dev {dev} proto kernel scope link src {src}\n"));
    }
    Outcome::ok(text)
}

fn network(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0);
            IpAddr::from((u32::from(a) & mask).to_be_bytes())
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix.min(128))).unwrap_or(0);
            IpAddr::from((u128::from(a) & mask).to_be_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GuestLink, GuestRoute};

    fn net(with_route: bool) -> GuestNet {
        GuestNet {
            links: vec![GuestLink { name: "ens18".into(), addresses: vec!["127.0.10.5/24".into()] }],
            routes: if with_route {
                vec![GuestRoute { gateway: "127.0.10.1".parse().unwrap(), dev: "ens18".into() }]
            } else {
                Vec::new()
            },
            files: Default::default(),
        }
    }

    #[test]
    fn ip_json_shows_what_cloud_init_installed_and_nothing_else() {
        let out = ip(&net(true), &["-j", "addr", "show"]);
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(v[1]["ifname"], "ens18");
        assert_eq!(v[1]["addr_info"][0]["local"], "127.0.10.5");
        assert_eq!(v[1]["addr_info"][0]["prefixlen"], 24);
        let out = ip(&net(true), &["-j", "route", "show", "default"]);
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(v, json!([{"dst": "default", "gateway": "127.0.10.1", "dev": "ens18", "flags": ["onlink"]}]));
        let out = ip(&net(false), &["-j", "route", "show", "default"]);
        assert_eq!(out.stdout.trim(), "[]");
        assert_eq!(ip(&net(true), &["-j", "-6", "route", "show", "default"]).stdout.trim(), "[]");
        assert_eq!(ip(&net(true), &["link2"]).code, 1);
    }
}
