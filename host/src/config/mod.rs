//! `cradle.toml`: state dir, default environment, clusters, environments,
//! plugins with their grants and limits, named HTTP endpoints, DNS providers
//! (`[dns.NAME]`), `[ssh]` and workflow settings.
//!
//! Contract: [`Config::load`] either returns a fully validated configuration or a
//! [`ConfigError`] whose message names the file, the field and what to change
//! (the error types are in `error.rs`).
//! Unknown keys are errors (a typo in a grant must not silently widen or narrow
//! it). Secrets are never inline: they are [`SecretRef`]s resolved later, by the
//! capability that needs them. Relative paths are resolved against the directory
//! that holds `cradle.toml`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::builtin::BuiltinPlugin;
use crate::caps::Grants;
pub use crate::caps::dns::DnsProviderConfig;
pub use crate::caps::http::{EndpointAuth, EndpointConfig};
pub use crate::caps::lock::{CoordinationBackend, CoordinationConfig};
pub use crate::caps::terraform::{Flavour, TerraformConfig};
use crate::plugin::limits::LimitsConfig;
use crate::secrets::SecretRef;

mod error;
mod serve;

pub use error::{ClusterProblem, ConfigError, ConfigProblem, EnvironmentError};
pub use serve::{ServeConfig, SourceConfig, SourceKind};

/// The file name cradle looks for in the project directory.
pub const CONFIG_FILE: &str = "cradle.toml";

/// A validated `cradle.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where cradle keeps journals, locks, checkpoints and the component cache.
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// The environment used when `--env` is not given.
    #[serde(default)]
    pub default_environment: Option<String>,
    /// Workflow settings.
    #[serde(default)]
    pub workflow: WorkflowConfig,
    /// Proxmox clusters by name.
    #[serde(default)]
    pub clusters: BTreeMap<String, ClusterConfig>,
    /// Environments by name: which cluster and which backend.
    #[serde(default)]
    pub environments: BTreeMap<String, EnvironmentConfig>,
    /// Backend plugins by name.
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginConfig>,
    /// Named HTTP endpoints the `http` capability may reach.
    #[serde(default)]
    pub endpoints: BTreeMap<String, EndpointConfig>,
    /// DNS providers by name (`[dns.NAME]`), chosen per environment with `dns = "NAME"`.
    #[serde(default)]
    pub dns: BTreeMap<String, DnsProviderConfig>,
    /// SSH login settings.
    #[serde(default)]
    pub ssh: SshConfig,
    /// How `ssh::playbook` runs Ansible (`[ansible]`).
    #[serde(default)]
    pub ansible: AnsibleConfig,
    /// The terraform binary and provider (`[terraform]`).
    #[serde(default)]
    pub terraform: TerraformConfig,
    /// Where workflow locks live (`[coordination]`: this node's state dir, or etcd).
    #[serde(default)]
    pub coordination: CoordinationConfig,
    /// `cradle serve`: listener, bounds and webhook sources (`[serve]`).
    #[serde(default)]
    pub serve: ServeConfig,
    /// The directory that held `cradle.toml` (set by [`Config::load`]).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

/// `[workflow]`: where scripts live, their grants and limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowConfig {
    /// The workflow directory. Unset: `workflows/` next to cradle.toml if it
    /// exists, else the workflows built into cradle. Set: that directory, which
    /// must exist.
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Operations a single script call may perform before it is stopped.
    #[serde(default = "default_max_operations")]
    pub max_operations: u64,
    /// Maximum nesting of function calls.
    #[serde(default = "default_max_call_depth")]
    pub max_call_depth: usize,
    /// Maximum size of one string, in bytes.
    #[serde(default = "default_max_string_size")]
    pub max_string_size: usize,
    /// Maximum number of elements of one array or map.
    #[serde(default = "default_max_array_size")]
    pub max_array_size: usize,
    /// What the workflow scripts themselves may do through host modules.
    #[serde(default)]
    pub grants: Grants,
}

/// The workflow directory looked for when `[workflow] dir` is not set.
pub const DEFAULT_WORKFLOW_DIR: &str = "workflows";

fn default_max_operations() -> u64 {
    50_000_000
}
fn default_max_call_depth() -> usize {
    64
}
fn default_max_string_size() -> usize {
    1 << 20
}
fn default_max_array_size() -> usize {
    100_000
}

impl Default for WorkflowConfig {
    fn default() -> Self {
        WorkflowConfig {
            dir: None,
            max_operations: default_max_operations(),
            max_call_depth: default_max_call_depth(),
            max_string_size: default_max_string_size(),
            max_array_size: default_max_array_size(),
            grants: Grants::default(),
        }
    }
}

/// `[clusters.NAME]`: how to reach one Proxmox VE cluster.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// `proxmox` (a real cluster) or `sim` (the built-in simulator).
    #[serde(default)]
    pub kind: ClusterKind,
    /// The API base URL, e.g. `https://pve1.lab:8006` (required for `proxmox`).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// The API token `USER@REALM!TOKENID=SECRET`, by reference.
    #[serde(default)]
    pub token: Option<SecretRef>,
    /// The SHA-256 fingerprint of the node's certificate (`AA:BB:...`).
    #[serde(default)]
    pub fingerprint: Option<String>,
    /// A CA certificate file (PEM) to verify the node's certificate with.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Skip TLS verification entirely (logged as a warning on every run).
    #[serde(default)]
    pub insecure_skip_verify: bool,
    /// How to reach each node over SSH for snippet uploads: `pve1 = "root@10.0.0.11"`.
    #[serde(default)]
    pub node_ssh: BTreeMap<String, String>,
    /// Each node's SSH host key (`ssh-ed25519 AAAA…`, from
    /// `/etc/ssh/ssh_host_ed25519_key.pub`), pinned before the first connection.
    #[serde(default)]
    pub node_host_keys: BTreeMap<String, String>,
    /// How fast this cluster's tasks run against PVE's usual durations, which
    /// task polls are fitted to (1 = usual; 0.5 = twice as fast). Only for
    /// `proxmox`; a `sim` cluster uses its `sim.time_scale`.
    #[serde(default = "default_task_time_scale")]
    pub task_time_scale: f64,
    /// Settings of a `sim` cluster.
    #[serde(default)]
    pub sim: SimSettings,
}

