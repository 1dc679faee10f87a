//! The post-provision stage of plain `cradle provision` (workflows/lib/post.rhai):
//! OS configuration after the finalization, through the Semaphore stand-in or
//! the real `ansible-playbook`, with its own checkpoint so a failure or a crash
//! makes the rerun run it again and a complete VM is left alone.
//!
//! The simulator runs in-process (tests/src/fixture.rs); each test has its
//! own loopback subnet 127.54.<n>.0/24. The real Ansible against a real guest
//! is in tests/e2e/qemu_guest.rs (the simulated guests answer a fixed set of
//! commands and have no Python).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use cradle::caps::checkpoint::CheckpointStore;
use cradle::provision::{Action, HostResult};
use cradle_sim::services::Listen;
use cradle_sim::services::semaphore::{self, Semaphore, SemaphoreConfig, TaskOutcome};
use cradle_tests::fixture::{
    Cluster, LabInventory, ProjectConfig, SimCluster, SimSession, assert_ok, error_of, writes,
};

struct Lab {
    dir: tempfile::TempDir,
    hosts: LabInventory,
    semaphore: Semaphore,
    _rt: tokio::runtime::Runtime,
}

impl Lab {
    /// One VM on 127.54.`subnet`.0/24 with `post_provision` (YAML flow
    /// mapping) in its group vars.
    fn new(subnet: u8, post_provision: &str) -> Lab {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
        let localhost = "127.0.0.1:0".parse().expect("addr");
        let semaphore = rt
            .block_on(semaphore::start(SemaphoreConfig {
                listen: Listen::http(localhost),
                time_scale: 0.01,
                ..SemaphoreConfig::default()
            }))
            .expect("semaphore");
        let dir = tempfile::tempdir().expect("tempdir");
        let hosts = LabInventory::new("127.54", subnet).vmid_base(Some(300));
        let name = hosts.name(0);
        let hosts = hosts.host_vars(&name, &format!("post_provision: {post_provision}\n"));
        hosts.write(dir.path());
        let token = dir.path().join("semaphore.token");
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&token).expect("token");
        f.write_all(semaphore.api_token().expose().as_bytes()).expect("write token");
        std::fs::create_dir(dir.path().join("playbooks")).expect("playbooks");
        std::fs::write(
            dir.path().join("playbooks/site.yml"),
            "- hosts: all\n  gather_facts: false\n  tasks:\n    - name: Mark the guest configured\n      ansible.builtin.command: touch /etc/cradle-configured\n",
        )
        .expect("playbook");
        Lab { dir, hosts, semaphore, _rt: rt }
    }

    fn open(&self) -> SimSession {
        let extra = format!(
            "{}[ansible]\ncommand = \"{}\"\n",
            post_toml(&self.semaphore),
            cradle_testkit::ansible::playbook_command().display(),
        );
        let config = ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0)))
            .environment_line("post = \"os\"")
            .append(&extra)
            .write(self.dir.path());
        SimSession::open(&config)
    }

    fn provision(&self, s: &SimSession) -> HostResult {
        let mut r = s.run(&self.dir.path().join("inventory"), None, Action::Provision, 1);
        assert_eq!(r.len(), 1);
        r.remove(0)
    }

    fn checkpoint_stage(&self) -> Option<String> {
        let store = CheckpointStore::new(self.dir.path().join("state/checkpoints"));
        store.read(&self.hosts.name(0)).expect("read checkpoint").map(|c| c.stage)
    }

    fn guest_has_cloudinit_drive(&self) -> bool {
        let vms = cradle_tests::fixture::sim_vms(&self.dir.path().join("state"));
        let config = &vms.get(&300).expect("VM 300")["config"];
        config.as_object().expect("config").values().any(|v| v.as_str().is_some_and(|s| s.contains("cloudinit")))
    }
}

#[test]
fn a_semaphore_post_provision_stage_runs_once_after_the_finalization_and_a_rerun_skips_it() {
    let lab = Lab::new(1, "{ semaphore: { project: 1, template: 1 }, extra_vars: { role: web } }");
    let s = lab.open();
    assert_ok(&lab.provision(&s), "created");
    let tasks = lab.semaphore.tasks();
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    let vars = tasks[0].extra_vars.clone().expect("extra vars");
    assert_eq!(
        (vars["vm_name"].as_str(), vars["vmid"].as_i64(), vars["role"].as_str()),
        (Some("vm-0"), Some(300), Some("web"))
    );
    assert_eq!(tasks[0].status, "success");
    assert!(!lab.guest_has_cloudinit_drive(), "the stage ran on a finalized guest");
    assert_eq!(lab.checkpoint_stage(), None, "the stage cleared the checkpoint");

    let before = writes(&s.counts().expect("counts"));
    assert_ok(&lab.provision(&s), "skipped");
    assert_eq!(lab.semaphore.tasks().len(), 1, "a complete VM is not configured again");
    assert_eq!(writes(&s.counts().expect("counts")), before, "the rerun wrote nothing");
}

