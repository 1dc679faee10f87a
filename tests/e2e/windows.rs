//! Windows from an ISO with an answer file (issue 15), end to end: the
//! example `examples/windows` (type `windows`, VMID 400) against the simulated
//! cluster started in-process, whose "Windows setup" runs when an attached ISO
//! carries `autounattend.xml` and reports through the QEMU guest agent. The
//! answer ISO is cradle's own (an ISO 9660 + Joliet image it builds).

use std::path::PathBuf;

use cradle::provision::{Action, HostResult};
use cradle_tests::fixture::{
    Cluster, ProjectConfig, SimCluster, SimSession, Workflows, assert_ok, error_of, example_project, sim_vms,
};

struct Example {
    dir: tempfile::TempDir,
}

impl Example {
    fn new() -> Example {
        let ex = Example { dir: example_project("windows") };
        ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0)))
            .workflows(Workflows::Dir("workflows".into()))
            .write(ex.dir.path());
        ex
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("cradle.toml")
    }

    fn run(&self, s: &SimSession, action: Action) -> Vec<HostResult> {
        s.run(&self.dir.path().join("inventory"), None, action, 1)
    }

    fn iso_dir(&self, s: &SimSession) -> PathBuf {
        s.project.sims.get("sim").expect("sim").node_path("pve1", "/var/lib/vz/template/iso")
    }

    fn isos(&self, s: &SimSession) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(self.iso_dir(s))
            .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        out.sort();
        out
    }
}

#[test]
fn a_windows_vm_installs_from_its_iso_detaches_its_media_on_finalize_and_a_rerun_skips_it() {
    let ex = Example::new();
    let s = SimSession::open(&ex.config());
    // The installer ISO is not on the node yet: refused before anything is changed.
    let missing = ex.run(&s, Action::Provision);
    let e = error_of(&missing[0]);
    assert!(e.contains("local:iso/windows-server-2022.iso") && e.contains("upload it there"), "{e}");
    assert!(!sim_vms(&ex.dir.path().join("state")).contains_key(&400));

    std::fs::create_dir_all(ex.iso_dir(&s)).expect("iso dir");
    std::fs::write(ex.iso_dir(&s).join("windows-server-2022.iso"), vec![0u8; 64 << 10]).expect("installer");
    std::fs::write(ex.iso_dir(&s).join("virtio-win.iso"), vec![0u8; 32 << 10]).expect("drivers");
    let first = ex.run(&s, Action::Provision);
    assert_ok(&first[0], "created");
    assert_eq!(first[0].vmid, Some(400));
    let vm = &sim_vms(&ex.dir.path().join("state"))[&400];
    let config = &vm["config"];
    for slot in ["ide0", "ide2", "ide3"] {
        assert_eq!(config[slot], "none,media=cdrom", "{slot} ejected on finalize: {config}");
    }
    assert_eq!(config["boot"], "order=scsi0", "{config}");
    assert!(config["scsi0"].as_str().is_some_and(|d| d.contains("size=64G")), "{config}");
    assert_eq!(vm["power"], "running");
    // Setup ran from cradle's answer ISO: Windows is on the system disk.
    let on = vm["disk"]["windows_on"].as_str().unwrap_or_default();
    assert!(on.starts_with("local-lvm:vm-400-disk-"), "installed by setup: {vm}");
    // The answer ISO (it may hold credentials) is gone from the node; the media stay.
    assert_eq!(ex.isos(&s), ["virtio-win.iso", "windows-server-2022.iso"]);

    let again = ex.run(&s, Action::Provision);
    assert_ok(&again[0], "skipped");
    let removed = ex.run(&s, Action::Remove);
    assert_ok(&removed[0], "removed");
    assert!(!sim_vms(&ex.dir.path().join("state")).contains_key(&400));
}
