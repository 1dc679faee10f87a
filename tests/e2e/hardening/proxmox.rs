//! Hardening: the proxmox capability's scope (issue 8, items 1-4 and 14).
//!
//! The hostile plugin is granted nodes pve1/pve2, VMIDs 100-199, storage
//! `local-lvm`, no destructive calls, ssh to the guests only. A second copy
//! of it (`admin`, widely granted) sets up what the attacks aim at: VM 150,
//! VM 5000 outside the grant and an HA rule holding VM 5000.

use cradle::caps::policy::ScopedVm;
use cradle::project::{RunReport, RunRequest};
use cradle_tests::{Harness, PROBE_RHAI, VM_SPEC_RHAI};
use serde_json::Value;

const CONFIG: &str = r#"
default_environment = "test"
state_dir = "state"
[workflow.grants.lock]
prefixes = ["*"]
[workflow.grants.checkpoint]
[clusters.sim]
kind = "sim"
[clusters.sim.sim]
nodes = ["pve1", "pve2"]
time_scale = 0.0
[environments.test]
cluster = "sim"
backend = "hostile"
[environments.admin]
cluster = "sim"
backend = "admin"
[plugins.hostile]
path = "@HOSTILE@"
[plugins.hostile.grants.proxmox]
nodes = ["pve1", "pve2"]
vmids = "100-199"
storages = ["local-lvm"]
destructive = false
[plugins.hostile.grants.lock]
prefixes = ["vm/"]
[plugins.hostile.grants.ssh]
hosts = ["guests"]
[plugins.hostile.grants.dns]
zones = []
[plugins.hostile.grants.checkpoint]
[plugins.hostile.grants.terraform]
module_root = "terraform"
[plugins.hostile.grants.http]
endpoints = []
[plugins.admin]
path = "@HOSTILE@"
[plugins.admin.grants.proxmox]
nodes = ["*"]
vmids = "100-9999"
storages = ["*"]
templates = ["*"]
destructive = true
[plugins.admin.grants.lock]
prefixes = []
[plugins.admin.grants.ssh]
hosts = []
[plugins.admin.grants.dns]
zones = []
[plugins.admin.grants.checkpoint]
[plugins.admin.grants.terraform]
module_root = "terraform"
[plugins.admin.grants.http]
endpoints = []
"#;

/// What the test script adds to [`PROBE_RHAI`].
const SCRIPT: &str = r#"
fn creation_of(name) {
    cloudinit::creation(#{ name: name })
}
"#;

fn harness() -> Harness {
    Harness::new(CONFIG, &[("hardening.rhai", &format!("{PROBE_RHAI}{SCRIPT}")), ("lib/vm.rhai", VM_SPEC_RHAI)])
}

fn probe(h: &Harness, env: &str, attack: &str, arg: &str) -> RunReport {
    h.run(RunRequest {
        env: Some(env.into()),
        script: "hardening".into(),
        func: "probe".into(),
        args: vec![attack.into(), arg.into()],
        ..Default::default()
    })
}

/// Create VMs `vmids` (HA-managed; rule `prod-rule` holds the last one) as the admin plugin.
fn setup(h: &Harness, vmids: &str) {
    let report = probe(h, "admin", "pve:setup", vmids);
    let out = report.result.map(|v| v.to_string()).map_err(|e| e.to_string());
    assert!(out.as_deref().is_ok_and(|o| o.contains("set up")), "setup failed: {out:?}");
}

fn journal(report: &RunReport) -> Vec<Value> {
    cradle_tests::journal_events(&report.journal)
}

fn calls<'a>(events: &'a [Value], function: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == "capability_call" && e["function"] == function).collect()
}

/// The attack was denied with `expected` in the message, and the journal
/// recorded one denial of `function` by `caller` naming the same scope.
fn assert_denied(report: &RunReport, caller: &str, function: &str, capability: &str, expected: &str) {
    let err = report.result.as_ref().map(|v| v.to_string()).expect_err("the attack must be denied").to_string();
    assert!(err.contains(&format!("{capability}: ")) && err.contains(expected), "{err}");
    let events = journal(report);
    let denial = calls(&events, function)
        .into_iter()
        .find(|e| e["outcome"]["result"] == "denied")
        .unwrap_or_else(|| panic!("no denied {function} in the journal: {events:#?}"));
    assert_eq!((denial["caller"].as_str(), denial["capability"].as_str()), (Some(caller), Some(capability)));
    assert!(denial["outcome"]["scope"].as_str().unwrap_or("").contains(expected), "{denial}");
}

fn set_config(h: &Harness, spec: &str) -> RunReport {
    probe(h, "test", "pve:set-config", spec)
}

#[test]
fn set_config_with_a_second_disk_on_an_ungranted_storage_is_denied() {
    let h = harness();
    let r = set_config(&h, "scsi1=local-lvm:1\nscsi2=local:1");
    assert_denied(
        &r,
        "hostile",
        "set-config",
        "proxmox",
        "key `scsi2` names storage `local`, which is not in plugins.hostile.grants.proxmox.storages",
    );
}

#[test]
fn set_config_with_a_hookscript_or_args_is_denied() {
    let h = harness();
    let r = set_config(&h, "hookscript=local-lvm:snippets/evil.sh");
    assert_denied(
        &r,
        "hostile",
        "set-config",
        "proxmox",
        "plugins.hostile.grants.proxmox.node_keys lists \"hookscript\"",
    );
    let r = set_config(&h, "args=-chardev file,id=x,path=/etc/shadow");
    assert_denied(&r, "hostile", "set-config", "proxmox", "key `args` runs code on the node");
}

