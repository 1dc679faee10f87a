//! The module cradle renders for one host: `main.tf.json` with the provider
//! requirement, an empty provider block (credentials come from terraform's
//! environment) and the single resource `vm` of the flavour, exactly as
//! docs/TERRAFORM.md shows it.
//!
//! Contract: the resource is the clone's initial state only — CPU, memory,
//! boot disk (when a size is given), extra disks, NICs with VLAN tags, the
//! cloud-init drive and snippet references, tags — created stopped on the
//! template's node. `lifecycle.ignore_changes` covers the node, the power
//! state, the disks and the cloud-init references, so what the workflow does
//! afterwards (migration, start, cloud-init drive removal, reboot) never shows
//! as drift and a finalized VM plans as no-op. Rendering is deterministic: the
//! same input gives the same bytes. It cannot fail: the inputs are typed and
//! validated by the host before a backend sees them.
//!
//! Maintenance (`cradle plan`, wit/maintenance.wit) renders with a [`Lift`]:
//! the operator fields whose change must reach Terraform although creation
//! ignores them. Of the ignored attributes only `disk` is ever lifted (a data
//! disk grown or added, the boot disk grown); node, power state and cloud-init
//! stay ignored, since the workflow owns them. With `disk` lifted, telmate's
//! `disk` list leaves out the cloud-init drive (a complete VM has none, and
//! rendering it would plan to add it back). The module written for
//! provisioning is always rendered with [`Lift::none`].

use serde_json::{Map, Value, json};

use crate::Flavour;

/// The one file of a host's module.
pub const MODULE_FILE: &str = "main.tf.json";

/// What a VM's resource is rendered from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmInput {
    /// The canonical VM name.
    pub name: String,
    /// Its VMID.
    pub vmid: u32,
    /// The template's name (telmate clones by name).
    pub template: String,
    /// The template's VMID (bpg clones by id).
    pub template_vmid: u32,
    /// The node the template is on: the clone is made there.
    pub template_node: String,
    /// The storage of the boot disk and the cloud-init drive.
    pub storage: String,
    /// Cores.
    pub cores: u32,
    /// Memory in MiB.
    pub memory_mib: u32,
    /// The boot disk's size in GiB; `None` keeps the template's.
    pub disk_gib: Option<u32>,
    /// Extra data disks.
    pub disks: Vec<DiskInput>,
    /// NICs in slot order.
    pub nics: Vec<NicInput>,
    /// Tags, in the form PVE stores them (lowercased, de-duplicated, sorted:
    /// the caller normalises them with `cradle_guest::config::pve_tags`), so
    /// what the provider reads back equals what was rendered.
    pub tags: Vec<String>,
    /// The cloud-init snippets; `None` before they are uploaded (a plan made
    /// then is only a check: the references are ignored after creation).
    pub snippets: Option<SnippetRefs>,
}

/// An extra disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskInput {
    /// `scsi1`.
    pub slot: String,
    /// Its storage.
    pub storage: String,
    /// Size in GiB.
    pub size_gib: u32,
}

/// A NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicInput {
    /// `net0`.
    pub slot: String,
    /// The bridge.
    pub bridge: String,
    /// The VLAN tag.
    pub vlan: Option<u16>,
}

/// The snippet volumes (`local:snippets/web-1-user.yaml`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnippetRefs {
    /// user-data.
    pub user: String,
    /// network-data.
    pub network: String,
    /// meta-data.
    pub meta: Option<String>,
}

/// The cloud-init drive's slot.
const CLOUDINIT_SLOT: &str = "ide2";

/// The attributes a maintenance plan takes out of `lifecycle.ignore_changes`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lift {
    /// The disks (`disk` in both flavours).
    pub disk: bool,
}

/// An operator field name [`Lift::parse`] does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot lift `{0}` from the terraform module's ignore_changes: the known fields are {KNOWN_FIELDS}")]
pub struct UnknownField(pub String);

/// The operator field names a lift list may hold (maintenance's words).
const KNOWN_FIELDS: &str = "disk, disks, boot_disk, memory, cores, nics, tags, startup_order";

impl Lift {
    /// Nothing lifted: the module as provisioning renders it.
    pub fn none() -> Lift {
        Lift::default()
    }

