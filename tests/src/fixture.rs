//! The provisioning fixtures the end-to-end tests share: a project's
//! `cradle.toml` ([`ProjectConfig`]), a lab inventory of VMs on a loopback
//! subnet ([`LabInventory`]), a project opened on an in-process simulated
//! cluster ([`SimSession`]), and the checks on its results and state dir.
//!
//! What is fixed (the tests never vary it): the environment is `test`, on
//! cluster `sim`, with backend `direct`; the workflow grants allow every lock,
//! checkpoints, every node and storage with VMIDs 100-999, and SSH to guests
//! and nodes with uploads to `/var/lib/vz/snippets` and `/var/tmp/cradle-images`; the inventory's group is
//! `lab`, its OS `debian12` (interface `ens18`, storage `local-lvm`, 2 cores,
//! 2048 MiB, a 12 GiB disk, startup order 10) and its one NIC `nic0` on
//! `vmbr0`, VLAN 20, `<ansible_host>/24` with the subnet's `.1` as gateway,
//! host `i` at the subnet's `.(10 + i)`, user `cradle`.
//!
//! What the tests vary is a knob here: the subnet (each test owns one, as
//! simulated guests bind port 22 on their address), the host count and
//! names, VMID base, target node, template, extra group variables, host
//! variables, wait bounds, nameservers; and on the project side the cluster
//! (an in-process simulator with its time scale, seed and faults, or the
//! `cluster.toml` a `cradle sim serve --write-config` wrote), the API token's
//! privileges (by default the documented least-privilege role, [`Privileges`]), the workflows
//! (the repository's, a named directory or the built-in set), the backend
//! (the `direct` plugin file with or without `destructive`, or the built-in)
//! and a `[dns.lab]` provider.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cradle::inventory::{Inventory, ResolveOptions, resolve_selected};
use cradle::project::Project;
use cradle::provision::{Action, Extra, HostResult, run_all};
use serde_json::Value;

/// The cluster a project runs on (named `sim` either way).
#[derive(Debug, Clone)]
pub enum Cluster {
    /// `kind = "sim"`: a simulator the project starts in-process at its first run.
    Sim(SimCluster),
    /// The text `cradle sim serve --write-config` wrote (`[clusters.sim]`,
    /// `kind = "proxmox"`, and `[ssh]`), for a simulator in its own process.
    Written(String),
}

/// `[clusters.sim.sim]`: how an in-process simulator behaves.
#[derive(Debug, Clone)]
pub struct SimCluster {
    /// Its Proxmox nodes.
    pub nodes: Vec<&'static str>,
    /// `time_scale`: 0 runs every task instantly, 1 at realistic durations.
    pub time_scale: f64,
    /// `seed` of the fault stream; `None` leaves the key out.
    pub seed: Option<u64>,
    /// `faults`; `None` leaves the key out.
    pub faults: Option<String>,
    /// More `key = value` lines of `[clusters.sim.sim]` (`pve_version`, `node_root_bytes`).
    pub extra: Vec<String>,
}

impl SimCluster {
    /// Nodes pve1, pve2 and pve3 at `time_scale`, seed 1, no faults key.
    pub fn three_nodes(time_scale: f64) -> SimCluster {
        SimCluster { nodes: vec!["pve1", "pve2", "pve3"], time_scale, seed: Some(1), faults: None, extra: Vec::new() }
    }
}

/// The API token cradle gets from an in-process simulator
/// (`[clusters.sim.sim] privileges`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Privileges {
    /// `privileges = "cradle"`: `cradle@pve!cradle`, privilege-separated,
    /// holding exactly the role docs/CONFIG.md documents
    /// (`cradle::caps::proxmox::role::ROLE`) minus `without`, checked as PVE
    /// checks it. The default: the suite proves the documented role is enough.
    Cradle { without: Vec<&'static str> },
    /// root@pam's token (every check passes), for a test that needs root.
    Root,
}

/// Where the project's workflows come from.
#[derive(Debug, Clone)]
pub enum Workflows {
    /// `[workflow] dir` = the repository's `workflows/` (absolute path).
    Repository,
    /// `[workflow] dir` = this (relative to the project).
    Dir(String),
    /// No `[workflow] dir`: the set built into the binary.
    BuiltIn,
}

