//! The cluster's state: VMs with their configs, pending changes and power state; tasks;
//! HA resources and rules. Pure data plus small invariant-keeping helpers.
//!
//! Contract: everything here is mutated under the single `Sim::state` mutex, never across
//! an await, so every API call sees a consistent cluster. The serialisable part is what a
//! state dir keeps; guest runtimes (sockets, tasks) are rebuilt at start.

pub mod cached;
pub mod ct;
pub mod ids;
pub mod props;
pub mod tasks;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use cached::{Tasks, Vms};
pub use tasks::Task;

/// Power state as `status/current` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Power {
    /// Not running.
    Stopped,
    /// Running (the guest may still be booting).
    Running,
}

/// What the guest's disk remembers across boots: the identity cloud-init applied.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GuestDisk {
    /// NoCloud instance-id of the last cloud-init run (sha1-like of user+network data).
    pub instance_id: Option<String>,
    /// Host key (OpenSSH private key text).
    pub host_key: Option<String>,
    /// Authorized keys per user name.
    pub authorized: BTreeMap<String, Vec<String>>,
    /// Hostname.
    pub hostname: Option<String>,
    /// The address sshd binds.
    pub address: Option<std::net::Ipv4Addr>,
    /// Whether the user-data was invalid (cloud-init reports degraded each boot).
    pub invalid_user_data: bool,
    /// The network cloud-init installed (it stays on disk across boots).
    #[serde(default)]
    pub net: GuestNet,
    /// The volid of the disk Windows Setup installed Windows to (`guest/windows.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows_on: Option<String>,
    /// The interfaces network-data configures with DHCP (they ask at every boot).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dhcp: Vec<DhcpIface>,
}

/// An interface that takes its IPv4 address from DHCP (network-config v2 `dhcp4:
/// true`, v1 subnet `dhcp`/`dhcp4`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DhcpIface {
    /// The interface's name in the guest (v2 `set-name` or its key; v1 `name`).
    pub name: String,
    /// Its key in network-config (v2; the same as `name` for v1).
    pub id: String,
    /// The MAC it matches (v2 `match.macaddress`, v1 `mac_address`), lower-case.
    pub mac: Option<String>,
}

/// The network a guest's cloud-init installed, as a minimal Debian 12 image ends up
/// with it (see `guest::cloudinit::network_state` for the rules).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GuestNet {
    /// Interfaces (besides `lo`) with their addresses (`ip/prefix`).
    pub links: Vec<GuestLink>,
    /// Default routes.
    pub routes: Vec<GuestRoute>,
    /// Files cloud-init wrote (`write_files`), by path.
    pub files: BTreeMap<String, String>,
}

/// One interface.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GuestLink {
    /// Interface name.
    pub name: String,
    /// Addresses as `ip/prefix`.
    pub addresses: Vec<String>,
}

/// One default route.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GuestRoute {
    /// Gateway address.
    pub gateway: std::net::IpAddr,
    /// Interface.
    pub dev: String,
}

/// What a guest is: a QEMU VM or an LXC container. Both share the VMID space
/// (`PVE::Cluster::check_vmid_unused`), so they live in one map.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A QEMU VM (`qemu-server`).
    #[default]
    Qemu,
    /// An LXC container (`pve-container`).
    Lxc,
}

impl Kind {
    fn is_qemu(&self) -> bool {
        *self == Kind::Qemu
    }
}

/// A simulated VM (or container, see [`Kind`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Vm {
    /// VMID.
    pub vmid: u32,
    /// VM or container (absent in state files = VM).
    #[serde(default, skip_serializing_if = "Kind::is_qemu")]
    pub kind: Kind,
    /// The node it is on.
    pub node: String,
    /// Config as PVE stores it (`lock` included when set).
    pub config: BTreeMap<String, String>,
    /// Pending values (applied at the next cold start / API reboot).
    pub pending: BTreeMap<String, String>,
    /// Pending deletions.
    pub pending_delete: BTreeSet<String>,
    /// Power state.
    pub power: Power,
    /// Unix time the VM was started (for uptime).
    pub started_at: Option<u64>,
    /// Simulated pid while running.
    pub pid: Option<u32>,
    /// The guest's persistent identity.
    #[serde(default)]
    pub disk: GuestDisk,
    /// Sizes (bytes) of volumes whose config line carries no `size=` (disks `qm disk
    /// import` added: PVE writes only the volid), by volid.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub volumes: BTreeMap<String, u64>,
}

impl Vm {
    /// The VM is off: no start time, no qemu pid.
    pub fn set_stopped(&mut self) {
        self.power = Power::Stopped;
        self.started_at = None;
        self.pid = None;
    }

