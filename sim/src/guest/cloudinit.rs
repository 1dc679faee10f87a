//! What a guest's cloud-init makes of its NoCloud seed, and what `cloud-init status`
//! prints (text, or with `--format json` the JSON of cloud-init 24.4.1).
//!
//! Contract: [`parse_identity`] never fails on bad user-data — like cloud-init it goes on
//! with defaults and marks the boot degraded; the network address is the first static
//! IPv4 address of network-data version 1 or 2. [`network_state`] is what a minimal
//! Debian 12 image (cloud-init's ifupdown renderer; no net-tools, no resolvconf, no
//! systemd-resolved) really installs from network-data: addresses, and a default
//! route only from a subnet gateway (`gateway4`/`gateway6`, v1 `gateway`), which ENI
//! writes as a `gateway` line; `routes:` entries become `post-up route add ... ||
//! true`, which fails without `route`, so they install nothing (and cloud-init still
//! reports `done`). Network-data nameservers become `dns-nameservers`, which do
//! nothing without resolvconf: `/etc/resolv.conf` is the image's (empty) file unless
//! user-data `write_files` writes it. [`status`] renders one of running /
//! done / error / degraded / disabled with the exit code the real tool gives (0/1/2).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use serde_json::json;

use crate::model::{GuestLink, GuestNet, GuestRoute};
use serde_yaml_ng::Value as Yaml;

/// The default user of Debian cloud images.
pub const DEFAULT_USER: &str = "debian";

/// The NoCloud seed of one cold start.
#[derive(Debug, Clone, Default)]
pub struct CiSeed {
    /// user-data text.
    pub user: String,
    /// network-config text.
    pub network: String,
    /// meta-data text.
    pub meta: String,
    /// vendor-data text (empty when none).
    pub vendor: String,
    /// instance-id (hash of user + network data).
    pub instance_id: String,
}

/// What cloud-init configured from the seed.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    /// Authorized public keys (OpenSSH lines) per user.
    pub authorized: BTreeMap<String, Vec<String>>,
    /// `ssh_keys.ed25519_private`, when given.
    pub host_key: Option<String>,
    /// Hostname (user-data `hostname`/`fqdn`, else meta-data `local-hostname`).
    pub hostname: Option<String>,
    /// First static IPv4 address of network-data.
    pub address: Option<Ipv4Addr>,
    /// User-data was not valid cloud-config.
    pub invalid_user_data: bool,
    /// The network installed from network-data and `write_files`.
    pub net: GuestNet,
}

pub(super) fn yaml_str(v: &Yaml) -> Option<String> {
    match v {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn key_list(v: Option<&Yaml>) -> Vec<String> {
    match v {
        Some(Yaml::Sequence(seq)) => seq.iter().filter_map(yaml_str).map(|s| s.trim().to_string()).collect(),
        Some(Yaml::String(s)) => vec![s.trim().to_string()],
        _ => Vec::new(),
    }
}

pub(super) fn get<'a>(v: &'a Yaml, k: &str) -> Option<&'a Yaml> {
    v.as_mapping().and_then(|m| m.get(Yaml::String(k.to_string())))
}