/// The `direct` backend.
#[derive(Debug, Clone)]
pub enum Backend {
    /// `[plugins.direct]`: the component `scripts/test` builds, granted nodes
    /// `*`, VMIDs 100-999, storages `local-lvm` and `local`, template
    /// `debian-12-cloud`, and `destructive` as given (removal needs it).
    Plugin { destructive: bool },
    /// No `[plugins]`: the backend built into the binary.
    BuiltIn,
    /// `[plugins.terraform]`: the component `scripts/test` builds, with the
    /// same Proxmox grants, `module_root = "terraform"` (beside cradle.toml)
    /// and `destructive`; `[terraform]` with this provider flavour and the
    /// CLI config [`crate::terraform_cli_config`] writes (the test provider in
    /// a filesystem mirror, so `terraform init` installs it as it would a
    /// downloaded one).
    Terraform { flavour: &'static str, cli_config: PathBuf },
}

/// A `[dns.lab]` RFC 2136 provider for environment `test`, with the workflow
/// grant for the same zones.
#[derive(Debug, Clone)]
pub struct DnsProvider {
    /// `IP:port`.
    pub server: String,
    /// The TSIG key's name.
    pub key_name: String,
    /// The owner-only file that holds the key's secret.
    pub secret_file: PathBuf,
    /// Zones (with the trailing dot) cradle may update.
    pub zones: Vec<String>,
}

/// A project's `cradle.toml`.
#[derive(Debug, Clone)]
pub struct ProjectConfig {
    default_environment: bool,
    state_dir: Option<String>,
    workflows: Workflows,
    cluster: Cluster,
    backend: Backend,
    dns: Option<DnsProvider>,
    environment_lines: String,
    extra: String,
    workflow_destructive: bool,
    privileges: Privileges,
}

impl ProjectConfig {
    /// `default_environment = "test"`, `state_dir = "state"`, the
    /// repository's workflows, `cluster` and the `direct` plugin with
    /// `destructive = true`.
    pub fn new(cluster: Cluster) -> ProjectConfig {
        ProjectConfig {
            default_environment: true,
            state_dir: Some("state".into()),
            workflows: Workflows::Repository,
            cluster,
            backend: Backend::Plugin { destructive: true },
            dns: None,
            environment_lines: String::new(),
            extra: String::new(),
            workflow_destructive: false,
            privileges: Privileges::Cradle { without: Vec::new() },
        }
    }

    /// The API token an in-process simulator gives cradle (default: the
    /// documented least-privilege role).
    pub fn privileges(mut self, privileges: Privileges) -> Self {
        self.privileges = privileges;
        self
    }

    /// Whether `default_environment = "test"` is written.
    pub fn default_environment(mut self, on: bool) -> Self {
        self.default_environment = on;
        self
    }

    /// `state_dir`, or none (the state dir then comes from the command line).
    pub fn state_dir(mut self, dir: Option<&str>) -> Self {
        self.state_dir = dir.map(str::to_string);
        self
    }

    pub fn workflows(mut self, workflows: Workflows) -> Self {
        self.workflows = workflows;
        self
    }

    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// `[dns.lab]`, `dns = "lab"` on the environment and `[workflow.grants.dns]`.
    pub fn dns(mut self, dns: DnsProvider) -> Self {
        self.dns = Some(dns);
        self
    }

    /// A line of `[environments.test]` (`post = "os"`: a provider the
    /// appended tables define).
    pub fn environment_line(mut self, line: &str) -> Self {
        self.environment_lines.push_str(line);
        self.environment_lines.push('\n');
        self
    }

    /// TOML tables appended at the end (another environment, another plugin).
    pub fn append(mut self, toml: &str) -> Self {
        self.extra.push_str(toml);
        self
    }

