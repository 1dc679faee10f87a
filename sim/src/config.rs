//! The simulator's configuration: cluster shape, timings, addresses, faults.
//!
//! Contract: [`SimConfig::default`] is a usable three-node cluster on 127.0.0.1 with an
//! ephemeral API port, instant timings off (`time_scale` 1.0 = realistic durations), no
//! faults. [`SimConfig::validate`] rejects what the simulator cannot honour (no nodes,
//! non-loopback guest subnet, negative time scale) before anything is started.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::SimError;
use crate::faults::FaultSpec;

/// A storage of the simulated datacenter (the same definition on every node).
#[derive(Debug, Clone)]
pub struct StorageSpec {
    /// Storage ID, e.g. `local`.
    pub id: String,
    /// PVE storage type: `dir` or `lvmthin` (others are reported as given).
    pub kind: String,
    /// Comma list of content types, e.g. `iso,vztmpl,backup,snippets`.
    pub content: String,
    /// Path on the (simulated) node for `dir` storages, e.g. `/var/lib/vz`.
    pub path: Option<String>,
    /// Whether the storage is shared between nodes.
    pub shared: bool,
    /// Capacity of a non-`dir` storage (an lvmthin pool) in bytes; `None` = 100 GiB.
    /// `dir` storages live on the node's root filesystem (`SimConfig::node_disk`).
    pub size_bytes: Option<u64>,
}

/// Default capacity of a storage without `size_bytes` (and of a node's root fs).
pub const DEFAULT_STORAGE_BYTES: u64 = 100 << 30;

/// The filesystems of every node: the root filesystem (`/`, holding `/var/tmp` and the
/// `dir` storages' paths such as `/var/lib/vz`) and `/tmp`, a tmpfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeDisk {
    /// Size of the root filesystem (`/dev/mapper/pve-root`, ext4), default 100 GiB.
    pub root_bytes: u64,
    /// Size of `/tmp` (a tmpfs), default 1 GiB.
    pub tmp_bytes: u64,
}

impl Default for NodeDisk {
    fn default() -> Self {
        NodeDisk { root_bytes: DEFAULT_STORAGE_BYTES, tmp_bytes: 1 << 30 }
    }
}

/// A cloud-init template VM seeded at first start.
#[derive(Debug, Clone)]
pub struct TemplateSpec {
    /// Its VMID.
    pub vmid: u32,
    /// Its name.
    pub name: String,
    /// The node it lives on.
    pub node: String,
}

/// Realistic durations of the simulated operations, multiplied by `time_scale`.
#[derive(Debug, Clone)]
pub struct Timings {
    /// A clone task (linked clone of a small template).
    pub clone: Duration,
    /// A start task (qmstart) until the VM is running.
    pub start: Duration,
    /// From "running" until the guest's sshd accepts connections.
    pub boot_ssh: Duration,
    /// From sshd up until cloud-init reports its final status (first boot).
    pub cloud_init: Duration,
    /// From sshd up until cloud-init reports `done` on a later boot with the drive
    /// still there (it runs every boot, skipping its once-per-instance modules; the
    /// real guest says `running` for a while after an in-guest reboot).
    pub cloud_init_later: Duration,
    /// A stop task.
    pub stop: Duration,
    /// A shutdown task (ACPI / agent).
    pub shutdown: Duration,
    /// Downtime of an in-guest reboot before sshd is back.
    pub guest_reboot: Duration,
    /// A migrate task.
    pub migrate: Duration,
    /// A resize task.
    pub resize: Duration,
    /// A disk move (`qmmove`): the copy, while the worker holds the VM's config lock.
    pub move_disk: Duration,
    /// A destroy task.
    pub destroy: Duration,
    /// A create task (`qmcreate`) without imports.
    pub create: Duration,
    /// What a create task adds per GiB of imported image data (`qemu-img convert`).
    pub import_per_gib: Duration,
    /// What an upload task (`imgcopy`) takes per GiB (checksum and copy).
    pub upload_per_gib: Duration,
    /// Delay before the HA manager acts on a requested state.
    pub ha_reaction: Duration,
    /// An unattended Windows install from ISO (`autounattend.xml`), from power-on until
    /// the disk holds Windows and its guest agent answers.
    pub windows_install: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            clone: Duration::from_secs(4),
            start: Duration::from_secs(2),
            boot_ssh: Duration::from_secs(8),
            cloud_init: Duration::from_secs(20),
            cloud_init_later: Duration::from_secs(2),
            stop: Duration::from_secs(1),
            shutdown: Duration::from_secs(5),
            guest_reboot: Duration::from_secs(10),
            migrate: Duration::from_secs(8),
            resize: Duration::from_secs(1),
            move_disk: Duration::from_secs(5),
            destroy: Duration::from_secs(1),
            create: Duration::from_secs(1),
            import_per_gib: Duration::from_secs(2),
            upload_per_gib: Duration::from_secs(1),
            ha_reaction: Duration::from_secs(10),
            windows_install: Duration::from_secs(60),
        }
    }
}

