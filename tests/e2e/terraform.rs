//! The Terraform backend end to end (issue 11): the shared workflows
//! (workflows/provision.rhai, remove.rhai), the `terraform` plugin, the real
//! `terraform` binary and the test provider (tests/tf-provider, installed by
//! `terraform init` from a filesystem mirror) against the simulated cluster
//! the project starts in-process, with guests answering real SSH.
//!
//! Each test owns a loopback subnet 127.52.<n>.0/24. What happened is read
//! from the simulator (its state, request counts), the module directory
//! (`<project>/terraform/<vm>`: state, modes) and the results' errors.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cradle::provision::{Action, HostResult};
use cradle_tests::fixture::{
    Backend, Cluster, LabInventory, ProjectConfig, SimCluster, SimSession, assert_ok, error_of, writes,
};
use serde_json::Value;

const VMID_BASE: u32 = 520;

struct Lab {
    dir: tempfile::TempDir,
    hosts: LabInventory,
    flavour: &'static str,
}

impl Lab {
    fn new(subnet: u8, flavour: &'static str, tweak: impl FnOnce(LabInventory) -> LabInventory) -> Lab {
        let hosts = tweak(LabInventory::new("127.52", subnet).vmid_base(Some(VMID_BASE)));
        let lab = Lab { dir: tempfile::tempdir().expect("tempdir"), hosts, flavour };
        lab.hosts.write(lab.dir.path());
        lab
    }

    /// Rewrite the inventory (a changed template, a new flag).
    fn rewrite(&mut self, tweak: impl FnOnce(LabInventory) -> LabInventory) {
        self.hosts = tweak(self.hosts.clone());
        self.hosts.write(self.dir.path());
    }

    fn open(&self) -> SimSession {
        let cli_config = cradle_tests::terraform_cli_config(self.dir.path());
        self.open_with(Backend::Terraform { flavour: self.flavour, cli_config }, "")
    }

    /// The project on `backend`, with `extra` tables appended.
    fn open_with(&self, backend: Backend, extra: &str) -> SimSession {
        self.open_faulty(backend, extra, None)
    }

    /// [`Lab::open_with`] on a simulator injecting `faults`.
    fn open_faulty(&self, backend: Backend, extra: &str, faults: Option<&str>) -> SimSession {
        let cluster = SimCluster { faults: faults.map(str::to_string), ..SimCluster::three_nodes(0.0) };
        let templates = "\n[[clusters.sim.sim.templates]]\nvmid = 9000\nname = \"debian-12-cloud\"\nnode = \"pve1\"\n\
                         [[clusters.sim.sim.templates]]\nvmid = 9001\nname = \"debian-13-cloud\"\nnode = \"pve1\"\n";
        let config = ProjectConfig::new(Cluster::Sim(cluster)).backend(backend).append(extra).write(self.dir.path());
        // The templates table belongs to [clusters.sim.sim]: insert it there.
        let text = std::fs::read_to_string(&config).expect("read cradle.toml");
        let text = text.replacen("\n[environments.test]", &format!("{templates}\n[environments.test]"), 1);
        std::fs::write(&config, text).expect("write cradle.toml");
        SimSession::open(&config)
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn module(&self, i: usize) -> PathBuf {
        self.dir.path().join("terraform").join(self.hosts.name(i))
    }

    fn guests(&self) -> Vec<Value> {
        cradle_tests::fixture::sim_vms(&self.state()).into_values().filter(|v| v["config"]["template"] != "1").collect()
    }

    fn provision(&self, s: &SimSession) -> Vec<HostResult> {
        s.run(&self.dir.path().join("inventory"), None, Action::Provision, 2)
    }

    /// The resource in the module's state (`terraform.tfstate`, format 4).
    fn state_resource(&self, i: usize) -> Option<Value> {
        let text = std::fs::read_to_string(self.module(i).join("terraform.tfstate")).ok()?;
        let state: Value = serde_json::from_str(&text).expect("state JSON");
        state["resources"].as_array().and_then(|r| r.first()).map(|r| r["instances"][0]["attributes"].clone())
    }
}

fn vmid_attribute(flavour: &str) -> &'static str {
    if flavour == "bpg" { "vm_id" } else { "vmid" }
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).expect("meta").permissions().mode() & 0o777
}

