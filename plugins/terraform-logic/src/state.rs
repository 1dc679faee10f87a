//! The *values representation* of `terraform show -json`, shared by a state's
//! `values` and a plan's `prior_state.values`.
//!
//! Only the keys the checks need are read; unknown keys are ignored. Modules nest:
//! `root_module.resources[]` holds root resources, `root_module.child_modules[]`
//! holds one entry per module instance (each with its own `resources[]` whose
//! `address` is absolute, e.g. `module.dhcp[0].terraform_data.reservation`).

use serde::Deserialize;
use serde_json::Value;

/// `terraform show -json` of a state, or a plan's `prior_state`.
#[derive(Debug, Deserialize)]
pub(crate) struct StateRepr {
    // `format_version` is checked on the untyped value before this is parsed.
    /// Absent when there is no state at all (`{"format_version":"1.0"}`).
    pub values: Option<Values>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Values {
    pub root_module: Option<Module>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Module {
    /// A child module instance's address (`module.dhcp[0]`); absent on the root.
    pub address: Option<String>,
    #[serde(default)]
    pub resources: Vec<StateResource>,
    #[serde(default)]
    pub child_modules: Vec<Module>,
}

/// One resource instance object in state.
#[derive(Debug, Deserialize)]
pub(crate) struct StateResource {
    pub address: String,
    pub mode: String,
    #[serde(rename = "type")]
    pub resource_type: String,
    /// Always printed by Terraform; optional here so that ownership, which does not
    /// need it, reads hand-trimmed states too (the approval requires it).
    pub name: Option<String>,
    /// The `count` / `for_each` key of the instance, if any.
    pub index: Option<Value>,
    pub provider_name: String,
    #[serde(default)]
    pub values: Value,
    /// Set on a deposed object (left over from a failed create-before-destroy).
    pub deposed_key: Option<String>,
}

/// A resource found in state, with whether it sits in a child module.
pub(crate) struct Located<'a> {
    pub resource: &'a StateResource,
    pub in_child_module: bool,
    /// The address of the module instance holding it (`None` in the root module).
    pub module_address: Option<&'a str>,
}

impl StateRepr {
    /// Every resource of the state, root module first, then child modules depth-first.
    pub fn resources(&self) -> Vec<Located<'_>> {
        self.values.as_ref().map(Values::resources).unwrap_or_default()
    }
}

impl Values {
    /// Every resource, root module first, then child modules depth-first.
    pub fn resources(&self) -> Vec<Located<'_>> {
        let mut out = Vec::new();
        if let Some(root) = &self.root_module {
            collect(root, false, &mut out);
        }
        out
    }
}

fn collect<'a>(module: &'a Module, in_child_module: bool, out: &mut Vec<Located<'a>>) {
    let module_address = if in_child_module { module.address.as_deref() } else { None };
    out.extend(module.resources.iter().map(|resource| Located { resource, in_child_module, module_address }));
    for child in &module.child_modules {
        collect(child, true, out);
    }
}