/// An IPv4 subnet inside 127.0.0.0/8 where guests may bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestSubnet {
    /// Network address.
    pub addr: Ipv4Addr,
    /// Prefix length (8..=32).
    pub prefix: u8,
}

impl GuestSubnet {
    /// Parse `a.b.c.d/n`.
    pub fn parse(s: &str) -> Result<Self, SimError> {
        let (a, p) =
            s.split_once('/').ok_or_else(|| SimError::Config(format!("guest subnet '{s}' is not a.b.c.d/n")))?;
        let addr: Ipv4Addr = a.parse().map_err(|_| SimError::Config(format!("guest subnet '{s}': bad address")))?;
        let prefix: u8 = p
            .parse()
            .ok()
            .filter(|p| *p <= 32)
            .ok_or_else(|| SimError::Config(format!("guest subnet '{s}': bad prefix")))?;
        Ok(GuestSubnet { addr, prefix })
    }

    /// Whether `ip` is inside the subnet.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(self.prefix)) };
        (u32::from(ip) & mask) == (u32::from(self.addr) & mask)
    }
}

impl Default for GuestSubnet {
    fn default() -> Self {
        GuestSubnet { addr: Ipv4Addr::new(127, 0, 0, 0), prefix: 8 }
    }
}

/// Everything a simulated cluster is made of.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Node names, e.g. `pve1,pve2,pve3`.
    pub nodes: Vec<String>,
    /// Where state, the certificate and the token persist; `None` = memory + a temp dir.
    pub state_dir: Option<PathBuf>,
    /// Multiplier for every duration; 0 = instant.
    pub time_scale: f64,
    /// Faults to inject.
    pub faults: FaultSpec,
    /// Seed for the fault draws and generated identifiers.
    pub seed: u64,
    /// Where the HTTPS API listens (port 0 = ephemeral).
    pub listen: SocketAddr,
    /// Addresses guests may take from their network-data.
    pub guest_subnet: GuestSubnet,
    /// Port the guests' sshd binds (22 as in reality; 0 = ephemeral, see
    /// `RunningCluster::guest_ssh_addr`).
    pub guest_ssh_port: u16,
    /// First node SSH address; node i gets this + i.
    pub node_ssh_base: Ipv4Addr,
    /// Port the nodes' sshd binds (0 = ephemeral, see `RunningCluster::node_ssh_addr`).
    pub node_ssh_port: u16,
    /// OpenSSH public keys (one per entry) the nodes accept for `root`, in addition to
    /// the operator key the simulator generates.
    pub node_authorized_keys: Vec<String>,
    /// Storages (same on every node).
    pub storages: Vec<StorageSpec>,
    /// Templates seeded at first start.
    pub templates: Vec<TemplateSpec>,
    /// Base durations.
    pub timings: Timings,
    /// What a started VM is: a simulated guest (default) or a real qemu VM.
    pub guest_mode: GuestMode,
    /// Sizes of the nodes' filesystems (root and `/tmp`).
    pub node_disk: NodeDisk,
    /// The PVE version `GET /version` reports (`MAJOR.MINOR.PATCH`, default `9.0.3`);
    /// versions before 8.3 refuse the `import` content type.
    pub pve_version: String,
    /// The DHCP server of the guests' network: a UniFi stand-in's
    /// ([`crate::services::unifi::Unifi::dhcp`]). Guests whose network-data asks for
    /// DHCP get its reservation for their NIC's MAC, else a pool address; `None` (the
    /// default) = no DHCP server, such guests get no address.
    pub dhcp: Option<crate::services::unifi::UnifiDhcp>,
    /// What appliances booted from an image do on the network (default: nothing).
    pub appliance: ApplianceSpec,
    /// Users, API tokens, roles and ACL entries, and which token the API secret is
    /// for (docs/SIMULATOR.md, "Permissions"); default root@pam's token, which may
    /// do everything.
    pub access: crate::acl::AccessConfig,
    /// Where to record every API request and answer for the schema conformance check
    /// (`sim/src/conformance/record.rs`: a JSONL file per simulator, 0600); default the
    /// `CRADLE_SIM_CONFORMANCE_DIR` environment variable, unset = no recording.
    pub record_dir: Option<PathBuf>,
}

