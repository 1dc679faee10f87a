//! A hostile NetBox-pipeline plugin (issue 33 §3, "Done when"): an
//! integration plugin with the pipeline's imports
//! (tests/plugins/hostile-pipeline) cannot reach a NetBox status, a DHCP
//! network, a DNS zone, an HA rule or resource, or an endpoint outside its own
//! `[plugins.NAME.grants.*]`: each is `denied` by the host, naming the grant,
//! before any service is asked. One test per denial; the grants are the
//! pipeline plugin's as docs/NETBOX.md writes them, narrowed.

use cradle::project::RunRequest;
use cradle_tests::{Harness, plugin_wasm};

const CONFIG: &str = r#"
default_environment = "test"
state_dir = "state"
[clusters.sim]
kind = "sim"
[environments.test]
cluster = "sim"
backend = "sample"
[plugins.sample]
path = "@SAMPLE@"
[plugins.netbox]
path = "@HOSTILE@"
kind = "integration"
[plugins.netbox.grants.netbox]
endpoint = "netbox"
statuses = ["active", "failed"]
[plugins.netbox.grants.dhcp]
networks = ["10.0.10.0/24"]
[plugins.netbox.grants.dns]
zones = ["lab.example"]
[plugins.netbox.grants.proxmox]
nodes = ["pve1"]
vmids = "100-199"
[plugins.netbox.grants.http]
endpoints = []
"#;

const SCRIPT: &str = r#"
fn try_attack(name, arg) {
    try {
        return #{ ok: cradle::plugin("netbox").attack(name, arg) };
    } catch (e) {
        return #{ kind: e.kind, message: e.message };
    }
}
"#;

/// The attack's outcome: the host's error kind and message (a success fails the test).
fn attack(name: &str, arg: &str) -> (String, String) {
    attack_under(CONFIG, name, arg)
}

/// [`attack`] under another cradle.toml (`@HOSTILE@` for the plugin's path).
fn attack_under(config: &str, name: &str, arg: &str) -> (String, String) {
    let config = config.replace("@HOSTILE@", &plugin_wasm("hostile_pipeline").display().to_string());
    let h = Harness::new(&config, &[("hostile.rhai", SCRIPT)]);
    let req = RunRequest {
        env: Some("test".into()),
        script: "hostile".into(),
        func: "try_attack".into(),
        args: vec![name.into(), arg.into()],
        ..Default::default()
    };
    let out = h.run(req).result.expect("the run").try_cast::<rhai::Map>().expect("a map");
    let text = |k: &str| out.get(k).map(ToString::to_string).unwrap_or_default();
    assert!(!out.contains_key("ok"), "attack {name} {arg} succeeded: {out:?}");
    (text("kind"), text("message"))
}

#[test]
fn a_pipeline_plugin_cannot_set_a_netbox_status_outside_its_grant() {
    let (kind, message) = attack("status", "decommissioning");
    assert_eq!(kind, "denied", "{message}");
    assert!(
        message.contains("decommissioning") && message.contains("plugins.netbox.grants.netbox.statuses"),
        "{message}"
    );
}

#[test]
fn a_pipeline_plugin_cannot_reserve_in_a_dhcp_network_outside_its_grant() {
    let (kind, message) = attack("network", "10.9.0.0/24 10.9.0.5");
    assert_eq!(kind, "denied", "{message}");
    assert!(message.contains("10.9.0") && message.contains("plugins.netbox"), "{message}");
}

#[test]
fn a_pipeline_plugin_cannot_write_a_dns_record_in_a_zone_outside_its_grant() {
    let (kind, message) = attack("zone", "evil.example");
    assert_eq!(kind, "denied", "{message}");
    assert!(message.contains("evil.example") && message.contains("plugins.netbox"), "{message}");
}

#[test]
fn a_pipeline_plugin_cannot_write_an_ha_rule_for_a_vmid_outside_its_grant() {
    let (kind, message) = attack("ha-rule", "500");
    assert_eq!(kind, "denied", "{message}");
    assert!(message.contains("500") && message.contains("plugins.netbox"), "{message}");
}

#[test]
fn a_pipeline_plugin_cannot_pin_an_ha_rule_to_a_node_outside_its_grant() {
    let (kind, message) = attack("ha-node", "pve2");
    assert_eq!(kind, "denied", "{message}");
    assert!(message.contains("pve2") && message.contains("plugins.netbox"), "{message}");
}

#[test]
fn a_pipeline_plugin_cannot_make_a_vmid_outside_its_grant_ha_managed() {
    let (kind, message) = attack("ha-resource", "500");
    assert_eq!(kind, "denied", "{message}");
    assert!(message.contains("500") && message.contains("plugins.netbox"), "{message}");
}

#[test]
fn a_pipeline_plugin_cannot_reach_the_netbox_endpoint_raw_over_http() {
    let (kind, message) = attack("endpoint", "netbox");
    assert_eq!(kind, "denied", "{message}");
    assert!(message.contains("netbox") && message.contains("plugins.netbox.grants.http"), "{message}");
}

/// [`CONFIG`] with an http grant of endpoint `api` limited to GET below `/ipam/`
/// (nothing listens at its URL: a denial comes before any connection).
fn limited_http_config() -> String {
    CONFIG.replace(
        "[plugins.netbox.grants.http]\nendpoints = []\n",
        "[plugins.netbox.grants.http]\nendpoints = [\"api\"]\n\
         [plugins.netbox.grants.http.limit.api]\nmethods = [\"GET\"]\npaths = [\"/ipam/\"]\n\
         [endpoints.api]\nurl = \"http://127.0.0.1:9/base\"\nauth = \"api-key\"\n\
         token = { command = [\"printf\", \"sekrit-api-key-42\"] }\n",
    )
}

#[test]
fn a_pipeline_plugin_cannot_use_a_method_or_path_outside_its_http_limit() {
    let config = limited_http_config();
    assert_ne!(config, CONFIG, "the http grant was replaced");
    let (kind, message) = attack_under(&config, "method", "api DELETE /ipam/prefixes/1/");
    assert_eq!(kind, "denied", "{message}");
    assert!(message.contains("DELETE is not in plugins.netbox.grants.http.limit.api.methods"), "{message}");
    let (kind, message) = attack_under(&config, "method", "api GET /users/tokens/");
    assert_eq!(kind, "denied", "{message}");
    assert!(message.contains("plugins.netbox.grants.http.limit.api.paths"), "{message}");
}