    /// A stopped VM on `node` with `config`: no pending changes, a blank disk.
    pub fn stopped(vmid: u32, node: String, config: BTreeMap<String, String>) -> Vm {
        Vm {
            vmid,
            kind: Kind::Qemu,
            node,
            config,
            pending: BTreeMap::new(),
            pending_delete: BTreeSet::new(),
            power: Power::Stopped,
            started_at: None,
            pid: None,
            disk: GuestDisk::default(),
            volumes: BTreeMap::new(),
        }
    }

    /// The lock, if any.
    pub fn lock(&self) -> Option<&str> {
        self.config.get("lock").map(String::as_str)
    }

    /// Whether this is a template.
    pub fn is_template(&self) -> bool {
        self.config.get("template").is_some_and(|v| v == "1")
    }

    /// Whether this is an LXC container.
    pub fn is_ct(&self) -> bool {
        self.kind == Kind::Lxc
    }

    /// The VM's name (PVE shows `VM <vmid>` when unset); a container's is its
    /// `hostname` (`CT<vmid>` when unset, `PVE::LXC::vmstatus`).
    pub fn name(&self) -> String {
        match self.kind {
            Kind::Qemu => self.config.get("name").cloned().unwrap_or_else(|| format!("VM {}", self.vmid)),
            Kind::Lxc => self.config.get("hostname").cloned().unwrap_or_else(|| format!("CT{}", self.vmid)),
        }
    }

    /// Memory in MiB.
    pub fn memory_mib(&self) -> u64 {
        self.config.get("memory").and_then(|m| m.parse().ok()).unwrap_or(512)
    }

    /// vCPUs.
    pub fn cpus(&self) -> u64 {
        if self.is_ct() {
            // `vmstatus`: `cores`, else the host's CPU count (16 in the simulator).
            return self.config.get("cores").and_then(|m| m.parse().ok()).unwrap_or(16);
        }
        let c: u64 = self.config.get("cores").and_then(|m| m.parse().ok()).unwrap_or(1);
        let s: u64 = self.config.get("sockets").and_then(|m| m.parse().ok()).unwrap_or(1);
        c * s
    }

    /// Max disk (bytes) summed over `size=` of the drives (a container: its `rootfs`).
    pub fn maxdisk(&self) -> u64 {
        self.config
            .iter()
            .filter(|(k, _)| if self.is_ct() { k.as_str() == "rootfs" } else { props::is_drive_key(k) })
            .filter_map(|(_, v)| props::prop(v, "size"))
            .filter_map(|s| ids::parse_size(&s))
            .sum()
    }

    /// The size of a volume of this VM: `size=` of the drive naming it, else what
    /// [`Vm::volumes`] remembers.
    pub fn volume_size(&self, volid: &str) -> Option<u64> {
        let line = self.config.values().chain(self.pending.values()).find(|v| v.split(',').next() == Some(volid));
        line.and_then(|v| props::prop(v, "size"))
            .and_then(|s| ids::parse_size(&s))
            .or_else(|| self.volumes.get(volid).copied())
    }

    /// Every volid this VM's config, pending changes and volume list name.
    pub fn volids(&self) -> BTreeSet<String> {
        let ct = self.is_ct();
        let drives = self
            .config
            .iter()
            .chain(self.pending.iter())
            .filter(|(k, _)| if ct { k.as_str() == "rootfs" } else { props::is_drive_key(k) });
        let mut out: BTreeSet<String> =
            drives.filter_map(|(_, v)| v.split(',').next()).filter(|v| v.contains(':')).map(str::to_string).collect();
        out.extend(self.volumes.keys().cloned());
        out
    }

    /// The next free `STORAGE:vm-VMID-disk-N` (`find_free_diskname`): the lowest N
    /// no volume of this VM uses on that storage. A volume counts as PVE counts it
    /// (pve-storage 0c56bad src/PVE/Storage/Plugin.pm:950-990, `$get_vm_disk_number`:
    /// `(vm|base)-VMID-disk-(\d+)` anywhere in the volume name), so a template's
    /// `base-VMID-disk-0` and a linked clone's `base-T-disk-0/vm-VMID-disk-0` take
    /// number 0.
    pub fn next_disk_name(&self, storage: &str) -> String {
        let prefix = format!("{storage}:");
        let taken: BTreeSet<u32> = self
            .volids()
            .iter()
            .filter_map(|v| v.strip_prefix(&prefix))
            .filter_map(|name| disk_number(name, self.vmid))
            .collect();
        let n = (0..).find(|n| !taken.contains(n)).unwrap_or(0);
        format!("{prefix}vm-{}-disk-{n}", self.vmid)
    }