#[test]
fn set_config_with_a_cicustom_snippet_of_another_vm_is_denied() {
    let h = harness();
    let r = set_config(&h, "cicustom=user=local-lvm:snippets/prod-db-user.yaml");
    assert_denied(&r, "hostile", "set-config", "proxmox", "names snippet `local-lvm:snippets/prod-db-user.yaml`");
}

#[test]
fn set_config_attaching_a_disk_of_a_vm_outside_the_grant_is_denied() {
    let h = harness();
    let r = set_config(&h, "scsi3=local-lvm:vm-5000-disk-0");
    assert_denied(
        &r,
        "hostile",
        "set-config",
        "proxmox",
        "a volume of VMID 5000, outside plugins.hostile.grants.proxmox.vmids",
    );
}

#[test]
fn set_config_deleting_a_disk_is_destructive_and_denied_but_the_cloud_init_drive_is_not() {
    let h = harness();
    setup(&h, "150");
    let r = set_config(&h, "-scsi0");
    assert_denied(&r, "hostile", "set-config", "proxmox", "deleting `scsi0` (it holds local-lvm:");
    let err = r.result.as_ref().map(|_| ()).expect_err("denied").to_string();
    assert!(err.contains("set plugins.hostile.grants.proxmox.destructive = true"), "{err}");
    // The read that described the deletion went through the guard too.
    let events = journal(&r);
    assert!(calls(&events, "get-config").iter().any(|e| e["outcome"]["result"] == "ok"), "{events:#?}");
    let ok = set_config(&h, "-ide2");
    let done = ok.result.expect("the cloud-init drive may go").to_string();
    assert!(done.contains("set-config accepted"), "{done}");
}

#[test]
fn rewriting_an_ha_rule_that_holds_a_vm_outside_the_grant_is_denied_with_one_journal_record() {
    let h = harness();
    setup(&h, "150,5000");
    let r = probe(&h, "test", "pve:rewrite-ha-rule", "");
    assert_denied(&r, "hostile", "put-ha-rule", "proxmox", "HA rule `prod-rule` currently holds vm:5000");
    let events = journal(&r);
    let puts = calls(&events, "put-ha-rule");
    assert_eq!(puts.len(), 1, "one put-ha-rule call, one record (no per-member `ok`s): {puts:#?}");
    let reads = calls(&events, "list-ha-rules");
    assert_eq!(reads.len(), 1, "the current members were read through the guard: {events:#?}");
}

#[test]
fn an_ha_rule_is_replaced_only_at_the_digest_its_members_were_checked_at() {
    let h = harness();
    setup(&h, "150");
    // A digest other than the one the adapter read: refused by cradle before
    // the write, so what is replaced is always what was checked.
    let r = probe(&h, "test", "pve:rewrite-ha-rule-at", "0123456789abcdef0123456789abcdef01234567");
    let err = r.result.as_ref().map(|_| ()).expect_err("a stale digest is refused").to_string();
    assert!(err.contains("HA rule `prod-rule` changed since it was read (digest 0123456789abcdef"), "{err}");
    let events = journal(&r);
    let puts = calls(&events, "put-ha-rule");
    assert_eq!(puts.len(), 1, "{events:#?}");
    assert_eq!(puts[0]["outcome"]["kind"], "conflict", "{:#?}", puts[0]);
    // With the digest it read, the plugin's own rule is rewritten.
    let digest = current_rules_digest(&h);
    let ok = probe(&h, "test", "pve:rewrite-ha-rule-at", &digest);
    let done = ok.result.expect("the digest the check read").to_string();
    assert!(done.contains("prod-rule rewritten"), "{done}");
}

/// The digest `GET /cluster/ha/rules` gives now (the same for every rule).
fn current_rules_digest(h: &Harness) -> String {
    let r = probe(h, "admin", "pve:ha-rules-digest", "");
    let out = r.result.map(|v| v.to_string()).expect("digest");
    let after = out.split_once("digest=").map(|(_, d)| d).unwrap_or_default();
    let digest: String = after.chars().take_while(char::is_ascii_hexdigit).collect();
    assert!(!digest.is_empty(), "no digest in {out}");
    digest
}

#[test]
fn a_template_name_lookup_goes_through_the_guard_and_the_journal() {
    let h = harness();
    let r = probe(&h, "test", "pve:clone", "");
    assert_denied(
        &r,
        "hostile",
        "clone-vm",
        "proxmox",
        "template `debian-12-cloud` (9000) is not in plugins.hostile.grants.proxmox.templates",
    );
    let events = journal(&r);
    let lookups = calls(&events, "list-vms");
    assert!(
        lookups.iter().any(|e| e["caller"] == "hostile" && e["outcome"]["result"] == "ok"),
        "the lookup is journaled as the plugin's list-vms: {events:#?}"
    );
}

#[test]
fn creation_records_of_a_vm_outside_the_run_are_denied_and_every_access_is_journaled() {
    let h = harness();
    let run = |name: &str| {
        h.run(RunRequest {
            script: "hardening".into(),
            func: "creation_of".into(),
            args: vec![name.into()],
            vms: vec![ScopedVm { name: "test-0".into(), vmid: 150, ssh: None, owned: false, allow_replacement: false }],
            ..Default::default()
        })
    };
    let r = run("prod-db");
    assert_denied(&r, "workflow", "creation-read", "checkpoint", "VM `prod-db` is not a VM of this call");
    let own = run("test-0");
    assert!(own.result.as_ref().expect("own record").is_unit(), "no record yet");
    let events = journal(&own);
    assert!(calls(&events, "creation-read").iter().any(|e| e["outcome"]["result"] == "ok"), "{events:#?}");
}