/// Parse the identity cloud-init applies from a seed.
pub fn parse_identity(seed: &CiSeed) -> Identity {
    let mut id = Identity::default();
    let user_doc: Option<Yaml> = if seed.user.trim().is_empty() {
        None
    } else if !seed.user.trim_start().starts_with("#cloud-config") {
        // Scripts and MIME archives are not modelled: treated as no cloud-config.
        id.invalid_user_data = !seed.user.trim_start().starts_with("#!");
        None
    } else {
        match serde_yaml_ng::from_str::<Yaml>(&seed.user) {
            Ok(Yaml::Mapping(m)) => Some(Yaml::Mapping(m)),
            Ok(Yaml::Null) => None,
            _ => {
                id.invalid_user_data = true;
                None
            }
        }
    };
    let meta: Option<Yaml> = serde_yaml_ng::from_str(&seed.meta).ok();
    let mut default_user = DEFAULT_USER.to_string();
    let mut have_default = true;
    if let Some(doc) = &user_doc {
        match get(doc, "user") {
            Some(Yaml::String(s)) => default_user = s.clone(),
            Some(m @ Yaml::Mapping(_)) => {
                if let Some(n) = get(m, "name").and_then(yaml_str) {
                    default_user = n;
                }
            }
            _ => {}
        }
        if let Some(Yaml::Sequence(users)) = get(doc, "users") {
            have_default = false;
            for u in users {
                match u {
                    Yaml::String(s) if s == "default" => have_default = true,
                    Yaml::Mapping(_) => {
                        let Some(name) = get(u, "name").and_then(yaml_str) else {
                            id.invalid_user_data = true;
                            continue;
                        };
                        let keys = key_list(get(u, "ssh_authorized_keys").or_else(|| get(u, "ssh-authorized-keys")));
                        id.authorized.entry(name).or_default().extend(keys);
                    }
                    _ => id.invalid_user_data = true,
                }
            }
        }
        if have_default {
            let keys = key_list(get(doc, "ssh_authorized_keys"));
            id.authorized.entry(default_user.clone()).or_default().extend(keys);
        }
        let disable_root = match get(doc, "disable_root") {
            Some(Yaml::Bool(b)) => *b,
            _ => true,
        };
        if !disable_root && have_default {
            let keys = id.authorized.get(&default_user).cloned().unwrap_or_default();
            id.authorized.entry("root".into()).or_default().extend(keys);
        }
        if let Some(k) = get(doc, "ssh_keys").and_then(|k| get(k, "ed25519_private")).and_then(yaml_str) {
            id.host_key = Some(k);
        }
        id.hostname = get(doc, "hostname")
            .or_else(|| get(doc, "fqdn"))
            .and_then(yaml_str)
            .map(|h| h.split('.').next().unwrap_or(&h).to_string());
    } else {
        id.authorized.entry(default_user).or_default();
    }
    if id.hostname.is_none() {
        id.hostname = meta
            .as_ref()
            .and_then(|m| get(m, "local-hostname"))
            .and_then(yaml_str)
            .map(|h| h.split('.').next().unwrap_or(&h).to_string());
    }
    id.address = parse_address(&seed.network);
    let (links, routes) = network_state(&seed.network);
    id.net = GuestNet { links, routes, files: user_doc.as_ref().map(write_files).unwrap_or_default() };
    id
}

/// The files of user-data `write_files` (plain-text `content`; `append` appends).
/// Other encodings are not modelled and write nothing.
fn write_files(doc: &Yaml) -> BTreeMap<String, String> {
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    let Some(Yaml::Sequence(entries)) = get(doc, "write_files") else { return files };
    for e in entries {
        let Some(path) = get(e, "path").and_then(yaml_str) else { continue };
        let plain = get(e, "encoding").and_then(yaml_str).is_none_or(|enc| enc == "text/plain");
        if !plain {
            continue;
        }
        let content = get(e, "content").and_then(yaml_str).unwrap_or_default();
        if matches!(get(e, "append"), Some(Yaml::Bool(true))) {
            files.entry(path).or_default().push_str(&content);
        } else {
            files.insert(path, content);
        }
    }
    files
}

/// `ip/prefix` with the family's default prefix when none is given (as cloud-init).
fn cidr(addr: &str, netmask: Option<&str>) -> Option<(IpAddr, String)> {
    let (ip, prefix) = match addr.split_once('/') {
        Some((ip, p)) => (ip.trim().parse::<IpAddr>().ok()?, p.trim().parse::<u8>().ok()?),
        None => {
            let ip: IpAddr = addr.trim().parse().ok()?;
            let prefix = match (netmask.and_then(|m| m.parse::<Ipv4Addr>().ok()), ip) {
                (Some(m), IpAddr::V4(_)) => u32::from(m).count_ones() as u8,
                (_, IpAddr::V4(_)) => 24,
                (_, IpAddr::V6(_)) => 64,
            };
            (ip, prefix)
        }
    };
    Some((ip, format!("{ip}/{prefix}")))
}

