//! The module the tests apply: `main.tf.json` rendered exactly in the shape
//! docs/TERRAFORM.md shows for each flavour (same attributes, same lifecycle).

use serde_json::{Value, json};

/// The provider flavour under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    Telmate,
    Bpg,
}

impl Flavour {
    /// The resource address in plans and state.
    pub fn address(self) -> &'static str {
        match self {
            Flavour::Telmate => "proxmox_vm_qemu.vm",
            Flavour::Bpg => "proxmox_virtual_environment_vm.vm",
        }
    }
}

/// What the inventory says about the VM.
#[derive(Debug, Clone)]
pub struct VmSpec {
    pub name: String,
    pub vmid: u64,
    pub node: String,
    pub template_name: String,
    pub template_vmid: u64,
    pub memory: u64,
    pub cores: u64,
    pub disk_gib: Option<u64>,
    pub extra_disks: Vec<u64>,
    pub storage: String,
    pub nics: Vec<(String, Option<u64>)>,
    pub tags: Vec<String>,
}

impl Default for VmSpec {
    fn default() -> Self {
        VmSpec {
            name: "web-1".into(),
            vmid: 120,
            node: "pve1".into(),
            template_name: "debian-12-cloud".into(),
            template_vmid: 9000,
            memory: 2048,
            cores: 2,
            disk_gib: Some(20),
            extra_disks: vec![50],
            storage: "local-lvm".into(),
            nics: vec![("vmbr0".into(), Some(20))],
            tags: vec!["env-test".into(), "web".into()],
        }
    }
}

impl VmSpec {
    /// The snippet volume of one cloud-init part.
    pub fn snippet(&self, part: &str) -> String {
        format!("local:snippets/{}-{part}.yaml", self.name)
    }

    /// Telmate's `cicustom` value.
    pub fn cicustom(&self) -> String {
        format!("user={},network={},meta={}", self.snippet("user"), self.snippet("network"), self.snippet("meta"))
    }
}

fn telmate(s: &VmSpec) -> Value {
    let mut disks = Vec::new();
    if let Some(g) = s.disk_gib {
        disks.push(json!({"slot": "scsi0", "type": "disk", "storage": s.storage, "size": format!("{g}G")}));
    }
    for (i, g) in s.extra_disks.iter().enumerate() {
        disks.push(
            json!({"slot": format!("scsi{}", i + 1), "type": "disk", "storage": s.storage, "size": format!("{g}G")}),
        );
    }
    disks.push(json!({"slot": "ide2", "type": "cloudinit", "storage": s.storage}));
    let network: Vec<Value> = s
        .nics
        .iter()
        .enumerate()
        .map(|(i, (bridge, vlan))| {
            let mut n = json!({"id": i, "model": "virtio", "bridge": bridge});
            if let Some(v) = vlan {
                n["tag"] = json!(v);
            }
            n
        })
        .collect();
    let mut vm = json!({
        "name": s.name,
        "vmid": s.vmid,
        "target_node": s.node,
        "clone": s.template_name,
        "full_clone": true,
        "os_type": "cloud-init",
        "memory": s.memory,
        "cpu": [{"cores": s.cores, "sockets": 1}],
        "power_state": "stopped",
        "disk": disks,
        "network": network,
        "cicustom": s.cicustom(),
        "lifecycle": {"ignore_changes": ["target_node", "power_state", "disk", "cicustom"]},
    });
    if !s.tags.is_empty() {
        vm["tags"] = json!(s.tags.join(";"));
    }
    json!({
        "terraform": {"required_providers": {"proxmox": {"source": "telmate/proxmox"}}},
        "provider": {"proxmox": {}},
        "resource": {"proxmox_vm_qemu": {"vm": vm}},
    })
}

fn bpg(s: &VmSpec) -> Value {
    let mut disks = Vec::new();
    if let Some(g) = s.disk_gib {
        disks.push(json!({"interface": "scsi0", "datastore_id": s.storage, "size": g}));
    }
    for (i, g) in s.extra_disks.iter().enumerate() {
        disks.push(json!({"interface": format!("scsi{}", i + 1), "datastore_id": s.storage, "size": g}));
    }
    let nics: Vec<Value> = s
        .nics
        .iter()
        .map(|(bridge, vlan)| {
            let mut n = json!({"bridge": bridge, "model": "virtio"});
            if let Some(v) = vlan {
                n["vlan_id"] = json!(v);
            }
            n
        })
        .collect();
    let mut vm = json!({
        "name": s.name,
        "vm_id": s.vmid,
        "node_name": s.node,
        "started": false,
        "clone": [{"vm_id": s.template_vmid, "full": true}],
        "cpu": [{"cores": s.cores}],
        "memory": [{"dedicated": s.memory}],
        "disk": disks,
        "network_device": nics,
        "initialization": [{
            "datastore_id": s.storage,
            "interface": "ide2",
            "user_data_file_id": s.snippet("user"),
            "network_data_file_id": s.snippet("network"),
            "meta_data_file_id": s.snippet("meta"),
        }],
        "lifecycle": {"ignore_changes": ["node_name", "started", "disk", "initialization"]},
    });
    if !s.tags.is_empty() {
        vm["tags"] = json!(s.tags);
    }
    json!({
        "terraform": {"required_providers": {"proxmox": {"source": "bpg/proxmox"}}},
        "provider": {"proxmox": {}},
        "resource": {"proxmox_virtual_environment_vm": {"vm": vm}},
    })
}

/// `main.tf.json` for `spec`.
pub fn render(flavour: Flavour, spec: &VmSpec) -> Value {
    match flavour {
        Flavour::Telmate => telmate(spec),
        Flavour::Bpg => bpg(spec),
    }
}