#[test]
fn a_failed_post_provision_stage_keeps_its_checkpoint_and_the_rerun_runs_only_the_stage_again() {
    let lab = Lab::new(2, "{ semaphore: { project: 1, template: 1 } }");
    assert!(lab.semaphore.set_template_outcome(1, 1, TaskOutcome::Fail));
    let s = lab.open();
    let r = lab.provision(&s);
    let e = error_of(&r);
    assert!(e.contains("in step 'post-provision' for VM 'vm-0'"), "{e}");
    assert!(e.contains("Semaphore task") && e.contains("ended error"), "{e}");
    assert_eq!(lab.checkpoint_stage().as_deref(), Some("post-provision"), "the stage is still owed");
    assert!(!lab.guest_has_cloudinit_drive(), "the finalization itself completed");

    assert!(lab.semaphore.set_template_outcome(1, 1, TaskOutcome::Success));
    let clones = |s: &SimSession| {
        s.counts().expect("counts").iter().filter(|(k, _)| k.ends_with("/clone")).map(|(_, v)| *v).sum::<u64>()
    };
    let cloned = clones(&s);
    assert_ok(&lab.provision(&s), "configured");
    assert_eq!(clones(&s), cloned, "the rerun did not create the VM again");
    assert_eq!(lab.semaphore.tasks().len(), 2);
    assert_eq!(lab.checkpoint_stage(), None);
    assert_ok(&lab.provision(&s), "skipped");
    assert_eq!(lab.semaphore.tasks().len(), 2);
}

#[test]
fn an_owed_post_provision_stage_the_inventory_no_longer_asks_for_clears_its_checkpoint() {
    let lab = Lab::new(7, "{ semaphore: { project: 1, template: 1 } }");
    assert!(lab.semaphore.set_template_outcome(1, 1, TaskOutcome::Fail));
    let s = lab.open();
    error_of(&lab.provision(&s));
    assert_eq!(lab.checkpoint_stage().as_deref(), Some("post-provision"));
    let host_vars = lab.dir.path().join("inventory/host_vars").join(format!("{}.yml", lab.hosts.name(0)));
    std::fs::write(&host_vars, "---\n").expect("drop post_provision");
    assert_ok(&lab.provision(&s), "configured");
    assert_eq!(lab.checkpoint_stage(), None);
    assert_eq!(lab.semaphore.tasks().len(), 1, "the stage did not run again");
    assert_ok(&lab.provision(&s), "skipped");
}

#[test]
fn a_vm_destroyed_outside_cradle_while_its_stage_was_owed_is_removed_and_can_be_provisioned_again() {
    let lab = Lab::new(13, "{ semaphore: { project: 1, template: 1 } }");
    assert!(lab.semaphore.set_template_outcome(1, 1, TaskOutcome::Fail));
    let s = lab.open();
    error_of(&lab.provision(&s));
    assert_eq!(lab.checkpoint_stage().as_deref(), Some("post-provision"));
    let vms = cradle_tests::fixture::sim_vms(&lab.dir.path().join("state"));
    let node = vms[&300]["node"].as_str().expect("node").to_string();
    let sim = s.project.sims.get("sim").expect("simulator");
    let api = |method: &str, path: &str| {
        cradle_tests::fixture::pve_api(&sim.api_url(), &sim.token(), &sim.ca_pem(), lab.dir.path(), method, path, &[]);
    };
    api("POST", &format!("/nodes/{node}/qemu/300/status/stop"));
    api("DELETE", &format!("/nodes/{node}/qemu/300"));
    let gone = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        !cradle_tests::fixture::sim_vms(&lab.dir.path().join("state")).contains_key(&300)
    });
    assert!(gone, "the operator destroyed VM 300");

    let mut removed = s.run(&lab.dir.path().join("inventory"), None, Action::Remove, 1);
    assert_ok(&removed.remove(0), "removed");
    assert_eq!(lab.checkpoint_stage(), None, "the owed stage's checkpoint went with it");
    assert!(lab.semaphore.set_template_outcome(1, 1, TaskOutcome::Success));
    assert_ok(&lab.provision(&s), "created");
}

#[test]
fn an_ansible_post_provision_stage_reaches_the_guest_over_cradles_pinned_ssh_and_its_failure_names_the_task() {
    // The simulated guest accepts the SSH login Ansible makes with cradle's
    // known_hosts (a wrong pin would be "could not reach the host"), then has
    // no Python to run the module: the stage fails at the task, and stays owed.
    let lab = Lab::new(3, "{ ansible: playbooks/site.yml, timeout_s: 300 }");
    let s = lab.open();
    let r = lab.provision(&s);
    let e = error_of(&r);
    assert!(e.contains("in step 'post-provision' for VM 'vm-0'"), "{e}");
    assert!(e.contains("ansible-playbook playbooks/site.yml on vm-0"), "{e}");
    assert!(e.contains("failed at task `Mark the guest configured`"), "{e}");
    assert!(!e.contains("could not reach"), "the login itself worked: {e}");
    let log = lab.dir.path().join("state/ansible");
    let logs: Vec<_> = std::fs::read_dir(&log).expect("log dir").flatten().map(|e| e.file_name()).collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(lab.checkpoint_stage().as_deref(), Some("post-provision"));
}