    /// The text of cradle.toml.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if self.default_environment {
            out.push_str("default_environment = \"test\"\n");
        }
        if let Some(dir) = &self.state_dir {
            let _ = writeln!(out, "state_dir = \"{dir}\"");
        }
        match &self.workflows {
            Workflows::Repository => {
                let _ = writeln!(out, "\n[workflow]\ndir = \"{}\"", crate::workspace().join("workflows").display());
            }
            Workflows::Dir(dir) => {
                let _ = writeln!(out, "\n[workflow]\ndir = \"{dir}\"");
            }
            Workflows::BuiltIn => {}
        }
        out.push_str(
            r#"[workflow.grants.lock]
prefixes = ["*"]
[workflow.grants.checkpoint]
[workflow.grants.proxmox]
nodes = ["*"]
vmids = "100-999"
storages = ["*"]
[workflow.grants.ssh]
hosts = ["guests", "nodes"]
upload_dirs = ["/var/lib/vz/snippets", "/var/tmp/cradle-images"]
playbooks = ["playbooks"]
"#,
        );
        if self.workflow_destructive {
            out = out.replace(
                "storages = [\"*\"]\n[workflow.grants.ssh]",
                "storages = [\"*\"]\ndestructive = true\n[workflow.grants.ssh]",
            );
        }
        if let Some(dns) = &self.dns {
            let _ = writeln!(out, "[workflow.grants.dns]\nzones = {:?}", dns.zones);
        }
        match &self.cluster {
            Cluster::Sim(sim) => {
                let _ = writeln!(out, "\n[clusters.sim]\nkind = \"sim\"\n[clusters.sim.sim]\nnodes = {:?}", sim.nodes);
                let _ = writeln!(out, "time_scale = {:?}", sim.time_scale);
                if let Some(seed) = sim.seed {
                    let _ = writeln!(out, "seed = {seed}");
                }
                if let Some(faults) = &sim.faults {
                    let _ = writeln!(out, "faults = \"{faults}\"");
                }
                match &self.privileges {
                    Privileges::Cradle { without } => {
                        let _ = writeln!(out, "privileges = \"cradle\"");
                        if !without.is_empty() {
                            let _ = writeln!(out, "privileges_without = {without:?}");
                        }
                    }
                    Privileges::Root => {
                        let _ = writeln!(out, "privileges = \"root\"");
                    }
                }
                for line in &sim.extra {
                    let _ = writeln!(out, "{line}");
                }
            }
            Cluster::Written(text) => {
                let _ = writeln!(out, "\n{text}");
            }
        }
        let backend = if matches!(self.backend, Backend::Terraform { .. }) { "terraform" } else { "direct" };
        let _ = writeln!(out, "\n[environments.test]\ncluster = \"sim\"\nbackend = \"{backend}\"");
        out.push_str(&self.environment_lines);
        if let Some(dns) = &self.dns {
            let _ = writeln!(
                out,
                "dns = \"lab\"\n\n[dns.lab]\nkind = \"rfc2136\"\nserver = \"{}\"\nkey_name = \"{}\"\nsecret = {{ file = \"{}\" }}\nzones = {:?}",
                dns.server,
                dns.key_name,
                dns.secret_file.display(),
                dns.zones
            );
        }
        if let Backend::Plugin { destructive } = self.backend {
            let _ = writeln!(
                out,
                r#"
[plugins.direct]
path = "{}"
[plugins.direct.grants.proxmox]
nodes = ["*"]
vmids = "100-999"
storages = ["local-lvm", "local"]
templates = ["debian-12-cloud"]
destructive = {destructive}"#,
                crate::plugin_wasm("direct").display()
            );
        }
        if let Backend::Terraform { flavour, cli_config } = &self.backend {
            out.push_str(&terraform_toml(flavour, cli_config));
        }
        if !self.extra.is_empty() {
            let _ = write!(out, "\n{}", self.extra);
        }
        out
    }

    /// `destructive = true` in `[workflow.grants.proxmox]` (removing a
    /// container type's guest is the workflow's own destroy).
    pub fn workflow_destructive(mut self, on: bool) -> Self {
        self.workflow_destructive = on;
        self
    }

    /// Write `dir/cradle.toml`; its path.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let path = dir.join("cradle.toml");
        std::fs::write(&path, self.render()).expect("write cradle.toml");
        path
    }
}

/// `[terraform]` with provider `flavour` and the CLI config `cli_config`, and
/// `[plugins.terraform]` (the component `scripts/test` builds) granted the
/// Proxmox scope of the direct backend's fixture plus templates
/// `debian-13-cloud`, `module_root = "terraform"` and `destructive`.
pub fn terraform_toml(flavour: &str, cli_config: &Path) -> String {
    format!(
        r#"
[terraform]
provider = "{flavour}"
cli_config = "{}"

[plugins.terraform]
path = "{}"
[plugins.terraform.grants.proxmox]
nodes = ["*"]
vmids = "100-999"
storages = ["local-lvm", "local"]
templates = ["debian-12-cloud", "debian-13-cloud"]
destructive = true
[plugins.terraform.grants.terraform]
module_root = "terraform"
destructive = true
"#,
        cli_config.display(),
        crate::plugin_wasm("terraform").display()
    )
}

