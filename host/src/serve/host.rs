//! An event's VM as an inventory host: what the workflow's `host(event)`
//! read from NetBox (`#{ name, vars }`), merged key by key over the source's
//! `defaults` (inventory variables, as `group_vars/all.yml`), resolved as
//! `cradle provision` resolves an inventory host — the same validation, the
//! same `vm` value, the same run scope.
//!
//! Failure modes: a `host` answer of the wrong shape, an unreadable defaults
//! file, or variables the inventory rules refuse are an error naming the VM,
//! the file or the variable (the pipeline records it as a failed `validate`).

use std::path::Path;

use rhai::Dynamic;
use serde_json::{Map as JsonMap, Value};

use crate::caps::policy::ScopedVm;
use crate::inventory::{Inventory, ResolveOptions, VmPlan, resolve};
use crate::workflow::values::to_json;

/// What `host(event)` asked for.
#[derive(Debug)]
pub enum Wanted {
    /// Nothing to do, and why (the VM is no longer Staged, say).
    Skip(String),
    /// This host, with these inventory variables.
    Host { name: String, vars: JsonMap<String, Value> },
}

/// Read `host(event)`'s answer: `#{ skip: "why" }` or `#{ name, vars }`.
pub fn wanted(value: &Dynamic) -> Result<Wanted, String> {
    let doc = to_json(value);
    let shape = "host(event) must return #{ name: \"vm-name\", vars: #{ ... } } or #{ skip: \"why\" }";
    let Value::Object(mut m) = doc else { return Err(format!("{shape}, not {}", short(&doc))) };
    if let Some(skip) = m.get("skip") {
        return Ok(Wanted::Skip(skip.as_str().map(str::to_string).unwrap_or_else(|| skip.to_string())));
    }
    let name = m.get("name").and_then(Value::as_str).ok_or_else(|| format!("{shape} (no name)"))?.to_string();
    let vars = match m.remove("vars") {
        Some(Value::Object(v)) => v,
        None | Some(Value::Null) => JsonMap::new(),
        Some(other) => return Err(format!("{shape} (vars is {})", short(&other))),
    };
    Ok(Wanted::Host { name, vars })
}

fn short(v: &Value) -> String {
    let text = v.to_string();
    if text.len() > 80 { format!("{}…", &text[..text.floor_char_boundary(80)]) } else { text }
}

/// The resolved VM: its plan, its workflow value and the run's scope.
pub struct Resolved {
    /// The plan, as the inventory resolves it.
    pub plan: VmPlan,
    /// The `vm` the workflow gets.
    pub vm: Dynamic,
    /// What the run may touch.
    pub scoped: ScopedVm,
}

/// Resolve `name` with `vars` over `defaults` for `environment`.
pub fn resolve_host(
    name: &str,
    vars: JsonMap<String, Value>,
    defaults: Option<&Path>,
    environment: &str,
) -> Result<Resolved, String> {
    let base = match defaults {
        None => JsonMap::new(),
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            match serde_yaml_ng::from_str::<Value>(&text) {
                Ok(Value::Object(m)) => m,
                Ok(Value::Null) => JsonMap::new(),
                Ok(_) => return Err(format!("{}: must be a mapping of inventory variables", path.display())),
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
    };
    let mut merged = Value::Object(base);
    merge(&mut merged, Value::Object(vars));
    let doc = serde_json::json!({ "all": { "hosts": { name: merged } } });
    let source = defaults.map(Path::to_path_buf).unwrap_or_else(|| Path::new("netbox").to_path_buf());
    let inv = Inventory::from_yaml(&doc.to_string(), &source).map_err(|e| format!("VM `{name}`: {e}"))?;
    let opts = ResolveOptions { environment: environment.to_string(), ..ResolveOptions::default() };
    let plan = resolve(&inv, name, &opts).map_err(|e| format!("VM `{name}`: {e}"))?;
    let vm = crate::provision::vm_value(&plan, &inv).map_err(|e| e.to_string())?;
    let scoped = crate::provision::scoped(&plan);
    Ok(Resolved { plan, vm, scoped })
}

/// `over` onto `base`, maps key by key (what NetBox says of `vms_config`
/// keeps the defaults' `nic0`); any other value replaces.
fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: Value) -> JsonMap<String, Value> {
        v.as_object().cloned().expect("object")
    }

    const DEFAULTS: &str = "global_os:\n  debian12:\n    template: debian-12-cloud\n    cores: 2\n    memory: 2048\n    storage: local-lvm\nvms_os: debian12\nvms_config:\n  nic0:\n    bridge: vmbr0\n    ip: dhcp\n";

    #[test]
    fn netbox_variables_over_the_defaults_resolve_like_an_inventory_host() {
        let dir = tempfile::tempdir().expect("tmp");
        let defaults = dir.path().join("defaults.yml");
        std::fs::write(&defaults, DEFAULTS).expect("write");
        let v = vars(serde_json::json!({
            "target_node": "pve2", "vms_vmid": 4100, "ansible_host": "10.0.20.10",
            "vms_config": { "cores": 4, "memory": 4096 },
        }));
        let r = resolve_host("web-1", v, Some(&defaults), "lab").expect("resolves");
        assert_eq!((r.plan.name.as_str(), r.plan.node.as_str(), r.plan.vmid), ("web-1", "pve2", Some(4100)));
        assert_eq!(r.plan.environment, "lab");
        assert_eq!(r.scoped.ssh.as_ref().map(|s| s.host.as_str()), Some("10.0.20.10"));
        assert_eq!(r.scoped.vmid, 4100);
    }

    #[test]
    fn a_bad_answer_or_a_bad_variable_names_what_is_wrong() {
        assert!(wanted(&Dynamic::from("x")).unwrap_err().contains("must return"));
        let skip = wanted(&rhai::Dynamic::from_map([("skip".into(), "VM is active".into())].into_iter().collect()));
        assert!(matches!(skip, Ok(Wanted::Skip(s)) if s == "VM is active"));
        let v = vars(serde_json::json!({ "target_node": "pve1", "vms_vmid": "abc" }));
        let err = resolve_host("web-1", v, None, "lab").err().expect("refused");
        assert!(err.contains("web-1") && err.contains("vms_vmid"), "{err}");
        let err =
            resolve_host("web-1", JsonMap::new(), Some(Path::new("/nonexistent/d.yml")), "lab").err().expect("no file");
        assert!(err.contains("/nonexistent/d.yml"), "{err}");
    }
}
