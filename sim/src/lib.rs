//! cradle-sim: a Proxmox VE cluster in a process.
//!
//! It serves the PVE HTTPS API (`/api2/json`, API-token auth, self-signed TLS) with the
//! behaviour provisioning workflows depend on — tasks that take time, `lock: clone`,
//! pending changes, `nextid` that never reserves, PVE 9 HA rules — and runs guests that
//! answer real SSH on loopback addresses taken from their cloud-init network-data (or
//! from DHCP: [`SimConfig::dhcp`], served by the UniFi stand-in of [`services`]). See
//! `docs/SIMULATOR.md` for what is modelled and every known difference from real PVE.
//!
//! Entry points: [`Cluster::start`] (library, in-process) and [`serve`] (the
//! `cradle sim serve` command). Failure modes: [`SimError`] at start (bad config, state
//! dir, TLS, bind); API-level errors are answered to clients as PVE would, never raised.

pub mod acl;
mod api;
pub mod config;
pub mod conformance;
pub mod error;
pub mod faults;
mod fsutil;
mod guest;
mod ha_manager;
mod image;
mod iso9660;
mod model;
mod nodefs;
mod persist;
mod recover;
mod seed;
pub mod services;
mod sim;
mod tls;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use config::{
    Accel, ApplianceSpec, GuestMode, GuestSubnet, NodeDisk, QemuSettings, SimConfig, StorageSpec, TemplateSpec, Timings,
};
pub use error::SimError;
pub use faults::{FaultKind, FaultSpec};
pub use guest::dhcp::DhcpLease;
pub use guest::http::GuestHttpRequest;

use crate::sim::{Sim, lock};

/// Entry point for starting simulated clusters.
#[derive(Debug)]
pub struct Cluster;

/// A started cluster. Dropping it stops everything (use [`RunningCluster::shutdown`] to
/// wait for that).
pub struct RunningCluster {
    sim: Arc<Sim>,
    api_addr: SocketAddr,
    tls: tls::TlsIdentity,
    key_path: PathBuf,
}

impl std::fmt::Debug for RunningCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret: never in Debug output.
        f.debug_struct("RunningCluster")
            .field("api_addr", &self.api_addr)
            .field("fingerprint", &self.tls.fingerprint_sha256())
            .finish_non_exhaustive()
    }
}

fn load_or_create_key(path: &Path) -> Result<russh::keys::PrivateKey, SimError> {
    let text = match fsutil::read_optional(path)? {
        Some(b) => String::from_utf8_lossy(&b).into_owned(),
        None => {
            let k = guest::keys::generate_ed25519_openssh().map_err(SimError::SshKey)?;
            fsutil::write_private(path, k.as_bytes())?;
            let public = guest::keys::public_openssh(&k).map_err(SimError::SshKey)?;
            fsutil::write_private(&path.with_extension("pub"), format!("{public}\n").as_bytes())?;
            k
        }
    };
    russh::keys::PrivateKey::from_openssh(&text).map_err(|e| SimError::SshKey(format!("{}: {e}", path.display())))
}

impl Cluster {
    /// Start a simulated cluster: state, TLS, API listener, node SSH servers, and the
    /// guests of VMs a state dir remembers as running.
    pub async fn start(config: SimConfig) -> Result<RunningCluster, SimError> {
        let listen = config.listen;
        let sim = Sim::new(config)?;
        let names: Vec<String> = sim.cfg.nodes.clone();
        let mut ips = vec![std::net::IpAddr::from([127, 0, 0, 1]), listen.ip()];
        ips.dedup();
        let tls = tls::TlsIdentity::load_or_generate(sim.cfg.state_dir.as_deref(), &names, &ips)?;
        let server_cfg = tls.server_config()?;
        let _ = sim.fingerprint.set(tls.fingerprint_sha256());
        let listener =
            tokio::net::TcpListener::bind(listen).await.map_err(|source| SimError::Bind { addr: listen, source })?;
        let api_addr = listener.local_addr().map_err(|source| SimError::Bind { addr: listen, source })?;

        // Node sshd: the operator key plus configured keys may log in as root.
        let key_path = sim.root().join("node_id_ed25519");
        let operator = load_or_create_key(&key_path)?;
        let mut authorized = vec![operator.public_key().clone()];
        for k in &sim.cfg.node_authorized_keys {
            let pk = russh::keys::PublicKey::from_openssh(k.trim()).map_err(|e| {
                SimError::Config(format!("node_authorized_keys entry is not an OpenSSH public key: {e}"))
            })?;
            authorized.push(pk);
        }
        for (i, node) in sim.cfg.nodes.clone().into_iter().enumerate() {
            let host_key = load_or_create_key(&sim.node_path(&node, "/etc/ssh/ssh_host_ed25519_key"))?;
            let addr = SocketAddr::from((sim.cfg.node_ip(i), sim.cfg.node_ssh_port));
            let bound = guest::spawn_node_sshd(sim.clone(), node, addr, host_key, authorized.clone())
                .await
                .map_err(|source| SimError::Bind { addr, source })?;
            lock(&sim.node_ssh).push(bound);
        }

        tokio::spawn(api::serve(sim.clone(), listener, server_cfg));
        guest::qemu::reap_stale(sim.root());
        resume_guests(&sim);
        recover::start_interrupted(&sim);
        Ok(RunningCluster { sim, api_addr, tls, key_path })
    }
}

