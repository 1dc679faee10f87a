//! `cradle plan` and `cradle apply` (issue 34) driven as an operator runs
//! them, the real binary against the simulator: VMs provisioned, the
//! inventory changed (memory, VLAN, boot disk size), the plan printed and
//! written (0600), applied with PVE's config digest. What must hold: `plan`
//! writes nothing anywhere (the simulator's own request and state-write
//! counts), `apply` never touches a VM changed since the plan, never reboots
//! with `--reboot never`, and refuses a plan too old or for another cluster.
//!
//! The project and its helpers are `maintenance_lab.rs`'s (shared with the
//! crash tests, `maintenance_crash.rs`).
//! Guests bind port 22 on 127.64.<subnet>.0/24, a prefix no other test uses;
//! each test has its own subnet.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::Value;

use crate::maintenance_lab::{Project, json_of, planned, show};

/// This file's guest prefix (`maintenance_lab.rs`).
const PREFIX: &str = "127.64";

/// The memory, net0 and boot disk of a VM's config (the pending values not applied).
fn hardware(vm: &Value) -> (String, String, String) {
    let c = &vm["config"];
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (s("memory"), s("net0"), s("scsi0"))
}

/// The three edits of the tests: memory 2048 → 3072 (next boot: no memory
/// hotplug by default), VLAN 20 → 30 (live), boot disk 12 → 14 GiB (live).
fn change_memory_vlan_and_disk(p: &Project) {
    p.edit_inventory("memory: 2048", "memory: 3072");
    p.edit_inventory("vlan: 20", "vlan: 30");
    p.edit_inventory("disk: 12", "disk: 14");
}

/// Memory 2048 → 3072 (next boot: no memory hotplug by default).
fn grow_memory(p: &Project) {
    p.edit_inventory("memory: 2048", "memory: 3072");
}

#[test]
fn plan_shows_each_change_and_apply_makes_three_vms_match_the_inventory_with_one_reboot_each() {
    let (p, plan, text) = planned(PREFIX, 1, 3, change_memory_vlan_and_disk);
    for name in &p.names {
        assert!(text.contains(&format!("{name} (vmid {}", p.vmid(name))), "{name} has its heading:\n{text}");
    }
    for (what, class) in [("memory", "next-boot"), ("net0 VLAN", "live"), ("boot disk size", "live")] {
        let lines: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with(what)).collect();
        assert_eq!(lines.len(), 3, "one `{what}` line per VM:\n{text}");
        assert!(lines.iter().all(|l| l.contains(class) && l.contains('→')), "{what} is {class}:\n{text}");
    }
    assert!(
        text.contains("3 VMs: 3 planned (0 unchanged), 0 blocked, 0 failed; changes: 6 live, 3 next-boot, 0 refused")
            && text.contains(&format!("plan written to {} (0600)", plan.display())),
        "the summary line:\n{text}"
    );
    let mode = std::fs::metadata(&plan).expect("the plan file").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the plan file is the owner's only");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).expect("the plan is JSON");
    assert_eq!(doc["format"], "cradle-maintenance-plan/1");
    assert_eq!(doc["vms"].as_array().map(Vec::len), Some(3));

    let reboots: Vec<usize> = p.names.iter().map(|n| p.tasks_of("qmreboot", p.vmid(n))).collect();
    let applied = p.apply(&plan, "if-needed", None);
    assert!(applied.status.success(), "apply: {}", show(&applied));
    let doc = json_of(&applied);
    for (i, name) in p.names.iter().enumerate() {
        let row = doc["vms"].as_array().unwrap().iter().find(|v| v["name"] == name.as_str()).expect("a row per VM");
        assert_eq!(row["result"], "applied", "{row}");
        assert!(row["run_id"].is_string(), "{row}");
        let vm = p.vm(name);
        let (memory, net0, scsi0) = hardware(&vm);
        assert!(memory == "3072" || memory.contains("current=3072"), "{name}: memory {memory}");
        assert!(net0.contains("tag=30") && net0.contains("bridge=vmbr0"), "{name}: net0 {net0}");
        assert!(scsi0.contains("size=14G"), "{name}: scsi0 {scsi0}");
        assert!(vm["pending"].as_object().is_none_or(|m| m.is_empty()), "{name}: nothing pending: {vm}");
        assert_eq!(p.tasks_of("qmreboot", p.vmid(name)), reboots[i] + 1, "{name} rebooted exactly once");
    }
    // The VMs now are what the inventory says: a new plan has nothing to do.
    let (_, again) = p.plan_ok("again.plan");
    assert!(again.contains("3 VMs: 3 planned (3 unchanged)"), "{again}");
}

