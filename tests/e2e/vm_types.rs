//! VM types built from a baked disk image (issue 15), end to end: the worked
//! example of docs/VM-TYPES.md (`examples/vm-types`: Home Assistant OS from
//! `images/haos.qcow2`, VMID 200 + the host's index in its group) provisioned,
//! rerun and removed through the real workflows, the direct backend and the
//! simulated cluster started in-process, whose nodes take the image over real
//! SSH. What happened is read from the simulator (its VMs, its nodes' files,
//! request counters) and from the state dir.

use std::path::{Path, PathBuf};

use cradle::provision::{Action, HostResult};
use cradle_tests::fixture::{
    Cluster, ProjectConfig, SimCluster, SimSession, Workflows, assert_ok, error_of, sim_vms, writes,
};

/// A project holding the example: the repository's workflows plus the type's
/// file, the example inventory, and an image of `image_bytes` bytes (none: no image).
struct Example {
    dir: tempfile::TempDir,
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir").flatten() {
        let target = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy");
        }
    }
}

/// A qcow2 header (magic, version 3, virtual size at offset 24) followed by
/// filler up to `len` bytes: what the simulator reads an image's virtual size from.
fn qcow2(len: usize, virtual_size: u64) -> Vec<u8> {
    let mut b = vec![0u8; len.max(104)];
    b[..4].copy_from_slice(b"QFI\xfb");
    b[4..8].copy_from_slice(&3u32.to_be_bytes());
    b[24..32].copy_from_slice(&virtual_size.to_be_bytes());
    for (i, x) in b.iter_mut().enumerate().skip(104) {
        *x = (i % 251) as u8;
    }
    b
}

impl Example {
    fn new(image_bytes: Option<usize>, extra_toml: &str) -> Example {
        let ex = Example { dir: tempfile::tempdir().expect("tempdir") };
        let root = cradle_tests::workspace();
        copy_tree(&root.join("workflows"), &ex.dir.path().join("workflows"));
        copy_tree(&root.join("examples/vm-types"), ex.dir.path());
        if let Some(n) = image_bytes {
            std::fs::create_dir_all(ex.dir.path().join("images")).expect("images dir");
            std::fs::write(ex.dir.path().join("images/haos.qcow2"), qcow2(n, 6 << 30)).expect("image");
        }
        ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0)))
            .workflows(Workflows::Dir("workflows".into()))
            .append(extra_toml)
            .write(ex.dir.path());
        ex
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("cradle.toml")
    }
    fn inventory(&self) -> PathBuf {
        self.dir.path().join("inventory")
    }
    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn run(&self, s: &SimSession, action: Action) -> Vec<HostResult> {
        s.run(&self.inventory(), None, action, 2)
    }
}

fn by_name<'a>(results: &'a [HostResult], name: &str) -> &'a HostResult {
    results.iter().find(|r| r.name == name).expect("result of the host")
}

#[test]
fn two_hosts_of_one_image_type_on_one_node_get_base_plus_index_vmids_and_provision_rerun_and_remove() {
    let ex = Example::new(Some(3 << 20), "");
    let s = SimSession::open(&ex.config());
    let first = ex.run(&s, Action::Provision);
    for (name, vmid) in [("ha-1", 200), ("ha-2", 201)] {
        let r = by_name(&first, name);
        assert_ok(r, "created");
        assert_eq!(r.vmid, Some(vmid), "{name}: VMID = homeassistant_vm_id + index in the group");
    }
    let vms = sim_vms(&ex.state());
    for vmid in [200, 201] {
        let config = &vms[&vmid]["config"];
        let disk = config["scsi0"].as_str().expect("scsi0 imported");
        assert!(disk.starts_with(&format!("local-lvm:vm-{vmid}-disk-")), "{disk}");
        assert!(disk.ends_with("size=32G"), "grown to the inventory's disk: {disk}");
        assert_eq!(config["bios"], "ovmf");
        assert_eq!(vms[&vmid]["power"], "running");
        assert!(config.get("ide2").is_none() && config.get("cicustom").is_none(), "no cloud-init scaffolding");
    }
    // One staged copy on the node, under its digest, no `.part` left.
    let staged: Vec<String> = std::fs::read_dir(s.project.sims.get("sim").expect("sim").node_path("pve1", "/var/tmp/cradle-images"))
        .expect("image dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(staged.len(), 1, "{staged:?}");
    assert!(staged[0].ends_with("-haos.qcow2") && !staged[0].starts_with('.'), "{staged:?}");

    // A rerun of the complete VMs changes nothing and uploads nothing.
    let before = writes(&s.counts().expect("counts"));
    let again = ex.run(&s, Action::Provision);
    for name in ["ha-1", "ha-2"] {
        assert_ok(by_name(&again, name), "skipped");
    }
    assert_eq!(writes(&s.counts().expect("counts")), before, "a rerun of complete VMs writes nothing");
    let check = ex.run(&s, Action::Check);
    assert_ok(by_name(&check, "ha-1"), "skip");

    let removed = ex.run(&s, Action::Remove);
    for (name, vmid) in [("ha-1", 200), ("ha-2", 201)] {
        let r = by_name(&removed, name);
        assert_ok(r, "removed");
        assert_eq!(r.vmid, Some(vmid), "remove computes the same VMID");
    }
    assert!(sim_vms(&ex.state()).is_empty());
}

#[test]
fn a_missing_image_fails_before_any_side_effect_with_the_path_and_the_fix() {
    let ex = Example::new(None, "");
    let s = SimSession::open(&ex.config());
    let results = ex.run(&s, Action::Provision);
    for name in ["ha-1", "ha-2"] {
        let e = error_of(by_name(&results, name));
        assert!(e.contains("images/haos.qcow2"), "{e}");
        assert!(e.contains("put the image there or fix the path in the inventory"), "{e}");
    }
    assert!(writes(&s.counts().unwrap_or_default()).is_empty(), "nothing was written to the cluster");
    assert!(sim_vms(&ex.state()).is_empty());
    let cps = ex.state().join("checkpoints");
    let left = std::fs::read_dir(&cps).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0, "no checkpoint written");
}