fn default_task_time_scale() -> f64 {
    1.0
}

/// `[clusters.NAME.sim]`: the built-in simulated cluster.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimSettings {
    /// Node names (default pve1, pve2, pve3).
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Multiplier for every simulated duration: 0 = instant, 1 = realistic.
    #[serde(default = "default_time_scale")]
    pub time_scale: f64,
    /// Seed for injected faults.
    #[serde(default)]
    pub seed: u64,
    /// Faults to inject (see docs/SIMULATOR.md).
    #[serde(default)]
    pub faults: Option<String>,
    /// The port guests' SSH servers listen on (22 as on real guests; 0 = any).
    #[serde(default = "default_guest_ssh_port")]
    pub guest_ssh_port: u16,
    /// The templates seeded into a new cluster (default: 9000
    /// `debian-12-cloud` on the first node).
    #[serde(default)]
    pub templates: Vec<SimTemplate>,
    /// `[clusters.NAME.sim.qemu]`: started VMs are real qemu guests.
    #[serde(default)]
    pub qemu: Option<SimQemu>,
    /// Size in bytes of each node's root filesystem (`/var/tmp`, the `dir`
    /// storages' paths); default 100 GiB.
    #[serde(default)]
    pub node_root_bytes: Option<u64>,
    /// Size in bytes of each node's `/tmp` (a tmpfs); default 1 GiB.
    #[serde(default)]
    pub node_tmp_bytes: Option<u64>,
    /// The Proxmox VE version the cluster reports (`GET /version`) and
    /// behaves as where versions differ (disk-image uploads need 8.4);
    /// default 9.0.3.
    #[serde(default)]
    pub pve_version: Option<String>,
    /// `[clusters.NAME.sim.appliance]`: what appliances booted from an image
    /// have on the network (docs/SIMULATOR.md); default nothing.
    #[serde(default)]
    pub appliance: Option<SimAppliance>,
    /// Whose API token cradle gets: `root` (default, root@pam's: everything
    /// allowed) or `cradle` (`cradle@pve!cradle`, privilege-separated, holding
    /// exactly the role docs/CONFIG.md documents, checked as PVE checks it).
    #[serde(default)]
    pub privileges: SimPrivileges,
    /// With `privileges = "cradle"`: privileges taken out of the role (to see
    /// what fails without one).
    #[serde(default)]
    pub privileges_without: Vec<String>,
}

/// `privileges` of `[clusters.NAME.sim]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SimPrivileges {
    /// root@pam's token: every check passes.
    Root,
    /// The documented least-privilege role (`crate::caps::proxmox::role`): the
    /// default, so a workflow that needs more than the role documents fails on the
    /// built-in cluster as it would on a real PVE with that token.
    #[default]
    Cradle,
}

/// `[clusters.NAME.sim.appliance]`: the address each appliance (a VM booted
/// from its image without cloud-init) gets, as a DHCP reservation would give
/// it, and the port its web UI answers HTTP on.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimAppliance {
    /// VM name → address inside the guest subnet (`127.x.y.z`).
    #[serde(default)]
    pub addresses: BTreeMap<String, std::net::Ipv4Addr>,
    /// The web UI's port (Home Assistant: 8123); none = no web UI.
    #[serde(default)]
    pub http_port: Option<u16>,
}

impl SimSettings {
    /// Apply the node disk sizes, the version, the appliances' network and the
    /// API token's privileges to `config`.
    pub fn apply_node_settings(&self, config: &mut cradle_sim::SimConfig) {
        if let Some(a) = &self.appliance {
            config.appliance = cradle_sim::ApplianceSpec { addresses: a.addresses.clone(), http_port: a.http_port };
        }
        if let Some(b) = self.node_root_bytes {
            config.node_disk.root_bytes = b;
        }
        if let Some(b) = self.node_tmp_bytes {
            config.node_disk.tmp_bytes = b;
        }
        if let Some(v) = &self.pve_version {
            config.pve_version = v.clone();
        }
        if self.privileges == SimPrivileges::Cradle {
            let without: Vec<&str> = self.privileges_without.iter().map(String::as_str).collect();
            config.access = crate::caps::proxmox::role::sim_access(&without);
        }
    }
}

/// `[clusters.NAME.sim.qemu]`: guest mode `qemu` (docs/SIMULATOR.md): a started VM
/// boots the Debian 12 image `scripts/guest-image` builds, with real cloud-init and
/// OpenSSH, reached at `127.B.C.D:guest_ssh_port` for a guest address `A.B.C.D`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimQemu {
    /// The image directory (`vmlinuz`, `initrd.img`, `rootfs.qcow2`); relative to
    /// cradle.toml. Default: where `scripts/guest-image` puts it,
    /// `~/.cache/cradle/guest-image/current`.
    #[serde(default)]
    pub image: Option<PathBuf>,
    /// `tcg` (default: software emulation, works everywhere), `kvm`, or `auto` (KVM
    /// when `/dev/kvm` opens read-write).
    #[serde(default = "default_qemu_accel")]
    pub accel: String,
    /// Only these VMIDs boot qemu; the others stay simulated guests. Empty = all.
    #[serde(default)]
    pub vmids: Vec<u32>,
    /// Seconds a graceful shutdown (shutdown task, API reboot) may take.
    #[serde(default = "default_qemu_shutdown_timeout")]
    pub shutdown_timeout_s: u64,
}

