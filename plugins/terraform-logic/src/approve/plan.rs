//! The parts of `terraform show -json <planfile>` the approval reads.
//!
//! Field names and shapes follow Terraform's implementation (`internal/command/jsonplan`);
//! keys not listed here are ignored, as the format's compatibility rule asks. A key
//! that is present with the wrong type makes the whole plan unparseable (a rejection).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::action::{Action, ActionReason};
use crate::state::{StateRepr, Values};

#[derive(Debug, Deserialize)]
pub(super) struct Plan {
    // `format_version` is checked on the untyped value before this is parsed.
    /// Absent before Terraform 1.8; `false` for a plan with nothing to apply.
    pub applyable: Option<bool>,
    /// Absent before Terraform 1.8; `false` means more plan/apply rounds will follow.
    pub complete: Option<bool>,
    /// Absent before Terraform 1.6.
    pub errored: Option<bool>,
    #[serde(default)]
    pub resource_changes: Vec<ResourceChange>,
    #[serde(default)]
    pub resource_drift: Vec<ResourceChange>,
    /// `{"reason", "resource_change"}` objects; only counted and named.
    #[serde(default)]
    pub deferred_changes: Vec<Value>,
    #[serde(default)]
    pub action_invocations: Vec<Value>,
    #[serde(default)]
    pub deferred_action_invocations: Vec<Value>,
    /// Root-module outputs; each value is a change object directly (not `{"change": …}`).
    #[serde(default)]
    pub output_changes: BTreeMap<String, Change>,
    pub prior_state: Option<StateRepr>,
    /// The state after apply, as far as known: the same values representation.
    pub planned_values: Option<Values>,
    /// The module as Terraform read it; only `root_module.resources` and
    /// `root_module.module_calls` are looked at, on the untyped value.
    pub configuration: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ResourceChange {
    pub address: String,
    pub previous_address: Option<String>,
    pub module_address: Option<String>,
    pub mode: String,
    #[serde(rename = "type")]
    pub resource_type: String,
    pub name: String,
    /// The `count` (number) or `for_each` (string) key, absent for a single instance.
    pub index: Option<Value>,
    pub provider_name: String,
    pub deposed: Option<String>,
    pub change: Change,
    pub action_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Change {
    pub actions: Vec<String>,
    #[serde(default)]
    pub before: Value,
    #[serde(default)]
    pub after: Value,
    #[serde(default)]
    pub after_unknown: Value,
    #[serde(default)]
    pub before_sensitive: Value,
    #[serde(default)]
    pub after_sensitive: Value,
    #[serde(default)]
    pub replace_paths: Vec<Vec<Value>>,
    pub importing: Option<Value>,
    pub generated_config: Option<String>,
}

/// `mode` of a resource change or state resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ResourceMode {
    Managed,
    Data,
    Other(String),
}

impl ResourceMode {
    pub fn parse(mode: &str) -> Self {
        match mode {
            "managed" => Self::Managed,
            "data" => Self::Data,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl ResourceChange {
    pub fn action(&self) -> Action {
        Action::from_strings(&self.change.actions)
    }

    pub fn reason(&self) -> Option<ActionReason> {
        self.action_reason.as_deref().map(ActionReason::parse)
    }

    pub fn mode(&self) -> ResourceMode {
        ResourceMode::parse(&self.mode)
    }

    /// The address its parts make (see [`super::address::compose`]).
    pub fn composed_address(&self) -> Option<String> {
        super::address::compose(
            self.module_address.as_deref(),
            &self.mode,
            &self.resource_type,
            &self.name,
            self.index.as_ref(),
        )
    }

    /// `replace_paths` rendered as attribute paths (`vmid`, `clone[0].vm_id`, `tags["a"]`).
    pub fn replace_paths(&self) -> Vec<String> {
        self.change.replace_paths.iter().map(|path| render_path(path)).collect()
    }

    /// Whether this change also imports an existing object into state.
    pub fn is_import(&self) -> bool {
        self.change.importing.as_ref().is_some_and(|i| !i.is_null()) || self.change.generated_config.is_some()
    }
}

fn render_path(steps: &[Value]) -> String {
    let mut out = String::new();
    for step in steps {
        match step {
            Value::String(name) if out.is_empty() => out.push_str(name),
            Value::String(key) if key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                out.push('.');
                out.push_str(key);
            }
            Value::Number(index) => out.push_str(&format!("[{index}]")),
            other => out.push_str(&format!("[{other}]")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::render_path;

    #[test]
    fn replace_paths_render_like_terraform_addresses() {
        let path = |v: serde_json::Value| render_path(v.as_array().unwrap());
        assert_eq!(path(json!(["vmid"])), "vmid");
        assert_eq!(path(json!(["clone", 0, "vm_id"])), "clone[0].vm_id");
        assert_eq!(path(json!(["map", "key two", "id"])), "map[\"key two\"].id");
    }
}