/// What a simulated appliance (a VM booted from its disk image, never named by
/// cloud-init: Home Assistant OS, say) has on the network, standing in for what
/// the real appliance and the operator's network give it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplianceSpec {
    /// Each appliance's address by VM name: the address the network's DHCP
    /// reservation for the VM gives the appliance at every boot (an appliance
    /// without an entry has no address, as with no DHCP server).
    pub addresses: BTreeMap<String, Ipv4Addr>,
    /// The port its web UI answers HTTP on, at its address (Home Assistant:
    /// 8123), from `timings.boot_ssh` after power-on until it stops; `None` =
    /// no web UI.
    pub http_port: Option<u16>,
}

/// What a started VM runs.
#[derive(Debug, Clone, Default)]
pub enum GuestMode {
    /// The in-process simulated guest (russh, cloud-init modelled): milliseconds per boot.
    #[default]
    Simulated,
    /// A real qemu VM booting the Debian 12 image of `scripts/guest-image` with real
    /// cloud-init and OpenSSH (docs/SIMULATOR.md, "Guest mode qemu").
    Qemu(QemuSettings),
}

/// Settings of the qemu guest mode.
#[derive(Debug, Clone)]
pub struct QemuSettings {
    /// The image directory `scripts/guest-image` prints: `vmlinuz`, `initrd.img`,
    /// `rootfs.qcow2`.
    pub image_dir: PathBuf,
    /// KVM, TCG, or KVM when `/dev/kvm` can be opened.
    pub accel: Accel,
    /// Only these VMIDs boot qemu (the others are simulated guests); `None` = all.
    pub vmids: Option<std::collections::BTreeSet<u32>>,
    /// The qemu binary (default `qemu-system-x86_64` on `PATH`).
    pub binary: PathBuf,
    /// How long a graceful shutdown (ACPI power button) may take before a shutdown
    /// task fails with `got timeout` (PVE's default is 180 s; TCG boots are slow).
    pub shutdown_timeout: Duration,
}

impl QemuSettings {
    /// Settings for an image directory, everything else default.
    pub fn new(image_dir: impl Into<PathBuf>) -> Self {
        QemuSettings {
            image_dir: image_dir.into(),
            accel: Accel::Auto,
            vmids: None,
            binary: PathBuf::from("qemu-system-x86_64"),
            shutdown_timeout: Duration::from_secs(180),
        }
    }

    /// The image files a guest boots from, checked to exist.
    pub fn image_files(&self) -> Result<[PathBuf; 3], SimError> {
        let files = ["vmlinuz", "initrd.img", "rootfs.qcow2"].map(|f| self.image_dir.join(f));
        for f in &files {
            if !f.is_file() {
                return Err(SimError::Config(format!(
                    "qemu guest mode: {} is missing; build the guest image with scripts/guest-image \
                     and give the directory it prints",
                    f.display()
                )));
            }
        }
        Ok(files)
    }
}

/// How qemu runs guest code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// KVM when `/dev/kvm` opens read-write, else TCG.
    Auto,
    /// Hardware virtualisation (fails to start without `/dev/kvm`).
    Kvm,
    /// Software emulation (minutes per boot).
    Tcg,
}

impl Accel {
    /// Parse `auto`, `kvm` or `tcg`.
    pub fn parse(s: &str) -> Result<Self, SimError> {
        match s {
            "auto" => Ok(Accel::Auto),
            "kvm" => Ok(Accel::Kvm),
            "tcg" => Ok(Accel::Tcg),
            other => Err(SimError::Config(format!("qemu accel '{other}' is not one of auto, kvm, tcg"))),
        }
    }

    /// What `Auto` means on this machine.
    pub fn resolve(self) -> Accel {
        match self {
            Accel::Auto => {
                let usable = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").is_ok();
                if usable { Accel::Kvm } else { Accel::Tcg }
            }
            other => other,
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: vec!["pve1".into(), "pve2".into(), "pve3".into()],
            state_dir: None,
            time_scale: 1.0,
            faults: FaultSpec::default(),
            seed: 0,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            guest_subnet: GuestSubnet::default(),
            guest_ssh_port: 22,
            node_ssh_base: Ipv4Addr::new(127, 1, 0, 1),
            node_ssh_port: 22,
            node_authorized_keys: Vec::new(),
            storages: default_storages(),
            templates: vec![TemplateSpec { vmid: 9000, name: "debian-12-cloud".into(), node: "pve1".into() }],
            timings: Timings::default(),
            guest_mode: GuestMode::Simulated,
            node_disk: NodeDisk::default(),
            pve_version: "9.0.3".into(),
            dhcp: None,
            appliance: ApplianceSpec::default(),
            access: crate::acl::AccessConfig::default(),
            record_dir: std::env::var_os("CRADLE_SIM_CONFORMANCE_DIR").filter(|d| !d.is_empty()).map(PathBuf::from),
        }
    }
}