fn default_qemu_accel() -> String {
    "tcg".into()
}
fn default_qemu_shutdown_timeout() -> u64 {
    180
}

impl SimQemu {
    /// The simulator's settings; the image path is already absolute (see
    /// `Config::parse`).
    pub fn settings(&self) -> Result<cradle_sim::QemuSettings, cradle_sim::SimError> {
        let image = match &self.image {
            Some(p) => p.clone(),
            None => default_guest_image(),
        };
        let mut q = cradle_sim::QemuSettings::new(image);
        q.accel = cradle_sim::Accel::parse(&self.accel)?;
        q.vmids = (!self.vmids.is_empty()).then(|| self.vmids.iter().copied().collect());
        q.shutdown_timeout = std::time::Duration::from_secs(self.shutdown_timeout_s);
        Ok(q)
    }
}

/// Where `scripts/guest-image` puts the image by default.
pub fn default_guest_image() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".cache/cradle/guest-image/current")
}

/// `[[clusters.NAME.sim.templates]]`: a template of a new simulated cluster.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimTemplate {
    /// Its VMID.
    pub vmid: u32,
    /// Its name.
    pub name: String,
    /// The node it lives on.
    pub node: String,
}

fn default_time_scale() -> f64 {
    0.05
}
fn default_guest_ssh_port() -> u16 {
    22
}

impl Default for SimSettings {
    fn default() -> Self {
        SimSettings {
            nodes: Vec::new(),
            time_scale: default_time_scale(),
            seed: 0,
            faults: None,
            guest_ssh_port: 22,
            templates: Vec::new(),
            qemu: None,
            node_root_bytes: None,
            node_tmp_bytes: None,
            pve_version: None,
            appliance: None,
            privileges: SimPrivileges::Cradle,
            privileges_without: Vec::new(),
        }
    }
}

/// `[ssh]`: how cradle logs in to nodes and guests.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshConfig {
    /// The private key cradle uses (must be 0600); a `sim` cluster supplies its own.
    #[serde(default)]
    pub identity: Option<PathBuf>,
    /// Public keys authorized for the guests' management user.
    #[serde(default)]
    pub authorized_keys: Vec<String>,
    /// Share one connection per target within a run (OpenSSH `ControlMaster`,
    /// sockets in `<state_dir>/mux`); `false` opens one connection per command.
    #[serde(default = "default_multiplex")]
    pub multiplex: bool,
    /// Which SSH client speaks to nodes and guests.
    #[serde(default)]
    pub client: SshClientChoice,
}

/// `[ssh] client`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SshClientChoice {
    /// The built-in client wherever it can serve the login, else OpenSSH,
    /// saying once why (`caps::ssh::choice`). The default.
    #[default]
    Auto,
    /// The operator's OpenSSH `ssh`.
    OpenSsh,
    /// cradle's in-process client: no process per connection (for many guests).
    Builtin,
}

fn default_multiplex() -> bool {
    true
}

impl Default for SshConfig {
    fn default() -> Self {
        SshConfig {
            identity: None,
            authorized_keys: Vec::new(),
            multiplex: default_multiplex(),
            client: SshClientChoice::default(),
        }
    }
}

/// `[ansible]`: the `ansible-playbook` that `ssh::playbook` runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnsibleConfig {
    /// A bare name is looked up on `PATH`; a relative path is relative to
    /// cradle.toml's directory.
    #[serde(default = "default_ansible_playbook")]
    pub command: PathBuf,
}

fn default_ansible_playbook() -> PathBuf {
    PathBuf::from("ansible-playbook")
}

impl Default for AnsibleConfig {
    fn default() -> Self {
        AnsibleConfig { command: default_ansible_playbook() }
    }
}

impl AnsibleConfig {
    /// The command to run, with a relative path made absolute against `base_dir`.
    pub fn resolved(&self, base_dir: &std::path::Path) -> PathBuf {
        if self.command.components().count() > 1 && self.command.is_relative() {
            base_dir.join(&self.command)
        } else {
            self.command.clone()
        }
    }
}

/// What kind of cluster a `[clusters.NAME]` is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClusterKind {
    /// A real Proxmox VE cluster.
    #[default]
    Proxmox,
    /// The simulated cluster built into cradle.
    Sim,
}

/// `[environments.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentConfig {
    /// The cluster name (a key of `[clusters]`).
    pub cluster: String,
    /// The backend plugin name (a key of `[plugins]`).
    pub backend: String,
    /// The DNS provider the `dns` capability uses (a key of `[dns]`); none means DNS calls fail.
    #[serde(default)]
    pub dns: Option<String>,
}

/// `[plugins.NAME]`: one backend plugin, its grants and limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(from = "RawPluginConfig")]
pub struct PluginConfig {
    /// The component file (`.wasm`); `None` means the component built into
    /// cradle under the same name (only for a built-in's name).
    pub path: Option<PathBuf>,
    /// What the operator grants this plugin. Nothing granted means nothing allowed.
    pub grants: Grants,
    /// Resource limits for each instance.
    pub limits: LimitsConfig,
    /// `true` when cradle.toml has no `[plugins.NAME]` for this built-in and an
    /// environment names it: the built-in's own grants and limits apply.
    pub implicit: bool,
}

/// Where a plugin's grants come from, for `cradle plugins list`/`inspect`.
pub fn grants_source(pc: &PluginConfig) -> &'static str {
    match (pc.implicit, pc.grants.proxmox.as_ref().is_some_and(|g| g.destructive)) {
        (false, _) => "cradle.toml",
        (true, false) => "default (built-in)",
        (true, true) => "default (built-in, destructive on the simulated cluster)",
    }
}

