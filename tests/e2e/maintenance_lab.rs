//! The project the maintenance tests (`maintenance.rs`, `maintenance_crash.rs`,
//! `maintenance_terraform.rs`) share: VMs `vm-0..` of a lab inventory on a
//! simulated cluster, `cradle` run as an operator runs it (optionally killed
//! by `CRADLE_CRASH_AT`), and
//! what the simulator says happened — its VMs and tasks (`state.json`), its
//! request counts (`/sim/requests`, counted across every `cradle` process
//! that talked to it), a guest's boot id over SSH, a run's journal.
//!
//! Each test file has its own guest prefix (`127.64`, `127.66`), each test its
//! own subnet of it: guests bind port 22 on `PREFIX.SUBNET.0/24`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use cradle_tests::cradle_bin;
use cradle_tests::fixture::{Cluster, LabInventory, ProjectConfig, SimCluster, Wait};
use cradle_tests::remote_sim::RemoteSim;
use serde_json::Value;

/// A project on a simulated cluster with `hosts` VMs `vm-0..` of an inventory.
pub struct Project {
    /// The project directory (cradle.toml, inventory/, state/).
    pub dir: tempfile::TempDir,
    /// The simulator in its own process (`None`: the built-in one, in each
    /// `cradle` process, its state under `state/sim/sim`).
    pub sim: Option<RemoteSim>,
    /// The VMs' names.
    pub names: Vec<String>,
    /// The lab inventory written (addresses of the VMs).
    pub lab: LabInventory,
}

impl Project {
    /// On a simulator in its own process (outlives a killed `cradle`), guests
    /// on `prefix`.`subnet`.0/24.
    pub fn new(prefix: &str, subnet: u8, hosts: usize) -> Project {
        Project::with(prefix, subnet, hosts, |lab| lab)
    }

