//! Terraform resource addresses rebuilt from their parts.
//!
//! Every resource entry of `terraform show -json` carries its `address` *and* the
//! parts it is made of (`module_address`, `mode`, `type`, `name`, `index`). Terraform
//! prints them from one `addrs.AbsResourceInstance`, so they always agree; a plan where
//! they do not (say `address: "proxmox_vm_qemu.vm"` with `name: "evil"`) was not
//! printed by Terraform, and the approval must not trust either half of it.

use serde_json::Value;

/// The absolute address the parts make, or `None` when a part cannot occur in an
/// address Terraform prints (an unknown mode, an index that is neither a number nor a
/// string).
pub(super) fn compose(
    module_address: Option<&str>,
    mode: &str,
    resource_type: &str,
    name: &str,
    index: Option<&Value>,
) -> Option<String> {
    let mut out = String::new();
    if let Some(module) = module_address {
        out.push_str(module);
        out.push('.');
    }
    match mode {
        "managed" => {}
        "data" => out.push_str("data."),
        _ => return None,
    }
    out.push_str(resource_type);
    out.push('.');
    out.push_str(name);
    match index {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) => out.push_str(&format!("[{n}]")),
        // Terraform quotes a string key like an HCL string literal: `"` and `\` escaped.
        Some(Value::String(key)) => {
            out.push_str("[\"");
            for c in key.chars() {
                if matches!(c, '"' | '\\') {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push_str("\"]");
        }
        Some(_) => return None,
    }
    Some(out)
}

/// The `name` part of a root-module managed address `type.name` or `type.name[key]`
/// of the given type, or `None` when the address is not of that shape.
pub(super) fn name_of<'a>(address: &'a str, resource_type: &str) -> Option<&'a str> {
    let rest = address.strip_prefix(resource_type)?.strip_prefix('.')?;
    let name = rest.split_once('[').map_or(rest, |(name, _)| name);
    (!name.is_empty() && !name.contains('.')).then_some(name)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{compose, name_of};

    #[test]
    fn addresses_are_composed_like_terraform_prints_them() {
        assert_eq!(compose(None, "managed", "proxmox_vm_qemu", "vm", None).unwrap(), "proxmox_vm_qemu.vm");
        assert_eq!(compose(None, "data", "x", "y", None).unwrap(), "data.x.y");
        assert_eq!(compose(Some("module.m[0]"), "managed", "t", "n", Some(&json!(1))).unwrap(), "module.m[0].t.n[1]");
        assert_eq!(compose(None, "managed", "t", "n", Some(&json!("a\"b"))).unwrap(), "t.n[\"a\\\"b\"]");
        assert_eq!(compose(None, "ephemeral", "t", "n", None), None);
        assert_eq!(compose(None, "managed", "t", "n", Some(&json!([1]))), None);
    }

    #[test]
    fn the_name_is_read_from_a_root_managed_address() {
        assert_eq!(name_of("proxmox_vm_qemu.vm", "proxmox_vm_qemu"), Some("vm"));
        assert_eq!(name_of("terraform_data.vm[\"web\"]", "terraform_data"), Some("vm"));
        assert_eq!(name_of("proxmox_vm_qemu.vm", "proxmox_vm"), None);
        assert_eq!(name_of("data.proxmox_vm_qemu.vm", "proxmox_vm_qemu"), None);
    }
}