impl PluginConfig {
    /// A component that no `[plugins]` entry names (`cradle plugins inspect
    /// FILE`): nothing granted, default limits.
    pub fn unconfigured() -> PluginConfig {
        PluginConfig { path: None, grants: Grants::default(), limits: LimitsConfig::default(), implicit: false }
    }

    /// The built-in plugin `p` with its default grants and limits, parsed from
    /// [`BuiltinPlugin::config`] like any `[plugins.NAME]` table.
    pub fn builtin(p: &BuiltinPlugin) -> PluginConfig {
        let mut config = match toml::from_str::<PluginConfig>(p.config) {
            Ok(config) => PluginConfig { implicit: true, ..config },
            Err(e) => {
                // Unit-tested never to happen; fail closed: nothing granted.
                tracing::error!(plugin = p.name, error = %e, "the built-in plugin's default grants do not parse");
                PluginConfig { path: None, grants: Grants::default(), limits: LimitsConfig::default(), implicit: true }
            }
        };
        config.grants.builtin_defaults = true;
        config
    }

    /// [`PluginConfig::builtin`] for environments that all run on the built-in
    /// simulated cluster: destructive calls are granted where the built-in
    /// says so ([`BuiltinPlugin::destructive_on_sim`]).
    pub fn builtin_on_sim(p: &BuiltinPlugin) -> PluginConfig {
        let mut config = PluginConfig::builtin(p);
        if p.destructive_on_sim {
            if let Some(pve) = config.grants.proxmox.as_mut() {
                pve.destructive = true;
            }
            if let Some(tf) = config.grants.terraform.as_mut() {
                tf.destructive = true;
            }
        }
        config
    }

    /// Whether the component is the one built into cradle.
    pub fn is_builtin(&self) -> bool {
        self.path.is_none()
    }
}

/// `[plugins.NAME]` as written. The limits are spelled out here instead of
/// `#[serde(flatten)]`ed: flatten loses toml's spans and the list of expected
/// keys, so a bad value or a typo was reported at the table header without
/// naming the field.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPluginConfig {
    #[serde(default)]
    path: Option<PathBuf>,
    #[serde(default)]
    grants: Grants,
    #[serde(default)]
    memory_limit_mib: Option<u64>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    call_timeout_ms: Option<u64>,
    #[serde(default)]
    max_host_calls: Option<u64>,
    #[serde(default)]
    max_journal_bytes: Option<u64>,
}

impl From<RawPluginConfig> for PluginConfig {
    fn from(raw: RawPluginConfig) -> Self {
        PluginConfig {
            path: raw.path,
            grants: raw.grants,
            limits: LimitsConfig {
                memory_limit_mib: raw.memory_limit_mib,
                timeout_ms: raw.timeout_ms,
                call_timeout_ms: raw.call_timeout_ms,
                max_host_calls: raw.max_host_calls,
                max_journal_bytes: raw.max_journal_bytes,
            },
            implicit: false,
        }
    }
}