    /// As [`Project::new`], the inventory shaped by `shape` (extra vars, host vars).
    pub fn with(prefix: &str, subnet: u8, hosts: usize, shape: impl FnOnce(LabInventory) -> LabInventory) -> Project {
        let dir = tempfile::tempdir().expect("tempdir");
        let sim = RemoteSim::start(dir.path(), "0");
        ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone())).write(dir.path());
        Project::with_inventory(dir, Some(sim), prefix, subnet, hosts, shape)
    }

    /// As [`Project::new`], the simulator started with `sim_args` besides its
    /// nodes (`--storage fast=lvmthin:images,rootdir`).
    pub fn with_sim_args(prefix: &str, subnet: u8, hosts: usize, sim_args: &[&str]) -> Project {
        let dir = tempfile::tempdir().expect("tempdir");
        let args: Vec<&str> = ["--nodes", "pve1,pve2,pve3"].iter().chain(sim_args).copied().collect();
        let sim = RemoteSim::start_with(dir.path(), "0", &args);
        ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone())).write(dir.path());
        Project::with_inventory(dir, Some(sim), prefix, subnet, hosts, |lab| lab)
    }

    /// On the built-in simulated cluster (`kind = "sim"`, time scale 0).
    pub fn builtin(prefix: &str, subnet: u8, hosts: usize) -> Project {
        let dir = tempfile::tempdir().expect("tempdir");
        ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0))).write(dir.path());
        Project::with_inventory(dir, None, prefix, subnet, hosts, |lab| lab)
    }

    fn with_inventory(
        dir: tempfile::TempDir,
        sim: Option<RemoteSim>,
        prefix: &str,
        subnet: u8,
        hosts: usize,
        shape: impl FnOnce(LabInventory) -> LabInventory,
    ) -> Project {
        let lab = shape(
            LabInventory::new(prefix, subnet).count(hosts).vmid_base(Some(500)).nameservers(None).wait(Wait::lab()),
        );
        lab.write(dir.path());
        let names = (0..hosts).map(|i| lab.name(i)).collect();
        Project { dir, sim, names, lab }
    }

    /// The inventory directory.
    pub fn inventory(&self) -> String {
        self.dir.path().join("inventory").display().to_string()
    }

    /// `cradle --config DIR/cradle.toml ARGS`, killed at `crash_at` when given.
    pub fn cradle(&self, args: &[&str], crash_at: Option<&str>) -> Output {
        let mut cmd = Command::new(cradle_bin());
        cmd.current_dir(self.dir.path())
            .arg("--config")
            .arg(self.dir.path().join("cradle.toml"))
            .args(args)
            .env_remove("CRADLE_CRASH_AT");
        if let Some(at) = crash_at {
            cmd.env("CRADLE_CRASH_AT", at);
        }
        cmd.stdin(Stdio::null()).output().expect("run cradle")
    }

    /// Provision every VM of the inventory; panics unless it succeeded.
    pub fn provision(&self) {
        let out = self.cradle(&["--output", "json", "provision", "-i", &self.inventory(), "--forks", "10"], None);
        assert!(out.status.success(), "provision: {}", show(&out));
    }

    /// Replace `from` by `to` in `inventory/group_vars/all.yml` (what every VM gets).
    pub fn edit_inventory(&self, from: &str, to: &str) {
        let path = self.dir.path().join("inventory/group_vars/all.yml");
        let text = std::fs::read_to_string(&path).expect("group_vars");
        assert!(text.contains(from), "group_vars has no `{from}`:\n{text}");
        std::fs::write(&path, text.replace(from, to)).expect("write group_vars");
    }

    /// Replace `from` by `to` in cradle.toml.
    pub fn edit_config(&self, from: &str, to: &str) {
        let path = self.dir.path().join("cradle.toml");
        let text = std::fs::read_to_string(&path).expect("cradle.toml");
        assert!(text.contains(from), "cradle.toml has no `{from}`");
        std::fs::write(&path, text.replacen(from, to, 1)).expect("write cradle.toml");
    }

    /// The plan file path `name` in the project directory.
    pub fn plan_path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `cradle plan -i INVENTORY --out PLAN ARGS` (text output unless ARGS says).
    pub fn plan(&self, plan: &Path, args: &[&str]) -> Output {
        let inv = self.inventory();
        let plan = plan.display().to_string();
        let mut all = vec!["plan", "-i", inv.as_str(), "--out", plan.as_str()];
        all.extend_from_slice(args);
        self.cradle(&all, None)
    }

    /// `cradle plan -i INVENTORY --out DIR/FILE` (text output); panics unless
    /// it succeeded: the plan file and what plan printed.
    pub fn plan_ok(&self, file: &str) -> (PathBuf, String) {
        let plan = self.plan_path(file);
        let out = self.plan(&plan, &[]);
        assert!(out.status.success(), "plan: {}", show(&out));
        (plan, String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `cradle --output json plan -i INVENTORY --out PLAN ARGS`: its document;
    /// panics unless it succeeded.
    pub fn plan_json(&self, plan: &Path, args: &[&str]) -> Value {
        let mut all = vec!["--output", "json", "plan", "-i"];
        let inv = self.inventory();
        let plan = plan.display().to_string();
        all.extend_from_slice(&[inv.as_str(), "--out", plan.as_str()]);
        all.extend_from_slice(args);
        let out = self.cradle(&all, None);
        assert!(out.status.success(), "plan: {}", show(&out));
        json_of(&out)
    }

    /// `cradle --output json apply PLAN --reboot REBOOT`, killed at `crash_at` when given.
    pub fn apply(&self, plan: &Path, reboot: &str, crash_at: Option<&str>) -> Output {
        let plan = plan.display().to_string();
        self.cradle(&["--output", "json", "apply", &plan, "--reboot", reboot], crash_at)
    }

    /// The simulator's state directory.
    pub fn sim_state(&self) -> PathBuf {
        match &self.sim {
            Some(sim) => sim.state.clone(),
            None => self.dir.path().join("state/sim/sim"),
        }
    }

    fn state_doc(&self) -> Value {
        let text = std::fs::read_to_string(self.sim_state().join("state.json")).expect("state.json");
        serde_json::from_str(&text).expect("state.json parses")
    }

    /// The simulator's VM named `name` (config, pending, power), as its state file has it.
    pub fn vm(&self, name: &str) -> Value {
        let doc = self.state_doc();
        doc["vms"]
            .as_object()
            .and_then(|m| m.values().find(|v| v["config"]["name"] == name).cloned())
            .unwrap_or_else(|| panic!("no VM {name} in the simulator"))
    }

    /// The VMID of `name`.
    pub fn vmid(&self, name: &str) -> u64 {
        self.vm(name)["vmid"].as_u64().expect("vmid")
    }

    /// How many `kind` tasks (`qmreboot`, ...) the simulator ran for `vmid`.
    pub fn tasks_of(&self, kind: &str, vmid: u64) -> usize {
        let doc = self.state_doc();
        let tasks = doc["tasks"].as_array().cloned().unwrap_or_default();
        tasks.iter().filter(|t| t["kind"] == kind && t["id"] == vmid.to_string().as_str()).count()
    }

    /// The remote simulator's endpoint, API token and CA (PEM).
    fn api_access(&self) -> (String, String, String) {
        let sim = self.sim.as_ref().expect("the API of a simulator in its own process");
        let line = |key: &str| {
            sim.cluster_toml
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key} = ")))
                .unwrap_or_else(|| panic!("no {key} in the written config"))
                .to_string()
        };
        let endpoint = line("endpoint").trim_matches('"').to_string();
        let token_file = line("token");
        let token_file = token_file.split('"').nth(1).expect("token = { file = \"..\" }");
        let token = std::fs::read_to_string(token_file).expect("token file").trim().to_string();
        let ca = std::fs::read_to_string(sim.state.join("pve-root-ca.pem")).expect("CA");
        (endpoint, token, ca)
    }

    /// A request to the simulator's API as an operator makes it (the remote
    /// simulator only); `path` under `/api2/json`.
    pub fn api(&self, method: &str, path: &str, form: &[&str]) {
        let (endpoint, token, ca) = self.api_access();
        let url = format!("{endpoint}/api2/json");
        cradle_tests::fixture::pve_api(&url, &token, &ca, self.dir.path(), method, path, form);
    }

    /// The requests the remote simulator served so far, per `METHOD /pattern`
    /// (`GET /sim/requests`: every `cradle` process that talked to it counts).
    pub fn requests(&self) -> BTreeMap<String, u64> {
        let (endpoint, token, ca) = self.api_access();
        let ca_file = self.dir.path().join("pve-api-ca.pem");
        std::fs::write(&ca_file, ca).expect("ca");
        let out = Command::new("curl")
            .args(["-sS", "--fail", "--cacert"])
            .arg(&ca_file)
            .arg("-H")
            .arg(format!("Authorization: PVEAPIToken={token}"))
            .arg(format!("{endpoint}/sim/requests"))
            .output()
            .expect("curl");
        assert!(out.status.success(), "GET /sim/requests: {}", String::from_utf8_lossy(&out.stderr));
        let doc: Value = serde_json::from_slice(&out.stdout).expect("/sim/requests is JSON");
        doc["data"]
            .as_object()
            .expect("counts")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().expect("a count")))
            .collect()
    }

    /// The guest `i`'s boot id, read over SSH as cradle reads it (the
    /// simulator's identity, which its guests trust).
    pub fn boot_id(&self, i: usize) -> String {
        let identity = self.sim_state().join("node_id_ed25519");
        let out = Command::new("ssh")
            .arg("-i")
            .arg(&identity)
            .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"])
            .args(["-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10"])
            .arg(format!("cradle@{}", self.lab.address(i)))
            .arg("cat /proc/sys/kernel/random/boot_id")
            .stdin(Stdio::null())
            .output()
            .expect("ssh");
        assert!(out.status.success(), "ssh to {}: {}", self.names[i], String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The events of run `run_id`'s journal.
    pub fn journal(&self, run_id: &str) -> Vec<Value> {
        let path = self.dir.path().join("state/runs").join(format!("{run_id}.jsonl"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        text.lines().map(|l| serde_json::from_str(l).expect("a journal line")).collect()
    }
}

/// `hosts` VMs provisioned on a simulator in its own process, the inventory
/// then changed by `change`, planned into `maint.plan` with changes for every
/// VM: the project, the plan file and what `cradle plan` printed.
pub fn planned(prefix: &str, subnet: u8, hosts: usize, change: fn(&Project)) -> (Project, PathBuf, String) {
    let p = Project::new(prefix, subnet, hosts);
    p.provision();
    change(&p);
    let (plan, text) = p.plan_ok("maint.plan");
    assert!(text.contains(&format!("{hosts} planned (0 unchanged), 0 blocked")), "every VM has changes:\n{text}");
    (p, plan, text)
}

/// What `after` counted beyond `before`, the API writes only (POST, PUT, DELETE).
pub fn writes_between(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let grown: BTreeMap<String, u64> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    cradle_tests::fixture::writes(&grown)
}

/// The row of VM `name` in an apply's or a plan's JSON document.
pub fn row<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["vms"]
        .as_array()
        .and_then(|vms| vms.iter().find(|v| v["name"] == name))
        .unwrap_or_else(|| panic!("no row for {name}: {doc}"))
}

/// A command's status and output, for assertion messages.
pub fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The JSON document a command printed.
pub fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not one JSON document ({e}): {}", show(o)))
}