/// Boot the guests of VMs persisted as running (a restarted simulator = a host reboot
/// with `onboot`-like resume; a start that now fails leaves the VM stopped).
fn resume_guests(sim: &Arc<Sim>) {
    let running: Vec<u32> =
        lock(&sim.state).vms.values().filter(|v| v.power == model::Power::Running).map(|v| v.vmid).collect();
    for vmid in running {
        if lock(&sim.state).vms.get(&vmid).is_some_and(model::Vm::is_ct) {
            if let Err(e) = guest::lxc::boot(sim, vmid) {
                tracing::warn!(vmid, "{e}");
            }
            continue;
        }
        let seed = {
            let st = lock(&sim.state);
            st.vms.get(&vmid).map(|vm| guest::read_seed(sim, vm))
        };
        let booted = match seed {
            Some(Ok(seed)) => guest::power_on(sim, vmid, seed).inspect_err(|e| tracing::warn!(vmid, "{e}")).is_ok(),
            _ => false,
        };
        if !booted {
            let mut st = lock(&sim.state);
            if let Some(vm) = st.vms.get_mut(&vmid) {
                vm.power = model::Power::Stopped;
            }
            sim.changed();
        }
    }
}

impl RunningCluster {
    /// The API base URL, e.g. `https://127.0.0.1:8006/api2/json`.
    pub fn api_url(&self) -> String {
        format!("https://{}/api2/json", self.api_addr)
    }

    /// The address the API listens on.
    pub fn api_addr(&self) -> SocketAddr {
        self.api_addr
    }

    /// The full API token `USER@REALM!TOKENID=SECRET` (a secret: do not log it).
    pub fn token(&self) -> String {
        self.sim.token()
    }

    /// SHA-256 fingerprint of the API certificate, `AA:BB:..` as PVE shows it.
    pub fn fingerprint_sha256(&self) -> String {
        self.tls.fingerprint_sha256()
    }

    /// The CA certificate (PEM) that signed the API certificate.
    pub fn ca_pem(&self) -> String {
        self.tls.ca_pem.clone()
    }

    /// How many times the state file was written so far.
    pub fn state_writes(&self) -> u64 {
        self.sim.persist.writes()
    }

    /// How fast simulated tasks run against PVE's durations (`time_scale`).
    pub fn time_scale(&self) -> f64 {
        self.sim.cfg.time_scale
    }

    /// Requests served so far, per `METHOD /pattern` (e.g. `GET /cluster/resources`).
    pub fn request_counts(&self) -> BTreeMap<String, u64> {
        lock(&self.sim.counts).clone()
    }

    /// Node names.
    pub fn nodes(&self) -> Vec<String> {
        self.sim.cfg.nodes.clone()
    }

    /// Where a node's sshd listens.
    pub fn node_ssh_addr(&self, node: &str) -> Option<SocketAddr> {
        let i = self.sim.cfg.nodes.iter().position(|n| n == node)?;
        lock(&self.sim.node_ssh).get(i).copied()
    }

