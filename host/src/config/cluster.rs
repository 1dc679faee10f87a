//! `[clusters.NAME]` in cradle.toml: how to reach one Proxmox VE cluster, a real
//! one (`kind = "proxmox"`: endpoint, token by reference, exactly one way to
//! verify its certificate) or the built-in simulator (`kind = "sim"` and its
//! `[clusters.NAME.sim]` settings: nodes, time scale, faults, templates, qemu
//! guests, appliances, the API token's privileges).
//!
//! Contract: [`ClusterConfig::validate`] refuses what cannot work as a
//! [`ClusterProblem`] naming the key (a negative or non-finite time scale, a
//! `node_ssh` entry that is not `user@host[:port]`, a privilege not in cradle's
//! role, a real cluster without endpoint, token or verifier). How the sim
//! settings become the simulator's own configuration is `crate::cluster`'s.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::ClusterProblem;
use crate::secrets::SecretRef;

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

impl ClusterConfig {
    pub(super) fn validate(&self) -> Result<(), ClusterProblem> {
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

#[cfg(test)]
mod tests {
    use crate::config::load::fixture::{GOOD, parse};

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
    fn a_real_cluster_needs_certificate_verification() {
        let text = GOOD.replace("kind = \"sim\"", "endpoint = \"https://pve1:8006\"\ntoken = { env = \"PVE_TOKEN\" }");
        let err = parse(&text).expect_err("no verify").to_string();
        assert!(err.contains("fingerprint"), "{err}");
    }
}
