//! `[ansible]` in cradle.toml: the `ansible-playbook` command `ssh::playbook` runs.
//!
//! Contract: a bare name is looked up on `PATH`; a relative path is resolved
//! against cradle.toml's directory ([`AnsibleConfig::resolved`]).

use std::path::PathBuf;

use serde::Deserialize;

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
