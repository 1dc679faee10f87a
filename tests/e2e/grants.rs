//! Every `proxmox` grant is checked before any side effect (issue 30, part 4):
//! a VMID, storage, node or template outside the grants of the backend (or
//! the workflow) stops `cradle provision` and `cradle provision --check`
//! with a message naming the host, the inventory variable, its value, the
//! grant key and the cradle.toml section, and leaves nothing behind — no
//! snippet on the node (they hold the guest's private host key), no creation
//! record, no VM — so the next run, after the inventory or the grant is
//! fixed, creates the VM. The built-in default grants allow four-digit VMIDs.
//!
//! The real binary against the built-in simulated cluster. Simulated guests
//! bind port 22 on 127.63.<n>.0/24, a prefix no other test uses.

use std::path::{Path, PathBuf};

use cradle_tests::Out;
use cradle_tests::fixture::{Backend, Cluster, LabInventory, ProjectConfig, SimCluster, Wait, Workflows, sim_vms};

/// The built-in direct backend's grants as a test writes them out.
const DIRECT: &str = r#"
[plugins.direct]
[plugins.direct.grants.proxmox]
nodes = ["*"]
vmids = "100-999999"
storages = ["local-lvm", "local"]
templates = ["debian-12-cloud"]
destructive = true
"#;

/// A project on a two-node simulator with the built-in workflows and the
/// built-in `direct` backend; `direct` is the `[plugins.direct]` text (empty:
/// the built-in default grants), the workflow's VMIDs are `workflow_vmids`.
struct Lab {
    dir: tempfile::TempDir,
    inventory: PathBuf,
}

impl Lab {
    fn new(subnet: u8, tweak: impl FnOnce(LabInventory) -> LabInventory) -> Lab {
        let dir = tempfile::tempdir().expect("tmp");
        let wait = Wait { reboot_attempts: None, ..Wait::fast() };
        let inv = LabInventory::new("127.63", subnet).name_prefix("grant").target_node("pve2").wait(wait);
        let inventory = tweak(inv).write(dir.path());
        Lab { dir, inventory }
    }

