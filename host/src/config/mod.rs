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
//!
//! One file per section: `workflow.rs`, `cluster.rs` (with the simulator's
//! settings), `ssh.rs`, `ansible.rs`, `plugins.rs`, `serve.rs`, `maintenance.rs`; the sections
//! of capabilities are their capability's (`caps::dns`, `caps::http`,
//! `caps::coordination`, `caps::terraform`). `load.rs` reads, resolves and
//! validates the whole file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use crate::caps::dhcp::DhcpProviderConfig;
pub use crate::caps::dns::DnsProviderConfig;
pub use crate::caps::http::{EndpointAuth, EndpointConfig};
pub use crate::caps::lock::{CoordinationBackend, CoordinationConfig};
pub use crate::caps::post::PostProviderConfig;
pub use crate::caps::terraform::{Flavour, TerraformConfig};

mod ansible;
mod cluster;
mod error;
mod integrations;
mod load;
#[cfg(test)]
pub(crate) use load::fixture;
mod maintenance;
mod plugins;
mod serve;
mod ssh;
mod workflow;

pub use ansible::AnsibleConfig;
pub use cluster::{
    ClusterConfig, ClusterKind, SimAppliance, SimPrivileges, SimQemu, SimSettings, SimTemplate, default_guest_image,
};
pub use error::{ClusterProblem, ConfigError, ConfigProblem, EnvironmentError};
pub use maintenance::{DEFAULT_PLAN_MAX_AGE, MaintenanceConfig, human as human_duration};
pub use plugins::{PluginConfig, grants_source};
pub use serve::{ServeConfig, SourceConfig, SourceKind};
pub use ssh::{SshClientChoice, SshConfig};
pub use workflow::{DEFAULT_WORKFLOW_DIR, WorkflowConfig};

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
    /// Plugins by name: backends and integration plugins (`kind`).
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginConfig>,
    /// Named HTTP endpoints the `http` capability may reach.
    #[serde(default)]
    pub endpoints: BTreeMap<String, EndpointConfig>,
    /// DNS providers by name (`[dns.NAME]`), chosen per environment with `dns = "NAME"`.
    #[serde(default)]
    pub dns: BTreeMap<String, DnsProviderConfig>,
    /// DHCP providers by name (`[dhcp.NAME]`), chosen per environment with `dhcp = "NAME"`.
    #[serde(default)]
    pub dhcp: BTreeMap<String, DhcpProviderConfig>,
    /// Post-provision task providers by name (`[post.NAME]`), chosen per environment with `post = "NAME"`.
    #[serde(default)]
    pub post: BTreeMap<String, PostProviderConfig>,
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
    /// `cradle plan` / `cradle apply` (`[maintenance]`: how old a plan may be).
    #[serde(default)]
    pub maintenance: MaintenanceConfig,
    /// The directory that held `cradle.toml` (set by [`Config::load`]).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

/// `[environments.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentConfig {
    /// The cluster name (a key of `[clusters]`).
    pub cluster: String,
    /// The backend plugin name (a key of `[plugins]`).
    pub backend: String,
    /// The DNS providers the `dns` capability uses (keys of `[dns]`): `dns =
    /// "NAME"`, or `dns = ["a", "b"]`, each call going to the one whose zones
    /// hold its zone; none means DNS calls fail.
    #[serde(default, deserialize_with = "one_or_many")]
    pub dns: Vec<String>,
    /// The DHCP provider the `dhcp` capability uses (a key of `[dhcp]`); none means DHCP calls fail.
    #[serde(default)]
    pub dhcp: Option<String>,
    /// The task provider the `post` capability uses (a key of `[post]`); none means post calls fail.
    #[serde(default)]
    pub post: Option<String>,
    /// The integration plugin of each role workflows ask for with
    /// `cradle::plugin("ROLE")`: `plugins = { netbox = "my-netbox" }` (role →
    /// a key of `[plugins]` of kind `integration`); a role not listed is the
    /// integration plugin of its own name.
    #[serde(default)]
    pub plugins: BTreeMap<String, String>,
}

impl Config {
    /// The state directory this configuration asks for: `--state-dir` (or
    /// `CRADLE_STATE_DIR`) when given, else `state_dir` resolved against this
    /// file's directory; `None` means the default (see `StateDir::resolve`).
    pub fn state_dir_override(&self, cli: Option<&Path>) -> Option<PathBuf> {
        cli.map(Path::to_path_buf).or_else(|| self.state_dir.as_ref().map(|p| self.resolve(p)))
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
}

fn join_keys<V>(map: &BTreeMap<String, V>) -> String {
    if map.is_empty() { "none".to_string() } else { map.keys().cloned().collect::<Vec<_>>().join(", ") }
}

/// A string or a list of strings (`dns = "lab"` or `dns = ["lab", "tech"]`).
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(name) => vec![name],
        OneOrMany::Many(names) => names,
    })
}