    /// The config digest (40 hex chars, over the sorted config).
    pub fn digest(&self) -> String {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        for (k, v) in &self.config {
            h.update(k.as_bytes());
            h.update(b": ");
            h.update(v.as_bytes());
            h.update(b"\n");
        }
        for (k, v) in &self.pending {
            h.update(format!("[PENDING]{k}: {v}\n").as_bytes());
        }
        for k in &self.pending_delete {
            h.update(format!("[PENDING]delete: {k}\n").as_bytes());
        }
        hex::encode(h.finalize())[..40].to_string()
    }

    /// Apply the pending changes (cold start / API reboot, a stopped VM's config
    /// update): qemu-server's `vmconfig_apply_pending` (e6352be,
    /// src/PVE/QemuServer.pm:4985-5100): a deleted or replaced drive's volume is
    /// registered as `unusedN` (`vmconfig_delete_or_detach_drive` without `force`,
    /// `vmconfig_register_unused_drive`), its data kept.
    pub fn apply_pending(&mut self) {
        for k in std::mem::take(&mut self.pending_delete) {
            if let Some(old) = self.config.remove(&k)
                && props::is_drive_key(&k)
                && !k.starts_with("unused")
            {
                self.register_unused(&old);
            }
        }
        for (k, v) in std::mem::take(&mut self.pending) {
            if props::is_drive_key(&k)
                && !k.starts_with("unused")
                && let Some(old) = self.config.get(&k).cloned()
            {
                self.register_unused(&old);
            }
            self.config.insert(k, v);
        }
        self.drop_reused_unused();
    }

    /// `write_vm_config` (qemu-server e6352be src/PVE/QemuServer.pm:2145-2150): an
    /// `unusedN` whose volume a drive of the config or of `[PENDING]` uses again is
    /// dropped (so a drive whose options changed is not left registered unused).
    pub fn drop_reused_unused(&mut self) {
        let used: BTreeSet<String> = self
            .config
            .iter()
            .chain(self.pending.iter())
            .filter(|(k, _)| props::is_drive_key(k) && !k.starts_with("unused"))
            .filter_map(|(_, v)| v.split(',').next().map(str::to_string))
            .collect();
        self.config.retain(|k, v| !(k.starts_with("unused") && used.contains(v)));
    }

    /// `vmconfig_register_unused_drive` (QemuServer.pm:1583-1603): a drive's volume
    /// this VM owns (`vm-VMID-*`, `base-VMID-*`) becomes the lowest free `unusedN`
    /// unless one names it already (`add_unused_volume`, pve-guest-common 4a8f6cb
    /// src/PVE/AbstractConfig.pm:428-446); CD-ROMs and the cloud-init drive (freed) are
    /// not registered. Returns the key used.
    pub fn register_unused(&mut self, drive: &str) -> Option<String> {
        let file = props::split_props(drive)
            .into_iter()
            .find(|(k, _)| k.is_empty() || k == "file")
            .map(|(_, f)| f)
            .unwrap_or_default();
        let cdrom = props::prop(drive, "media").as_deref() == Some("cdrom") || file == "none" || file == "cdrom";
        if cdrom || file.contains("-cloudinit") {
            return None;
        }
        let (_, volname) = file.split_once(':')?;
        let name = volname.rsplit('/').next().unwrap_or(volname);
        let owned =
            name.starts_with(&format!("vm-{}-", self.vmid)) || name.starts_with(&format!("base-{}-", self.vmid));
        if !owned {
            return None;
        }
        let unused = |i: &u32| format!("unused{i}");
        if (0..256).any(|i| self.config.get(&unused(&i)).is_some_and(|v| *v == file)) {
            return None;
        }
        let key = (0..256).map(|i| unused(&i)).find(|k| !self.config.contains_key(k))?;
        self.config.insert(key.clone(), file);
        Some(key)
    }

    /// The `vmid.conf` path PVE names in errors.
    pub fn conf_path(node: &str, vmid: u32) -> String {
        format!("nodes/{node}/qemu-server/{vmid}.conf")
    }

    /// The container config path PVE names in errors (`PVE::LXC::Config::cfs_config_path`).
    pub fn ct_conf_path(node: &str, vmid: u32) -> String {
        format!("nodes/{node}/lxc/{vmid}.conf")
    }

    /// `VM` or `CT`, as `check_vmid_unused` and `check_lock` name the guest type.
    pub fn type_str(&self) -> &'static str {
        if self.is_ct() { "CT" } else { "VM" }
    }
}

