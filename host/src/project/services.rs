//! The services a run works with, built per environment: the cluster's
//! Proxmox client and node logins, the SSH client with the nodes' keys pinned,
//! the named HTTP endpoints, the environment's DNS and DHCP providers,
//! Ansible, Terraform, the lock store and the checkpoint store.
//!
//! Contract: [`ServicesBuilder`] is the one place a run's
//! [`Services`](crate::caps::context::Services) is made. What is costly or
//! must be shared is made once per project and reused by every later run: a
//! cluster's connection (one API client and TLS pool for a whole `cradle
//! provision`), the lock store and, with `[coordination] backend = "etcd"`,
//! the etcd connection and sealing key; everything else (the SSH client,
//! providers over the endpoints) is made per call, so each run's SSH
//! connections end with it. It reads only the project's configuration, state
//! directory and simulators ([`Inputs`]) and starts no run itself. A
//! configuration the loader already refused cannot reach here; what only
//! shows when connecting (a cluster that cannot be reached, a provider that
//! cannot be built, no tokio runtime) is a [`ProjectError`] naming the
//! environment, cluster or section.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::ProjectError;
use crate::caps::checkpoint::CheckpointStore;
use crate::caps::context::Services;
use crate::caps::coordination::CoordinationBackend;
use crate::caps::coordination::etcd::EtcdConn;
use crate::caps::coordination::records::{Sealer, SharedRecords};
use crate::caps::dns::providers::{DnsProviders, Provider};
use crate::caps::dns::technitium::Technitium;
use crate::caps::dns::{DnsProviderKind, Rfc2136};
use crate::caps::http::Endpoints;
use crate::caps::lock::{EtcdLockStore, FsLockStore, LockStore};
use crate::caps::ssh::{ClientKind, SshClient, SshSettings};
use crate::caps::terraform::Terraform;
use crate::config::Config;
use crate::state::StateDir;

/// What the services are made from: the project's configuration, state
/// directory and the simulators it started.
#[derive(Clone, Copy)]
pub(crate) struct Inputs<'a> {
    pub(crate) config: &'a Config,
    pub(crate) state: &'a StateDir,
    pub(crate) sims: &'a crate::cluster::SimClusters,
}

/// Builds each run's [`Services`], keeping what it made once for the runs after.
#[derive(Debug, Default)]
pub(crate) struct ServicesBuilder {
    /// Each cluster's connection, made by the first run that needs it and
    /// shared by the runs after it: one API client (its TLS connections and
    /// its shared VM listings, `caps::proxmox::client::flights`) for a whole
    /// `cradle provision`, instead of a new client, TLS handshake and
    /// credential file per VM.
    connections: Mutex<BTreeMap<String, crate::cluster::ClusterAccess>>,
    /// The lock store of `[coordination]`, made (for etcd: connected) by the
    /// first run that needs it and shared by every run after it.
    locks: Mutex<Option<Arc<dyn LockStore>>>,
    /// The etcd connection and sealing key of `[coordination]`, made once.
    shared: Mutex<Option<SharedRecords>>,
    /// The clusters whose node keys this process has pinned in
    /// `known_hosts`. Once per cluster, not per run: pinning reads the whole
    /// file, which holds a line per guest, so pinning per run cost a
    /// `cradle plan` of 200 VMs 43% of its CPU (docs/BENCHMARKS.md,
    /// "Maintenance"). Held while pinning, so no run connects before.
    nodes_pinned: Mutex<BTreeSet<String>>,
}

impl ServicesBuilder {
    /// The lock store `[coordination]` names: this node's state directory, or
    /// etcd (connected here, once per project).
    pub(crate) fn locks(&self, on: Inputs<'_>) -> Result<Arc<dyn LockStore>, ProjectError> {
        let mut slot = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(store) = &*slot {
            return Ok(store.clone());
        }
        let store: Arc<dyn LockStore> = match self.shared_records(on)? {
            Some(shared) => Arc::new(EtcdLockStore::new(shared.conn)),
            None => Arc::new(FsLockStore::new(on.state.locks()?)),
        };
        *slot = Some(store.clone());
        Ok(store)
    }