    /// The lift for the operator field names `fields`: `disk`, `disks` and
    /// `boot_disk` lift the flavour's `disk`; `memory`, `cores`, `nics`,
    /// `tags` and `startup_order` are accepted and lift nothing (terraform
    /// never ignores them, or does not manage them: `startup`).
    pub fn parse<S: AsRef<str>>(fields: &[S]) -> Result<Lift, UnknownField> {
        let mut lift = Lift::none();
        for f in fields {
            match f.as_ref() {
                "disk" | "disks" | "boot_disk" => lift.disk = true,
                "memory" | "cores" | "nics" | "tags" | "startup_order" => {}
                other => return Err(UnknownField(other.to_string())),
            }
        }
        Ok(lift)
    }
}

/// `main.tf.json` for `vm` in `flavour`, as provisioning renders it.
pub fn render(flavour: Flavour, vm: &VmInput) -> String {
    render_lifted(flavour, vm, &Lift::none())
}

/// `main.tf.json` for `vm` in `flavour` with the attributes of `lift` taken
/// out of `ignore_changes` (a maintenance plan's module).
pub fn render_lifted(flavour: Flavour, vm: &VmInput, lift: &Lift) -> String {
    let source = match flavour {
        Flavour::Telmate => "telmate/proxmox",
        Flavour::Bpg => "bpg/proxmox",
    };
    let resource = match flavour {
        Flavour::Telmate => telmate(vm, lift),
        Flavour::Bpg => bpg(vm, lift),
    };
    let module = json!({
        "terraform": { "required_providers": { "proxmox": { "source": source } } },
        "provider": { "proxmox": {} },
        "resource": { flavour.resource_type(): { "vm": resource } },
    });
    // serde_json's Map is ordered by key (no `preserve_order`): deterministic.
    let mut text = serde_json::to_string_pretty(&module).unwrap_or_default();
    text.push('\n');
    text
}

/// The NIC index N of `netN` (the slot names are validated by the host).
fn nic_index(slot: &str) -> u64 {
    slot.trim_start_matches("net").parse().unwrap_or(0)
}

