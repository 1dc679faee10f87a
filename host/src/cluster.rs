//! How cradle reaches an environment's cluster: a real Proxmox VE (endpoint,
//! token, TLS verification from cradle.toml, node SSH addresses for snippet
//! uploads) or the built-in simulator, started in-process once per project and
//! kept in the state directory so a second run sees the VMs of the first.
//!
//! Failure modes: a cluster that cannot be reached or configured is a
//! [`ClusterError`] naming the `[clusters.NAME]` key to fix; nothing is retried
//! here.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cradle_sim::{Cluster, FaultSpec, RunningCluster, SimConfig, SimError, TemplateSpec};

use crate::caps::proxmox::client::{ClientSettings, ProxmoxClient, RetryPolicy};
use crate::caps::proxmox::errors::ProxmoxError;
use crate::caps::proxmox::tls::TlsVerify;
use crate::caps::ssh::NodeSshError;
use crate::caps::terraform::{Credentials, TlsTrust};
use crate::config::{ClusterConfig, ClusterKind, Config, SimPrivileges, SimQemu, SimSettings, SshClientChoice};
use crate::secrets::{Secret, SecretError};
use crate::state::{StateDir, StateError};

pub use crate::caps::ssh::NodeSsh;

/// Why cluster `name` (`[clusters.NAME]`) cannot be reached as configured.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// `sim.faults` does not parse.
    #[error("clusters.{name}.sim.faults: {source}")]
    Faults { name: String, source: SimError },
    /// The simulator did not start.
    #[error("clusters.{name}: the simulated cluster did not start: {source}")]
    SimStart { name: String, source: SimError },
    /// The simulator's CA cannot be written for terraform.
    #[error("clusters.{name}: cannot keep the simulator's CA for terraform: {source}")]
    SimCa { name: String, source: StateError },
    /// The simulator's operator key cannot be read.
    #[error("clusters.{name}: cannot read the simulator's public key: {source}")]
    SimKey { name: String, source: std::io::Error },
    /// A Proxmox cluster without `endpoint`.
    #[error("clusters.{name}.endpoint is missing")]
    NoEndpoint { name: String },
    /// A Proxmox cluster without `token`.
    #[error("clusters.{name}.token is missing")]
    NoToken { name: String },
    /// The token's reference does not resolve.
    #[error("clusters.{name}.token: {source}")]
    Token { name: String, source: SecretError },
    /// The API client cannot be built (endpoint, token or TLS settings).
    #[error("clusters.{name}: {source}")]
    Client { name: String, source: Box<ProxmoxError> },
    /// A Proxmox cluster without an API connection.
    #[error("clusters.{name}: no API connection configured")]
    NoApi { name: String },
    /// A `node_ssh` entry.
    #[error("clusters.{name}.node_ssh.{node}: {source}")]
    NodeSsh { name: String, node: String, source: NodeSshError },
    /// The API endpoint cannot be connected to (asked once, before a command
    /// works on any VM: one message instead of one per VM).
    #[error(
        "cluster `{name}` is unreachable: cannot connect to its Proxmox API at {endpoint} ({detail}). Nothing was sent \
         and no VM was worked on; check clusters.{name}.endpoint in cradle.toml and that the Proxmox API (pveproxy, \
         port 8006) is up and reachable from here, then run the command again"
    )]
    Unreachable { name: String, endpoint: String, detail: String },
    /// A pinned host key for a node without an SSH address.
    #[error("clusters.{name}.node_host_keys.{node}: node {node} has no address in clusters.{name}.node_ssh")]
    HostKeyWithoutAddress { name: String, node: String },
}

/// A connected cluster.
#[derive(Debug, Clone)]
pub struct ClusterAccess {
    /// The API client.
    pub proxmox: ProxmoxClient,
    /// Node name → SSH access (for snippet uploads).
    pub nodes: BTreeMap<String, NodeSsh>,
    /// The private key cradle logs in with (nodes and guests), if configured.
    pub identity: Option<PathBuf>,
    /// Public keys to authorize for the guests' management user.
    pub guest_keys: Vec<String>,
    /// What terraform's provider needs to reach the same API.
    pub terraform: Credentials,
    /// Whether cradle's built-in SSH client logs in to this cluster's nodes
    /// and guests (`[ssh] client`, `auto` decided by `caps::ssh::choice`),
    /// else OpenSSH's `ssh`.
    pub ssh_builtin: bool,
    /// Whether this process runs the nodes' sshd (a built-in simulated
    /// cluster, new ports each start, keys kept in its state directory): their
    /// pins replace the earlier starts' instead of piling up, and a port
    /// another cluster once pinned is taken over
    /// (`caps::ssh::KnownHosts::pin_own_server`). A real cluster's node pins
    /// never replace anything.
    pub own_nodes: bool,
}

