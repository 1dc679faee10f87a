//! The content a fresh simulated cluster starts with: the configured cloud-init
//! templates (by default VMID 9000 `debian-12-cloud` on pve1), configured like a Debian
//! 12 generic-cloud template made with `qm importdisk` + `qm template`.

use std::sync::Arc;

use crate::model::{Vm, ids};
use crate::sim::{Sim, lock};

/// Seed the templates into an empty state.
pub fn seed(sim: &Arc<Sim>) {
    let mut st = lock(&sim.state);
    for t in &sim.cfg.templates {
        st.id_counter += 3;
        let c = st.id_counter;
        let seed = sim.cfg.seed;
        let vmid = t.vmid;
        let entries = [
            ("agent", "1".to_string()),
            ("boot", "order=scsi0".into()),
            ("cores", "2".into()),
            ("ide2", format!("local-lvm:vm-{vmid}-cloudinit,media=cdrom")),
            ("memory", "2048".into()),
            ("meta", "creation-qemu=9.2.0,ctime=1732960000".into()),
            ("name", t.name.clone()),
            ("net0", format!("virtio={},bridge=vmbr0", ids::mac(seed, c))),
            ("ostype", "l26".into()),
            ("scsi0", format!("local-lvm:base-{vmid}-disk-0,size=3G")),
            ("scsihw", "virtio-scsi-single".into()),
            ("serial0", "socket".into()),
            ("smbios1", format!("uuid={}", ids::uuid(seed, c + 1))),
            ("template", "1".into()),
            ("vga", "serial0".into()),
            ("vmgenid", ids::uuid(seed, c + 2)),
        ];
        let config = entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let vm = Vm::stopped(vmid, t.node.clone(), config);
        st.vms.insert(vmid, vm);
    }
    sim.changed();
}
