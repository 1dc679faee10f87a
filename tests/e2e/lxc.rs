//! LXC containers from a baked rootfs template (issue 15), end to end: the
//! example `examples/lxc` (type `container`, VMIDs 300 + index) provisioned,
//! rerun, checked and removed through the real workflows against the
//! simulated cluster started in-process, whose containers answer real SSH on
//! loopback (subnet 127.36.1.0/24, owned by this file) with the host key whose
//! fingerprint PVE printed in the create task's log.

use std::path::PathBuf;

use cradle::provision::{Action, HostResult};
use cradle_tests::fixture::{
    Cluster, ProjectConfig, SimCluster, SimSession, Workflows, assert_ok, error_of, example_project, sim_vms,
};

const TEMPLATE: &str = "debian-12-standard_12.7-1_amd64.tar.zst";

struct Example {
    dir: tempfile::TempDir,
}

impl Example {
    fn new() -> Example {
        let ex = Example { dir: example_project("lxc") };
        // The containers' addresses on this test's loopback subnet.
        let hosts = ex.dir.path().join("inventory/hosts.yml");
        let text = std::fs::read_to_string(&hosts).expect("hosts").replace("10.0.40.", "127.36.1.");
        std::fs::write(&hosts, text).expect("hosts");
        let vars = ex.dir.path().join("inventory/group_vars/containers.yml");
        let text = std::fs::read_to_string(&vars).expect("vars").replace("10.0.40.1", "127.36.1.1");
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
    fn download_template(&self, s: &SimSession) {
        let dir = s.project.sims.get("sim").expect("sim").node_path("pve1", "/var/lib/vz/template/cache");
        std::fs::create_dir_all(&dir).expect("cache dir");
        std::fs::write(dir.join(TEMPLATE), b"a baked rootfs").expect("template");
    }

    fn known_hosts(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("state/known_hosts")).unwrap_or_default()
    }
}

fn by_name<'a>(results: &'a [HostResult], name: &str) -> &'a HostResult {
    results.iter().find(|r| r.name == name).expect("result of the host")
}

#[test]
fn a_container_without_its_template_fails_before_any_side_effect_then_provisions_reruns_and_is_removed() {
    let ex = Example::new();
    let s = SimSession::open(&ex.config());
    // No template on the node: refused with the volume and the fix, nothing created.
    let missing = ex.run(&s, Action::Provision);
    for name in ["ct-1", "ct-2"] {
        let e = error_of(by_name(&missing, name));
        assert!(e.contains(&format!("local:vztmpl/{TEMPLATE}")) && e.contains("pveam download"), "{e}");
    }
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
    assert!(kh.contains("127.36.1.11") && kh.contains("127.36.1.12"), "{kh}");

    let again = ex.run(&s, Action::Provision);
    assert_ok(by_name(&again, "ct-1"), "skipped");
    assert_ok(by_name(&again, "ct-2"), "skipped");
    let check = ex.run(&s, Action::Check);
    assert_ok(by_name(&check, "ct-1"), "skip");

    let removed = ex.run(&s, Action::Remove);
    assert_ok(by_name(&removed, "ct-1"), "removed");
    assert_ok(by_name(&removed, "ct-2"), "removed");
    let kh = ex.known_hosts();
    assert!(!kh.contains("127.36.1.11") && !kh.contains("127.36.1.12"), "host keys forgotten: {kh}");
    let left = sim_vms(&ex.dir.path().join("state"));
    assert!(!left.contains_key(&300) && !left.contains_key(&301), "destroyed: {:?}", left.keys());
}