/// `[ssh] client` for a login with `identity`; an `auto` that falls back to
/// OpenSSH says so once per process.
fn ssh_builtin(name: &str, config: &Config, identity: Option<&std::path::Path>) -> bool {
    use crate::caps::ssh::choice::{self, Preference};
    let pref = match config.ssh.client {
        SshClientChoice::Auto => Preference::Auto,
        SshClientChoice::OpenSsh => Preference::OpenSsh,
        SshClientChoice::Builtin => Preference::Builtin,
    };
    let agent = std::env::var_os("SSH_AUTH_SOCK").filter(|s| !s.is_empty()).map(PathBuf::from);
    let home = std::env::var_os("HOME").filter(|s| !s.is_empty()).map(PathBuf::from);
    let chosen = choice::choose(pref, identity, agent.as_deref(), home.as_deref());
    if let Some(why) = &chosen.fallback {
        choice::warn_fallback_once(name, why);
    }
    chosen.builtin
}

/// The simulated clusters this process started, by cluster name.
#[derive(Default)]
pub struct SimClusters {
    running: Mutex<BTreeMap<String, Arc<RunningCluster>>>,
}

impl std::fmt::Debug for SimClusters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.running.lock().map(|m| m.keys().cloned().collect()).unwrap_or_default();
        f.debug_struct("SimClusters").field("running", &names).finish()
    }
}

impl SimClusters {
    /// The running simulator for cluster `name`, if this project started it.
    pub fn get(&self, name: &str) -> Option<Arc<RunningCluster>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    /// The running simulator for cluster `name`, started on first use.
    pub fn get_or_start(
        &self,
        name: &str,
        cluster: &ClusterConfig,
        state: &StateDir,
        rt: &tokio::runtime::Handle,
    ) -> Result<Arc<RunningCluster>, ClusterError> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = running.get(name) {
            return Ok(c.clone());
        }
        let sim = &cluster.sim;
        let mut config = SimConfig {
            state_dir: Some(state.root().join("sim").join(name)),
            time_scale: sim.time_scale,
            seed: sim.seed,
            guest_ssh_port: sim.guest_ssh_port,
            // cradle reaches nodes at whatever address the simulator reports,
            // so several simulators (parallel tests) can run side by side.
            node_ssh_port: 0,
            ..SimConfig::default()
        };
        if !sim.nodes.is_empty() {
            config.nodes = sim.nodes.clone();
        }
        sim.apply_node_settings(&mut config);
        if !sim.templates.is_empty() {
            config.templates = sim
                .templates
                .iter()
                .map(|t| TemplateSpec { vmid: t.vmid, name: t.name.clone(), node: t.node.clone() })
                .collect();
        }
        if let Some(q) = &sim.qemu {
            let settings = q.settings().map_err(|source| ClusterError::SimStart { name: name.to_string(), source })?;
            config.guest_mode = cradle_sim::GuestMode::Qemu(settings);
        }
        if let Some(spec) = &sim.faults {
            config.faults =
                FaultSpec::parse(spec).map_err(|source| ClusterError::Faults { name: name.to_string(), source })?;
        }
        let started = rt
            .block_on(Cluster::start(config))
            .map_err(|source| ClusterError::SimStart { name: name.to_string(), source })?;
        let started = Arc::new(started);
        running.insert(name.to_string(), started.clone());
        Ok(started)
    }
}

/// The identity of cluster `name` in lock keys (invariant 1): stable across
/// processes, unlike a simulator's ephemeral API port.
pub fn cluster_id(name: &str, cluster: &ClusterConfig) -> String {
    match (cluster.kind, &cluster.endpoint) {
        (ClusterKind::Proxmox, Some(endpoint)) => endpoint.trim_end_matches('/').to_string(),
        _ => format!("sim://{name}"),
    }
}