/// `vms_wait` of the inventory: how long the workflow waits for tasks, SSH,
/// commands, cloud-init and the reboot.
#[derive(Debug, Clone)]
pub struct Wait {
    pub task_ms: u32,
    pub ssh_ms: u32,
    pub command_ms: u32,
    pub cloudinit_attempts: u32,
    pub cloudinit_interval_ms: u32,
    /// `None` leaves the key out (the workflow's default).
    pub reboot_attempts: Option<u32>,
    pub reboot_interval_s: f64,
}

impl Wait {
    /// Short polls for a simulator at time scale 0: a 60 s task bound, 3 s
    /// SSH, 5 s commands, 200 × 50 ms for cloud-init, 20 × 0.05 s for the reboot.
    pub fn fast() -> Wait {
        Wait {
            task_ms: 60000,
            ssh_ms: 3000,
            command_ms: 5000,
            cloudinit_attempts: 200,
            cloudinit_interval_ms: 50,
            reboot_attempts: Some(20),
            reboot_interval_s: 0.05,
        }
    }

    /// [`Wait::fast`] for guests that must come back from a kill or a
    /// reboot on a loaded machine (the crash and maintenance labs): 60 s
    /// SSH, cloud-init polled every 0.5 s, 120 × 0.5 s for the reboot.
    pub fn lab() -> Wait {
        Wait {
            ssh_ms: 60000,
            cloudinit_interval_ms: 500,
            reboot_attempts: Some(120),
            reboot_interval_s: 0.5,
            ..Wait::fast()
        }
    }
}

/// An inventory of `count` VMs in group `lab` on the loopback /24 `net`
/// (see the module documentation for what is fixed).
#[derive(Debug, Clone)]
pub struct LabInventory {
    net: String,
    count: usize,
    prefix: &'static str,
    template: &'static str,
    target_node: &'static str,
    vmid_base: Option<u32>,
    extra_vars: Vec<String>,
    nameservers: Option<&'static str>,
    wait: Wait,
    host_vars: Vec<(String, String)>,
}

impl LabInventory {
    /// One VM `vm-0` on `<prefix>.<subnet>.0/24` (`prefix` e.g. `127.31`),
    /// template `debian-12-cloud` on node `pve2`, no VMID (probed),
    /// nameserver 127.0.0.53, [`Wait::fast`].
    pub fn new(prefix: &str, subnet: u8) -> LabInventory {
        LabInventory {
            net: format!("{prefix}.{subnet}"),
            count: 1,
            prefix: "vm",
            template: "debian-12-cloud",
            target_node: "pve2",
            vmid_base: None,
            extra_vars: Vec::new(),
            nameservers: Some("127.0.0.53"),
            wait: Wait::fast(),
            host_vars: Vec::new(),
        }
    }

    /// How many VMs (`<name prefix>-0` … ).
    pub fn count(mut self, count: usize) -> Self {
        self.count = count;
        self
    }

    /// The VMs' names are `<prefix>-<i>` (default `vm`).
    pub fn name_prefix(mut self, prefix: &'static str) -> Self {
        self.prefix = prefix;
        self
    }

    /// `global_os.debian12.template`.
    pub fn template(mut self, template: &'static str) -> Self {
        self.template = template;
        self
    }

    pub fn target_node(mut self, node: &'static str) -> Self {
        self.target_node = node;
        self
    }

    /// `vms_vmid_base` of the group (VMID = base + index); `None`: no VMID, probed.
    pub fn vmid_base(mut self, base: Option<u32>) -> Self {
        self.vmid_base = base;
        self
    }

    /// Another `key=value` line of `[lab:vars]`.
    pub fn var(mut self, line: &str) -> Self {
        self.extra_vars.push(line.to_string());
        self
    }

    /// `nameservers` of `nic0`; `None` leaves the key out.
    pub fn nameservers(mut self, nameservers: Option<&'static str>) -> Self {
        self.nameservers = nameservers;
        self
    }

    pub fn wait(mut self, wait: Wait) -> Self {
        self.wait = wait;
        self
    }

