//! Windows installed from ISO: what a VM without a cloud-init drive boots, decided at
//! every cold start from its CD-ROMs and its first disk.
//!
//! Contract: the boot disk is the first non-CD disk (by `boot: order=`, else ide,
//! scsi, virtio, sata by index). If that disk is marked as holding Windows
//! (`GuestDisk::windows_on`, persisted), Windows boots and the guest agent (when the
//! config enables it) answers `timings.boot_ssh` after power-on. Otherwise, if a CD-ROM
//! drive (`media=cdrom`) holds an ISO volume (`STORAGE:iso/F`), the disk is taken as
//! blank and the VM boots the ISO: with an `autounattend.xml` (case-insensitive) in the
//! root directory of an attached ISO (`crate::iso9660`) Windows Setup runs unattended
//! and, `timings.windows_install` after power-on (scaled), marks the disk and its agent
//! answers; without one (or without a disk) Setup waits for a user forever and the
//! agent never answers. A stop, a reset or a reboot during Setup loses the install
//! (a new boot starts Setup again). Without an ISO the VM is what it was before: an
//! appliance booting its disk (`guest/mod.rs`).

use std::collections::BTreeMap;

use crate::model::{Vm, props};
use crate::sim::Sim;

/// How a VM's firmware boots it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WinBoot {
    /// Not a Windows boot: the disk's (Linux) appliance or cloud-init guest.
    No,
    /// Windows from the disk.
    Installed,
    /// Windows Setup from an ISO; `disk` is marked when it finishes (`None` = it never
    /// finishes: no answer file, or no disk to install to).
    Setup {
        /// The volid of the disk Setup installs to.
        disk: Option<String>,
    },
}

fn is_cd(v: &str) -> bool {
    props::prop(v, "media").as_deref() == Some("cdrom") || v.contains("cloudinit")
}

/// The first non-CD disk: its volid.
pub fn boot_disk(config: &BTreeMap<String, String>) -> Option<String> {
    let disk = |k: &str| {
        props::is_drive_key(k)
            && !k.starts_with("efidisk")
            && !k.starts_with("tpmstate")
            && !k.starts_with("unused")
            && config.get(k).is_some_and(|v| !is_cd(v) && v.split(',').next().is_some_and(|vol| vol.contains(':')))
    };
    let ordered = config
        .get("boot")
        .and_then(|b| props::prop(b, "order"))
        .and_then(|o| o.split(';').find(|k| disk(k)).map(str::to_string));
    let key = ordered.or_else(|| {
        let rank = |k: &str| {
            let (p, n) = k.split_at(k.find(|c: char| c.is_ascii_digit()).unwrap_or(k.len()));
            let r = ["ide", "scsi", "virtio", "sata"].iter().position(|x| *x == p).unwrap_or(9);
            (r, n.parse::<u32>().unwrap_or(0))
        };
        config.keys().filter(|k| disk(k)).min_by_key(|k| rank(k)).cloned()
    })?;
    config.get(&key).and_then(|v| v.split(',').next()).map(str::to_string)
}

/// The real files of the ISOs in the VM's CD-ROM drives, on the VM's node.
fn attached_isos(sim: &Sim, vm: &Vm) -> Vec<std::path::PathBuf> {
    vm.config
        .iter()
        .filter(|(k, v)| props::is_drive_key(k) && props::prop(v, "media").as_deref() == Some("cdrom"))
        .filter_map(|(_, v)| {
            let vol = v.split(',').next()?;
            let (sid, name) = vol.split_once(':')?;
            let file = name.strip_prefix("iso/").filter(|f| !f.contains('/') && !f.starts_with('.'))?;
            Some(sim.storage_dir(&vm.node, sid)?.join("template/iso").join(file))
        })
        .collect()
}

/// What the VM boots now (its config with pending changes applied).
pub fn plan(sim: &Sim, vm: &Vm) -> WinBoot {
    let disk = boot_disk(&vm.config);
    if disk.is_some() && disk == vm.disk.windows_on {
        return WinBoot::Installed;
    }
    let isos = attached_isos(sim, vm);
    if isos.is_empty() {
        return WinBoot::No;
    }
    let answer = isos.iter().any(|f| crate::iso9660::has_root_file(f, "autounattend.xml"));
    WinBoot::Setup { disk: disk.filter(|_| answer) }
}
