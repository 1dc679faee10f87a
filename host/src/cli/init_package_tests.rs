//! The Debian package's conffile (`packaging/cradle.toml`, installed as
//! `/etc/cradle/cradle.toml`) against cradle's own loader and `cradle init`:
//! it parses, puts the state in /var/lib/cradle, grants the built-ins what
//! `cradle init` grants them, and every secret it references (its commented
//! examples included) is a credential `packaging/cradle.service` loads.

use std::path::Path;

use super::config_text;
use crate::config::Config;
use crate::secrets::SecretRef;

const CONFFILE: &str = include_str!("../../../packaging/cradle.toml");
const UNIT: &str = include_str!("../../../packaging/cradle.service");

fn parse(text: &str) -> Config {
    match Config::parse(text, Path::new("/etc/cradle/cradle.toml"), Path::new("/etc/cradle")) {
        Ok(c) => c,
        Err(e) => panic!("packaging/cradle.toml does not load: {e}"),
    }
}

/// The conffile with its commented TOML examples (`# [serve.sources.netbox]`,
/// `# secret = ...`) made live: every `# ` line that is a table header or a
/// `key = value`, indented examples (`#   [clusters.lab]`) included.
fn uncommented() -> String {
    CONFFILE
        .lines()
        .map(|line| {
            let Some(rest) = line.strip_prefix('#') else { return line.to_string() };
            let code = rest.trim_start();
            let is_toml = code.starts_with('[') || code.split_once(" = ").is_some_and(|(k, _)| !k.contains(' '));
            if is_toml { code.to_string() } else { line.to_string() }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_package_conffile_loads_with_its_state_in_var_lib_cradle_and_serves_on_loopback() {
    let c = parse(CONFFILE);
    assert_eq!(c.state_dir_override(None).as_deref(), Some(Path::new("/var/lib/cradle")));
    let listen = c.serve.listen.expect("[serve] listen is set");
    let status = c.serve.status.as_ref().expect("[serve.status] is on");
    assert!(status.check_listen(listen).is_ok(), "cradle serve starts on the conffile as shipped");
    // The service's user has no CAP_NET_BIND_SERVICE: the built-in cluster's
    // guests must answer SSH on an unprivileged port, or no VM ever comes up.
    let sim = &c.clusters["sim"].sim;
    assert!(sim.guest_ssh_port >= 1024, "guest_ssh_port = {} needs root", sim.guest_ssh_port);
    // Nothing it names may be written under /etc (read-only to the service).
    let tf = c.plugins["terraform"].grants.terraform.as_ref().expect("terraform grant");
    assert_eq!(tf.module_root, Path::new("/var/lib/cradle/terraform"));
}

#[test]
fn the_package_conffile_grants_the_built_ins_what_cradle_init_grants() {
    let shipped = parse(CONFFILE);
    let init = parse(&config_text());
    assert_eq!(shipped.plugins.keys().collect::<Vec<_>>(), init.plugins.keys().collect::<Vec<_>>());
    for (name, plugin) in &init.plugins {
        let mut want = plugin.grants.clone();
        if let Some(tf) = want.terraform.as_mut() {
            tf.module_root = "/var/lib/cradle/terraform".into();
        }
        let got = &shipped.plugins[name];
        assert_eq!(format!("{:?}", got.grants), format!("{want:?}"), "plugins.{name}.grants");
        assert_eq!(format!("{:?}", got.limits), format!("{:?}", plugin.limits), "plugins.{name} limits");
    }
    assert_eq!(format!("{:?}", shipped.workflow), format!("{:?}", init.workflow));
    // Only the simulated guests' SSH port differs (see the next test).
    let mut init_clusters = init.clusters.clone();
    init_clusters.get_mut("sim").expect("init's sim cluster").sim.guest_ssh_port =
        shipped.clusters["sim"].sim.guest_ssh_port;
    assert_eq!(format!("{:?}", shipped.clusters), format!("{init_clusters:?}"));
    assert_eq!(format!("{:?}", shipped.environments), format!("{:?}", init.environments));
    assert_eq!(shipped.default_environment, init.default_environment);
}

#[test]
fn every_secret_the_package_conffile_references_is_a_credential_the_unit_loads() {
    let loaded: Vec<&str> = UNIT.lines().filter_map(|l| l.strip_prefix("LoadCredential=")).collect();
    let c = parse(&uncommented());
    let source = c.serve.sources.get("netbox").expect("the commented [serve.sources.netbox] example");
    let mut refs = vec![("serve.sources.netbox.secret", &source.secret)];
    let status = c.serve.status.as_ref().expect("[serve.status]");
    refs.push(("serve.status.token", status.token.as_ref().expect("the commented token example")));
    let netbox = c.endpoints.get("netbox").expect("the commented [endpoints.netbox] example");
    refs.push(("endpoints.netbox.token", netbox.token.as_ref().expect("its token")));
    let lab = c.clusters.get("lab").expect("the commented [clusters.lab] example");
    let pve = lab.token.as_ref().expect("its token");
    refs.push(("clusters.lab.token", pve));
    for (key, secret) in refs {
        // `systemd-creds cat NAME`: a `file` reference to the credential would
        // be refused (systemd's ACL shows as mode 0440), see cradle.service.
        let SecretRef::Command(argv) = secret else { panic!("{key}: {secret} is not a systemd-creds command") };
        let [prog, cat, name] = argv.as_slice() else { panic!("{key}: {argv:?}") };
        assert_eq!((prog.as_str(), cat.as_str()), ("systemd-creds", "cat"), "{key}");
        assert!(loaded.contains(&name.as_str()), "{key}: credential {name} is not in the unit's {loaded:?}");
    }
}