/// Every directory 0700 and every regular file 0600 (0700 if executable) under `dir`.
fn assert_owner_only(dir: &Path) {
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    for e in std::fs::read_dir(dir).expect("list").flatten() {
        let p = e.path();
        let kind = e.file_type().expect("type");
        if kind.is_dir() {
            assert_owner_only(&p);
        } else if kind.is_file() {
            let m = mode(&p);
            assert!(m == 0o600 || m == 0o700, "{} is {m:o}", p.display());
        }
    }
}

fn creates_and_reruns_as_a_noop(subnet: u8, flavour: &'static str) {
    let lab = Lab::new(subnet, flavour, |h| h.count(2));
    let s = lab.open();
    for r in lab.provision(&s) {
        assert_ok(&r, "created");
    }
    let guests = lab.guests();
    assert_eq!(guests.len(), 2, "one VM per host: {guests:?}");
    for g in &guests {
        assert_eq!((g["node"].as_str(), g["power"].as_str()), (Some("pve2"), Some("running")), "{g}");
    }
    for i in 0..2 {
        let res = lab.state_resource(i).expect("the module's state holds the VM");
        assert_eq!(res["name"], lab.hosts.name(i));
        assert_eq!(res[vmid_attribute(flavour)], VMID_BASE + i as u32);
        assert_owner_only(&lab.module(i));
        let plans: Vec<_> = std::fs::read_dir(lab.module(i))
            .expect("list")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tfplan"))
            .collect();
        assert!(plans.is_empty(), "no saved plan outlives its attempt: {plans:?}");
    }
    assert_owner_only(&lab.dir.path().join("terraform"));

    let before = writes(&s.counts().expect("counts"));
    for r in lab.provision(&s) {
        assert_ok(&r, "skipped");
    }
    let after = writes(&s.counts().expect("counts"));
    assert_eq!(before, after, "the rerun plans a no-op and writes nothing to the API");
}

#[test]
fn telmate_creates_through_terraform_and_the_shared_workflow_and_reruns_as_a_noop() {
    creates_and_reruns_as_a_noop(1, "telmate");
}

#[test]
fn bpg_creates_through_terraform_and_the_shared_workflow_and_reruns_as_a_noop() {
    creates_and_reruns_as_a_noop(2, "bpg");
}

#[test]
fn a_change_that_forces_replacement_is_refused_and_passes_only_with_the_flag() {
    let mut lab = Lab::new(3, "telmate", |h| h);
    let s = lab.open();
    assert_ok(&lab.provision(&s)[0], "created");
    let first = lab.guests();
    lab.rewrite(|h| h.template("debian-13-cloud"));
    let before = writes(&s.counts().expect("counts"));
    let err = error_of(&lab.provision(&s)[0]);
    assert!(err.contains("replace") && err.contains("proxmox_vm_qemu.vm"), "{err}");
    assert_eq!(writes(&s.counts().expect("counts")), before, "nothing was applied");
    assert_eq!(lab.guests(), first, "the VM is untouched");

    lab.rewrite(|h| h.var("vms_terraform_allow_replacement=true"));
    assert_ok(&lab.provision(&s)[0], "created");
    let now = lab.guests();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(now[0]["vmid"], VMID_BASE, "the same VMID, rebuilt");
    assert_eq!(now[0]["power"], "running");
    let res = lab.state_resource(0).expect("state");
    assert_eq!(res["clone"], "debian-13-cloud", "rebuilt from the new template");
}