/// `ignore_changes` of a flavour, without what `lift` lifts.
fn ignored(all: [&'static str; 4], lift: &Lift) -> Value {
    json!(all.into_iter().filter(|a| !(lift.disk && *a == "disk")).collect::<Vec<_>>())
}

fn telmate(vm: &VmInput, lift: &Lift) -> Value {
    // In the order the real provider reads disks back (ide, sata, scsi,
    // virtio), so a refresh reports no drift even though `disk` is ignored.
    // A lifted `disk` describes the complete VM, which has no cloud-init drive.
    let mut disks = Vec::new();
    if !lift.disk {
        disks.push(json!({ "slot": CLOUDINIT_SLOT, "type": "cloudinit", "storage": vm.storage }));
    }
    if let Some(gib) = vm.disk_gib {
        disks.push(json!({ "slot": "scsi0", "type": "disk", "storage": vm.storage, "size": format!("{gib}G") }));
    }
    for d in &vm.disks {
        disks.push(json!({ "slot": d.slot, "type": "disk", "storage": d.storage, "size": format!("{}G", d.size_gib) }));
    }
    let network: Vec<Value> = vm
        .nics
        .iter()
        .map(|n| {
            let mut nic = json!({ "id": nic_index(&n.slot), "model": "virtio", "bridge": n.bridge });
            if let Some(tag) = n.vlan {
                nic["tag"] = json!(tag);
            }
            nic
        })
        .collect();
    let mut r = Map::new();
    r.insert("name".into(), json!(vm.name));
    r.insert("vmid".into(), json!(vm.vmid));
    r.insert("target_node".into(), json!(vm.template_node));
    r.insert("clone".into(), json!(vm.template));
    r.insert("full_clone".into(), json!(true));
    r.insert("os_type".into(), json!("cloud-init"));
    r.insert("memory".into(), json!(vm.memory_mib));
    r.insert("cpu".into(), json!([{ "cores": vm.cores, "sockets": 1 }]));
    r.insert("power_state".into(), json!("stopped"));
    r.insert("disk".into(), Value::Array(disks));
    r.insert("network".into(), Value::Array(network));
    if let Some(s) = &vm.snippets {
        let mut parts = vec![format!("user={}", s.user), format!("network={}", s.network)];
        if let Some(meta) = &s.meta {
            parts.push(format!("meta={meta}"));
        }
        r.insert("cicustom".into(), json!(parts.join(",")));
    }
    if !vm.tags.is_empty() {
        r.insert("tags".into(), json!(vm.tags.join(";")));
    }
    r.insert(
        "lifecycle".into(),
        json!({ "ignore_changes": ignored(["target_node", "power_state", "disk", "cicustom"], lift) }),
    );
    Value::Object(r)
}

fn bpg(vm: &VmInput, lift: &Lift) -> Value {
    let mut disks = Vec::new();
    if let Some(gib) = vm.disk_gib {
        disks.push(json!({ "interface": "scsi0", "datastore_id": vm.storage, "size": gib }));
    }
    for d in &vm.disks {
        disks.push(json!({ "interface": d.slot, "datastore_id": d.storage, "size": d.size_gib }));
    }
    let network: Vec<Value> = vm
        .nics
        .iter()
        .map(|n| {
            let mut nic = json!({ "bridge": n.bridge, "model": "virtio" });
            if let Some(tag) = n.vlan {
                nic["vlan_id"] = json!(tag);
            }
            nic
        })
        .collect();
    let mut init = json!({ "datastore_id": vm.storage, "interface": CLOUDINIT_SLOT });
    if let Some(s) = &vm.snippets {
        init["user_data_file_id"] = json!(s.user);
        init["network_data_file_id"] = json!(s.network);
        if let Some(meta) = &s.meta {
            init["meta_data_file_id"] = json!(meta);
        }
    }
    let mut r = Map::new();
    r.insert("name".into(), json!(vm.name));
    r.insert("vm_id".into(), json!(vm.vmid));
    r.insert("node_name".into(), json!(vm.template_node));
    r.insert("started".into(), json!(false));
    r.insert("clone".into(), json!([{ "vm_id": vm.template_vmid, "full": true }]));
    r.insert("cpu".into(), json!([{ "cores": vm.cores }]));
    r.insert("memory".into(), json!([{ "dedicated": vm.memory_mib }]));
    if !disks.is_empty() {
        r.insert("disk".into(), Value::Array(disks));
    }
    r.insert("network_device".into(), Value::Array(network));
    r.insert("initialization".into(), json!([init]));
    if !vm.tags.is_empty() {
        r.insert("tags".into(), json!(vm.tags));
    }
    r.insert(
        "lifecycle".into(),
        json!({ "ignore_changes": ignored(["node_name", "started", "disk", "initialization"], lift) }),
    );
    Value::Object(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web1() -> VmInput {
        VmInput {
            name: "web-1".into(),
            vmid: 120,
            template: "debian-12-template".into(),
            template_vmid: 9000,
            template_node: "pve1".into(),
            storage: "local-lvm".into(),
            cores: 2,
            memory_mib: 2048,
            disk_gib: Some(20),
            disks: vec![DiskInput { slot: "scsi1".into(), storage: "local-lvm".into(), size_gib: 50 }],
            nics: vec![NicInput { slot: "net0".into(), bridge: "vmbr0".into(), vlan: Some(20) }],
            tags: vec!["env-test".into(), "web".into()],
            snippets: Some(SnippetRefs {
                user: "local:snippets/web-1-user.yaml".into(),
                network: "local:snippets/web-1-network.yaml".into(),
                meta: Some("local:snippets/web-1-meta.yaml".into()),
            }),
        }
    }

    fn resource(flavour: Flavour, vm: &VmInput) -> Value {
        let m: Value = serde_json::from_str(&render(flavour, vm)).expect("JSON");
        m["resource"][flavour.resource_type()]["vm"].clone()
    }

    #[test]
    fn telmate_renders_the_documented_resource() {
        let r = resource(Flavour::Telmate, &web1());
        assert_eq!(r["target_node"], "pve1", "cloned on the template's node");
        assert_eq!((r["clone"].as_str(), r["vmid"].as_u64()), (Some("debian-12-template"), Some(120)));
        assert_eq!(r["disk"][0], json!({ "slot": "ide2", "type": "cloudinit", "storage": "local-lvm" }));
        assert_eq!(r["disk"][1], json!({ "slot": "scsi0", "type": "disk", "storage": "local-lvm", "size": "20G" }));
        assert_eq!(r["network"], json!([{ "id": 0, "model": "virtio", "bridge": "vmbr0", "tag": 20 }]));
        assert_eq!(r["tags"], "env-test;web");
        assert_eq!(r["power_state"], "stopped");
        assert!(r["cicustom"].as_str().is_some_and(|c| c.starts_with("user=local:snippets/web-1-user.yaml,network=")));
        assert_eq!(r["lifecycle"]["ignore_changes"], json!(["target_node", "power_state", "disk", "cicustom"]));
    }

    #[test]
    fn bpg_renders_the_documented_resource() {
        let r = resource(Flavour::Bpg, &web1());
        assert_eq!((r["node_name"].as_str(), r["vm_id"].as_u64()), (Some("pve1"), Some(120)));
        assert_eq!(r["clone"], json!([{ "vm_id": 9000, "full": true }]));
        assert_eq!(r["memory"], json!([{ "dedicated": 2048 }]));
        assert_eq!(r["network_device"], json!([{ "bridge": "vmbr0", "model": "virtio", "vlan_id": 20 }]));
        assert_eq!(r["initialization"][0]["user_data_file_id"], "local:snippets/web-1-user.yaml");
        assert_eq!(r["started"], false);
        assert_eq!(r["lifecycle"]["ignore_changes"], json!(["node_name", "started", "disk", "initialization"]));
    }

    #[test]
    fn optional_parts_are_left_out_and_rendering_is_deterministic() {
        let mut vm = web1();
        vm.disk_gib = None;
        vm.disks.clear();
        vm.tags.clear();
        vm.snippets = None;
        vm.nics[0].vlan = None;
        let r = resource(Flavour::Telmate, &vm);
        assert_eq!(r["disk"], json!([{ "slot": "ide2", "type": "cloudinit", "storage": "local-lvm" }]));
        assert!(r.get("tags").is_none() && r.get("cicustom").is_none() && r["network"][0].get("tag").is_none());
        let b = resource(Flavour::Bpg, &vm);
        assert!(b.get("disk").is_none() && b["initialization"][0].get("user_data_file_id").is_none());
        assert_eq!(render(Flavour::Bpg, &vm), render(Flavour::Bpg, &vm));
    }

    #[test]
    fn a_lifted_disk_leaves_ignore_changes_and_telmate_renders_no_cloudinit_drive() {
        let mut vm = web1();
        vm.snippets = None;
        let lift = Lift::parse(&["disk", "memory"]).expect("known fields");
        let t: Value = serde_json::from_str(&render_lifted(Flavour::Telmate, &vm, &lift)).expect("JSON");
        let t = &t["resource"]["proxmox_vm_qemu"]["vm"];
        assert_eq!(t["lifecycle"]["ignore_changes"], json!(["target_node", "power_state", "cicustom"]));
        assert_eq!(
            t["disk"],
            json!([
                { "slot": "scsi0", "type": "disk", "storage": "local-lvm", "size": "20G" },
                { "slot": "scsi1", "type": "disk", "storage": "local-lvm", "size": "50G" }
            ]),
            "the complete VM's disks: no cloud-init drive to add back"
        );
        let b: Value = serde_json::from_str(&render_lifted(Flavour::Bpg, &vm, &lift)).expect("JSON");
        let b = &b["resource"]["proxmox_virtual_environment_vm"]["vm"];
        assert_eq!(b["lifecycle"]["ignore_changes"], json!(["node_name", "started", "initialization"]));
        assert_eq!(b["disk"][1], json!({ "interface": "scsi1", "datastore_id": "local-lvm", "size": 50 }));
    }

    #[test]
    fn fields_terraform_never_ignores_lift_nothing_and_provisioning_renders_unlifted() {
        let vm = web1();
        let lift = Lift::parse(&["memory", "cores", "nics", "tags", "startup_order"]).expect("known fields");
        assert_eq!(lift, Lift::none());
        for f in [Flavour::Telmate, Flavour::Bpg] {
            assert_eq!(render_lifted(f, &vm, &lift), render(f, &vm), "{f:?}");
        }
        assert_eq!(resource(Flavour::Telmate, &vm)["disk"][0]["type"], "cloudinit");
    }

    #[test]
    fn an_unknown_field_to_lift_is_refused_naming_it_and_the_known_ones() {
        let err = Lift::parse(&["disk", "cpu_type"]).expect_err("unknown").to_string();
        assert!(err.contains("`cpu_type`") && err.contains("disk, disks"), "{err}");
    }
}
