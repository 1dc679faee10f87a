//! `[workflow]` in cradle.toml: where the workflow scripts live, the Rhai
//! engine's limits and the grants of the scripts themselves.
//!
//! Contract: every limit has a default (a missing `[workflow]` is the default
//! section); `max_operations = 0` is refused by the loader (`load.rs`), and the
//! grants are checked like a plugin's ([`Grants::validate`]).

use std::path::PathBuf;

use serde::Deserialize;

use crate::caps::Grants;

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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::config::load::fixture::{GOOD, parse};

    #[test]
    fn an_explicit_workflow_dir_is_resolved_against_the_config() {
        let c = parse(&format!("{GOOD}[workflow]\ndir = \"flows\"\n")).expect("valid");
        assert_eq!(c.workflow_dir(), PathBuf::from("/proj/flows"));
    }
}