#[test]
fn a_vm_whose_vmid_differs_from_the_state_fails_closed_before_any_side_effect() {
    let lab = Lab::new(4, "telmate", |h| h);
    let s = lab.open();
    assert_ok(&lab.provision(&s)[0], "created");
    // The state says another VMID than the VM's (someone rebuilt it by hand).
    let path = lab.module(0).join("terraform.tfstate");
    let text = std::fs::read_to_string(&path).expect("state");
    let edited = text.replace(&format!("\"vmid\": {VMID_BASE}"), &format!("\"vmid\": {}", VMID_BASE + 77));
    assert_ne!(text, edited, "the state holds the vmid");
    std::fs::write(&path, edited).expect("write");
    let before = writes(&s.counts().expect("counts"));
    let r = &lab.provision(&s)[0];
    let err = error_of(r);
    assert!(err.contains("ownership") || err.contains("state"), "{err}");
    assert!(err.contains(&(VMID_BASE + 77).to_string()), "it says what differs: {err}");
    assert!(err.contains("import") && err.contains("delete"), "it says not to delete state or import blindly: {err}");
    assert_eq!(writes(&s.counts().expect("counts")), before, "nothing was written");
    assert!(
        s.run(&lab.dir.path().join("inventory"), None, Action::Remove, 1)[0].error.is_some(),
        "removal fails closed too"
    );
    assert_eq!(lab.guests().len(), 1, "the VM is still there");
}

#[test]
fn removal_applies_a_destroy_plan_of_exactly_the_vm() {
    let lab = Lab::new(5, "bpg", |h| h);
    let s = lab.open();
    assert_ok(&lab.provision(&s)[0], "created");
    let r = &s.run(&lab.dir.path().join("inventory"), None, Action::Remove, 1)[0];
    assert_ok(r, "removed");
    assert!(lab.guests().is_empty(), "the VM is gone");
    assert!(lab.state_resource(0).is_none(), "the state no longer holds it");
    assert!(lab.module(0).join("terraform.tfstate.backup").exists(), "terraform's backup is kept");
    let counts: BTreeMap<String, u64> = s.counts().expect("counts");
    assert_eq!(counts.get("DELETE /nodes/{node}/qemu/{vmid}").copied(), Some(1), "{counts:?}");
}

/// The command lines of the terraform processes (and their providers) seen
/// while `work` runs, sampled every 10 ms from /proc.
fn terraform_command_lines<T>(work: impl FnOnce() -> T) -> (T, Vec<String>) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut seen = std::collections::BTreeSet::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                    let p = e.path();
                    let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
                    if comm.starts_with("terraform") {
                        let raw = std::fs::read(p.join("cmdline")).unwrap_or_default();
                        seen.insert(String::from_utf8_lossy(&raw).replace('\0', " "));
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            seen.into_iter().collect::<Vec<_>>()
        })
    };
    let out = work();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    (out, watcher.join().expect("watcher"))
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let kind = e.file_type().expect("type");
        if kind.is_dir() {
            files_under(&e.path(), out);
        } else if kind.is_file() {
            out.push(e.path());
        }
    }
}

#[test]
fn the_proxmox_token_never_reaches_a_terraform_command_line_a_module_file_or_a_journal() {
    let lab = Lab::new(6, "telmate", |h| h);
    let s = lab.open();
    let (results, lines) = terraform_command_lines(|| lab.provision(&s));
    assert_ok(&results[0], "created");
    let token = s.project.sims.get("sim").expect("simulator").token();
    let secret = token.split_once('=').map(|(_, s)| s.to_string()).expect("USER@REALM!ID=SECRET");
    assert!(lines.iter().any(|l| l.contains(" plan ")), "terraform was seen running: {lines:?}");
    for l in &lines {
        assert!(!l.contains(&secret) && !l.contains("-var"), "a terraform command line holds the token: {l}");
    }
    let mut files = Vec::new();
    files_under(&lab.dir.path().join("terraform"), &mut files);
    files_under(&lab.state().join("runs"), &mut files);
    files_under(&lab.state().join("terraform"), &mut files);
    assert!(files.iter().any(|f| f.ends_with("terraform.tfstate")), "{files:?}");
    // terraform's own lines reached the run journal as it ran.
    let journals: String = files
        .iter()
        .filter(|f| f.starts_with(lab.state().join("runs")))
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect();
    assert!(
        journals.contains("terraform apply: ") && journals.contains("Apply complete!"),
        "the journal streams terraform's output"
    );
    for f in files {
        let text = String::from_utf8_lossy(&std::fs::read(&f).expect("read")).into_owned();
        assert!(!text.contains(&secret), "{} holds the token", f.display());
    }
}

