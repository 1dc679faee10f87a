//! `[terraform]` in cradle.toml: which binary, which CLI configuration and
//! plugin cache, which provider flavour modules are rendered for, and how long
//! one terraform command may run. Validated at load; a path that is set must
//! exist when terraform first runs (the error names the key).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// The provider flavour the backend renders modules for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavour {
    /// `telmate/proxmox` (`proxmox_vm_qemu`).
    #[default]
    Telmate,
    /// `bpg/proxmox` (`proxmox_virtual_environment_vm`).
    Bpg,
}

impl Flavour {
    /// The name as written in cradle.toml.
    pub fn as_str(self) -> &'static str {
        match self {
            Flavour::Telmate => "telmate",
            Flavour::Bpg => "bpg",
        }
    }
}

/// `[terraform]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerraformConfig {
    /// The terraform binary; unset: `terraform` on `PATH`.
    #[serde(default)]
    pub binary: Option<PathBuf>,
    /// A CLI configuration file (`TF_CLI_CONFIG_FILE`): provider mirrors,
    /// credentials for private registries. Unset: terraform's own default
    /// (`~/.terraformrc`).
    #[serde(default)]
    pub cli_config: Option<PathBuf>,
    /// The shared provider cache (`TF_PLUGIN_CACHE_DIR`), so each host's module
    /// links the provider instead of copying it. Unset:
    /// `<state_dir>/terraform/plugin-cache`.
    #[serde(default)]
    pub plugin_cache_dir: Option<PathBuf>,
    /// The provider modules are rendered for.
    #[serde(default)]
    pub provider: Flavour,
    /// Longest run of one terraform command, in seconds (default 1800). Past
    /// it terraform is interrupted (SIGINT, so it can save state), then killed
    /// after 30 s.
    #[serde(default = "default_timeout_s")]
    pub timeout_s: u64,
}

fn default_timeout_s() -> u64 {
    1800
}

impl Default for TerraformConfig {
    fn default() -> Self {
        TerraformConfig {
            binary: None,
            cli_config: None,
            plugin_cache_dir: None,
            provider: Flavour::default(),
            timeout_s: default_timeout_s(),
        }
    }
}

/// A `[terraform]` value that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TerraformConfigError {
    /// `timeout_s` out of range.
    #[error("timeout_s = {0}: must be 1 to 86400 seconds")]
    Timeout(u64),
    /// An empty path.
    #[error("{0} is empty")]
    EmptyPath(&'static str),
}

impl TerraformConfig {
    /// What serde cannot check.
    pub fn validate(&self) -> Result<(), TerraformConfigError> {
        if !(1..=86_400).contains(&self.timeout_s) {
            return Err(TerraformConfigError::Timeout(self.timeout_s));
        }
        for (key, path) in
            [("binary", &self.binary), ("cli_config", &self.cli_config), ("plugin_cache_dir", &self.plugin_cache_dir)]
        {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return Err(TerraformConfigError::EmptyPath(key));
            }
        }
        Ok(())
    }

    /// The per-command limit.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_s)
    }
}