#[test]
fn a_post_provision_with_two_drivers_an_unknown_key_or_an_unusable_playbook_fails_validation_before_any_side_effect() {
    for (subnet, spec, says) in [
        (4, "{ ansible: playbooks/site.yml, semaphore: { template: 1 } }", "needs exactly one of"),
        (5, "{ playbook: playbooks/site.yml }", "unknown key 'playbook'"),
        (6, "{ semaphore: { template: nine } }", "semaphore must be"),
        (10, "{ ansible: playbooks/missing.yml }", "playbook `playbooks/missing.yml` cannot be read"),
        (11, "{ ansible: other/site.yml }", "is not in workflow.grants.ssh.playbooks"),
        (12, "{ semaphore: { template: 1 }, timeout_s: 100000 }", "timeout_s must be"),
    ] {
        let lab = Lab::new(subnet, spec);
        let s = lab.open();
        let r = lab.provision(&s);
        let e = error_of(&r);
        assert!(e.contains("in step 'validate' for VM 'vm-0'"), "{spec}: {e}");
        assert!(e.contains(says), "{spec}: {e}");
        let counts = s.counts().unwrap_or_default();
        assert!(writes(&counts).is_empty(), "{spec}: nothing was written: {counts:?}");
        assert!(lab.semaphore.tasks().is_empty());
        assert!(!Path::new(&lab.dir.path().join("state/checkpoints").join("vm-0.json")).exists());
    }
}

/// kill -9 of `cradle` around the post-provision stage, then `cradle unlock`
/// and a rerun: the stage runs again only when its success was not recorded
/// (killed before it began: once in all; killed after it succeeded but before
/// its checkpoint was cleared: once more, which is why it must be idempotent),
/// and the VM ends configured with no checkpoint. The simulator runs as its
/// own process so it survives the kill.
#[test]
fn kill_9_around_the_post_provision_stage_then_unlock_and_rerun_configure_the_vm() {
    use std::os::unix::process::ExitStatusExt;
    for (subnet, at, tasks) in [(8u8, "before:post-provision@vm-0", 1usize), (9, "after:post-provision@vm-0", 2)] {
        let lab = Lab::new(subnet, "{ semaphore: { project: 1, template: 1 } }");
        let sim = cradle_tests::remote_sim::RemoteSim::start(lab.dir.path(), "0");
        let config = ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone()))
            .environment_line("post = \"os\"")
            .append(&post_toml(&lab.semaphore))
            .write(lab.dir.path());
        let inventory = lab.dir.path().join("inventory");
        let cradle = |args: &[&str], crash: Option<&str>| {
            let mut cmd = std::process::Command::new(cradle_tests::cradle_bin());
            cmd.arg("--config").arg(&config).args(args).env_remove("CRADLE_CRASH_AT");
            if let Some(at) = crash {
                cmd.env("CRADLE_CRASH_AT", at);
            }
            cmd.stdin(std::process::Stdio::null()).output().expect("run cradle")
        };
        let provision = |crash: Option<&str>| {
            cradle(&["--output", "json", "provision", "-i", inventory.to_str().expect("utf-8")], crash)
        };
        let results = |o: &std::process::Output| -> Vec<String> {
            let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
            doc["hosts"]
                .as_array()
                .expect("hosts")
                .iter()
                .map(|h| h["result"].as_str().unwrap_or("").to_string())
                .collect()
        };

        let killed = provision(Some(at));
        assert_eq!(killed.status.signal(), Some(9), "{at}: died of SIGKILL: {killed:?}");
        assert_eq!(lab.checkpoint_stage().as_deref(), Some("post-provision"), "{at}: the stage is owed");
        let unlock = cradle(&["unlock", "vm-0"], None);
        assert!(unlock.status.success(), "{at}: {unlock:?}");

        assert_eq!(results(&provision(None)), ["configured"], "{at}");
        assert_eq!(lab.semaphore.tasks().len(), tasks, "{at}: the template ran {tasks} time(s) in all");
        assert_eq!(lab.checkpoint_stage(), None, "{at}");
        assert_eq!(results(&provision(None)), ["skipped"], "{at}");
        assert_eq!(lab.semaphore.tasks().len(), tasks, "{at}");
    }
}

/// The environment's post provider `[post.os]` (Semaphore over the endpoint
/// `semaphore`, its token in `semaphore.token`) and the workflow's grant of
/// template 1 of project 1: no `http` grant, the host holds the token.
fn post_toml(semaphore: &Semaphore) -> String {
    format!(
        "\n[workflow.grants.post]\nprojects = [1]\ntemplates = [1]\n[post.os]\nkind = \"semaphore\"\nendpoint = \
         \"semaphore\"\npoll_ms = 100\n[endpoints.semaphore]\nurl = \"{}\"\ntoken = {{ file = \"semaphore.token\" }}\n\
         auth = \"bearer\"\n",
        semaphore.url(),
    )
}
