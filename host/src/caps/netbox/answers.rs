//! NetBox's JSON answers as the `netbox` capability's WIT records: the one
//! reading of a VM, an IP address, a VM interface, a VM listing and the
//! server's version. Pure (no I/O), so each is tested on NetBox 4.7.3's own
//! answers without a server.
//!
//! Contract: a value of the wrong type where a field is required (`id`,
//! `name`) is `failed` naming the object and the field; optional fields that
//! are absent or `null` are none. A selection (`status`, a selection custom
//! field) is read as its `value`, as NetBox 4.x writes `{value, label}`; a
//! plain string is taken as it is (webhook snapshots, older versions).

use serde_json::Value;

use crate::contract::CapError;
use crate::contract::bindings::cradle::host::netbox::{CustomFields, IpAddress, Vm, VmInterface, VmSummary};

/// The object type of VM interfaces, as IP and MAC assignments name it.
pub(crate) const VM_INTERFACE_OBJECT_TYPE: &str = "virtualization.vminterface";

fn missing(what: &str, field: &str, v: &Value) -> CapError {
    CapError::failed(format!("NetBox: {what}: the answer has no valid `{field}`: {}", short(v)))
}

/// At most 300 characters of `v`, for a message.
pub(crate) fn short(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}

fn id(v: &Value, what: &str) -> Result<u64, CapError> {
    v.get("id").and_then(Value::as_u64).ok_or_else(|| missing(what, "id", v))
}

fn string(v: &Value, key: &str, what: &str) -> Result<String, CapError> {
    v.get(key).and_then(Value::as_str).map(str::to_string).ok_or_else(|| missing(what, key, v))
}

/// A selection's value: `{value, label}` → value; a plain value as it is.
fn choice(v: &Value) -> &Value {
    match v.get("value") {
        Some(inner) if v.is_object() => inner,
        _ => v,
    }
}

fn opt_string(v: Option<&Value>) -> Option<String> {
    match v.map(choice) {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
}

fn opt_u32(v: Option<&Value>, what: &str, field: &str) -> Result<Option<u32>, CapError> {
    let bad =
        |v: &Value| CapError::failed(format!("NetBox: {what}: custom field `{field}` is not a whole number: {v}"));
    match v.map(choice) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => s.trim().parse().map(Some).map_err(|_| bad(&Value::String(s.clone()))),
        Some(n @ Value::Number(_)) => n.as_u64().and_then(|n| u32::try_from(n).ok()).map(Some).ok_or_else(|| bad(n)),
        Some(other) => Err(bad(other)),
    }
}

fn opt_f64(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// `GET /api/virtualization/virtual-machines/ID/` as a [`Vm`], with
/// `primary_ip4` given separately (read in full by the caller, or none).
pub(crate) fn vm(v: &Value, primary_ip4: Option<IpAddress>) -> Result<Vm, CapError> {
    let what = match v.get("id").and_then(Value::as_u64) {
        Some(n) => format!("virtual machine {n}"),
        None => "virtual machine".to_string(),
    };
    let status = v.get("status").map(choice).and_then(Value::as_str).ok_or_else(|| missing(&what, "status", v))?;
    let cf = v.get("custom_fields");
    let field = |name: &str| cf.and_then(|c| c.get(name));
    Ok(Vm {
        id: id(v, &what)?,
        name: string(v, "name", &what)?,
        status: status.to_string(),
        cluster: v.get("cluster").and_then(|c| c.get("name")).and_then(Value::as_str).map(str::to_string),
        vcpus: opt_f64(v.get("vcpus")),
        memory_mb: v.get("memory").and_then(Value::as_u64),
        custom_fields: CustomFields {
            proxmox_node: opt_string(field("proxmox_node")),
            proxmox_template: opt_string(field("proxmox_template")),
            proxmox_datastore: opt_string(field("proxmox_datastore")),
            proxmox_vmid: opt_u32(field("proxmox_vmid"), &what, "proxmox_vmid")?,
            semaphore_template: opt_u32(field("semaphore_template"), &what, "semaphore_template")?,
        },
        primary_ip4,
    })
}

/// The id of a VM's `primary_ip4`, if it has one.
pub(crate) fn primary_ip4_id(v: &Value) -> Option<u64> {
    v.get("primary_ip4").and_then(|ip| ip.get("id")).and_then(Value::as_u64)
}

/// `GET /api/ipam/ip-addresses/ID/` as an [`IpAddress`].
pub(crate) fn ip_address(v: &Value) -> Result<IpAddress, CapError> {
    let what = "IP address";
    let on_vm_interface = v.get("assigned_object_type").and_then(Value::as_str) == Some(VM_INTERFACE_OBJECT_TYPE);
    Ok(IpAddress {
        id: id(v, what)?,
        address: string(v, "address", what)?,
        dns_name: v.get("dns_name").and_then(Value::as_str).unwrap_or_default().to_string(),
        vm_interface: if on_vm_interface { v.get("assigned_object_id").and_then(Value::as_u64) } else { None },
    })
}

/// One VM interface of a listing or a read.
pub(crate) fn interface(v: &Value) -> Result<VmInterface, CapError> {
    let what = "VM interface";
    Ok(VmInterface { id: id(v, what)?, name: string(v, "name", what)?, mac: opt_string(v.get("mac_address")) })
}

/// The `results` of a paged listing.
pub(crate) fn results<'a>(v: &'a Value, what: &str) -> Result<&'a Vec<Value>, CapError> {
    v.get("results").and_then(Value::as_array).ok_or_else(|| missing(what, "results", v))
}