impl Config {
    /// Read and validate `path`.
    ///
    /// The one loader of every command: `path` is made absolute first, so the
    /// bare default `cradle.toml` (whose parent is the empty path) resolves
    /// its relative paths against the current directory exactly as
    /// `./cradle.toml` or `--config /abs/cradle.toml` would, and state,
    /// workflow and module-root paths come out absolute (the SSH control
    /// directory and `terraform.module_root` must be).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let path = &std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        let base = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let base = std::path::absolute(&base).unwrap_or(base);
        Config::parse(&text, path, &base)
    }

    /// The state directory this configuration asks for: `--state-dir` (or
    /// `CRADLE_STATE_DIR`) when given, else `state_dir` resolved against this
    /// file's directory; `None` means the default (see `StateDir::resolve`).
    pub fn state_dir_override(&self, cli: Option<&Path>) -> Option<PathBuf> {
        cli.map(Path::to_path_buf).or_else(|| self.state_dir.as_ref().map(|p| self.resolve(p)))
    }

    /// Parse `text` as if read from `path`, resolving relative paths against `base`.
    pub fn parse(text: &str, path: &Path, base: &Path) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            // toml quotes the offending line; an inline secret must not be echoed.
            message: hide_quoted_secrets(&crate::secrets::redact(e.to_string().trim_end())),
        })?;
        config.base_dir = base.to_path_buf();
        config.add_implied_builtins();
        config.resolve_module_roots();
        config.resolve_guest_images();
        config.resolve_relative_paths();
        config.resolve_terraform_paths();
        config
            .validate()
            .map_err(|problem| ConfigError::Invalid { path: path.to_path_buf(), problem: Box::new(problem) })?;
        Ok(config)
    }

    /// Resolve a path from the config against the config's directory.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() { p.to_path_buf() } else { self.base_dir.join(p) }
    }

    /// The environment named `name`, or the default one.
    pub fn environment(&self, name: Option<&str>) -> Result<(&str, &EnvironmentConfig), EnvironmentError> {
        let name = match name.or(self.default_environment.as_deref()) {
            Some(n) => n,
            None if self.environments.len() == 1 => {
                self.environments.keys().next().map(String::as_str).unwrap_or_default()
            }
            None => return Err(EnvironmentError::NotChosen { known: join_keys(&self.environments) }),
        };
        self.environments
            .get_key_value(name)
            .map(|(k, v)| (k.as_str(), v))
            .ok_or_else(|| EnvironmentError::Unknown { name: name.to_string(), known: join_keys(&self.environments) })
    }

    /// The workflow directory: `[workflow] dir`, or `workflows/` next to cradle.toml.
    pub fn workflow_dir(&self) -> PathBuf {
        self.resolve(self.workflow.dir.as_deref().unwrap_or(Path::new(DEFAULT_WORKFLOW_DIR)))
    }

    /// `[serve.sources.NAME] defaults`, `[endpoints.NAME] ca_file` and every
    /// secret `{ file = .. }` are relative to cradle.toml.
    fn resolve_relative_paths(&mut self) {
        let base = self.base_dir.clone();
        let secrets = self
            .clusters
            .values_mut()
            .filter_map(|c| c.token.as_mut())
            .chain(self.endpoints.values_mut().filter_map(|e| e.token.as_mut()))
            .chain(self.serve.sources.values_mut().map(|s| &mut s.secret))
            .chain(self.dns.values_mut().map(|d| &mut d.secret))
            .chain(self.coordination.password.as_mut())
            .chain(self.coordination.records_key.as_mut())
            .chain(self.serve.status.as_mut().and_then(|s| s.token.as_mut()));
        for secret in secrets {
            secret.anchor(&base);
        }
        for ep in self.endpoints.values_mut() {
            if let Some(ca) = ep.ca_file.as_mut()
                && ca.is_relative()
            {
                *ca = base.join(&*ca);
            }
        }
        for source in self.serve.sources.values_mut() {
            if let Some(d) = source.defaults.as_mut()
                && d.is_relative()
            {
                *d = base.join(&*d);
            }
        }
    }

    /// `[terraform] cli_config` and `plugin_cache_dir` are relative to
    /// cradle.toml (terraform itself runs in a host's module directory, where a
    /// relative `TF_CLI_CONFIG_FILE` would name another file); `binary` too
    /// unless it is a bare name, which is looked up on `PATH`.
    fn resolve_terraform_paths(&mut self) {
        let base = self.base_dir.clone();
        let tf = &mut self.terraform;
        let bare = |p: &Path| p.components().count() == 1 && !p.is_absolute();
        let binary = tf.binary.as_mut().filter(|p| !bare(p));
        for path in [binary, tf.cli_config.as_mut(), tf.plugin_cache_dir.as_mut()].into_iter().flatten() {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        }
    }

    fn resolve_guest_images(&mut self) {
        let base = self.base_dir.clone();
        for c in self.clusters.values_mut() {
            if let Some(image) = c.sim.qemu.as_mut().and_then(|q| q.image.as_mut())
                && image.is_relative()
            {
                *image = base.join(&*image);
            }
        }
    }

    /// `[plugins.NAME.grants.terraform] module_root` is relative to cradle.toml
    /// (the built-in `terraform` plugin's default is `terraform/` beside it),
    /// like every other path the file gives.
    fn resolve_module_roots(&mut self) {
        let base = self.base_dir.clone();
        let grants = self.plugins.values_mut().map(|p| &mut p.grants).chain(std::iter::once(&mut self.workflow.grants));
        for g in grants {
            if let Some(tf) = g.terraform.as_mut()
                && tf.module_root.is_relative()
            {
                tf.module_root = base.join(&tf.module_root);
            }
        }
    }

    /// An environment naming a built-in plugin that `[plugins]` does not
    /// configure gets the built-in, with the built-in's grants and limits.
    /// Grants belong to the plugin, not the environment, so the simulated
    /// cluster's destructive default applies only when every environment
    /// naming the plugin runs on a `kind = "sim"` cluster; one environment on
    /// a real cluster (or an unknown one) keeps it opt-in for all.
    fn add_implied_builtins(&mut self) {
        for env in self.environments.values() {
            if self.plugins.contains_key(&env.backend) {
                continue;
            }
            let Some(builtin) = crate::builtin::plugin(&env.backend) else { continue };
            let all_sim = self
                .environments
                .values()
                .filter(|e| e.backend == env.backend)
                .all(|e| self.clusters.get(&e.cluster).is_some_and(|c| c.kind == ClusterKind::Sim));
            let config = if all_sim { PluginConfig::builtin_on_sim(builtin) } else { PluginConfig::builtin(builtin) };
            self.plugins.insert(env.backend.clone(), config);
        }
    }

    fn validate(&self) -> Result<(), ConfigProblem> {
        if let Some(env) = &self.default_environment
            && !self.environments.contains_key(env)
        {
            return Err(ConfigProblem::DefaultEnvironment { env: env.clone(), known: join_keys(&self.environments) });
        }
        for (name, env) in &self.environments {
            if !self.clusters.contains_key(&env.cluster) {
                return Err(ConfigProblem::Cluster {
                    env: name.clone(),
                    cluster: env.cluster.clone(),
                    known: join_keys(&self.clusters),
                });
            }
            if !self.plugins.contains_key(&env.backend) {
                return Err(ConfigProblem::Backend {
                    env: name.clone(),
                    backend: env.backend.clone(),
                    known: join_keys(&self.plugins),
                    builtin: crate::builtin::plugin_names(),
                });
            }
            if let Some(dns) = &env.dns
                && !self.dns.contains_key(dns)
            {
                return Err(ConfigProblem::Dns { env: name.clone(), dns: dns.clone(), known: join_keys(&self.dns) });
            }
        }
        self.terraform.validate().map_err(ConfigProblem::Terraform)?;
        self.coordination.validate().map_err(ConfigProblem::Coordination)?;
        let envs: Vec<&str> = self.environments.keys().map(String::as_str).collect();
        self.serve.validate(&envs).map_err(ConfigProblem::Serve)?;
        for (name, dns) in &self.dns {
            dns.validate().map_err(|problem| ConfigProblem::DnsProvider { name: name.clone(), problem })?;
        }
        for (name, cluster) in &self.clusters {
            cluster.validate().map_err(|problem| ConfigProblem::ClusterValue { name: name.clone(), problem })?;
        }
        for (name, plugin) in &self.plugins {
            if plugin.path.is_none() && crate::builtin::plugin(name).is_none() {
                return Err(ConfigProblem::PluginPath { name: name.clone(), builtin: crate::builtin::plugin_names() });
            }
            plugin.grants.validate().map_err(|problem| ConfigProblem::PluginGrants { name: name.clone(), problem })?;
            plugin.limits.validate().map_err(|problem| ConfigProblem::PluginLimits { name: name.clone(), problem })?;
            if let Some(http) = &plugin.grants.http {
                for alias in &http.endpoints {
                    if !self.endpoints.contains_key(alias) {
                        return Err(ConfigProblem::HttpEndpoint {
                            name: name.clone(),
                            alias: alias.clone(),
                            known: join_keys(&self.endpoints),
                        });
                    }
                }
            }
        }
        self.workflow.grants.validate().map_err(|problem| ConfigProblem::WorkflowGrants { problem })?;
        if self.workflow.max_operations == 0 {
            return Err(ConfigProblem::MaxOperations);
        }
        for (name, ep) in &self.endpoints {
            if !(ep.url.starts_with("https://") || ep.url.starts_with("http://")) {
                return Err(ConfigProblem::EndpointUrl { name: name.clone(), url: ep.url.clone() });
            }
            let login = ep.auth == EndpointAuth::UnifiLogin;
            if login && (ep.username.is_none() || ep.token.is_none()) {
                return Err(ConfigProblem::EndpointLogin {
                    name: name.clone(),
                    problem: "auth = \"unifi-login\" needs username and token (the password, as a secret reference)",
                });
            }
            if !login && ep.username.is_some() {
                return Err(ConfigProblem::EndpointLogin {
                    name: name.clone(),
                    problem: "username is only used with auth = \"unifi-login\"",
                });
            }
        }
        Ok(())
    }
}