    /// A node's SSH host public key (`ssh-ed25519 AAAA…`), for pinning in a
    /// known_hosts file before the first connection.
    pub fn node_host_key(&self, node: &str) -> Option<String> {
        if !self.sim.has_node(node) {
            return None;
        }
        let path = self.sim.node_path(node, "/etc/ssh/ssh_host_ed25519_key.pub");
        std::fs::read_to_string(path).ok().map(|k| k.trim().to_string())
    }

    /// Path of the private key (0600) that nodes accept for `root`.
    pub fn node_ssh_key_path(&self) -> &Path {
        &self.key_path
    }

    /// Real directory backing `<storage path>/snippets` on a node.
    pub fn snippet_dir(&self, node: &str, storage: &str) -> Option<PathBuf> {
        self.sim.storage_dir(node, storage).map(|d| d.join("snippets"))
    }

    /// The real path backing the node path `abs` (absolute, e.g. `/var/tmp/x.qcow2`)
    /// on `node`: `<root>/nodes/<node>/<abs>`. Purely computed: the node need not
    /// exist, nothing is created, symlinks are not resolved and `..` is not checked,
    /// so tests can plant or inspect files the node's commands and API then see.
    pub fn node_path(&self, node: &str, abs: &str) -> PathBuf {
        self.sim.node_path(node, abs)
    }

    /// Where a running guest's sshd listens, once it is up.
    pub fn guest_ssh_addr(&self, vmid: u32) -> Option<SocketAddr> {
        guest::ssh_addr(&self.sim, vmid)
    }

    /// Every DHCP exchange of a guest so far (each boot of an interface that asks for
    /// DHCP, offers and refusals), oldest first.
    pub fn dhcp_leases(&self) -> Vec<DhcpLease> {
        lock(&self.sim.dhcp_leases).clone()
    }

    /// The DHCP exchanges of one guest, oldest first (the first is its first boot's).
    pub fn dhcp_leases_of(&self, vmid: u32) -> Vec<DhcpLease> {
        lock(&self.sim.dhcp_leases).iter().filter(|l| l.vmid == vmid).cloned().collect()
    }

    /// Every request an appliance's web UI answered so far, oldest first.
    pub fn guest_http_requests(&self) -> Vec<GuestHttpRequest> {
        lock(&self.sim.guest_http).clone()
    }

    /// The current boot ID of a running guest.
    pub fn guest_boot_id(&self, vmid: u32) -> Option<String> {
        guest::boot_id(&self.sim, vmid)
    }

    /// What a client needs, one `key: value` per line: API URL, token (this
    /// is for the operator's own terminal), fingerprint, node SSH, state dir.
    pub fn banner(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::from("cradle-sim: Proxmox VE simulator running\n");
        let _ = writeln!(out, "  API URL:      {}", self.api_url());
        let _ = writeln!(out, "  API token:    {}", self.token());
        let _ = writeln!(out, "  fingerprint:  {}", self.fingerprint_sha256());
        for n in self.nodes() {
            if let Some(a) = self.node_ssh_addr(&n) {
                let _ =
                    writeln!(out, "  node {n}: ssh root@{} -p {} (key {})", a.ip(), a.port(), self.key_path.display());
            }
        }
        let _ = writeln!(out, "  state:        {}", self.root().display());
        out
    }

    /// The state dir (or temporary root) of this cluster.
    pub fn root(&self) -> &Path {
        self.sim.root()
    }

    /// Stop the API, the node and guest SSH servers and all timers.
    pub async fn shutdown(self) {
        let _ = self.sim.shutdown.send(true);
        // Let the accept loops observe the signal and release their sockets.
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

impl Drop for RunningCluster {
    fn drop(&mut self) {
        let _ = self.sim.shutdown.send(true);
        guest::qemu::kill_all(&self.sim);
        lock(&self.sim.guests).clear();
        if self.sim.root_is_temp {
            let _ = std::fs::remove_dir_all(self.sim.root());
            return;
        }
        self.sim.flush();
        self.sim.write_request_counts();
    }
}

/// Run a cluster until Ctrl-C, printing the API URL, the token and the certificate
/// fingerprint (what `cradle sim serve` shows the operator).
pub async fn serve(config: SimConfig) -> Result<(), SimError> {
    let cluster = Cluster::start(config).await?;
    print!("{}", cluster.banner());
    println!("Press Ctrl-C to stop.");
    let _ = tokio::signal::ctrl_c().await;
    cluster.shutdown().await;
    Ok(())
}