/// `local` (dir) and `local-lvm` (lvmthin, images), as a fresh PVE 9 install on LVM has
/// them (pve-installer `Proxmox/Install/StorageConfig.pm`, `get_lvm_thin_config`:
/// `content iso,vztmpl,backup,import`), plus `snippets` on `local`, which cradle needs.
pub fn default_storages() -> Vec<StorageSpec> {
    vec![
        StorageSpec {
            id: "local".into(),
            kind: "dir".into(),
            content: "iso,vztmpl,backup,snippets,import".into(),
            path: Some("/var/lib/vz".into()),
            shared: false,
            size_bytes: None,
        },
        StorageSpec {
            id: "local-lvm".into(),
            kind: "lvmthin".into(),
            content: "images,rootdir".into(),
            path: None,
            shared: false,
            size_bytes: None,
        },
    ]
}

impl SimConfig {
    /// A config with nodes `pve1..pveN` and everything else default.
    pub fn with_nodes(n: usize) -> Self {
        SimConfig { nodes: (1..=n).map(|i| format!("pve{i}")).collect(), ..SimConfig::default() }
    }

    /// Scale a base duration by `time_scale`.
    pub fn scaled(&self, d: Duration) -> Duration {
        if self.time_scale <= 0.0 { Duration::ZERO } else { d.mul_f64(self.time_scale) }
    }

    /// Reject configurations the simulator cannot honour.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.nodes.is_empty() {
            return Err(SimError::Config("at least one node is required".into()));
        }
        for n in &self.nodes {
            let ok = !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') && !n.starts_with('-');
            if !ok {
                return Err(SimError::Config(format!("node name '{n}' is not a valid hostname")));
            }
        }
        if !self.time_scale.is_finite() || self.time_scale < 0.0 {
            return Err(SimError::Config(format!("time_scale must be a finite number >= 0, got {}", self.time_scale)));
        }
        if !self.guest_subnet.addr.is_loopback() || self.guest_subnet.prefix < 8 {
            return Err(SimError::Config(format!(
                "guest subnet {}/{} must lie inside 127.0.0.0/8",
                self.guest_subnet.addr, self.guest_subnet.prefix
            )));
        }
        if !self.node_ssh_base.is_loopback() {
            return Err(SimError::Config(format!(
                "node SSH base address {} must be in 127.0.0.0/8",
                self.node_ssh_base
            )));
        }
        if self.pve_version_parts().is_none() {
            return Err(SimError::Config(format!("pve_version '{}' is not MAJOR.MINOR[.PATCH]", self.pve_version)));
        }
        if self.node_disk.root_bytes == 0 || self.node_disk.tmp_bytes == 0 {
            return Err(SimError::Config("node_disk sizes must be > 0".into()));
        }
        if let GuestMode::Qemu(q) = &self.guest_mode {
            q.image_files()?;
        }
        for (vm, ip) in &self.appliance.addresses {
            if !self.guest_subnet.contains(*ip) || !ip.is_loopback() {
                return Err(SimError::Config(format!(
                    "appliance address {ip} of {vm} must lie inside the guest subnet {}/{}",
                    self.guest_subnet.addr, self.guest_subnet.prefix
                )));
            }
        }
        if self.appliance.http_port == Some(0) {
            return Err(SimError::Config("appliance http_port must be a port (1-65535)".into()));
        }
        self.access.validate().map_err(|e| SimError::Config(format!("access: {e}")))?;
        for t in &self.templates {
            if !self.nodes.contains(&t.node) {
                return Err(SimError::Config(format!("template {} is on unknown node '{}'", t.vmid, t.node)));
            }
        }
        Ok(())
    }

    /// `(major, minor)` of `pve_version`.
    pub fn pve_version_parts(&self) -> Option<(u32, u32)> {
        let mut it = self.pve_version.split('.');
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        Some((major, minor))
    }

    /// Whether the configured PVE version knows the `import` content type (pve-storage
    /// 8.2.8, shipped with PVE 8.3: "directory backed storage: implement import content type").
    pub fn has_import_content(&self) -> bool {
        self.pve_version_parts().is_some_and(|v| v >= (8, 3))
    }

    /// The SSH address of node number `index` (0-based).
    pub fn node_ip(&self, index: usize) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.node_ssh_base).wrapping_add(index as u32))
    }
}
