//! The MAC of a VM's first NIC, from its Proxmox `net0` value
//! (`virtio=BC:24:11:00:00:01,bridge=vmbr0`: the model's key holds the MAC,
//! qemu-server's `net` property string). Upper case, as NetBox answers it.

use crate::{Kind, Problem};

/// The MAC in `net0` of VM `vmid` on `node` (`None`: the VM has no `net0`).
pub fn of_net0(net0: Option<&str>, node: &str, vmid: u32) -> Result<String, Problem> {
    // `model=MAC` first; a value without a MAC there (`bridge=vmbr0` alone,
    // or a model with no `=`) has none to give.
    let first = net0.and_then(|v| v.split(',').next());
    let mac = first.and_then(|model| {
        let parts: Vec<&str> = model.split('=').collect();
        (parts.len() == 2).then(|| parts[1].to_uppercase())
    });
    mac.ok_or_else(|| Problem { kind: Kind::Failed, message: format!("VM {vmid} on {node} has no net0 with a MAC") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mac_is_the_models_value_upper_case() {
        let got = of_net0(Some("virtio=bc:24:11:00:00:01,bridge=vmbr0,firewall=1"), "pve1", 140);
        assert_eq!(got, Ok("BC:24:11:00:00:01".to_string()));
        assert_eq!(of_net0(Some("e1000=BC:24:11:AA:BB:CC"), "pve1", 140), Ok("BC:24:11:AA:BB:CC".to_string()));
    }

    #[test]
    fn no_net0_or_no_mac_in_it_fails_naming_the_vm_and_node() {
        for net0 in [None, Some("virtio,bridge=vmbr0"), Some(""), Some("virtio=a=b,bridge=vmbr0")] {
            let p = of_net0(net0, "pve2", 141).expect_err("no MAC");
            assert_eq!(p.kind, Kind::Failed);
            assert_eq!(p.message, "VM 141 on pve2 has no net0 with a MAC", "{net0:?}");
        }
    }
}