/// Interfaces and default routes a minimal Debian 12 installs from network-data
/// (see the module docs): only subnet gateways give a route, never `routes:`.
pub fn network_state(network: &str) -> (Vec<GuestLink>, Vec<GuestRoute>) {
    let mut links = Vec::new();
    let mut routes = Vec::new();
    let Ok(doc) = serde_yaml_ng::from_str::<Yaml>(network) else { return (links, routes) };
    let doc = get(&doc, "network").cloned().unwrap_or(doc);
    let version = get(&doc, "version").and_then(yaml_str).unwrap_or_default();
    if version == "2" {
        for key in ["ethernets", "vlans", "bonds", "bridges"] {
            let Some(Yaml::Mapping(ifs)) = get(&doc, key) else { continue };
            for (id, iface) in ifs {
                let Some(id) = yaml_str(id) else { continue };
                let name = get(iface, "set-name").and_then(yaml_str).unwrap_or(id);
                let addrs: Vec<(IpAddr, String)> = match get(iface, "addresses") {
                    Some(Yaml::Sequence(a)) => a.iter().filter_map(yaml_str).filter_map(|a| cidr(&a, None)).collect(),
                    _ => Vec::new(),
                };
                // cloud-init attaches gateway4/6 to the first static subnet of that
                // family; without one it is dropped.
                for (gw_key, v4) in [("gateway4", true), ("gateway6", false)] {
                    let gw = get(iface, gw_key).and_then(yaml_str).and_then(|g| g.parse::<IpAddr>().ok());
                    if let Some(gw) = gw
                        && addrs.iter().any(|(ip, _)| ip.is_ipv4() == v4)
                    {
                        routes.push(GuestRoute { gateway: gw, dev: name.clone() });
                    }
                }
                // `routes:` → `post-up route add` → `route: command not found`: nothing.
                links.push(GuestLink { name, addresses: addrs.into_iter().map(|(_, c)| c).collect() });
            }
        }
    } else if let Some(Yaml::Sequence(cfg)) = get(&doc, "config") {
        for item in cfg {
            let kind = get(item, "type").and_then(yaml_str).unwrap_or_default();
            if !matches!(kind.as_str(), "physical" | "vlan" | "bond" | "bridge") {
                continue;
            }
            let Some(name) = get(item, "name").and_then(yaml_str) else { continue };
            let mut addresses = Vec::new();
            if let Some(Yaml::Sequence(subnets)) = get(item, "subnets") {
                for sn in subnets {
                    let is_static = get(sn, "type").and_then(yaml_str).is_some_and(|t| t == "static" || t == "static6");
                    let Some(addr) = get(sn, "address").and_then(yaml_str).filter(|_| is_static) else { continue };
                    let netmask = get(sn, "netmask").and_then(yaml_str);
                    let Some((_, c)) = cidr(&addr, netmask.as_deref()) else { continue };
                    addresses.push(c);
                    if let Some(gw) = get(sn, "gateway").and_then(yaml_str).and_then(|g| g.parse::<IpAddr>().ok()) {
                        routes.push(GuestRoute { gateway: gw, dev: name.clone() });
                    }
                }
            }
            links.push(GuestLink { name, addresses });
        }
    }
    (links, routes)
}

fn first_v4(addr: &str) -> Option<Ipv4Addr> {
    addr.split('/').next().and_then(|a| a.trim().parse().ok())
}