/// `requests.json` of the built-in simulator: what the last `cradle` process's
/// simulator served (`{"requests": {"METHOD /pattern": n}, "state_writes": n}`).
fn request_counts(p: &Project) -> Value {
    let text = std::fs::read_to_string(p.sim_state().join("requests.json")).expect("requests.json");
    serde_json::from_str(&text).expect("requests.json parses")
}

#[test]
fn plan_makes_no_write_anywhere() {
    let p = Project::builtin(PREFIX, 2, 1);
    p.provision();
    change_memory_vlan_and_disk(&p);
    // What a `cradle` process's own simulator writes when it starts (it
    // resumes the running guests, as a restarted node would): measured with
    // `provision --check`, which changes nothing.
    let check = p.cradle(&["provision", "--check", "-i", &p.inventory()], None);
    assert!(check.status.success(), "{}", show(&check));
    let baseline = request_counts(&p)["state_writes"].as_u64().expect("state_writes");
    let state = std::fs::read(p.sim_state().join("state.json")).expect("state.json");
    let (_, text) = p.plan_ok("maint.plan");
    assert!(text.contains("1 VM: 1 planned"), "{text}");
    // The simulator of the `cradle plan` process counted its requests when it ended.
    let counts = request_counts(&p);
    let requests = counts["requests"].as_object().expect("requests");
    assert!(requests.keys().any(|k| k.starts_with("GET /nodes/{node}/qemu/{vmid}/config")), "read: {counts}");
    let writes: Vec<&String> = requests.keys().filter(|k| !k.starts_with("GET ")).collect();
    assert!(writes.is_empty(), "plan sent no request but GETs: {writes:?}");
    assert_eq!(counts["state_writes"], baseline, "no state write beyond the simulator's own start: {counts}");
    assert_eq!(std::fs::read(p.sim_state().join("state.json")).unwrap(), state, "state.json unchanged");
    assert!(cradle_tests::fixture::held_locks(&p.dir.path().join("state")).is_empty(), "no lock taken or left");
}

#[test]
fn apply_refuses_a_vm_changed_since_the_plan_and_writes_nothing() {
    let (p, plan, _) = planned(PREFIX, 3, 1, change_memory_vlan_and_disk);
    let vm = &p.names[0];
    let (vmid, node) = (p.vmid(vm), p.vm(vm)["node"].as_str().unwrap().to_string());
    // Someone changes the VM in PVE after the review.
    p.api("PUT", &format!("/nodes/{node}/qemu/{vmid}/config"), &["memory=4096"]);
    let before = p.vm(vm);
    let applied = p.apply(&plan, "if-needed", None);
    assert!(!applied.status.success(), "apply must fail: {}", show(&applied));
    let doc = json_of(&applied);
    let row = &doc["vms"][0];
    assert_eq!(row["result"], "failed", "{doc}");
    let error = row["error"].as_str().unwrap_or_default();
    assert!(error.contains("changed since the plan") && error.contains("plan again"), "{error}");
    let after = p.vm(vm);
    assert_eq!(after["config"], before["config"], "the VM's config is as the other change left it");
    assert_eq!(after["pending"], before["pending"], "nothing was made pending");
    assert_eq!(p.tasks_of("qmreboot", vmid), 1, "no reboot besides the finalization's");
}

#[test]
fn apply_never_reboots_with_reboot_never() {
    let (p, plan, _) = planned(PREFIX, 4, 1, grow_memory);
    let vm = &p.names[0];
    let vmid = p.vmid(vm);
    let reboots = p.tasks_of("qmreboot", vmid);
    let applied = p.apply(&plan, "never", None);
    assert!(applied.status.success(), "apply: {}", show(&applied));
    let doc = json_of(&applied);
    assert_eq!(doc["vms"][0]["result"], "applied-pending", "{doc}");
    assert!(doc["vms"][0]["why"].as_str().unwrap_or_default().contains("pending until the next boot"), "{doc}");
    assert_eq!(p.tasks_of("qmreboot", vmid), reboots, "no reboot");
    assert_eq!(p.tasks_of("qmshutdown", vmid), 0, "no shutdown");
    let after = p.vm(vm);
    assert_eq!(after["power"], "running");
    assert_eq!(after["config"]["memory"], "2048", "still in effect until a cold start: {after}");
    assert_eq!(after["pending"]["memory"], "3072", "memory is pending: {after}");
    // A second apply of the same plan finds it done: nothing twice, still no reboot.
    let again = p.apply(&plan, "never", None);
    assert!(again.status.success(), "{}", show(&again));
    assert_eq!(p.tasks_of("qmreboot", vmid), reboots, "no reboot");
}

