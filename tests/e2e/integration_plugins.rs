//! Integration plugins (issue 33 §3, host side): a plugin of
//! `kind = "integration"` exports its own `cradle:host/*` interface instead
//! of a backend's `lifecycle`, and workflows reach it with
//! `cradle::plugin("ROLE")`, the environment saying which plugin plays the
//! role. The test plugin is `tests/plugins/integration-sample`
//! (`wit/sample.wit`: `admit`, `vm-status`, `fetch`, `spin`).
//!
//! Proves, against the simulated cluster through the library as the CLI runs
//! it: a workflow calls an export by its snake_case name and gets the `ok`
//! value or a thrown `#{kind, message}`; the environment's `plugins` mapping
//! swaps the plugin (and with it its grants); a role with no plugin is an
//! error naming the environment and the role; an integration plugin is
//! refused as a backend and a backend as an integration plugin, naming
//! cradle.toml and the field; the plugin's proxmox and http calls meet its
//! own grants; a looping export is ended by the plugin's deadline and the
//! next call still works; the built-in `netbox` plays the `netbox` role with
//! no `[plugins.netbox]`, under its default grants, whose denials name the
//! section to write.

use cradle::project::{Project, RunRequest};
use cradle_tests::{Harness, plugin_wasm};
use rhai::Dynamic;

const CONFIG: &str = r#"
default_environment = "test"
state_dir = "state"
[clusters.sim]
kind = "sim"
[environments.test]
cluster = "sim"
backend = "sample"
[environments.wide]
cluster = "sim"
backend = "sample"
plugins = { pipeline = "lenient" }
[plugins.sample]
path = "@SAMPLE@"
[plugins.pipeline]
path = "@INTEGRATION@"
kind = "integration"
timeout_ms = 300
[plugins.pipeline.grants.proxmox]
nodes = ["pve1"]
vmids = "100-199"
[plugins.pipeline.grants.http]
endpoints = []
[plugins.lenient]
path = "@INTEGRATION@"
kind = "integration"
[plugins.lenient.grants.proxmox]
nodes = ["pve1"]
vmids = "100-999"
[plugins.lenient.grants.http]
endpoints = []
"#;