/// The first static IPv4 address of network-config v1 or v2.
pub fn parse_address(network: &str) -> Option<Ipv4Addr> {
    let doc: Yaml = serde_yaml_ng::from_str(network).ok()?;
    let doc = get(&doc, "network").cloned().unwrap_or(doc);
    let version = get(&doc, "version").and_then(yaml_str).unwrap_or_default();
    if version == "2" {
        for key in ["ethernets", "bonds", "vlans", "bridges"] {
            if let Some(Yaml::Mapping(ifs)) = get(&doc, key) {
                for (_, iface) in ifs {
                    if let Some(Yaml::Sequence(addrs)) = get(iface, "addresses")
                        && let Some(a) = addrs.iter().filter_map(yaml_str).find_map(|a| first_v4(&a))
                    {
                        return Some(a);
                    }
                }
            }
        }
        None
    } else {
        let Some(Yaml::Sequence(cfg)) = get(&doc, "config") else { return None };
        for item in cfg {
            if let Some(Yaml::Sequence(subnets)) = get(item, "subnets") {
                for s in subnets {
                    let is_static = get(s, "type").and_then(yaml_str).is_some_and(|t| t == "static");
                    if let (true, Some(a)) = (is_static, get(s, "address").and_then(yaml_str))
                        && let Some(ip) = first_v4(&a)
                    {
                        return Some(ip);
                    }
                }
            }
        }
        None
    }
}

/// The final outcome of cloud-init in one boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CiOutcome {
    /// `done`, exit 0.
    Done,
    /// `error`, exit 1.
    Error,
    /// Done with recoverable errors: cloud-init 22.4 still says `done`, exit 0;
    /// only its log (`/var/log/cloud-init.log`) has the `[WARNING]` line.
    Degraded,
    /// No datasource (the cloud-init drive is gone): `disabled`, exit 0.
    Disabled,
}

/// The version the guests' cloud-init reports: Debian 12's (the template is
/// `debian-12-cloud`).
pub const VERSION: &str = "22.4.2";

/// The warning a degraded boot logs (cloud-init's own text for bad cloud-config).
pub const DEGRADED_WARNING: &str = "util.py[WARNING]: Invalid cloud-config provided: Please run 'sudo cloud-init schema --system' to see the schema errors.";

/// `/var/log/cloud-init.log` of a boot: a few of the real lines, plus the
/// warning of a degraded one and the traceback of a failed one.
pub fn log(outcome: CiOutcome, boot_unix: u64) -> String {
    let at = |o: u64| crate::model::ids::log_stamp(boot_unix + o);
    let mut out = format!(
        "{} - util.py[DEBUG]: Cloud-init v. {VERSION} running 'init-local' at {}. Up 3.1 seconds.\n",
        at(0),
        crate::model::ids::rfc2822(boot_unix)
    );
    out.push_str(&format!("{} - main.py[DEBUG]: [net] init will now be targeting instance id: nocloud\n", at(2)));
    match outcome {
        CiOutcome::Degraded => out.push_str(&format!("{} - {DEGRADED_WARNING}\n", at(4))),
        CiOutcome::Error => {
            out.push_str(&format!("{} - util.py[WARNING]: Running module scripts_user failed\n", at(6)));
            out.push_str(&format!(
                "{} - util.py[DEBUG]: Running module scripts_user failed\nTraceback (most recent call last):\n",
                at(6)
            ));
        }
        _ => {}
    }
    out.push_str(&format!("{} - util.py[DEBUG]: cloud-init mode 'modules' took 0.5 seconds (0.50)\n", at(7)));
    out
}

