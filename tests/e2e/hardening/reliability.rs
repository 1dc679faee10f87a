//! Hardening: reliability and bad input (issue 8, items 18–20; 16 is in
//! tests/e2e/crash.rs, 17 next to the inventory parser).
//!
//! - every inventory value a later step uses is checked in the `validate`
//!   step, before the lock and any side effect: the run fails naming the host
//!   and the variable, and the simulator saw no write, no VM, no snippet, the
//!   state dir holds no creation record and no lock;
//! - `provision` and `provision --check` take one decision (a checkpoint for
//!   another VMID blocks both);
//! - a `cradle init` project run from inside with the default `./cradle.toml`
//!   hot-reloads and shares SSH connections.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use cradle::caps::checkpoint::{CheckpointStore, Finalization};
use cradle::provision::{Action, HostResult};
use cradle_tests::cradle_bin;
use cradle_tests::fixture::{Cluster, LabInventory, ProjectConfig, SimCluster, SimSession, error_of, writes};

struct Lab {
    dir: tempfile::TempDir,
    session: SimSession,
}

impl Lab {
    /// One host `vm-0` (VMID 200) on 127.47.`subnet`.0/24, `host_vars` for it.
    fn new(subnet: u8, host_vars: Option<&str>) -> Lab {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut inv = LabInventory::new("127.47", subnet).vmid_base(Some(200));
        if let Some(yaml) = host_vars {
            inv = inv.host_vars("vm-0", yaml);
        }
        inv.write(dir.path());
        let config = ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0))).write(dir.path());
        let session = SimSession::open(&config);
        Lab { dir, session }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn run(&self, action: Action) -> HostResult {
        let mut results = self.session.run(&self.dir.path().join("inventory"), None, action, 1);
        assert_eq!(results.len(), 1);
        results.remove(0)
    }

    fn files(&self, sub: &str) -> Vec<String> {
        match std::fs::read_dir(self.state().join(sub)) {
            Ok(rd) => rd
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Nothing happened: no cluster write, no VM, no snippet, no record, no lock.
    fn assert_untouched(&self, what: &str) {
        let counts = self.session.counts().unwrap_or_default();
        assert_eq!(writes(&counts), BTreeMap::new(), "{what}: no write reached the cluster");
        let guests: Vec<_> = cradle_tests::fixture::sim_vms(&self.state())
            .into_values()
            .filter(|v| v["config"]["template"] != "1")
            .collect();
        assert!(guests.is_empty(), "{what}: no VM: {guests:?}");
        for node in ["pve1", "pve2", "pve3"] {
            let snippets = self.session.snippets_on(node).unwrap_or_default();
            assert!(snippets.is_empty(), "{what}: no snippet on {node}: {snippets:?}");
        }
        assert_eq!(self.files("checkpoints/creating"), Vec::<String>::new(), "{what}: no creation record");
        assert_eq!(self.files("checkpoints"), Vec::<String>::new(), "{what}: no checkpoint");
        assert_eq!(cradle_tests::fixture::held_locks(&self.state()), Vec::<String>::new(), "{what}: no lock");
    }
}

/// A `vms_config` like the fixture's, with `nic0` replaced by `nic0`.
fn vms_config(nic0: &str) -> String {
    format!("vms_config:\n  disk: 12\n  network:\n    nic0: {{ bridge: vmbr0, vlan: 20, {nic0} }}\n")
}

/// Provision `vm-0` with `host_vars`; it must fail in `validate` naming
/// `variable`, with nothing changed anywhere.
fn refused_before_any_side_effect(subnet: u8, host_vars: &str, variable: &str) {
    let lab = Lab::new(subnet, Some(host_vars));
    let r = lab.run(Action::Provision);
    let err = error_of(&r);
    assert!(err.contains("vm-0") && err.contains(variable), "names the host and {variable}: {err}");
    assert!(err.contains("validate"), "names the step: {err}");
    lab.assert_untouched(variable);
}

#[test]
fn an_option_like_ansible_host_is_refused_before_the_clone() {
    let vars = format!("ansible_host: '-oProxyCommand=touch /tmp/pwned'\n{}", vms_config("ip: 127.47.1.10/24"));
    refused_before_any_side_effect(1, &vars, "ansible_host");
}

#[test]
fn a_bad_ansible_user_is_refused_before_the_creation_record() {
    refused_before_any_side_effect(2, "ansible_user: Bad$User\n", "ansible_user");
}

#[test]
fn a_gateway_outside_the_subnet_is_refused_before_the_creation_record() {
    let vars = vms_config("ip: 127.47.3.10/24, gateway: 10.9.9.1");
    refused_before_any_side_effect(3, &vars, "vms_config.nic0");
}

#[test]
fn a_bad_fqdn_is_refused_before_any_side_effect() {
    refused_before_any_side_effect(4, "vms_fqdn: other.example.org\n", "vms_fqdn");
}

#[test]
fn a_bad_snippet_storage_is_refused_before_any_side_effect() {
    refused_before_any_side_effect(5, "vms_snippet_storage: 'Local Storage'\n", "vms_snippet_storage");
}

#[test]
fn a_malformed_dns_record_is_refused_before_any_side_effect() {
    refused_before_any_side_effect(
        6,
        "vms_dns_record: { zone: lab., name: vm-0, kind: a, valu: 1.2.3.4 }\n",
        "vms_dns_record",
    );
}

#[test]
fn a_checkpoint_for_another_vmid_says_blocked_in_check_and_blocks_provision() {
    let lab = Lab::new(7, None);
    let first = lab.run(Action::Provision);
    assert!(first.ok(), "vm-0 provisions: {first:?}");
    CheckpointStore::new(lab.state().join("checkpoints"))
        .write(&Finalization {
            vm_name: "vm-0".into(),
            vmid: 777,
            node: "pve2".into(),
            stage: "drive-removal".into(),
            written: String::new(),
            fence: None,
            host_key: None,
        })
        .expect("write checkpoint");
    // vm-0 exists with the inventory's VMID, so a check that ignored the
    // checkpoint's VMID would say "finalize" (it did).
    let check = lab.run(Action::Check);
    assert!(check.ok(), "{check:?}");
    assert_eq!(check.result, "blocked", "--check: {check:?}");
    assert!(check.detail.as_deref().unwrap_or("").contains("777"), "{check:?}");
    let r = lab.run(Action::Provision);
    let err = error_of(&r);
    assert!(err.contains("777") && err.contains("review"), "provision blocks too: {err}");
    assert!(err.contains("decide"), "names the step: {err}");
}

/// Lines of a child's stderr, read on a thread.
fn lines_of(stderr: std::process::ChildStderr) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Wait (bounded) for a line containing `needle`; every line seen is kept.
fn wait_for(rx: &mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while std::time::Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let hit = line.contains(needle);
                seen.push(line);
                if hit {
                    return true;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => return false,
        }
    }
    false
}