const SCRIPT: &str = r#"
fn vm(vmid) {
    #{ name: "web1", vmid: vmid, node: "pve1", template: "debian-12", storage: "local-lvm",
       cores: 2, memory_mib: 2048, disk_gib: 20, disks: [], nics: [],
       startup_order: 10, tags: [], environment: "test", allow_replacement: false }
}
fn caught(f) {
    try { return #{ ok: f.call() }; } catch (e) { return #{ kind: e.kind, message: e.message }; }
}
fn admit(role, vmid) {
    let p = cradle::plugin(role);
    let out = caught(|| p.admit(#{ name: "web1", vmid: vmid }));
    out.plugin = p.name;
    out
}
fn status(role, vmid) {
    let p = cradle::plugin(role);
    let out = caught(|| p.vm_status(vm(vmid)));
    out.plugin = p.name;
    out
}
fn fetch(role) {
    let p = cradle::plugin(role);
    caught(|| p.fetch("netbox", "/api/"))
}
fn spin_then_admit(role) {
    let p = cradle::plugin(role);
    let spun = caught(|| p.spin());
    #{ spun: spun, after: caught(|| p.admit(#{ name: "web2", vmid: 151 })) }
}
fn role(name) {
    cradle::plugin(name).name
}
fn netbox_dns() {
    let p = cradle::plugin("netbox");
    let out = caught(|| p.set_dns("lab.example", "web1", "10.0.10.5", 300, true));
    out.plugin = p.name;
    out
}
fn netbox_dhcp() {
    let p = cradle::plugin("netbox");
    caught(|| p.reserve((), "bc:24:11:00:00:01", "10.0.10.5", "web1"))
}
"#;

fn config(text: &str) -> String {
    text.replace("@INTEGRATION@", &plugin_wasm("integration_sample").display().to_string())
}

fn harness() -> Harness {
    Harness::new(&config(CONFIG), &[("pipe.rhai", SCRIPT)])
}

/// `pipe::func(args)` in environment `env`: the returned map, or the error text.
fn call(h: &Harness, env: &str, func: &str, args: Vec<Dynamic>) -> Result<rhai::Map, String> {
    let req =
        RunRequest { env: Some(env.into()), script: "pipe".into(), func: func.into(), args, ..Default::default() };
    let report = h.run(req);
    report.result.map(|v| v.try_cast::<rhai::Map>().expect("a map")).map_err(|e| e.to_string())
}

fn text(map: &rhai::Map, key: &str) -> String {
    map.get(key).map(ToString::to_string).unwrap_or_default()
}

#[test]
fn a_workflow_calls_an_integration_plugins_export_through_cradle_plugin() {
    let h = harness();
    let ok = call(&h, "test", "admit", vec!["pipeline".into(), 150_i64.into()]).expect("run");
    assert_eq!((text(&ok, "plugin"), text(&ok, "ok")), ("pipeline".into(), "admitted web1 (150)".into()), "{ok:?}");
    // A WIT `result` error is thrown as #{kind, message}, as for a backend.
    let err = call(&h, "test", "admit", vec!["pipeline".into(), 0_i64.into()]).expect("run");
    assert_eq!(text(&err, "kind"), "invalid", "{err:?}");
    assert!(text(&err, "message").contains("has no VMID"), "{err:?}");
}

#[test]
fn the_environments_plugins_mapping_swaps_the_integration_plugin_and_its_grants() {
    let h = harness();
    // `test` maps nothing: the role is the plugin of its name, granted 100-199.
    let narrow = call(&h, "test", "status", vec!["pipeline".into(), 500_i64.into()]).expect("run");
    assert_eq!((text(&narrow, "plugin"), text(&narrow, "kind")), ("pipeline".into(), "denied".into()), "{narrow:?}");
    // `wide` maps the role to `lenient`, granted 100-999: past the policy.
    let wide = call(&h, "wide", "status", vec!["pipeline".into(), 500_i64.into()]).expect("run");
    assert_eq!(text(&wide, "plugin"), "lenient", "{wide:?}");
    assert_ne!(text(&wide, "kind"), "denied", "{wide:?}");
}

#[test]
fn a_role_with_no_plugin_is_an_error_naming_the_environment_and_the_role() {
    let h = harness();
    let err = call(&h, "test", "role", vec!["ghost".into()]).expect_err("no plugin for the role");
    assert!(
        err.contains("environment `test` has no plugin for role `ghost`")
            && err.contains("plugins = { ghost = \"NAME\" }")
            && err.contains("cradle.toml"),
        "{err}"
    );
    // A backend is no role's default.
    let err = call(&h, "test", "role", vec!["sample".into()]).expect_err("a backend plays no role");
    assert!(err.contains("no plugin for role `sample`"), "{err}");
}

#[test]
fn the_built_in_netbox_plugin_plays_its_role_without_a_table_and_its_denials_name_the_section_to_write() {
    // CONFIG has no [plugins.netbox] and no environment maps the role.
    let h = harness();
    let dns = call(&h, "test", "netbox_dns", vec![]).expect("run");
    assert_eq!(text(&dns, "plugin"), "netbox", "the built-in plays the role of its name: {dns:?}");
    assert_eq!(text(&dns, "kind"), "denied", "the defaults grant no DNS zone: {dns:?}");
    let message = text(&dns, "message");
    assert!(
        message.contains("zone `lab.example` is not in plugins.netbox.grants.dns.zones")
            && message.contains("cradle.toml has no [plugins.netbox]")
            && message.contains("widen [plugins.netbox.grants.dns] there"),
        "{dns:?}"
    );
    let dhcp = call(&h, "test", "netbox_dhcp", vec![]).expect("run");
    assert_eq!(text(&dhcp, "kind"), "denied", "the defaults grant no DHCP network: {dhcp:?}");
    assert!(text(&dhcp, "message").contains("widen [plugins.netbox.grants.dhcp] there"), "{dhcp:?}");
}

#[test]
fn an_integration_plugins_capability_calls_meet_its_own_grants() {
    let h = harness();
    let pve = call(&h, "test", "status", vec!["pipeline".into(), 500_i64.into()]).expect("run");
    assert_eq!(text(&pve, "kind"), "denied", "{pve:?}");
    assert!(text(&pve, "message").contains("500") && text(&pve, "message").contains("plugins.pipeline"), "{pve:?}");
    let inside = call(&h, "test", "status", vec!["pipeline".into(), 150_i64.into()]).expect("run");
    assert_ne!(text(&inside, "kind"), "denied", "a VMID the grant covers passes the policy: {inside:?}");
    let http = call(&h, "test", "fetch", vec!["pipeline".into()]).expect("run");
    assert_eq!(text(&http, "kind"), "denied", "{http:?}");
    assert!(text(&http, "message").contains("netbox"), "{http:?}");
}

#[test]
fn a_looping_integration_export_is_stopped_by_its_deadline_and_the_next_call_works() {
    let h = harness();
    let out = call(&h, "test", "spin_then_admit", vec!["pipeline".into()]).expect("run");
    let spun = out["spun"].clone().try_cast::<rhai::Map>().expect("map");
    assert_eq!(text(&spun, "kind"), "failed", "{spun:?}");
    assert!(
        text(&spun, "message").contains("timeout")
            && text(&spun, "message").contains("timeout_ms in [plugins.pipeline]"),
        "{spun:?}"
    );
    let after = out["after"].clone().try_cast::<rhai::Map>().expect("map");
    assert_eq!(text(&after, "ok"), "admitted web2 (151)", "{after:?}");
}

/// Open and load a project with `config`; the error text.
fn load_error(config_text: &str) -> String {
    let fixture = cradle_tests::Fixture::new(&config(config_text), &[("pipe.rhai", SCRIPT)]);
    let err = match Project::open(&fixture.config(), None) {
        Err(e) => e.to_string(),
        Ok(project) => project.load().map(|_| ()).expect_err("refused").to_string(),
    };
    assert!(err.contains(&fixture.config().display().to_string()), "the error names cradle.toml: {err}");
    err
}

#[test]
fn an_integration_plugin_is_refused_as_a_backend_and_a_backend_as_an_integration_plugin() {
    // Declared integration, named as an environment's backend.
    let err = load_error(&CONFIG.replacen("backend = \"sample\"", "backend = \"pipeline\"", 1));
    assert!(err.contains("environments.test.backend = \"pipeline\"") && err.contains("integration plugin"), "{err}");
    // The integration component declared a backend (kind left out).
    let undeclared = CONFIG.replacen("kind = \"integration\"\ntimeout_ms", "timeout_ms", 1);
    let err = load_error(&undeclared);
    assert!(
        err.contains("plugins.pipeline.kind") && err.contains("does not export `cradle:host/lifecycle@0.1.0`"),
        "{err}"
    );
    // A backend component declared an integration plugin.
    let err = load_error(&CONFIG.replacen("path = \"@INTEGRATION@\"", "path = \"@SAMPLE@\"", 1));
    assert!(err.contains("plugins.pipeline.kind") && err.contains("exports `cradle:host/lifecycle@0.1.0`"), "{err}");
    // A backend mapped to a role.
    let err =
        load_error(&CONFIG.replace("plugins = { pipeline = \"lenient\" }", "plugins = { pipeline = \"sample\" }"));
    assert!(
        err.contains("environments.wide.plugins.pipeline = \"sample\"") && err.contains("kind = \"backend\""),
        "{err}"
    );
}