    fn configure(&self, direct: &str, workflow_vmids: &str) {
        let sim =
            SimCluster { nodes: vec!["pve1", "pve2"], time_scale: 0.0, seed: None, faults: None, extra: Vec::new() };
        let text = ProjectConfig::new(Cluster::Sim(sim))
            .workflows(Workflows::BuiltIn)
            .backend(Backend::BuiltIn)
            .append(direct)
            .render()
            .replace(
                "vmids = \"100-999\"\nstorages = [\"*\"]",
                &format!("vmids = \"{workflow_vmids}\"\nstorages = [\"*\"]"),
            );
        std::fs::write(self.config(), text).expect("write cradle.toml");
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("cradle.toml")
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn provision(&self, extra: &[&str]) -> Out {
        let config = self.config();
        let inventory = self.inventory.clone();
        let mut args = vec!["--config", s(&config), "--output", "json", "provision", "-i", s(&inventory)];
        args.extend_from_slice(extra);
        cradle_tests::cradle_in(self.dir.path(), &args)
    }

    /// `provision --check` and `provision` both refuse the host with a
    /// message holding every part of `expected`, and leave nothing behind.
    fn refused(&self, expected: &[&str]) {
        for extra in [&["--check"][..], &[][..]] {
            let out = self.provision(extra);
            assert_ne!(out.code, 0, "{extra:?} must fail: {out:#?}");
            let doc = out.json();
            let host = &doc["hosts"][0];
            assert_eq!(host["result"], "failed", "{extra:?}: {doc}");
            let error = host["error"].as_str().unwrap_or_default();
            for part in expected {
                assert!(error.contains(part), "{extra:?}: the error names `{part}`: {error}");
            }
            self.nothing_written();
        }
    }

    /// No snippet on any node, no creation record, no VM but the template.
    fn nothing_written(&self) {
        let mut files = Vec::new();
        files_under(&self.state().join("sim"), &mut files);
        let snippets: Vec<&PathBuf> =
            files.iter().filter(|p| p.parent().is_some_and(|d| d.ends_with("snippets"))).collect();
        assert!(snippets.is_empty(), "no snippet was uploaded: {snippets:?}");
        // Creation records live in checkpoints/creating/, beside the checkpoints.
        let mut records = Vec::new();
        files_under(&self.state().join("checkpoints"), &mut records);
        assert!(records.is_empty(), "no creation record or checkpoint was written: {records:?}");
        let vms: Vec<String> = sim_vms(&self.state())
            .values()
            .filter(|v| v["config"]["template"] != "1" && v["config"]["template"] != 1)
            .map(|v| v["config"]["name"].to_string())
            .collect();
        assert!(vms.is_empty(), "no VM was created: {vms:?}");
    }

    /// With the direct grant's line `from` replaced by `to`, provisioning is
    /// refused (see [`Lab::refused`]); with the grant restored it converges.
    fn refused_until_granted(&self, from: &str, to: &str, expected: &[&str]) {
        self.configure(&DIRECT.replace(from, to), "100-999999");
        self.refused(expected);
        self.configure(DIRECT, "100-999999");
        self.converges();
    }

    /// The next run creates the VM; the one after skips it.
    fn converges(&self) {
        let out = self.provision(&[]);
        let doc = out.json();
        assert_eq!(doc["hosts"][0]["result"], "created", "{out:#?}");
        let doc = self.provision(&[]).json();
        assert_eq!(doc["hosts"][0]["result"], "skipped", "{doc}");
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let path = e.path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn a_vmid_outside_the_backend_grant_and_then_the_workflow_grant_is_refused_before_any_side_effect() {
    let lab = Lab::new(1, |i| i.var("vms_vmid=5000"));
    lab.configure(&DIRECT.replace("100-999999", "100-999"), "100-999999");
    lab.refused(&[
        "host grant-0",
        "vms_vmid 5000",
        "`direct` backend",
        "plugins.direct.grants.proxmox.vmids = \"100-999\"",
        "[plugins.direct.grants.proxmox]",
        "cradle.toml",
    ]);
    // The backend's grant fixed, the workflow's own still ends at 999: its
    // start, migration and finalization would be refused after the clone.
    lab.configure(DIRECT, "100-999");
    lab.refused(&[
        "vms_vmid 5000",
        "the workflow",
        "workflow.grants.proxmox.vmids = \"100-999\"",
        "[workflow.grants.proxmox]",
    ]);
    lab.configure(DIRECT, "100-999999");
    lab.converges();
}

#[test]
fn the_built_in_default_grants_allow_four_digit_vmids() {
    let lab = Lab::new(2, |i| i.var("vms_vmid=5000"));
    lab.configure("", "100-999999");
    lab.converges();
}

#[test]
fn a_vmid_outside_the_built_in_default_grants_says_to_write_the_section_out() {
    let lab = Lab::new(3, |i| i.var("vms_vmid=1000000"));
    lab.configure("", "100-9999999");
    lab.refused(&[
        "vms_vmid 1000000",
        "plugins.direct.grants.proxmox.vmids = \"100-999999\"",
        "built-in default grants",
        "[plugins.direct]",
    ]);
}

#[test]
fn an_ungranted_storage_is_refused_before_any_side_effect() {
    let lab = Lab::new(4, |i| i.vmid_base(Some(400)));
    lab.refused_until_granted(
        "storages = [\"local-lvm\", \"local\"]",
        "storages = [\"local\"]",
        &[
            "host grant-0",
            "vms_config.storage local-lvm",
            "storage `local-lvm` is not in plugins.direct.grants.proxmox.storages",
            "[plugins.direct.grants.proxmox]",
        ],
    );
}

#[test]
fn an_ungranted_snippet_storage_is_refused_before_any_side_effect() {
    let lab = Lab::new(5, |i| i.vmid_base(Some(410)));
    lab.refused_until_granted(
        "storages = [\"local-lvm\", \"local\"]",
        "storages = [\"local-lvm\"]",
        &["vms_snippet_storage local", "storage `local` is not in plugins.direct.grants.proxmox.storages"],
    );
}

#[test]
fn an_ungranted_node_is_refused_before_any_side_effect() {
    let lab = Lab::new(6, |i| i.vmid_base(Some(420)));
    lab.refused_until_granted(
        "nodes = [\"*\"]",
        "nodes = [\"pve1\"]",
        &[
            "host grant-0",
            "target_node pve2",
            "node `pve2` is not in plugins.direct.grants.proxmox.nodes",
            "[plugins.direct.grants.proxmox]",
        ],
    );
}

#[test]
fn an_ungranted_template_is_refused_before_any_side_effect() {
    let lab = Lab::new(7, |i| i.vmid_base(Some(430)));
    lab.refused_until_granted(
        "templates = [\"debian-12-cloud\"]",
        "templates = [\"debian-13-cloud\"]",
        &[
            "host grant-0",
            "global_os[vms_os].template debian-12-cloud",
            "template `debian-12-cloud`",
            "is not in plugins.direct.grants.proxmox.templates",
            "[plugins.direct.grants.proxmox]",
        ],
    );
}

#[test]
fn a_probed_vmid_outside_the_grant_is_never_reserved() {
    // No VMID in the inventory: the cluster's nextid (100 and up) is outside
    // a grant that starts at 5000.
    let lab = Lab::new(8, |i| i.vmid_base(None));
    lab.configure(&DIRECT.replace("100-999999", "5000-5999"), "100-999999");
    let out = lab.provision(&[]);
    assert_ne!(out.code, 0, "{out:#?}");
    let error = out.json()["hosts"][0]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("no vms_vmid") && error.contains("5000-5999"), "{error}");
    lab.nothing_written();
    lab.configure(DIRECT, "100-999999");
    lab.converges();
}
