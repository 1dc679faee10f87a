//! The qemu command line of one guest, laid out as Proxmox VE lays out a VM with the
//! template's hardware (`qm showcmd`): machine `pc` (i440fx, bus `pci.0`), the boot disk
//! `scsi0` on a `virtio-scsi-pci` controller (the guest sees `/dev/sda`), the cloud-init
//! drive `ide2` as a CD on `ide.1` unit 0, and `net0` as `virtio-net-pci` at
//! `bus=pci.0,addr=0x12` — PCI slot 18, which systemd's predictable names turn into
//! `ens18`, the name Debian guests on PVE have. The kernel is booted directly (the image
//! has no boot loader); the serial console goes to `console.log` beside the disk; QMP
//! listens on `qmp.sock` for the power button and resets.

use std::path::Path;

use super::net::SlirpNet;
use crate::config::Accel;

/// What one boot needs.
pub struct BootSpec<'a> {
    /// VMID (the qemu name is `cradle-sim-vm<vmid>`, which the reaper looks for).
    pub vmid: u32,
    /// The image's kernel and initrd.
    pub kernel: &'a Path,
    /// The image's initrd.
    pub initrd: &'a Path,
    /// The VM's own disk (an overlay on the image).
    pub disk: &'a Path,
    /// The seed ISO, when the VM has a cloud-init drive.
    pub seed: Option<&'a Path>,
    /// net0's MAC address.
    pub mac: &'a str,
    /// The user-mode network.
    pub net: &'a SlirpNet,
    /// The port guest port 22 is forwarded from.
    pub forward_port: u16,
    /// Cores and memory (MiB) from the VM's config.
    pub cores: u32,
    /// Memory in MiB.
    pub memory_mib: u32,
    /// KVM or TCG (resolved).
    pub accel: Accel,
    /// The VM's directory (console log, QMP socket).
    pub dir: &'a Path,
    /// SMBIOS uuid from `smbios1`.
    pub uuid: Option<&'a str>,
}

/// The arguments after the binary.
pub fn build(b: &BootSpec<'_>) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let mut push = |xs: &[&str]| a.extend(xs.iter().map(|s| s.to_string()));
    let name = format!("cradle-sim-vm{},debug-threads=on", b.vmid);
    push(&["-name", &name, "-nodefaults", "-no-user-config", "-display", "none"]);
    let (machine, cpu) = match b.accel {
        Accel::Kvm => ("pc,accel=kvm", "host"),
        _ => ("pc,accel=tcg", "max"),
    };
    push(&["-machine", machine, "-cpu", cpu]);
    push(&["-smp", &b.cores.max(1).to_string(), "-m", &b.memory_mib.max(256).to_string()]);
    if let Some(u) = b.uuid {
        push(&["-smbios", &format!("type=1,uuid={u}")]);
    }
    let path = |p: &Path| p.display().to_string();
    push(&["-kernel", &path(b.kernel), "-initrd", &path(b.initrd)]);
    push(&["-append", "root=LABEL=rootfs rw console=ttyS0,115200 net.ifnames=1 systemd.show_status=false"]);
    push(&["-chardev", &format!("file,id=serial0,path={},append=on", path(&b.dir.join("console.log")))]);
    push(&["-serial", "chardev:serial0"]);
    push(&["-qmp", &format!("unix:{},server=on,wait=off", path(&b.dir.join("qmp.sock")))]);
    // Entropy for the first boot's key generation and Python's hash seeds.
    push(&["-object", "rng-random,filename=/dev/urandom,id=rng0", "-device", "virtio-rng-pci,rng=rng0"]);
    push(&["-device", "virtio-scsi-pci,id=scsihw0,bus=pci.0,addr=0x5"]);
    push(&["-drive", &format!("file={},if=none,id=drive-scsi0,format=qcow2,cache=unsafe,discard=on", path(b.disk))]);
    push(&["-device", "scsi-hd,bus=scsihw0.0,channel=0,scsi-id=0,lun=0,drive=drive-scsi0,id=scsi0"]);
    if let Some(seed) = b.seed {
        push(&["-drive", &format!("file={},if=none,id=drive-ide2,media=cdrom,format=raw,readonly=on", path(seed))]);
        push(&["-device", "ide-cd,bus=ide.1,unit=0,drive=drive-ide2,id=ide2"]);
    }
    push(&["-netdev", &b.net.netdev("net0", b.forward_port)]);
    push(&["-device", &format!("virtio-net-pci,mac={},netdev=net0,bus=pci.0,addr=0x12,id=net0", b.mac)]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::path::PathBuf;

    #[test]
    fn net0_sits_in_pci_slot_18_so_the_guest_names_it_ens18_and_ide2_is_a_cd_on_ide1() {
        let net = SlirpNet {
            guest: Ipv4Addr::new(10, 1, 0, 5),
            prefix: 24,
            host: Ipv4Addr::new(10, 1, 0, 1),
            dns: Ipv4Addr::new(10, 1, 0, 2),
            forward: Ipv4Addr::new(127, 1, 0, 5),
        };
        let (k, i, d, s, dir) = (
            PathBuf::from("/img/vmlinuz"),
            PathBuf::from("/img/initrd.img"),
            PathBuf::from("/vm/disk.qcow2"),
            PathBuf::from("/vm/cloudinit.iso"),
            PathBuf::from("/vm"),
        );
        let spec = BootSpec {
            vmid: 101,
            kernel: &k,
            initrd: &i,
            disk: &d,
            seed: Some(&s),
            mac: "BC:24:11:00:00:01",
            net: &net,
            forward_port: 22,
            cores: 2,
            memory_mib: 2048,
            accel: Accel::Tcg,
            dir: &dir,
            uuid: None,
        };
        let a = build(&spec).join(" ");
        assert!(a.contains("virtio-net-pci,mac=BC:24:11:00:00:01,netdev=net0,bus=pci.0,addr=0x12"), "{a}");
        assert!(a.contains("ide-cd,bus=ide.1,unit=0,drive=drive-ide2"), "{a}");
        assert!(a.contains("restrict=on"), "{a}");
        assert!(a.contains("-machine pc,accel=tcg"), "{a}");
        let none = build(&BootSpec { seed: None, ..spec }).join(" ");
        assert!(!none.contains("ide2"), "no cloud-init drive, no CD: {none}");
    }
}