    /// `host_vars/<host>.yml` with this YAML (after `---`).
    pub fn host_vars(mut self, host: &str, yaml: &str) -> Self {
        self.host_vars.push((host.to_string(), yaml.to_string()));
        self
    }

    /// The name of VM `i`.
    pub fn name(&self, i: usize) -> String {
        format!("{}-{i}", self.prefix)
    }

    /// The address of VM `i`: `<net>.(10 + i)`.
    pub fn address(&self, i: usize) -> String {
        format!("{}.{}", self.net, 10 + i)
    }

    /// The text of `group_vars/all.yml`.
    pub fn group_vars(&self) -> String {
        let w = &self.wait;
        let mut all = format!(
            r#"---
global_os:
  debian12:
    template: {template}
    interface: ens18
    storage: local-lvm
    cores: 2
    memory: 2048
vms_os: debian12
vms_config:
  disk: 12
  startup_order: 10
  network:
    nic0:
      bridge: vmbr0
      vlan: 20
      ip: "{{{{ ansible_host }}}}/24"
      gateway: {net}.1
"#,
            template = self.template,
            net = self.net,
        );
        if let Some(ns) = self.nameservers {
            let _ = writeln!(all, "      nameservers: [{ns}]");
        }
        let _ = write!(
            all,
            "vms_wait:\n  task_ms: {}\n  ssh_ms: {}\n  command_ms: {}\n  cloudinit_attempts: {}\n  cloudinit_interval_ms: {}\n",
            w.task_ms, w.ssh_ms, w.command_ms, w.cloudinit_attempts, w.cloudinit_interval_ms
        );
        if let Some(attempts) = w.reboot_attempts {
            let _ = writeln!(all, "  reboot_attempts: {attempts}");
        }
        let _ = writeln!(all, "  reboot_interval_s: {}", w.reboot_interval_s);
        all
    }

    /// The text of `hosts.ini`.
    pub fn hosts_ini(&self) -> String {
        let mut ini = String::from("[lab]\n");
        for i in 0..self.count {
            let _ = writeln!(ini, "{} ansible_host={}", self.name(i), self.address(i));
        }
        ini.push_str("\n[lab:vars]\n");
        if let Some(base) = self.vmid_base {
            let _ = writeln!(ini, "vms_vmid_base={base}");
        }
        let _ = writeln!(ini, "target_node={}\nansible_user=cradle", self.target_node);
        for line in &self.extra_vars {
            let _ = writeln!(ini, "{line}");
        }
        ini
    }

    /// Write `dir/inventory/` (hosts.ini, group_vars/all.yml, host_vars/); its path.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let inv = dir.join("inventory");
        std::fs::create_dir_all(inv.join("group_vars")).expect("mkdir inventory/group_vars");
        std::fs::write(inv.join("group_vars/all.yml"), self.group_vars()).expect("write group_vars");
        if !self.host_vars.is_empty() {
            std::fs::create_dir_all(inv.join("host_vars")).expect("mkdir inventory/host_vars");
        }
        for (host, yaml) in &self.host_vars {
            std::fs::write(inv.join(format!("host_vars/{host}.yml")), format!("---\n{yaml}")).expect("write host_vars");
        }
        std::fs::write(inv.join("hosts.ini"), self.hosts_ini()).expect("write hosts.ini");
        inv
    }
}

/// A project opened on a cradle.toml whose cluster is an in-process
/// simulator, with the runtime the simulator lives on. Dropping it stops the
/// simulator (guests' sockets included).
pub struct SimSession {
    pub project: Arc<Project>,
    rt: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for SimSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimSession").finish_non_exhaustive()
    }
}

impl Drop for SimSession {
    fn drop(&mut self) {
        // The runtime owns the simulator's listeners (API, node and guest
        // sshd): shutting it down closes them before the project (and its
        // simulator) goes, so the next session can bind the same addresses.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(std::time::Duration::from_secs(5));
        }
    }
}

impl SimSession {
    /// Open the project of `config` (the simulator starts at its first run).
    pub fn open(config: &Path) -> SimSession {
        let project = Arc::new(Project::open(config, None).expect("open project"));
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        SimSession { project, rt: Some(rt) }
    }