fn init_project(parent: &Path) -> PathBuf {
    let out = Command::new(cradle_bin()).current_dir(parent).args(["init", "lab"]).output().expect("cradle init");
    assert!(out.status.success(), "cradle init: {}", String::from_utf8_lossy(&out.stderr));
    parent.join("lab")
}

/// A command in `dir` with the default `./cradle.toml` and its own state dir
/// (the project's `.cradle` would do too; HOME must not be shared).
fn cradle_in(dir: &Path) -> Command {
    let mut cmd = Command::new(cradle_bin());
    cmd.current_dir(dir).env_remove("CRADLE_CRASH_AT").env("HOME", dir).stdin(Stdio::null());
    cmd
}

#[test]
fn watch_in_a_cradle_init_project_with_the_default_config_reloads_after_an_edit() {
    let parent = tempfile::tempdir().expect("tempdir");
    let lab = init_project(parent.path());
    let mut child = cradle_in(&lab)
        .args(["run", "sample", "--env", "demo", "test-0", "--watch"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cradle run --watch");
    let rx = lines_of(child.stderr.take().expect("stderr"));
    let mut seen = Vec::new();
    let watching = wait_for(&rx, "watching", &mut seen);
    if watching {
        let sample = lab.join("workflows/sample.rhai");
        let text = std::fs::read_to_string(&sample).expect("sample.rhai");
        std::fs::write(&sample, format!("{text}\n// edited\n")).expect("edit sample.rhai");
    }
    let reloaded = watching && wait_for(&rx, "reloaded after changes", &mut seen);
    let _ = child.kill();
    let _ = child.wait();
    assert!(watching, "the watcher started: {seen:#?}");
    assert!(reloaded, "the edit was reloaded: {seen:#?}");
    assert!(!seen.iter().any(|l| l.contains("multiplexing is off")), "connection sharing stays on: {seen:#?}");
}

#[test]
fn a_cradle_init_project_with_the_default_config_keeps_ssh_connection_sharing_on() {
    let parent = tempfile::tempdir().expect("tempdir");
    let lab = init_project(parent.path());
    let out = cradle_in(&lab).args(["run", "sample", "--env", "demo", "test-0"]).output().expect("cradle run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cradle run sample: {stderr}");
    assert!(!stderr.contains("multiplexing is off"), "no multiplexing warning: {stderr}");
}