/// Connect to cluster `name` as configured: resolve the token, choose how the
/// certificate is verified. `Ok(None)` for a `sim` cluster, whose client the
/// simulator provides when it starts.
fn connect_api(
    name: &str,
    cluster: &ClusterConfig,
    config: &Config,
) -> Result<Option<(ProxmoxClient, Credentials)>, ClusterError> {
    if cluster.kind == ClusterKind::Sim {
        return Ok(None);
    }
    let name_of = || name.to_string();
    let endpoint = cluster.endpoint.clone().ok_or_else(|| ClusterError::NoEndpoint { name: name_of() })?;
    let token = cluster
        .token
        .as_ref()
        .ok_or_else(|| ClusterError::NoToken { name: name_of() })?
        .resolve()
        .map_err(|source| ClusterError::Token { name: name_of(), source })?;
    let (verify, trust) = match (&cluster.fingerprint, &cluster.ca_file) {
        // A CA file as well: terraform's providers can use it, cradle pins the fingerprint.
        (Some(fp), Some(ca)) => (TlsVerify::Fingerprint(fp.clone()), TlsTrust::CaFile(config.resolve(ca))),
        (Some(fp), None) => (TlsVerify::Fingerprint(fp.clone()), TlsTrust::FingerprintOnly),
        (None, Some(ca)) => (TlsVerify::CaFile(config.resolve(ca)), TlsTrust::CaFile(config.resolve(ca))),
        (None, None) => (TlsVerify::Insecure, TlsTrust::Insecure),
    };
    let creds = Credentials { endpoint: endpoint.clone(), token: Secret::new(token.expose().to_string()), tls: trust };
    let settings = ClientSettings {
        endpoint,
        token: token.expose().to_string(),
        verify,
        timeout: Duration::from_secs(30),
        retry: RetryPolicy::default(),
        task_time_scale: cluster.task_time_scale,
    };
    ProxmoxClient::new(settings)
        .map(|client| Some((client, creds)))
        .map_err(|source| ClusterError::Client { name: name_of(), source: Box::new(source) })
}

/// Whether cluster `name` answers at all: one `GET /version` (a read, retried
/// like any), before a command works on its VMs. Only a connection that cannot
/// be made is an error here; any answer, even a refusal of the token, is left
/// to the runs, which report it with the call that met it.
pub fn check_reachable(name: &str, access: &ClusterAccess, rt: &tokio::runtime::Handle) -> Result<(), ClusterError> {
    match rt.block_on(access.proxmox.pve_version()) {
        Err(ProxmoxError::Unreachable { endpoint, detail, .. }) => {
            Err(ClusterError::Unreachable { name: name.to_string(), endpoint, detail })
        }
        _ => Ok(()),
    }
}

/// Connect to cluster `name` as configured.
pub fn connect(
    name: &str,
    cluster: &ClusterConfig,
    config: &Config,
    sims: &SimClusters,
    state: &StateDir,
    rt: &tokio::runtime::Handle,
) -> Result<ClusterAccess, ClusterError> {
    let name_of = || name.to_string();
    match cluster.kind {
        ClusterKind::Proxmox => {
            let (proxmox, terraform) =
                connect_api(name, cluster, config)?.ok_or_else(|| ClusterError::NoApi { name: name_of() })?;
            let mut nodes = BTreeMap::new();
            for (node, target) in &cluster.node_ssh {
                let mut access = NodeSsh::parse(target).map_err(|source| ClusterError::NodeSsh {
                    name: name_of(),
                    node: node.clone(),
                    source,
                })?;
                access.host_key = cluster.node_host_keys.get(node).cloned();
                nodes.insert(node.clone(), access);
            }
            if let Some(node) = cluster.node_host_keys.keys().find(|n| !cluster.node_ssh.contains_key(*n)) {
                return Err(ClusterError::HostKeyWithoutAddress { name: name_of(), node: node.clone() });
            }
            let identity = config.ssh.identity.as_ref().map(|p| config.resolve(p));
            Ok(ClusterAccess {
                proxmox,
                nodes,
                ssh_builtin: ssh_builtin(name, config, identity.as_deref()),
                identity,
                guest_keys: config.ssh.authorized_keys.clone(),
                terraform,
                own_nodes: false,
            })
        }
        ClusterKind::Sim => {
            let sim = sims.get_or_start(name, cluster, state, rt)?;
            let endpoint = sim.api_url().trim_end_matches("/api2/json").to_string();
            let proxmox = ProxmoxClient::new(ClientSettings {
                endpoint,
                token: sim.token(),
                verify: TlsVerify::Fingerprint(sim.fingerprint_sha256()),
                timeout: std::time::Duration::from_secs(30),
                retry: RetryPolicy::default(),
                // The simulator runs PVE's task durations scaled by this.
                task_time_scale: cluster.sim.time_scale,
            })
            .map_err(|source| ClusterError::Client { name: name_of(), source: Box::new(source) })?;
            let nodes = sim
                .nodes()
                .into_iter()
                .filter_map(|n| {
                    let addr = sim.node_ssh_addr(&n)?;
                    let host_key = sim.node_host_key(&n);
                    Some((n, NodeSsh { host: addr.ip().to_string(), port: addr.port(), user: "root".into(), host_key }))
                })
                .collect();
            // The simulator's nodes accept its generated operator key; cradle
            // logs in to nodes and guests with it.
            let key = sim.node_ssh_key_path().to_path_buf();
            let public = std::fs::read_to_string(key.with_extension("pub"))
                .map_err(|source| ClusterError::SimKey { name: name_of(), source })?;
            let mut guest_keys = config.ssh.authorized_keys.clone();
            guest_keys.push(public.trim().to_string());
            let terraform = sim_credentials(name, &sim, state)?;
            let ssh_builtin = ssh_builtin(name, config, Some(&key));
            Ok(ClusterAccess {
                proxmox,
                nodes,
                identity: Some(key),
                guest_keys,
                terraform,
                ssh_builtin,
                own_nodes: true,
            })
        }
    }
}

