//! LXC containers from a baked rootfs template (issue 15), end to end: the
//! example `examples/lxc` (type `container`, VMIDs 300 + index) provisioned,
//! rerun, checked and removed through the real workflows against the
//! simulated cluster started in-process, whose containers answer real SSH on
//! loopback (subnets 127.55.1.0/24 to 127.55.3.0/24, owned by this file: one
//! per test, as they run in parallel) with the host key whose
//! fingerprint PVE printed in the create task's log.

use std::path::PathBuf;
use std::time::Duration;

use cradle::caps::proxmox::client::{ClientSettings, ProxmoxClient, RetryPolicy};
use cradle::caps::proxmox::tls::TlsVerify;
use cradle::contract::bindings::cradle::host::types::Entry;
use cradle::provision::{Action, HostResult};
use cradle_tests::fixture::{
    Cluster, ProjectConfig, SimCluster, SimSession, Workflows, assert_ok, error_of, example_project, sim_vms, writes,
};

const TEMPLATE: &str = "debian-12-standard_12.7-1_amd64.tar.zst";

struct Example {
    dir: tempfile::TempDir,
}

impl Example {
    /// The example with its containers on the loopback subnet `net` (`127.55.1`).
    fn new(net: &str) -> Example {
        let ex = Example { dir: example_project("lxc") };
        // The containers' addresses on this test's loopback subnet.
        let hosts = ex.dir.path().join("inventory/hosts.yml");
        let text = std::fs::read_to_string(&hosts).expect("hosts").replace("10.0.40.", &format!("{net}."));
        std::fs::write(&hosts, text).expect("hosts");
        let vars = ex.dir.path().join("inventory/group_vars/containers.yml");
        let text = std::fs::read_to_string(&vars).expect("vars").replace("10.0.40.1", &format!("{net}.1"));
        std::fs::write(&vars, text).expect("vars");
        ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0)))
            .workflows(Workflows::Dir("workflows".into()))
            .workflow_destructive(true)
            .write(ex.dir.path());
        ex
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("cradle.toml")
    }

    fn run(&self, s: &SimSession, action: Action) -> Vec<HostResult> {
        s.run(&self.dir.path().join("inventory"), None, action, 2)
    }

    /// Put the template on pve1's `local` storage (what `pveam download` does).
    /// The simulator starts at a project's first run: a check, which changes nothing.
    fn download_template(&self, s: &SimSession) {
        if s.counts().is_none() {
            self.run(s, Action::Check);
        }
        let dir = s.project.sims.get("sim").expect("sim").node_path("pve1", "/var/lib/vz/template/cache");
        std::fs::create_dir_all(&dir).expect("cache dir");
        std::fs::write(dir.join(TEMPLATE), b"a baked rootfs").expect("template");
    }

    fn known_hosts(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("state/known_hosts")).unwrap_or_default()
    }

    fn checkpoints(&self) -> usize {
        std::fs::read_dir(self.dir.path().join("state/checkpoints")).map(|d| d.count()).unwrap_or(0)
    }

    /// Replace `anchor` (which must be there) in the group's variables.
    fn edit_vars(&self, anchor: &str, with: &str) {
        let file = self.dir.path().join("inventory/group_vars/containers.yml");
        let text = std::fs::read_to_string(&file).expect("vars");
        assert!(text.contains(anchor), "containers.yml changed shape: no {anchor:?}");
        std::fs::write(file, text.replacen(anchor, with, 1)).expect("vars");
    }
}

/// What an operator's `pct set <vmid> --key value` does: a config PUT through the API.
fn pct_set(s: &SimSession, vmid: u32, set: &[(&str, &str)]) {
    let sim = s.project.sims.get("sim").expect("sim");
    let pve = ProxmoxClient::new(ClientSettings {
        endpoint: format!("https://{}", sim.api_addr()),
        token: sim.token(),
        verify: TlsVerify::Fingerprint(sim.fingerprint_sha256()),
        timeout: Duration::from_secs(30),
        retry: RetryPolicy::default(),
        task_time_scale: sim.time_scale(),
    })
    .expect("client");
    let set: Vec<Entry> = set.iter().map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() }).collect();
    s.rt().block_on(pve.set_container_config("pve1", vmid, &set, &[], None)).expect("pct set");
}

fn by_name<'a>(results: &'a [HostResult], name: &str) -> &'a HostResult {
    results.iter().find(|r| r.name == name).expect("result of the host")
}