#[test]
fn a_host_with_vms_use_terraform_goes_through_terraform_and_its_neighbour_through_the_direct_backend() {
    let lab = Lab::new(7, "telmate", |h| h.count(2).host_vars("vm-1", "vms_use_terraform: true"));
    let cli_config = cradle_tests::terraform_cli_config(lab.dir.path());
    let s = lab.open_with(
        Backend::Plugin { destructive: true },
        &cradle_tests::fixture::terraform_toml("telmate", &cli_config),
    );
    for r in lab.provision(&s) {
        assert_ok(&r, "created");
    }
    assert!(lab.state_resource(1).is_some(), "vm-1 is in its module's state");
    assert!(!lab.module(0).exists(), "vm-0 has no module: the direct backend made it");
    assert_eq!(lab.guests().len(), 2);
}

#[test]
fn vms_use_terraform_without_a_terraform_plugin_stops_the_command_before_any_run() {
    let lab = Lab::new(8, "telmate", |h| h.count(2).host_vars("vm-1", "vms_use_terraform: true"));
    let config = ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0))).write(lab.dir.path());
    let s = SimSession::open(&config);
    let inv =
        std::sync::Arc::new(cradle::inventory::Inventory::load(&lab.dir.path().join("inventory")).expect("inventory"));
    let hosts = inv.select(None).expect("select");
    let opts = cradle::inventory::ResolveOptions { environment: "test".into(), ..Default::default() };
    let plans = cradle::inventory::resolve_selected(&inv, &hosts, &opts).expect("plans");
    let loaded = std::sync::Arc::new(s.project.load().expect("load"));
    let err = s
        .rt()
        .block_on(cradle::provision::run_all(
            s.project.clone(),
            loaded,
            inv,
            plans,
            None,
            Action::Provision,
            2,
            Default::default(),
        ))
        .expect_err("refused");
    let err = err.to_string();
    assert!(err.contains("vm-1") && err.contains("vms_use_terraform") && err.contains("[plugins.terraform]"), "{err}");
    assert!(lab.guests().is_empty(), "no run started");
}

#[test]
fn a_failed_apply_leaves_an_owner_only_failure_log_and_the_rerun_converges() {
    let lab = Lab::new(9, "telmate", |h| h);
    let cli_config = cradle_tests::terraform_cli_config(lab.dir.path());
    let backend = || Backend::Terraform { flavour: "telmate", cli_config: cli_config.clone() };
    {
        let s = lab.open_faulty(backend(), "", Some("clone-fail"));
        let err = error_of(&lab.provision(&s)[0]);
        assert!(err.contains("terraform apply failed") && err.contains("terraform-failure.log"), "{err}");
        assert!(err.contains("may hold secrets") && err.contains("before retrying"), "{err}");
        let log = lab.module(0).join("terraform-failure.log");
        assert_eq!(mode(&log), 0o600);
        assert!(std::fs::read_to_string(&log).expect("log").contains("clone"), "the log holds terraform's output");
        assert!(lab.guests().is_empty(), "the failed clone left no VM");
    }
    // The same cluster (its state dir), now without the fault.
    let s = lab.open_with(backend(), "");
    assert_ok(&lab.provision(&s)[0], "created");
    assert_eq!(lab.guests().len(), 1);
    assert!(lab.state_resource(0).is_some());
}

#[test]
fn hosts_in_parallel_share_one_plugin_cache_without_racing_its_installs() {
    // Every run has its own terraform provider object; the cache is shared:
    // concurrent `terraform init`s into it fail ("file exists", "still not
    // detected in .terraform/providers") unless cradle serializes them.
    let lab = Lab::new(10, "bpg", |h| h.count(10));
    let s = lab.open();
    let results = s.run(&lab.dir.path().join("inventory"), None, Action::Provision, 10);
    for r in &results {
        assert_ok(r, "created");
    }
    assert_eq!(lab.guests().len(), 10);
}