/// One VM of a listing.
pub(crate) fn vm_summary(v: &Value) -> Result<VmSummary, CapError> {
    Ok(VmSummary { id: id(v, "virtual machine")?, name: string(v, "name", "virtual machine")? })
}

/// `netbox-version` of `GET /api/status/` (`4.7.3`, `4.2.0-Docker-3.1`) as
/// `(major, minor)`.
pub(crate) fn version(v: &Value) -> Result<(u32, u32), CapError> {
    let text = v.get("netbox-version").and_then(Value::as_str).ok_or_else(|| missing("status", "netbox-version", v))?;
    let mut parts = text.split(|c: char| !c.is_ascii_digit());
    let mut number = || parts.next().and_then(|p| p.parse::<u32>().ok());
    match (number(), number()) {
        (Some(major), Some(minor)) => Ok((major, minor)),
        _ => Err(CapError::failed(format!("NetBox: status: `netbox-version` `{text}` is not a version"))),
    }
}

/// Whether a NetBox of `version` takes `mac_address` on an interface: 4.7+
/// (writable again) and before 4.2 (a plain field). 4.2–4.6 ignore it there
/// (read-only) and need the MACAddress object.
pub(crate) fn takes_mac_field((major, minor): (u32, u32)) -> bool {
    major > 4 || (major == 4 && minor >= 7) || major < 4 || (major == 4 && minor < 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The shape of a NetBox 4.7.3 VM (`GET .../virtual-machines/ID/`, trimmed).
    fn vm_473() -> Value {
        json!({
            "id": 17, "name": "web-1", "status": {"value": "staged", "label": "Staged"},
            "cluster": {"id": 3, "name": "lab", "url": "/api/virtualization/clusters/3/"},
            "vcpus": 2.0, "memory": 2048,
            "primary_ip4": {"id": 41, "address": "10.0.10.5/24", "family": {"value": 4, "label": "IPv4"}},
            "custom_fields": {
                "proxmox_node": "pve1", "proxmox_template": {"value": "debian-12", "label": "Debian 12"},
                "proxmox_datastore": "local-lvm", "proxmox_vmid": 4100, "semaphore_template": null,
            },
        })
    }

    #[test]
    fn a_vm_reads_its_status_value_custom_fields_and_cluster() {
        let ip = IpAddress { id: 41, address: "10.0.10.5/24".into(), dns_name: String::new(), vm_interface: Some(9) };
        let vm = vm(&vm_473(), Some(ip.clone())).expect("vm");
        assert_eq!((vm.id, vm.name.as_str(), vm.status.as_str()), (17, "web-1", "staged"));
        assert_eq!((vm.cluster.as_deref(), vm.vcpus, vm.memory_mb), (Some("lab"), Some(2.0), Some(2048)));
        assert_eq!(vm.custom_fields.proxmox_template.as_deref(), Some("debian-12"), "a selection's value");
        assert_eq!((vm.custom_fields.proxmox_vmid, vm.custom_fields.semaphore_template), (Some(4100), None));
        assert_eq!(format!("{:?}", vm.primary_ip4), format!("{:?}", Some(ip)));
        assert_eq!(primary_ip4_id(&vm_473()), Some(41));
    }

    #[test]
    fn a_vm_without_fields_or_with_a_bad_number_is_read_as_none_or_refused() {
        let bare =
            json!({"id": 1, "name": "a", "status": "planned", "cluster": null, "vcpus": null, "custom_fields": {}});
        let vm = vm(&bare, None).expect("bare");
        assert_eq!((vm.status.as_str(), vm.cluster, vm.vcpus), ("planned", None, None));
        assert_eq!(vm.custom_fields.proxmox_node, None);
        let bad = json!({"id": 1, "name": "a", "status": "planned", "custom_fields": {"proxmox_vmid": "x12"}});
        let e = super::vm(&bad, None).expect_err("bad vmid");
        assert!(e.message.contains("custom field `proxmox_vmid` is not a whole number"), "{}", e.message);
        let e = super::vm(&json!({"id": 1, "status": "active"}), None).expect_err("no name");
        assert!(e.message.contains("virtual machine 1: the answer has no valid `name`"), "{}", e.message);
    }

    #[test]
    fn an_ip_is_on_a_vm_interface_only_when_its_object_type_says_so() {
        let on_vm = json!({"id": 41, "address": "10.0.10.5/24", "dns_name": "web-1.lab",
            "assigned_object_type": "virtualization.vminterface", "assigned_object_id": 9});
        assert_eq!(ip_address(&on_vm).expect("ip").vm_interface, Some(9));
        let on_device = json!({"id": 42, "address": "10.0.10.6/24",
            "assigned_object_type": "dcim.interface", "assigned_object_id": 9});
        assert_eq!(ip_address(&on_device).expect("ip").vm_interface, None);
    }

    #[test]
    fn the_mac_write_path_follows_the_version() {
        assert!(takes_mac_field(version(&json!({"netbox-version": "4.7.3"})).expect("4.7.3")));
        assert!(!takes_mac_field(version(&json!({"netbox-version": "4.2.0-Docker-3.1"})).expect("4.2")));
        assert!(!takes_mac_field((4, 6)));
        assert!(takes_mac_field((4, 1)) && takes_mac_field((3, 7)) && takes_mac_field((5, 0)));
        assert!(version(&json!({"netbox-version": "dev"})).is_err());
    }
}
