//! How cradle reaches an environment's cluster: a real Proxmox VE (endpoint,
//! token, TLS verification from cradle.toml, node SSH addresses for snippet
//! uploads) or the built-in simulator, started in-process once per project and
//! kept in the state directory so a second run sees the VMs of the first.
//!
//! Failure modes: a cluster that cannot be reached or configured is an error
//! naming the `[clusters.NAME]` key to fix; nothing is retried here.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cradle_sim::{Cluster, FaultSpec, RunningCluster, SimConfig};

use crate::caps::proxmox::client::{ClientSettings, ProxmoxClient, RetryPolicy};
use crate::caps::proxmox::tls::TlsVerify;
use crate::config::{ClusterConfig, ClusterKind, Config};
use crate::state::StateDir;

pub use crate::caps::ssh::NodeSsh;

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
    ) -> Result<Arc<RunningCluster>, String> {
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
        if let Some(spec) = &sim.faults {
            config.faults = FaultSpec::parse(spec).map_err(|e| format!("clusters.{name}.sim.faults: {e}"))?;
        }
        let started = rt
            .block_on(Cluster::start(config))
            .map_err(|e| format!("clusters.{name}: the simulated cluster did not start: {e}"))?;
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
fn connect_api(name: &str, cluster: &ClusterConfig, config: &Config) -> Result<Option<ProxmoxClient>, String> {
    if cluster.kind == ClusterKind::Sim {
        return Ok(None);
    }
    let endpoint = cluster.endpoint.clone().ok_or_else(|| format!("clusters.{name}.endpoint is missing"))?;
    let token = cluster
        .token
        .as_ref()
        .ok_or_else(|| format!("clusters.{name}.token is missing"))?
        .resolve()
        .map_err(|e| format!("clusters.{name}.token: {e}"))?;
    let verify = match (&cluster.fingerprint, &cluster.ca_file) {
        (Some(fp), _) => TlsVerify::Fingerprint(fp.clone()),
        (None, Some(ca)) => TlsVerify::CaFile(config.resolve(ca)),
        (None, None) => TlsVerify::Insecure,
    };
    let settings = ClientSettings {
        endpoint,
        token: token.expose().to_string(),
        verify,
        timeout: Duration::from_secs(30),
        retry: RetryPolicy::default(),
    };
    ProxmoxClient::new(settings).map(Some).map_err(|e| format!("clusters.{name}: {e}"))
}

/// Connect to cluster `name` as configured.
pub fn connect(
    name: &str,
    cluster: &ClusterConfig,
    config: &Config,
    sims: &SimClusters,
    state: &StateDir,
    rt: &tokio::runtime::Handle,
) -> Result<ClusterAccess, String> {
    match cluster.kind {
        ClusterKind::Proxmox => {
            let proxmox = connect_api(name, cluster, config)?
                .ok_or_else(|| format!("clusters.{name}: no API connection configured"))?;
            let mut nodes = BTreeMap::new();
            for (node, target) in &cluster.node_ssh {
                let mut access = NodeSsh::parse(target).map_err(|e| format!("clusters.{name}.node_ssh.{node}: {e}"))?;
                access.host_key = cluster.node_host_keys.get(node).cloned();
                nodes.insert(node.clone(), access);
            }
            if let Some(node) = cluster.node_host_keys.keys().find(|n| !cluster.node_ssh.contains_key(*n)) {
                return Err(format!(
                    "clusters.{name}.node_host_keys.{node}: node {node} has no address in clusters.{name}.node_ssh"
                ));
            }
            Ok(ClusterAccess {
                proxmox,
                nodes,
                identity: config.ssh.identity.as_ref().map(|p| config.resolve(p)),
                guest_keys: config.ssh.authorized_keys.clone(),
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
            })
            .map_err(|e| format!("clusters.{name}: {e}"))?;
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
                .map_err(|e| format!("clusters.{name}: cannot read the simulator's public key: {e}"))?;
            let mut guest_keys = config.ssh.authorized_keys.clone();
            guest_keys.push(public.trim().to_string());
            Ok(ClusterAccess { proxmox, nodes, identity: Some(key), guest_keys })
        }
    }
}