impl ClusterConfig {
    fn validate(&self) -> Result<(), ClusterProblem> {
        if !(self.sim.time_scale >= 0.0 && self.sim.time_scale.is_finite()) {
            return Err(ClusterProblem::TimeScale(self.sim.time_scale));
        }
        if !(self.task_time_scale >= 0.0 && self.task_time_scale.is_finite()) {
            return Err(ClusterProblem::TaskTimeScale(self.task_time_scale));
        }
        if !self.sim.privileges_without.is_empty() && self.sim.privileges != SimPrivileges::Cradle {
            return Err(ClusterProblem::PrivilegesWithout("only applies with privileges = \"cradle\"".into()));
        }
        let role = crate::caps::proxmox::role::ROLE;
        if let Some(p) = self.sim.privileges_without.iter().find(|p| !role.iter().any(|r| r.name == p.as_str())) {
            return Err(ClusterProblem::PrivilegesWithout(format!(
                "'{p}' is not a privilege of cradle's role ({})",
                crate::caps::proxmox::role::privs_list()
            )));
        }
        for (node, target) in &self.node_ssh {
            crate::caps::ssh::NodeSsh::parse(target)
                .map_err(|problem| ClusterProblem::NodeSsh { node: node.clone(), problem })?;
        }
        if self.kind == ClusterKind::Proxmox {
            let Some(endpoint) = &self.endpoint else {
                return Err(ClusterProblem::NoEndpoint);
            };
            if !endpoint.starts_with("https://") {
                return Err(ClusterProblem::EndpointNotHttps(endpoint.clone()));
            }
            if self.token.is_none() {
                return Err(ClusterProblem::NoToken);
            }
            let verifiers = [self.fingerprint.is_some(), self.ca_file.is_some(), self.insecure_skip_verify];
            match verifiers.iter().filter(|v| **v).count() {
                0 => return Err(ClusterProblem::NoVerifier),
                1 => {}
                _ => return Err(ClusterProblem::SeveralVerifiers),
            }
        }
        Ok(())
    }
}