    /// The runtime runs are made on.
    pub fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("runtime")
    }

    /// `action` in environment `test` for the hosts of `inventory` matching
    /// `limit` (all for `None`), at `forks`: what `cradle provision` /
    /// `cradle remove --yes` / `--check` do.
    pub fn run(&self, inventory: &Path, limit: Option<&str>, action: Action, forks: usize) -> Vec<HostResult> {
        let inv = Arc::new(Inventory::load(inventory).expect("inventory"));
        let hosts = inv.select(limit).expect("select");
        let opts = ResolveOptions { environment: "test".into(), ..ResolveOptions::default() };
        let plans = resolve_selected(&inv, &hosts, &opts).expect("resolve");
        let loaded = Arc::new(self.project.load().expect("load"));
        self.rt()
            .block_on(run_all(
                self.project.clone(),
                loaded,
                inv,
                plans,
                Some("test".into()),
                action,
                forks,
                Extra::default(),
            ))
            .expect("run_all")
    }

    /// Requests the simulator of cluster `sim` served so far; `None` when no
    /// run started it.
    pub fn counts(&self) -> Option<BTreeMap<String, u64>> {
        self.project.sims.get("sim").map(|s| s.request_counts())
    }

    /// The files in the snippet storage `local` of `node`; `None` when no run
    /// started the simulator.
    pub fn snippets_on(&self, node: &str) -> Option<Vec<String>> {
        let dir = self.project.sims.get("sim")?.snippet_dir(node, "local").expect("snippet dir");
        Some(match std::fs::read_dir(dir) {
            Ok(rd) => rd.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
            Err(_) => Vec::new(),
        })
    }
}

/// Copy the directory `from` into `to` (created), recursively.
pub fn copy_tree(from: &Path, to: &Path) {
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

/// A project directory holding the repository's `workflows/` and the worked
/// example `examples/<example>` (its type's workflow and its inventory), as an
/// operator would lay out a VM type (docs/VM-TYPES.md).
pub fn example_project(example: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = crate::workspace();
    copy_tree(&root.join("workflows"), &dir.path().join("workflows"));
    copy_tree(&root.join("examples").join(example), dir.path());
    dir
}

/// The in-process simulator's persisted VMs (templates included) by VMID,
/// from `<state>/sim/sim/state.json` (empty before its first save).
pub fn sim_vms(state: &Path) -> BTreeMap<u32, Value> {
    let Ok(text) = std::fs::read_to_string(state.join("sim/sim/state.json")) else { return BTreeMap::new() };
    let doc: Value = serde_json::from_str(&text).expect("state.json");
    doc["vms"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.parse().expect("vmid key"), v.clone())).collect())
        .unwrap_or_default()
}

/// The lock files left in `<state>/locks`.
pub fn held_locks(state: &Path) -> Vec<String> {
    match std::fs::read_dir(state.join("locks")) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".lock"))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The API writes (POST/PUT/DELETE) among request counts.
pub fn writes(counts: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    counts
        .iter()
        .filter(|(k, _)| k.starts_with("POST ") || k.starts_with("PUT ") || k.starts_with("DELETE "))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// `r` succeeded with result `expected`.
pub fn assert_ok(r: &HostResult, expected: &str) {
    assert!(r.ok(), "{} failed: {:?}", r.name, r.error);
    assert_eq!(r.result, expected, "{}: {r:?}", r.name);
}

/// The error of `r`, which must have failed.
pub fn error_of(r: &HostResult) -> String {
    assert!(!r.ok(), "{} should have failed: {r:?}", r.name);
    r.error.clone().unwrap_or_default()
}

/// A call to a simulated Proxmox VE API at `url` (token `token`, CA `ca_pem`
/// written into `dir`), as an operator would make it with `curl`; panics
/// unless it answers 200.
pub fn pve_api(url: &str, token: &str, ca_pem: &str, dir: &Path, method: &str, path: &str, form: &[&str]) {
    let ca = dir.join("pve-api-ca.pem");
    std::fs::write(&ca, ca_pem).expect("ca");
    let mut curl = std::process::Command::new("curl");
    curl.args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", method, "--cacert"])
        .arg(&ca)
        .arg("-H")
        .arg(format!("Authorization: PVEAPIToken={token}"));
    for f in form {
        curl.args(["--data-urlencode", f]);
    }
    let out = curl.arg(format!("{url}{path}")).output().expect("curl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "200",
        "{method} {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