/// A plan the project made, then re-signed as made `hours` ago (the plan
/// file's own writer sets its id).
fn age_plan(plan: &Path, hours: i64) {
    let text = std::fs::read_to_string(plan).expect("plan");
    let mut file: cradle::maintain::PlanFile = serde_json::from_str(&text).expect("a plan file");
    let created = time_ago(hours);
    file.created = created;
    file.write(plan).expect("rewrite the plan");
}

fn time_ago(hours: i64) -> String {
    let t = time::OffsetDateTime::now_utc() - time::Duration::hours(hours);
    t.format(&time::format_description::well_known::Rfc3339).expect("RFC 3339")
}

/// `cradle apply PLAN --reboot never` of a plan refused as a whole (before
/// any run): what it printed on stderr; the VM's config is as it was.
fn apply_refused(p: &Project, plan: &Path) -> String {
    let vm = &p.names[0];
    let before = p.vm(vm);
    let refused = p.apply(plan, "never", None);
    assert!(!refused.status.success(), "{}", show(&refused));
    assert_eq!(p.vm(vm)["config"], before["config"], "nothing changed");
    String::from_utf8_lossy(&refused.stderr).into_owned()
}

#[test]
fn a_plan_older_than_plan_max_age_is_refused() {
    let (p, plan, _) = planned(PREFIX, 5, 1, grow_memory);
    age_plan(&plan, 26);
    let err = apply_refused(&p, &plan);
    assert!(
        err.contains("the plan was made 26 h ago; the limit is 24 h ([maintenance] plan_max_age); plan again")
            && err.contains(&plan.display().to_string())
            && err.contains("created"),
        "{err}"
    );
    // The limit is the project's: a longer one accepts the same plan.
    let path = p.dir.path().join("cradle.toml");
    let mut toml = std::fs::read_to_string(&path).unwrap();
    toml.push_str("\n[maintenance]\nplan_max_age = \"48h\"\n");
    std::fs::write(&path, toml).unwrap();
    let applied = p.apply(&plan, "never", None);
    assert!(applied.status.success(), "{}", show(&applied));
    assert_eq!(p.vm(&p.names[0])["pending"]["memory"], "3072");
}

#[test]
fn a_plan_for_another_cluster_is_refused() {
    let (p, plan, _) = planned(PREFIX, 6, 1, grow_memory);
    let made_on = serde_json::from_str::<Value>(&std::fs::read_to_string(&plan).unwrap()).unwrap()["cluster"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(made_on.starts_with("https://127.0.0.1:"), "the cluster identity is its endpoint: {made_on}");
    // Environment `test` now points at another cluster (another endpoint).
    p.edit_config(&format!("endpoint = \"{made_on}\""), "endpoint = \"https://pve-other.invalid:8006\"");
    let err = apply_refused(&p, &plan);
    assert!(
        err.contains("cluster:") && err.contains(&made_on) && err.contains("https://pve-other.invalid:8006"),
        "{err}"
    );
}

#[test]
fn apply_refuses_a_vm_whose_inventory_changed_since_the_plan() {
    let (p, plan, _) = planned(PREFIX, 7, 1, grow_memory);
    // The inventory moves on after the review: the plan no longer says what it asks for.
    p.edit_inventory("cores: 2", "cores: 4");
    let vm = &p.names[0];
    let before = p.vm(vm);
    let refused = p.apply(&plan, "if-needed", None);
    assert!(!refused.status.success(), "{}", show(&refused));
    let doc = json_of(&refused);
    assert_eq!(doc["vms"][0]["result"], "failed", "{doc}");
    let error = doc["vms"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("the inventory changed since the plan") && error.contains("plan again"), "{error}");
    assert!(doc["vms"][0]["run_id"].is_null(), "no run was started for it: {doc}");
    let after = p.vm(vm);
    assert_eq!(after["config"], before["config"], "nothing changed");
    assert_eq!(after["pending"], before["pending"], "nothing made pending");
}