#[test]
fn a_container_without_its_template_fails_before_any_side_effect_then_provisions_reruns_and_is_removed() {
    let ex = Example::new("127.55.1");
    let s = SimSession::open(&ex.config());
    // No template on the node: refused with the volume and the fix, nothing changed.
    let missing = ex.run(&s, Action::Provision);
    for name in ["ct-1", "ct-2"] {
        let e = error_of(by_name(&missing, name));
        assert!(e.contains(&format!("local:vztmpl/{TEMPLATE}")) && e.contains("pveam download"), "{e}");
    }
    assert!(writes(&s.counts().unwrap_or_default()).is_empty(), "nothing was written to the cluster");
    assert_eq!(ex.checkpoints(), 0, "no checkpoint written");
    let vms = sim_vms(&ex.dir.path().join("state"));
    assert!(!vms.contains_key(&300) && !vms.contains_key(&301), "no container: {:?}", vms.keys());

    ex.download_template(&s);
    let first = ex.run(&s, Action::Provision);
    for (name, vmid) in [("ct-1", 300), ("ct-2", 301)] {
        let r = by_name(&first, name);
        assert_ok(r, "created");
        assert_eq!(r.vmid, Some(vmid));
    }
    // Host keys pinned from the create task's fingerprints, for both addresses.
    let kh = ex.known_hosts();
    assert!(kh.contains("127.55.1.11") && kh.contains("127.55.1.12"), "{kh}");

    assert_eq!(ex.checkpoints(), 0, "both complete");

    // A rerun of complete containers changes nothing.
    let before = writes(&s.counts().expect("counts"));
    let again = ex.run(&s, Action::Provision);
    assert_ok(by_name(&again, "ct-1"), "skipped");
    assert_ok(by_name(&again, "ct-2"), "skipped");
    assert_eq!(writes(&s.counts().expect("counts")), before, "a rerun of complete containers writes nothing");
    let check = ex.run(&s, Action::Check);
    assert_ok(by_name(&check, "ct-1"), "skip");

    let removed = ex.run(&s, Action::Remove);
    assert_ok(by_name(&removed, "ct-1"), "removed");
    assert_ok(by_name(&removed, "ct-2"), "removed");
    let kh = ex.known_hosts();
    assert!(!kh.contains("127.55.1.11") && !kh.contains("127.55.1.12"), "host keys forgotten: {kh}");
    let left = sim_vms(&ex.dir.path().join("state"));
    assert!(!left.contains_key(&300) && !left.contains_key(&301), "destroyed: {:?}", left.keys());
}

#[test]
fn a_rerun_restores_onboot_and_startup_an_operator_changed_and_reports_what_it_restored() {
    let ex = Example::new("127.55.2");
    ex.edit_vars("  cores: 1\n", "  cores: 1\n  startup_order: 20\n");
    let s = SimSession::open(&ex.config());
    ex.download_template(&s);
    let first = ex.run(&s, Action::Provision);
    assert_ok(by_name(&first, "ct-1"), "created");
    assert_ok(by_name(&first, "ct-2"), "created");
    let config = |vmid: u32| sim_vms(&ex.dir.path().join("state"))[&vmid]["config"].clone();
    assert_eq!((config(300)["onboot"].clone(), config(300)["startup"].clone()), ("1".into(), "order=20".into()));

    // The operator: `pct set 300 --onboot 0 --startup order=5`.
    pct_set(&s, 300, &[("onboot", "0"), ("startup", "order=5")]);
    assert_eq!(config(300)["onboot"], "0");
    let before = writes(&s.counts().expect("counts"));
    let again = ex.run(&s, Action::Provision);
    let ct1 = by_name(&again, "ct-1");
    assert_ok(ct1, "skipped");
    let said = ct1.detail.clone().unwrap_or_default();
    assert!(said.contains("onboot: 0 -> 1") && said.contains("startup: order=5 -> order=20"), "{said}");
    assert_eq!((config(300)["onboot"].clone(), config(300)["startup"].clone()), ("1".into(), "order=20".into()));
    // One config write for ct-1; ct-2 was left as it was, and says nothing.
    let after = writes(&s.counts().expect("counts"));
    let grew: u64 = after.values().sum::<u64>() - before.values().sum::<u64>();
    assert_eq!(grew, 1, "one PUT of ct-1's config: {before:?} -> {after:?}");
    assert_ok(by_name(&again, "ct-2"), "skipped");
    assert_eq!(by_name(&again, "ct-2").detail, None);

    // Restored: the next rerun has nothing to do.
    let before = writes(&s.counts().expect("counts"));
    let third = ex.run(&s, Action::Provision);
    assert_eq!(by_name(&third, "ct-1").detail, None);
    assert_eq!(writes(&s.counts().expect("counts")), before);
}

/// A Proxmox task that fails is classed like the HTTP error of the same cause
/// (issue 31): pve-container refuses to stop a locked container inside the
/// `vzstop` worker (`CT is locked (backup)`), and `cradle remove` reports that
/// as a `conflict` (someone else's operation holds the container), not as a
/// plain `failed`, with the task's text and nothing destroyed.
#[test]
fn a_locked_containers_stop_task_failure_is_a_conflict_and_nothing_is_destroyed() {
    let ex = Example::new("127.55.3");
    let s = SimSession::open(&ex.config());
    ex.download_template(&s);
    let first = ex.run(&s, Action::Provision);
    assert_ok(by_name(&first, "ct-1"), "created");
    drop(s);
    // A vzdump running on the node holds the container (written into the
    // stopped simulator's state, as the lock file would be on PVE).
    let path = ex.dir.path().join("state/sim/sim/state.json");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("state.json")).expect("json");
    doc["vms"]["300"]["config"]["lock"] = "backup".into();
    std::fs::write(&path, serde_json::to_vec(&doc).expect("json")).expect("write state.json");

    let s = SimSession::open(&ex.config());
    let removed = ex.run(&s, Action::Remove);
    let e = error_of(by_name(&removed, "ct-1"));
    assert!(e.contains("conflict") && e.contains("CT is locked (backup)"), "a conflict naming the lock: {e}");
    assert!(e.contains("stopping container ct-1"), "the step's action is named: {e}");
    assert!(sim_vms(&ex.dir.path().join("state")).contains_key(&300), "nothing was destroyed");
}