/// The disk number `$get_vm_disk_number` finds in a volume name: the leftmost
/// `vm-VMID-disk-N` or `base-VMID-disk-N` (pve-storage 0c56bad
/// src/PVE/Storage/Plugin.pm:950-968).
fn disk_number(volname: &str, vmid: u32) -> Option<u32> {
    let patterns = [format!("vm-{vmid}-disk-"), format!("base-{vmid}-disk-")];
    let mut found: Option<(usize, u32)> = None;
    for p in &patterns {
        let mut from = 0;
        while let Some(i) = volname[from..].find(p.as_str()) {
            let at = from + i;
            let digits: String = volname[at + p.len()..].chars().take_while(char::is_ascii_digit).collect();
            if let Ok(n) = digits.parse::<u32>() {
                if found.is_none_or(|(pos, _)| at < pos) {
                    found = Some((at, n));
                }
                break;
            }
            from = at + 1;
        }
    }
    found.map(|(_, n)| n)
}

/// An HA resource (`vm:<vmid>`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HaResource {
    /// `vm:<vmid>`.
    pub sid: String,
    /// started | stopped | disabled | ignored.
    pub state: String,
    /// Options as given (failback, max_restart, max_relocate, comment).
    pub options: BTreeMap<String, String>,
}

/// A PVE 9 HA rule.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HaRule {
    /// Rule ID.
    pub rule: String,
    /// `node-affinity` or `resource-affinity`.
    pub kind: String,
    /// Resource SIDs in order.
    pub resources: Vec<String>,
    /// Other options as given (nodes, strict, disable, comment, affinity).
    pub options: BTreeMap<String, String>,
}

/// All persistent state of the cluster.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClusterState {
    /// VMs by VMID.
    pub vms: Vms,
    /// Tasks, oldest first.
    pub tasks: Tasks,
    /// HA resources by SID.
    pub ha_resources: BTreeMap<String, HaResource>,
    /// HA rules by ID.
    pub ha_rules: BTreeMap<String, HaRule>,
    /// Counter for simulated pids.
    pub next_pid: u32,
    /// Counter for generated identifiers (MACs, UUIDs).
    pub id_counter: u64,
    /// The VMs whose config file lock (`lock_config`'s flock on
    /// `/var/lock/qemu-server/lock-VMID.conf`, not the `lock` property) a running
    /// worker holds, with that worker's UPID (`crate::api` `move_disk`). Never
    /// written: a loaded state has no running workers (`crate::recover`).
    #[serde(skip)]
    pub config_flocks: BTreeMap<u32, String>,
}

impl ClusterState {
    /// The first VMID ≥ 100 not in use (never reserved).
    pub fn next_free_vmid(&self) -> u32 {
        let mut id = 100;
        for &v in self.vms.keys() {
            if v == id {
                id += 1;
            } else if v > id {
                break;
            }
        }
        id
    }

    /// A fresh simulated pid.
    pub fn pid(&mut self) -> u32 {
        if self.next_pid < 1000 {
            self.next_pid = 1000;
        }
        self.next_pid += 1;
        self.next_pid
    }

    /// Find a task by UPID.
    pub fn task(&self, upid: &str) -> Option<&Task> {
        self.tasks.iter().rev().find(|t| t.upid == upid)
    }

    /// Find a task by UPID, mutably.
    pub fn task_mut(&mut self, upid: &str) -> Option<&mut Task> {
        self.tasks.find_mut(upid)
    }

    /// The state as `Serialize` writes it, rendering anew only the VMs and
    /// tasks changed since the last call (see [`cached`]).
    pub fn write_json(&mut self) -> serde_json::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(64 * 1024);
        out.extend_from_slice(b"{\"vms\":");
        self.vms.write_json(&mut out)?;
        out.extend_from_slice(b",\"tasks\":");
        self.tasks.write_json(&mut out)?;
        out.extend_from_slice(b",\"ha_resources\":");
        serde_json::to_writer(&mut out, &self.ha_resources)?;
        out.extend_from_slice(b",\"ha_rules\":");
        serde_json::to_writer(&mut out, &self.ha_rules)?;
        out.extend_from_slice(
            format!(",\"next_pid\":{},\"id_counter\":{}}}", self.next_pid, self.id_counter).as_bytes(),
        );
        Ok(out)
    }

    /// The HA resource of a VM, if managed.
    pub fn ha_of(&self, vmid: u32) -> Option<&HaResource> {
        self.ha_resources.get(&format!("vm:{vmid}"))
    }
}