/// toml's parse errors quote the offending source line (`8 | token = "…`).
/// When that line sets a credential, its value is not shown: a value toml
/// could not even parse (an unterminated string) never reaches the secret
/// deserializer that would otherwise refuse it without echoing it.
fn hide_quoted_secrets(message: &str) -> String {
    const SECRET_WORDS: [&str; 4] = ["token", "password", "passwd", "secret"];
    message
        .lines()
        .map(|line| {
            if let Some((gutter, src)) = line.split_once(" | ")
                && !gutter.trim().is_empty()
                && gutter.trim().chars().all(|c| c.is_ascii_digit())
                && let Some((key, _)) = src.split_once('=')
                && SECRET_WORDS.iter().any(|w| src.to_ascii_lowercase().contains(w))
            {
                format!("{gutter} | {key}= [value not shown]")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn join_keys<V>(map: &BTreeMap<String, V>) -> String {
    if map.is_empty() { "none".to_string() } else { map.keys().cloned().collect::<Vec<_>>().join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("cradle.toml"), Path::new("/proj"))
    }

    const GOOD: &str = r#"
default_environment = "test"
[clusters.lab]
kind = "sim"
[environments.test]
cluster = "lab"
backend = "sample"
[plugins.sample]
path = "plugins/sample.wasm"
memory_limit_mib = 32
[plugins.sample.grants.lock]
prefixes = ["*"]
[plugins.sample.grants.proxmox]
nodes = ["pve1"]
vmids = "100-199"
"#;

    #[test]
    fn secret_files_are_relative_to_cradle_toml_not_to_the_working_directory() {
        let text = format!(
            "{GOOD}[endpoints.sem]\nurl = \"http://127.0.0.1:3000\"\ntoken = {{ file = \"sem.token\" }}\n\
             [endpoints.abs]\nurl = \"http://127.0.0.1:3001\"\ntoken = {{ file = \"/etc/cradle/abs.token\" }}\n"
        );
        let c = parse(&text).expect("valid");
        let token = |name: &str| match &c.endpoints[name].token {
            Some(SecretRef::File(p)) => p.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(token("sem"), PathBuf::from("/proj/sem.token"));
        assert_eq!(token("abs"), PathBuf::from("/etc/cradle/abs.token"));
    }

    #[test]
    fn terraform_paths_are_relative_to_cradle_toml_and_a_bare_binary_stays_on_path() {
        let base = format!(
            "{GOOD}[terraform]\ncli_config = \"terraform.rc\"\nplugin_cache_dir = \"cache\"\nbinary = \"terraform\"\n"
        );
        let c = parse(&base).expect("valid");
        assert_eq!(c.terraform.cli_config, Some(PathBuf::from("/proj/terraform.rc")));
        assert_eq!(c.terraform.plugin_cache_dir, Some(PathBuf::from("/proj/cache")));
        assert_eq!(c.terraform.binary, Some(PathBuf::from("terraform")));
        let nested = base.replace("binary = \"terraform\"", "binary = \"bin/terraform\"");
        assert_eq!(parse(&nested).expect("valid").terraform.binary, Some(PathBuf::from("/proj/bin/terraform")));
    }

    #[test]
    fn a_valid_config_loads_with_paths_relative_to_its_directory() {
        let c = parse(GOOD).expect("valid");
        let p = &c.plugins["sample"];
        assert_eq!(c.resolve(p.path.as_deref().expect("path")), PathBuf::from("/proj/plugins/sample.wasm"));
        assert_eq!(c.workflow_dir(), PathBuf::from("/proj/workflows"));
        assert_eq!(p.limits.memory_limit_mib, Some(32));
        assert_eq!(c.environment(None).expect("env").0, "test");
    }

    #[test]
    fn ssh_connection_sharing_is_on_unless_turned_off() {
        assert!(parse(GOOD).expect("valid").ssh.multiplex, "on by default");
        assert!(SshConfig::default().multiplex);
        let off = format!("{GOOD}[ssh]\nmultiplex = false\n");
        assert!(!parse(&off).expect("valid").ssh.multiplex);
        assert_eq!(parse(GOOD).expect("valid").ssh.client, SshClientChoice::Auto, "built-in where it serves");
        for (name, choice) in [
            ("auto", SshClientChoice::Auto),
            ("openssh", SshClientChoice::OpenSsh),
            ("builtin", SshClientChoice::Builtin),
        ] {
            let text = format!("{GOOD}[ssh]\nclient = \"{name}\"\n");
            assert_eq!(parse(&text).expect("valid").ssh.client, choice, "{name}");
        }
        let bad = format!("{GOOD}[ssh]\nclient = \"putty\"\n");
        let e = parse(&bad).expect_err("an unknown client").to_string();
        assert!(e.contains("auto") && e.contains("openssh") && e.contains("builtin"), "{e}");
    }

    #[test]
    fn task_time_scale_defaults_to_pve_durations_and_a_bad_one_is_named() {
        assert_eq!(parse(GOOD).expect("valid").clusters["lab"].task_time_scale, 1.0);
        let fast = GOOD.replace("kind = \"sim\"", "kind = \"sim\"\ntask_time_scale = 0.25");
        assert_eq!(parse(&fast).expect("valid").clusters["lab"].task_time_scale, 0.25);
        let bad = GOOD.replace("kind = \"sim\"", "kind = \"sim\"\ntask_time_scale = -1.0");
        let err = parse(&bad).expect_err("negative").to_string();
        assert!(err.contains("clusters.lab") && err.contains("task_time_scale = -1"), "{err}");
    }

    #[test]
    fn an_unknown_key_is_an_error_naming_it() {
        let text = GOOD.replace("prefixes = [\"*\"]", "prefixes = [\"*\"]\n[plugins.sample.grants.proxmux]");
        let err = parse(&text).expect_err("typo").to_string();
        assert!(err.contains("proxmux"), "{err}");
        assert!(err.starts_with("cradle.toml"), "{err}");
    }

    #[test]
    fn an_environment_naming_a_missing_plugin_is_refused() {
        let err = parse(&GOOD.replace("backend = \"sample\"", "backend = \"ghost\"")).expect_err("bad");
        assert!(err.to_string().contains("environments.test.backend = \"ghost\""), "{err}");
        assert!(err.to_string().contains("built-in: direct, sample"), "{err}");
    }

    #[test]
    fn an_environment_naming_an_unconfigured_built_in_gets_it_with_its_own_grants() {
        let c = parse(&GOOD.replace("backend = \"sample\"", "backend = \"direct\"")).expect("built-in");
        let direct = &c.plugins["direct"];
        assert!(direct.is_builtin() && direct.implicit);
        let proxmox = direct.grants.proxmox.as_ref().expect("the built-in grants proxmox");
        assert!(proxmox.destructive && proxmox.nodes == ["*"], "destructive by default on the simulated cluster");
        assert_eq!(grants_source(direct), "default (built-in, destructive on the simulated cluster)");
        assert_eq!(grants_source(&c.plugins["sample"]), "cradle.toml");
        // Configured plugins stay as written.
        assert_eq!(c.plugins["sample"].path.as_deref(), Some(Path::new("plugins/sample.wasm")));
    }

    const REAL: &str = "endpoint = \"https://pve1:8006\"\ntoken = { env = \"PVE_TOKEN\" }\nfingerprint = \"AA\"";

    #[test]
    fn the_built_in_default_grants_are_not_destructive_on_a_real_cluster() {
        let text = GOOD.replace("backend = \"sample\"", "backend = \"direct\"").replace("kind = \"sim\"", REAL);
        let c = parse(&text).expect("built-in on a real cluster");
        let direct = &c.plugins["direct"];
        assert!(direct.implicit && direct.grants.builtin_defaults);
        assert!(!direct.grants.proxmox.as_ref().expect("proxmox").destructive, "opt-in on kind = proxmox");
        assert_eq!(grants_source(direct), "default (built-in)");
        // One environment on a real cluster keeps it opt-in for the plugin's every environment.
        let mixed = format!(
            "{}[clusters.prod]\n{REAL}\n[environments.prod]\ncluster = \"prod\"\nbackend = \"direct\"\n",
            GOOD.replace("backend = \"sample\"", "backend = \"direct\"")
        );
        let c = parse(&mixed).expect("mixed");
        assert!(!c.plugins["direct"].grants.proxmox.as_ref().expect("proxmox").destructive);
        // Written out, the operator's choice stands.
        let explicit = format!(
            "{text}[plugins.direct.grants.proxmox]\nnodes = [\"*\"]\nvmids = \"100-199\"\ndestructive = true\n"
        );
        let c = parse(&explicit).expect("explicit");
        assert!(c.plugins["direct"].grants.proxmox.as_ref().expect("proxmox").destructive);
        assert!(!c.plugins["direct"].grants.builtin_defaults);
    }

    #[test]
    fn a_built_in_without_path_takes_the_operators_grants_only() {
        let text = GOOD.replace("backend = \"sample\"", "backend = \"direct\"")
            + "[plugins.direct.grants.lock]\nprefixes = [\"vm/\"]\n";
        let c = parse(&text).expect("built-in with own grants");
        let direct = &c.plugins["direct"];
        assert!(direct.is_builtin() && !direct.implicit);
        assert!(direct.grants.proxmox.is_none(), "the built-in's defaults are replaced, not merged");
        assert!(direct.grants.lock.is_some());
    }

    #[test]
    fn a_non_built_in_plugin_needs_a_path() {
        let err = parse(&GOOD.replace("path = \"plugins/sample.wasm\"\n", "").replace("sample", "mine"))
            .expect_err("no path");
        assert!(err.to_string().contains("plugins.mine: path is required"), "{err}");
    }

    #[test]
    fn an_explicit_workflow_dir_is_resolved_against_the_config() {
        let c = parse(&format!("{GOOD}[workflow]\ndir = \"flows\"\n")).expect("valid");
        assert_eq!(c.workflow_dir(), PathBuf::from("/proj/flows"));
    }

    #[test]
    fn a_real_cluster_needs_certificate_verification() {
        let text = GOOD.replace("kind = \"sim\"", "endpoint = \"https://pve1:8006\"\ntoken = { env = \"PVE_TOKEN\" }");
        let err = parse(&text).expect_err("no verify").to_string();
        assert!(err.contains("fingerprint"), "{err}");
    }

    #[test]
    fn a_unifi_login_endpoint_needs_its_user_and_password_and_a_user_needs_the_login() {
        let ep = |extra: &str| format!("{GOOD}\n[endpoints.unifi]\nurl = \"https://unifi/proxy/network\"\n{extra}");
        let missing = parse(&ep("auth = \"unifi-login\"\ntoken = { file = \"/etc/u\" }\n")).expect_err("no user");
        assert!(missing.to_string().contains("endpoints.unifi: auth = \"unifi-login\" needs username"), "{missing}");
        let stray = parse(&ep("username = \"admin\"\ntoken = { file = \"/etc/u\" }\n")).expect_err("stray user");
        assert!(stray.to_string().contains("username is only used with"), "{stray}");
        parse(&ep("auth = \"unifi-login\"\nusername = \"admin\"\ntoken = { file = \"/etc/u\" }\n")).expect("valid");
    }

    #[test]
    fn an_inline_token_is_refused() {
        let text = GOOD.replace(
            "kind = \"sim\"",
            "endpoint = \"https://pve1:8006\"\ntoken = \"root@pam!x=CANARY-SECRET\"\nfingerprint = \"AA\"",
        );
        let err = parse(&text).expect_err("inline").to_string();
        assert!(!err.contains("CANARY-SECRET"), "secret leaked into the error: {err}");
    }

    #[test]
    fn an_unterminated_inline_token_is_not_echoed() {
        let text = GOOD.replace(
            "kind = \"sim\"",
            "endpoint = \"https://pve1:8006\"\ntoken = \"root@pam!x=CANARY-SECRET\nfingerprint = \"AA\"",
        );
        let err = parse(&text).expect_err("unterminated").to_string();
        assert!(err.contains("line 5"), "{err}");
        assert!(!err.contains("CANARY-SECRET"), "secret leaked into the error: {err}");
    }

    #[test]
    fn a_bad_limit_is_reported_at_its_line_naming_the_field() {
        let err =
            parse(&GOOD.replace("memory_limit_mib = 32", "memory_limit_mib = \"big\"")).expect_err("bad").to_string();
        assert!(err.contains("memory_limit_mib") && err.contains("line 10"), "{err}");
        let err = parse(&GOOD.replace("memory_limit_mib = 32", "memory_limit = 32")).expect_err("typo").to_string();
        assert!(err.contains("unknown field `memory_limit`") && err.contains("`memory_limit_mib`"), "{err}");
    }

    #[test]
    fn a_malformed_vmid_range_names_the_field() {
        let err = parse(&GOOD.replace("\"100-199\"", "\"199-100\"")).expect_err("bad range");
        assert!(err.to_string().contains("vmids"), "{err}");
    }
}
