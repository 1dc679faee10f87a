//! The rendered snippets checked by cloud-init itself (Debian package `cloud-init`).
//! Missing tools fail the tests unless `CRADLE_SKIP_CLOUDINIT_SCHEMA=1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::tests::{OPS_KEY, PRIVATE, nic, user};
use super::*;

const SKIP_VAR: &str = "CRADLE_SKIP_CLOUDINIT_SCHEMA";

/// `Some(version)` when `cloud-init` runs; `None` only when skipping is allowed.
fn cloud_init() -> Option<String> {
    match Command::new("cloud-init").arg("--version").output() {
        Ok(out) if out.status.success() => {
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            Some(text.trim().to_string())
        }
        other => {
            if std::env::var(SKIP_VAR).as_deref() == Ok("1") {
                eprintln!("SKIPPED: cloud-init schema checks ({SKIP_VAR}=1)");
                return None;
            }
            panic!(
                "`cloud-init --version` failed ({other:?}): install the Debian package `cloud-init` \
                 (apt-get install -y cloud-init) to run the schema checks, or set {SKIP_VAR}=1 to skip them"
            );
        }
    }
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("could not run {cmd:?}: {e}"))
}

fn show(out: &Output) -> String {
    format!("{}\n{}\n{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn write(dir: &Path, name: &str, s: &Snippet) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, s.content.as_bytes()).unwrap();
    p
}

fn schema_check(file: &Path) -> Output {
    run(Command::new("cloud-init").arg("schema").arg("--config-file").arg(file))
}

/// PyYAML (cloud-init's loader) → JSON, to see what the guest will read.
fn pyyaml(file: &Path) -> serde_json::Value {
    let script = "import json,sys,yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]).read()), default=repr))";
    let out = run(Command::new("python3").arg("-c").arg(script).arg(file));
    assert!(out.status.success(), "PyYAML could not load {}: {}", file.display(), show(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn user_data_passes_cloud_init_schema() {
    let Some(version) = cloud_init() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut variants = vec![user()];
    let mut minimal = user();
    (minimal.fqdn, minimal.timezone, minimal.host_key, minimal.keep_default_user) = (None, None, None, true);
    minimal.packages.clear();
    minimal.user.sudo = SudoPolicy::None;
    minimal.user.groups.clear();
    variants.push(minimal);
    for (i, d) in variants.iter().enumerate() {
        let f = write(dir.path(), &format!("user-{i}.yaml"), &render_user_data(d).unwrap());
        let out = schema_check(&f);
        assert!(out.status.success(), "{version}: user-data variant {i} fails the schema: {}", show(&out));
    }
    // The checker really checks: a known-bad document fails.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "#cloud-config\n{\"users\": [{\"name\": \"x\", \"bogus\": 1}]}\n").unwrap();
    assert!(!schema_check(&bad).status.success(), "{version}: schema check accepted a bogus user entry");
}

#[test]
fn pyyaml_reads_the_values_cloud_init_will_use() {
    if cloud_init().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut d = user();
    d.vm_name = "no".into();
    d.hostname = "no".into();
    d.fqdn = Some("no.on".into());
    d.packages = vec!["on".into(), "0755".into(), "2024-01-01".into(), "1_000".into(), "x:#y".into()];
    let f = write(dir.path(), "user.yaml", &render_user_data(&d).unwrap());
    let v = pyyaml(&f);
    assert_eq!(v["hostname"], "no");
    assert_eq!(v["fqdn"], "no.on");
    assert_eq!(v["packages"], serde_json::json!(["on", "0755", "2024-01-01", "1_000", "x:#y"]));
    assert_eq!(v["users"][0]["ssh_authorized_keys"][0], OPS_KEY);
    assert_eq!(v["ssh_keys"]["ed25519_private"], format!("{PRIVATE}\n"));
    assert!(schema_check(&f).status.success());
    let n =
        render_network_data(&NetworkData { vm_name: "no".into(), interfaces: vec![nic("10.1.0.9/22", "10.1.3.254")] });
    let v = pyyaml(&write(dir.path(), "net.yaml", &n.unwrap()));
    assert_eq!(v["version"], 2);
    assert_eq!(v["ethernets"]["ens18"]["addresses"][0], "10.1.0.9/22");
}

fn supports_network_schema() -> bool {
    let out = run(Command::new("cloud-init").args(["schema", "--help"]));
    String::from_utf8_lossy(&out.stdout).contains("--schema-type")
}

/// cloud-init's own network-config parser and renderers, as the guest runs them.
fn net_convert(file: &Path, out_dir: &Path, output_kind: &str) -> Output {
    run(Command::new("cloud-init")
        .args(["devel", "net-convert", "--kind", "yaml", "--distro", "debian", "--output-kind", output_kind])
        .arg("--network-data")
        .arg(file)
        .arg("--directory")
        .arg(out_dir))
}

fn read_tree(dir: &Path) -> String {
    let mut text = String::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        for entry in std::fs::read_dir(&p).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                text += &std::fs::read_to_string(&path).unwrap_or_default();
            }
        }
    }
    text
}

#[test]
fn network_data_is_accepted_by_cloud_init() {
    let Some(version) = cloud_init() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut lan = nic("10.20.3.7/23", "10.20.2.1");
    lan.mac = Some("bc:24:11:aa:bb:cc".into());
    let storage = Interface {
        name: "ens19".into(),
        address: Some("2001:db8:5::7/64".parse().unwrap()),
        mtu: Some(9000),
        ..Interface::default()
    };
    let mut trunk = nic("192.0.2.10/24", "192.0.2.1");
    trunk.vlan_in_guest = Some(20);
    // Expected text in the ENI output (ifupdown, Debian's renderer): the v2 input is
    // fully parsed into cloud-init's network state for it, unlike netplan (passthrough).
    let cases: Vec<(&str, Vec<Interface>, Vec<&str>)> = vec![
        (
            "static",
            vec![nic("10.20.3.7/23", "10.20.2.1")],
            vec!["address 10.20.3.7/23", "gateway 10.20.2.1", "dns-nameservers 192.0.2.53 2001:db8::53"],
        ),
        ("dhcp", vec![Interface::default()], vec!["iface ens18 inet dhcp"]),
        (
            "two-nics",
            vec![lan, storage],
            vec!["ATTR{address}==\"bc:24:11:aa:bb:cc\", NAME=\"ens18\"", "address 2001:db8:5::7/64", "mtu 9000"],
        ),
        (
            "vlan",
            vec![trunk],
            vec!["iface ens18.20 inet static", "vlan-raw-device ens18", "address 192.0.2.10/24", "gateway 192.0.2.1"],
        ),
    ];
    let schema = supports_network_schema();
    for (name, interfaces, expect) in cases {
        let snippet = render_network_data(&NetworkData { vm_name: "test-0".into(), interfaces }).unwrap();
        let f = write(dir.path(), &format!("{name}.yaml"), &snippet);
        if schema {
            let out = run(Command::new("cloud-init")
                .args(["schema", "--schema-type", "network-config", "--config-file"])
                .arg(&f));
            assert!(out.status.success(), "{version}: {name} fails the network-config schema: {}", show(&out));
        }
        let eni_dir = dir.path().join(format!("{name}-eni"));
        let out = net_convert(&f, &eni_dir, "eni");
        assert!(out.status.success(), "{version}: cloud-init cannot parse the {name} network-data: {}", show(&out));
        let eni = read_tree(&eni_dir);
        for e in expect {
            assert!(eni.contains(e), "{version}: {name}: {e:?} missing from cloud-init's ENI output:\n{eni}");
        }
        // No route needs net-tools: ifupdown applies `gateway` lines with `ip`.
        assert!(!eni.contains("route add"), "{version}: {name}: ENI uses `route` (net-tools):\n{eni}");
        let netplan_dir = dir.path().join(format!("{name}-netplan"));
        let out = net_convert(&f, &netplan_dir, "netplan");
        assert!(out.status.success(), "{version}: {name}: the netplan renderer fails: {}", show(&out));
        let netplan = read_tree(&netplan_dir);
        for (gw_key, want) in netplan_expect(name) {
            assert!(
                netplan.contains(&format!("{gw_key}: {want}")),
                "{version}: {name}: {gw_key} {want} missing from netplan:\n{netplan}"
            );
        }
        if name == "static" {
            // netplan → networkd → resolved carries the nameservers there.
            assert!(netplan.contains("- 192.0.2.53") && netplan.contains("- lab.example"), "{netplan}");
        }
    }
    // The parser really checks: a route to a non-address fails.
    let bad = dir.path().join("bad.yaml");
    let doc = r#"{"version": 2, "ethernets": {"ens18": {"addresses": ["10.0.0.3/24"], "routes": [{"to": "nowhere", "via": "10.0.0.1"}]}}}"#;
    std::fs::write(&bad, doc).unwrap();
    assert!(!net_convert(&bad, &dir.path().join("bad-out"), "eni").status.success(), "{version}: bad route accepted");
}

/// The gateway each netplan output must carry (v2 is passed through).
fn netplan_expect(case: &str) -> Vec<(&'static str, &'static str)> {
    match case {
        "static" => vec![("gateway4", "10.20.2.1")],
        "vlan" => vec![("gateway4", "192.0.2.1")],
        _ => Vec::new(),
    }
}

#[test]
fn user_data_with_resolv_conf_passes_cloud_init_schema() {
    let Some(version) = cloud_init() else { return };
    let dir = tempfile::tempdir().unwrap();
    let all = render_all(
        &user(),
        &NetworkData { vm_name: "test-0".into(), interfaces: vec![nic("10.20.3.7/23", "10.20.2.1")] },
    )
    .unwrap();
    assert!(all.user.content.expose().contains("write_files"));
    let f = write(dir.path(), "user-resolv.yaml", &all.user);
    let out = schema_check(&f);
    assert!(out.status.success(), "{version}: user-data with write_files fails the schema: {}", show(&out));
}
