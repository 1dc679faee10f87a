//! The guest settings a workflow's `vm` carries besides the plan: the
//! cloud-init inputs (`vms_packages`, `vms_timezone`, `vms_fqdn`,
//! `vms_ssh_authorized_keys`), the snippet storage (`vms_snippet_storage`),
//! the DNS records (`vms_dns_record`) and the workflow's wait bounds
//! (`vms_wait`), read untemplated from the host's merged variables
//! ([`Inventory::guest_vars`]).
//!
//! The strings and lists of strings are typed here: a value of another type
//! (a number for `vms_fqdn`, one string for `vms_packages`, a vault-encrypted
//! value) is an `Invalid` error naming the host, the variable, the value and
//! where it was set, instead of being ignored downstream. Their content (an
//! FQDN that does not start with the VM name, a bad time zone, a storage ID
//! `cicustom` refuses) is checked by `cradle::check_inputs`, like the records
//! of `vms_dns_record`, whose shape (a map or a list of maps) that check
//! reports record by record. `vms_wait` is the workflow's to read (keys it
//! does not know default there), so both stay JSON.

use serde_json::Value;

use super::values::Ctx;
use super::{Inventory, InventoryError};

/// A host's guest settings (see the module doc). Serialized under the
/// script-visible names a workflow's `vm` uses (`packages`, `dns`, ...).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GuestVars {
    /// `vms_packages`: `[]` when unset, `None` when set to null.
    pub packages: Option<Vec<String>>,
    /// `vms_timezone`.
    pub timezone: Option<String>,
    /// `vms_fqdn`.
    pub fqdn: Option<String>,
    /// `vms_snippet_storage` (the workflow defaults it to `local`).
    pub snippet_storage: Option<String>,
    /// `vms_ssh_authorized_keys`: `[]` when unset, `None` when set to null.
    pub authorized_keys: Option<Vec<String>>,
    /// `vms_dns_record`, null when unset.
    pub dns: Value,
    /// `vms_wait`, null when unset.
    pub wait: Value,
}

impl Inventory {
    /// The guest settings of `host`, untemplated.
    pub fn guest_vars(&self, host: &str) -> Result<GuestVars, InventoryError> {
        let h = self.host_index(host)?;
        let vars = self.merged(h);
        let ctx = Ctx { inv: self, h };
        let text = |name: &str| match vars.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(ctx.invalid(name, other, "a string")),
        };
        let list = |name: &str| match vars.get(name) {
            None => Ok(Some(Vec::new())),
            Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
                Ok(Some(items.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()))
            }
            Some(other) => Err(ctx.invalid(name, other, "a list of strings, e.g. [vim, curl]")),
        };
        let json = |name: &str| vars.get(name).cloned().unwrap_or(Value::Null);
        Ok(GuestVars {
            packages: list("vms_packages")?,
            timezone: text("vms_timezone")?,
            fqdn: text("vms_fqdn")?,
            snippet_storage: text("vms_snippet_storage")?,
            authorized_keys: list("vms_ssh_authorized_keys")?,
            dns: json("vms_dns_record"),
            wait: json("vms_wait"),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn guest(host_vars: &str) -> Result<GuestVars, InventoryError> {
        let text = format!("all:\n  hosts:\n    vm-0:\n{host_vars}");
        Inventory::from_yaml(&text, Path::new("hosts.yml")).expect("yaml").guest_vars("vm-0")
    }

    #[test]
    fn unset_settings_are_empty_lists_and_nulls() {
        let g = guest("      ansible_host: 10.0.0.5\n").expect("guest vars");
        assert_eq!((g.packages, g.authorized_keys), (Some(vec![]), Some(vec![])));
        assert_eq!((g.timezone, g.fqdn, g.snippet_storage), (None, None, None));
        assert_eq!((g.dns, g.wait), (Value::Null, Value::Null));
        let null = guest("      vms_packages: null\n      vms_fqdn: null\n").expect("guest vars");
        assert_eq!((null.packages, null.fqdn), (None, None));
    }

    #[test]
    fn set_settings_keep_their_values() {
        let g = guest(
            "      vms_packages: [vim, curl]\n      vms_timezone: Europe/Berlin\n      vms_wait: { task_ms: 5 }\n      \
             vms_dns_record: { zone: lab., name: vm-0, kind: a, value: 10.0.0.5 }\n",
        )
        .expect("guest vars");
        assert_eq!(g.packages, Some(vec!["vim".to_string(), "curl".to_string()]));
        assert_eq!(g.timezone.as_deref(), Some("Europe/Berlin"));
        assert_eq!(g.wait, serde_json::json!({"task_ms": 5}));
        assert_eq!(g.dns["kind"], "a");
    }

    #[test]
    fn a_value_of_another_type_is_refused_naming_host_and_variable() {
        let e = guest("      vms_packages: vim\n").expect_err("one string").to_string();
        assert!(e.contains("host `vm-0`") && e.contains("vms_packages") && e.contains("a list of strings"), "{e}");
        let e = guest("      vms_ssh_authorized_keys: [ssh-ed25519 AAAA, 5]\n").expect_err("a number").to_string();
        assert!(e.contains("vms_ssh_authorized_keys"), "{e}");
        let e = guest("      vms_fqdn: 5\n").expect_err("a number").to_string();
        assert!(e.contains("host `vm-0`") && e.contains("vms_fqdn = 5") && e.contains("a string"), "{e}");
    }
}