/// terraform's view of a simulated cluster: its URL and token, and its CA
/// written owner-only under `<state_dir>/terraform/` for `SSL_CERT_FILE`.
fn sim_credentials(name: &str, sim: &RunningCluster, state: &StateDir) -> Result<Credentials, ClusterError> {
    let dir = state.root().join("terraform");
    let ca = dir.join(format!("{name}-ca.pem"));
    crate::state::create_private_dir(&dir)
        .and_then(|()| crate::state::write_private_file_atomic(&ca, sim.ca_pem().as_bytes()))
        .map_err(|source| ClusterError::SimCa { name: name.to_string(), source })?;
    let endpoint = sim.api_url().trim_end_matches("/api2/json").to_string();
    Ok(Credentials { endpoint, token: Secret::new(sim.token()), tls: TlsTrust::CaFile(ca) })
}

/// A TOML string literal (`toml` escapes it).
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Write the `[clusters.NAME]` and `[ssh]` sections a cradle on another
/// process (or machine) needs to reach `cluster` as a Proxmox VE cluster,
/// owner-only, with its token in `path` with the extension `.token` (what
/// `cradle sim serve --write-config` writes; tests that run the simulator
/// in-process write it the same way).
pub fn write_client_config(cluster: &RunningCluster, name: &str, path: &std::path::Path) -> Result<(), String> {
    use std::fmt::Write as _;
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') || name.is_empty() {
        return Err(format!("cluster name `{name}`: use letters, digits, `-` and `_`"));
    }
    let token_path = path.with_extension("token");
    let abs = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    crate::state::write_private_file_atomic(&token_path, cluster.token().as_bytes()).map_err(|e| e.to_string())?;
    let key = cluster.node_ssh_key_path();
    let public = std::fs::read_to_string(key.with_extension("pub"))
        .map_err(|e| format!("cannot read the simulator's public key {}.pub: {e}", key.display()))?;
    let endpoint = cluster.api_url().trim_end_matches("/api2/json").to_string();
    let mut out = format!("# Written by `cradle sim serve` for {endpoint}; merge into cradle.toml.\n");
    let _ = writeln!(out, "[clusters.{name}]\nkind = \"proxmox\"\nendpoint = {}", quoted(&endpoint));
    let _ = writeln!(out, "token = {{ file = {} }}", quoted(&abs(&token_path).display().to_string()));
    let _ = writeln!(out, "fingerprint = {}", quoted(&cluster.fingerprint_sha256()));
    // Its tasks take PVE's usual durations scaled by this: polls fit them.
    let _ = writeln!(out, "task_time_scale = {}\n\n[clusters.{name}.node_ssh]", cluster.time_scale());
    for n in cluster.nodes() {
        if let Some(a) = cluster.node_ssh_addr(&n) {
            let _ = writeln!(out, "{n} = {}", quoted(&format!("root@{}:{}", a.ip(), a.port())));
        }
    }
    let _ = writeln!(out, "\n[clusters.{name}.node_host_keys]");
    for n in cluster.nodes() {
        if let Some(k) = cluster.node_host_key(&n) {
            let _ = writeln!(out, "{n} = {}", quoted(&k));
        }
    }
    let _ = writeln!(out, "\n[ssh]\nidentity = {}", quoted(&abs(key).display().to_string()));
    let _ = writeln!(out, "authorized_keys = [{}]", quoted(public.trim()));
    crate::state::write_private_file_atomic(path, out.as_bytes()).map_err(|e| e.to_string())
}

// The simulator's configuration from `[clusters.NAME.sim]`: the settings
// themselves are `crate::config`'s, which knows nothing of the simulator (so
// the fuzz crate compiles the loader without it).

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

impl SimQemu {
    /// The simulator's settings; the image path is already absolute (see
    /// `Config::parse`).
    pub fn settings(&self) -> Result<cradle_sim::QemuSettings, cradle_sim::SimError> {
        let image = match &self.image {
            Some(p) => p.clone(),
            None => crate::config::default_guest_image(),
        };
        let mut q = cradle_sim::QemuSettings::new(image);
        q.accel = cradle_sim::Accel::parse(&self.accel)?;
        q.vmids = (!self.vmids.is_empty()).then(|| self.vmids.iter().copied().collect());
        q.shutdown_timeout = std::time::Duration::from_secs(self.shutdown_timeout_s);
        Ok(q)
    }
}