    /// With `[coordination] backend = "etcd"`: the connection and the sealing
    /// key of the shared records (checkpoints, creation records), made once
    /// per project and shared with the lock store. `None` for the file backend.
    pub(crate) fn shared_records(&self, on: Inputs<'_>) -> Result<Option<SharedRecords>, ProjectError> {
        let config = &on.config.coordination;
        if config.backend != CoordinationBackend::Etcd {
            return Ok(None);
        }
        let mut slot = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shared) = &*slot {
            return Ok(Some(shared.clone()));
        }
        let env = |e: String| ProjectError::Environment(format!("[coordination]: {e}"));
        let key = config.records_key.as_ref().ok_or_else(|| env("records_key is required with etcd".into()))?;
        let sealer = Arc::new(Sealer::from_ref(key).map_err(|e| env(e.to_string()))?);
        let conn = Arc::new(EtcdConn::connect(config, &on.config.base_dir).map_err(|e| env(e.to_string()))?);
        let shared = SharedRecords { conn, sealer };
        *slot = Some(shared.clone());
        Ok(Some(shared))
    }

    /// The services of environment `env` (its cluster connection is made here).
    pub(crate) fn services(&self, on: Inputs<'_>, env: &str) -> Result<Services, ProjectError> {
        let (_, environment) = on.config.environment(Some(env))?;
        let cluster = &on.config.clusters[&environment.cluster];
        let rt = tokio::runtime::Handle::try_current().map_err(|_| {
            ProjectError::Environment("cradle runs workflows inside its tokio runtime; none is running".into())
        })?;
        let access = self.connection(on, &environment.cluster, &rt)?;
        let locks = self.locks(on)?;
        let ssh = SshClient::new(SshSettings {
            known_hosts: on.state.known_hosts(),
            identity: access.identity.clone(),
            connect_timeout: std::time::Duration::from_secs(10),
            control_dir: if on.config.ssh.multiplex && !access.ssh_builtin {
                crate::caps::ssh::control_dir(on.state.root())
            } else {
                None
            },
            client: if access.ssh_builtin {
                ClientKind::Builtin {
                    share: on.config.ssh.multiplex,
                    agent: std::env::var_os("SSH_AUTH_SOCK").filter(|s| !s.is_empty()).map(PathBuf::from),
                }
            } else {
                ClientKind::OpenSsh
            },
        })
        .map_err(|e| ProjectError::Environment(e.message))?;
        let mut pinned_clusters = self.nodes_pinned.lock().unwrap_or_else(|e| e.into_inner());
        if !pinned_clusters.contains(&environment.cluster) {
            for (node, node_ssh) in &access.nodes {
                if let Some(key) = &node_ssh.host_key {
                    let pinned = if access.own_nodes {
                        ssh.pin_own_server_key(&node_ssh.host, node_ssh.port, key)
                    } else {
                        ssh.trust_host_key(&node_ssh.host, node_ssh.port, key)
                    };
                    pinned.map_err(|e| ProjectError::Environment(format!("node {node}: {}", e.message)))?;
                }
            }
            pinned_clusters.insert(environment.cluster.clone());
        }
        drop(pinned_clusters);
        let http = Endpoints::new(&on.config.endpoints);
        let mut dns_list = Vec::new();
        for name in &environment.dns {
            let cfg = on.config.dns.get(name).ok_or_else(|| {
                ProjectError::Environment(format!("environment `{env}` names dns = \"{name}\", which is not in [dns]"))
            })?;
            let provider = match cfg.kind {
                DnsProviderKind::Rfc2136 => Rfc2136::new(name, cfg).map(|p| Provider::Rfc2136(Box::new(p))),
                DnsProviderKind::Technitium => Technitium::new(name, cfg, http.clone()).map(Provider::Technitium),
            };
            dns_list.push((name.clone(), provider.map_err(|e| ProjectError::Environment(e.message))?));
        }
        let dns = (!dns_list.is_empty()).then(|| Arc::new(DnsProviders::new(dns_list)));
        let dhcp = match &environment.dhcp {
            Some(name) => {
                let cfg = on.config.dhcp.get(name).ok_or_else(|| {
                    ProjectError::Environment(format!(
                        "environment `{env}` names dhcp = \"{name}\", which is not in [dhcp]"
                    ))
                })?;
                let provider = crate::caps::dhcp::Unifi::new(name, cfg, http.clone());
                Some(Arc::new(provider.map_err(|e| ProjectError::Environment(e.message))?))
            }
            None => None,
        };
        let post = match &environment.post {
            Some(name) => {
                let cfg = on.config.post.get(name).ok_or_else(|| {
                    ProjectError::Environment(format!(
                        "environment `{env}` names post = \"{name}\", which is not in [post]"
                    ))
                })?;
                let provider = crate::caps::post::Semaphore::new(name, cfg, http.clone());
                Some(Arc::new(provider.map_err(|e| ProjectError::Environment(e.message))?))
            }
            None => None,
        };
        let terraform = Some(Arc::new(Self::terraform(on, &environment.cluster, access.terraform)));
        Ok(Services {
            locks,
            checkpoints: CheckpointStore::new(on.state.checkpoints()?).shared(self.shared_records(on)?),
            proxmox: Some(Arc::new(access.proxmox)),
            http,
            ssh: Some(Arc::new(ssh)),
            dns,
            dhcp,
            post,
            ansible: Some(Arc::new(crate::caps::ssh::playbook::Ansible {
                command: on.config.ansible.resolved(&on.config.base_dir),
                log_dir: on.state.root().join("ansible"),
            })),
            terraform,
            rt,
            cluster_id: crate::cluster::cluster_id(&environment.cluster, cluster),
            nodes: access.nodes,
            guest_keys: access.guest_keys,
            project_dir: on.config.base_dir.clone(),
            // Simulated guests live on the simulator's clock; qemu guests and
            // real clusters on the wall clock.
            wait_scale: match cluster.kind {
                crate::config::ClusterKind::Sim if cluster.sim.qemu.is_none() => cluster.sim.time_scale,
                _ => 1.0,
            },
        })
    }

    /// Whether environment `env`'s cluster can be connected to at all, asked once
    /// before a command works on its VMs (`crate::cluster::check_reachable`), so
    /// an endpoint that refuses connections is one error naming the cluster and
    /// URL, not one per VM. The in-process simulator always answers: not asked.
    pub(crate) fn check_reachable(&self, on: Inputs<'_>, env: Option<&str>) -> Result<(), ProjectError> {
        let (_, environment) = on.config.environment(env)?;
        if on.config.clusters[&environment.cluster].kind == crate::config::ClusterKind::Sim {
            return Ok(());
        }
        let rt = tokio::runtime::Handle::try_current().map_err(|_| {
            ProjectError::Environment("cradle runs workflows inside its tokio runtime; none is running".into())
        })?;
        let access = self.connection(on, &environment.cluster, &rt)?;
        crate::cluster::check_reachable(&environment.cluster, &access, &rt)?;
        Ok(())
    }

    /// The connection to cluster `name`, made once per project (see `connections`).
    fn connection(
        &self,
        on: Inputs<'_>,
        name: &str,
        rt: &tokio::runtime::Handle,
    ) -> Result<crate::cluster::ClusterAccess, ProjectError> {
        let mut made = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(access) = made.get(name) {
            return Ok(access.clone());
        }
        let cluster = &on.config.clusters[name];
        let access = crate::cluster::connect(name, cluster, on.config, on.sims, on.state, rt)?;
        made.insert(name.to_string(), access.clone());
        Ok(access)
    }

    /// The environment's terraform: `[terraform]` (its paths resolved against
    /// cradle.toml by the config loader), on the cluster `cluster` as `creds`
    /// reach it.
    fn terraform(on: Inputs<'_>, cluster: &str, creds: crate::caps::terraform::Credentials) -> Terraform {
        let cfg = &on.config.terraform;
        let cache = cfg.plugin_cache_dir.clone().unwrap_or_else(|| on.state.root().join("terraform/plugin-cache"));
        Terraform::new(cfg, creds, cluster, cache).with_kept_max_age(on.config.maintenance.plan_max_age)
    }
}