/// Render `cloud-init status` (`json` or text, `long`) as cloud-init 22.4.2 prints it
/// (captured from the real tool in the qemu guest mode:
/// `tests/fixtures/cloud-init-status/22.4.2-*`) for a boot at `boot_unix`; `finished`
/// = whether the final stage has ended. Returns (stdout, exit code).
pub fn status(outcome: CiOutcome, finished: bool, boot_unix: u64, json_format: bool, long: bool) -> (String, u32) {
    let err_text = "('scripts_user', RuntimeError('Runparts: 1 failures (runcmd) in 1 attempted commands'))";
    let seeded = "DataSourceNoCloud [seed=/dev/sr0][dsmode=net]";
    let (boot_code, datasource, detail, errors, last_update, status, code) = match (outcome, finished) {
        (CiOutcome::Disabled, _) => (
            "disabled-by-generator",
            "",
            "Cloud-init disabled by cloud-init-generator".to_string(),
            vec![],
            String::new(),
            "disabled",
            0,
        ),
        (_, false) => (
            "enabled-by-generator",
            "nocloud",
            "Running in stage: modules-config".to_string(),
            vec![],
            crate::model::ids::rfc2822(boot_unix + 4),
            "running",
            0,
        ),
        (CiOutcome::Error, true) => (
            "enabled-by-generator",
            "nocloud",
            seeded.to_string(),
            vec![err_text.to_string()],
            crate::model::ids::rfc2822(boot_unix + 7),
            "error",
            1,
        ),
        (_, true) => (
            "enabled-by-generator",
            "nocloud",
            seeded.to_string(),
            vec![],
            crate::model::ids::rfc2822(boot_unix + 7),
            "done",
            0,
        ),
    };
    if json_format {
        let inner = json!({
            "boot_status_code": boot_code, "datasource": datasource, "detail": detail,
            "errors": errors, "last_update": last_update, "status": status,
        });
        let doc = json!({
            "_schema_version": "1", "boot_status_code": boot_code, "datasource": datasource,
            "detail": detail, "errors": errors, "last_update": last_update,
            "schemas": {"1": inner}, "status": status,
        });
        let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
        return (format!("{text}\n"), code);
    }
    let mut out = format!("status: {status}\n");
    if long {
        out.push_str(&format!("boot_status_code: {boot_code}\n"));
        if !last_update.is_empty() {
            out.push_str(&format!("last_update: {last_update}\n"));
        }
        out.push_str(&format!("detail:\n{detail}\n"));
        if !errors.is_empty() {
            out.push_str("errors:\n");
            for e in &errors {
                out.push_str(&format!("\t{e}\n"));
            }
        }
    }
    (out, code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn identity_takes_users_keys_host_key_and_v2_or_v1_address() {
        let seed = CiSeed {
            user: "#cloud-config\nhostname: test-0\nssh_authorized_keys:\n  - ssh-ed25519 AAAA top\nusers:\n  - default\n  - name: ops\n    ssh_authorized_keys: [\"ssh-ed25519 BBBB ops\"]\n".into(),
            network: "version: 2\nethernets:\n  eth0:\n    addresses: [127.0.5.9/8]\n".into(),
            ..Default::default()
        };
        let id = parse_identity(&seed);
        assert_eq!(id.hostname.as_deref(), Some("test-0"));
        assert_eq!(id.authorized["debian"], vec!["ssh-ed25519 AAAA top".to_string()]);
        assert_eq!(id.authorized["ops"], vec!["ssh-ed25519 BBBB ops".to_string()]);
        assert!(!id.authorized.contains_key("root"));
        assert_eq!(id.address, Some(Ipv4Addr::new(127, 0, 5, 9)));
        let v1 = "version: 1\nconfig:\n  - type: physical\n    name: eth0\n    subnets:\n      - type: static\n        address: 127.0.6.1\n        netmask: 255.0.0.0\n";
        assert_eq!(parse_address(v1), Some(Ipv4Addr::new(127, 0, 6, 1)));
        let bad = parse_identity(&CiSeed { user: "#cloud-config\n: : [".into(), ..Default::default() });
        assert!(bad.invalid_user_data);
    }

    #[test]
    fn a_routes_entry_installs_no_default_route_on_a_minimal_image_but_a_gateway_does() {
        let routes = r#"{"version": 2, "ethernets": {"ens18": {"addresses": ["127.0.10.5/24"], "routes": [{"to": "0.0.0.0/0", "via": "127.0.10.1"}]}}}"#;
        let (links, r) = network_state(routes);
        assert_eq!(links, vec![GuestLink { name: "ens18".into(), addresses: vec!["127.0.10.5/24".into()] }]);
        assert!(r.is_empty(), "ENI renders routes as `post-up route add`; net-tools is missing: {r:?}");
        let gw = r#"{"version": 2, "ethernets": {"ens18": {"match": {"macaddress": "bc:24:11:00:00:01"}, "set-name": "lan", "addresses": ["127.0.10.5/24"], "gateway4": "127.0.10.1"}}}"#;
        let (links, r) = network_state(gw);
        assert_eq!(links[0].name, "lan");
        assert_eq!(r, vec![GuestRoute { gateway: "127.0.10.1".parse().unwrap(), dev: "lan".into() }]);
        // gateway4 without a static IPv4 address is dropped, as cloud-init does.
        let (_, r) =
            network_state(r#"{"version": 2, "ethernets": {"ens18": {"dhcp4": true, "gateway4": "10.0.0.1"}}}"#);
        assert!(r.is_empty());
        let v1 = "version: 1\nconfig:\n  - type: physical\n    name: eth0\n    subnets:\n      - type: static\n        address: 127.0.6.1\n        netmask: 255.255.0.0\n        gateway: 127.0.0.1\n";
        let (links, r) = network_state(v1);
        assert_eq!(links[0].addresses, vec!["127.0.6.1/16".to_string()]);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn write_files_lands_on_the_guest_and_network_nameservers_alone_do_not() {
        let seed = CiSeed {
            user: "#cloud-config\nwrite_files:\n  - path: /etc/resolv.conf\n    content: \"nameserver 127.0.0.53\\n\"\n  - path: /x\n    encoding: b64\n    content: eA==\n".into(),
            network: r#"{"version": 2, "ethernets": {"ens18": {"addresses": ["127.0.10.5/24"], "nameservers": {"addresses": ["127.0.0.9"]}}}}"#.into(),
            ..Default::default()
        };
        let id = parse_identity(&seed);
        assert_eq!(id.net.files.get("/etc/resolv.conf").map(String::as_str), Some("nameserver 127.0.0.53\n"));
        assert!(!id.net.files.contains_key("/x"), "b64 content is not modelled");
        let plain = parse_identity(&CiSeed { user: "#cloud-config\n{}\n".into(), ..seed });
        assert!(plain.net.files.is_empty(), "dns-nameservers needs resolvconf: nothing is written");
    }

    #[test]
    fn status_json_matches_the_real_22_4_2_tool_for_each_outcome() {
        let real = |name: &str| {
            let path =
                format!("{}/../tests/fixtures/cloud-init-status/22.4.2-{name}.exit0.txt", env!("CARGO_MANIFEST_DIR"));
            serde_json::from_str::<Value>(&std::fs::read_to_string(path).expect("fixture")).expect("json")
        };
        let keys = |v: &Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
        for (outcome, finished, name) in [
            (CiOutcome::Done, true, "done"),
            (CiOutcome::Done, false, "running"),
            (CiOutcome::Disabled, true, "disabled"),
        ] {
            let (out, code) = status(outcome, finished, 1_732_960_000, true, false);
            let v: Value = serde_json::from_str(&out).expect("json");
            let r = real(name);
            assert_eq!((keys(&v), keys(&v["schemas"]["1"])), (keys(&r), keys(&r["schemas"]["1"])), "{name}");
            for k in ["status", "boot_status_code", "datasource", "detail", "errors", "_schema_version"] {
                assert_eq!(v[k], r[k], "{name}: {k}");
            }
            assert_eq!(code, 0);
        }
        let (out, code) = status(CiOutcome::Error, true, 0, true, false);
        let v: Value = serde_json::from_str(&out).expect("json");
        assert_eq!((v["status"].as_str(), code, v["errors"].as_array().map(Vec::len)), (Some("error"), 1, Some(1)));
        // 22.4 has no degraded state: a boot with warnings says done, exit 0, and
        // only the log tells.
        let (out, code) = status(CiOutcome::Degraded, true, 0, false, true);
        assert!(out.starts_with("status: done\nboot_status_code: enabled-by-generator\n"), "{out}");
        assert_eq!(code, 0);
        assert!(log(CiOutcome::Degraded, 0).contains("[WARNING]"));
        assert!(!log(CiOutcome::Done, 0).contains("[WARNING]"));
    }
}
