//! The Proxmox VE role cradle's API token needs: one table, the single source for
//! docs/CONFIG.md ("Proxmox VE permissions"; a test checks the table there lists
//! exactly these), for the simulator's least-privilege token (`privileges = "cradle"`
//! in `[clusters.NAME.sim]`, `cradle sim serve --least-privilege`, the e2e suite's
//! default) and for the hint a 403 carries.
//!
//! Contract: [`ROLE`] lists every privilege a provision, a removal, the finalize
//! step, migrations, HA placement and disk-image uploads check, with the ACL path
//! PVE checks it on and the step that needs it; granting [`ROLE_NAME`] with these
//! privileges on `/` (propagated) to the user and its privilege-separated token is
//! enough for every feature, and removing any one of them fails the step named.
//! The privileges and paths are PVE 9.1's (pve-docs `api-viewer/apidata.js`,
//! qemu-server `src/PVE/API2/Qemu.pm`; sim/fixtures/SOURCES.md, "Proxmox VE
//! permissions (ACL)").
//!
//! Plain data and text: the `cradle.toml` loader checks `privileges_without`
//! against [`ROLE`], and the fuzz crate compiles this file as it is; the
//! simulator's access configuration for the role is `super`'s ([`super::sim_access`]).

/// One privilege of the role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Privilege {
    /// The privilege, e.g. `VM.Clone`.
    pub name: &'static str,
    /// The ACL path PVE checks it on (`{vmid}`, `{storage}`, `{node}`, `{bridge}` stand
    /// for the VM's, the storage's, the node's, the NIC's bridge).
    pub path: &'static str,
    /// What in cradle needs it.
    pub needed_by: &'static str,
}

/// The role name the documented `pveum` commands create.
pub const ROLE_NAME: &str = "Cradle";

/// Every privilege of the role, in the order docs/CONFIG.md lists them.
pub const ROLE: &[Privilege] = &[
    Privilege {
        name: "VM.Audit",
        path: "/vms/{vmid}",
        needed_by: "discovery: see the template and the VM (cluster resources, config, status, pending)",
    },
    Privilege { name: "VM.Clone", path: "/vms/{template}", needed_by: "create: clone the template" },
    Privilege {
        name: "VM.Allocate",
        path: "/vms/{vmid}",
        needed_by: "create: the clone's new VMID (or a VM from a disk image); remove: destroy the VM",
    },
    Privilege {
        name: "VM.Config.Disk",
        path: "/vms/{vmid}",
        needed_by: "create: resize the disk, add data disks, boot order; finalize: unlink disks",
    },
    Privilege {
        name: "VM.Config.CDROM",
        path: "/vms/{vmid}",
        needed_by: "finalize: remove the cloud-init drive; Windows: the install media",
    },
    Privilege { name: "VM.Config.CPU", path: "/vms/{vmid}", needed_by: "create: cores, sockets, CPU type" },
    Privilege { name: "VM.Config.Memory", path: "/vms/{vmid}", needed_by: "create: memory" },
    Privilege { name: "VM.Config.Network", path: "/vms/{vmid}", needed_by: "create: the NICs (netN)" },
    Privilege {
        name: "VM.Config.HWType",
        path: "/vms/{vmid}",
        needed_by: "create from an image or ISO: machine, SCSI controller, VGA, serial console",
    },
    Privilege {
        name: "VM.Config.Options",
        path: "/vms/{vmid}",
        needed_by: "create: name, tags, description, start-up order, guest agent, OS type",
    },
    Privilege {
        name: "VM.Config.Cloudinit",
        path: "/vms/{vmid}",
        needed_by: "create: cicustom (the snippets), ipconfig, user; finalize: remove the cloud-init drive",
    },
    Privilege {
        name: "VM.PowerMgmt",
        path: "/vms/{vmid}",
        needed_by: "start, reboot after finalize, stop before removal",
    },
    Privilege { name: "VM.Migrate", path: "/vms/{vmid}", needed_by: "placement: migrate to the target node" },
    Privilege {
        name: "VM.GuestAgent.Audit",
        path: "/vms/{vmid}",
        needed_by: "guest agent reads (PVE 9): addresses and OS info of appliances and Windows",
    },
    Privilege {
        name: "Datastore.AllocateSpace",
        path: "/storage/{storage}",
        needed_by: "create: the clone's disks and new disks on the VM storage; preflight: the storages' status and content (it stands in for Datastore.Audit there)",
    },
    Privilege {
        name: "Datastore.AllocateTemplate",
        path: "/storage/{storage}",
        needed_by: "disk images and ISOs: upload them to the storage",
    },
    Privilege {
        name: "SDN.Use",
        path: "/sdn/zones/localnetwork/{bridge}",
        needed_by: "create: attach NICs to the bridge (and its VLANs)",
    },
    Privilege {
        name: "Sys.Audit",
        path: "/, /nodes/{node}",
        needed_by: "HA placement: read the HA resources and rules (on /); settle and resume: see and wait for the VM's tasks other users started (on /nodes/{node}: the start PVE runs as root@pam after a reboot, HA's and an operator's tasks)",
    },
    Privilege {
        name: "Sys.Modify",
        path: "/",
        needed_by: "create: the `startup` order option (qemu-server requires it on / for that key)",
    },
    Privilege { name: "Sys.Console", path: "/", needed_by: "HA: create, update and delete HA resources and rules" },
];

/// The privileges of [`ROLE`], comma-separated as `pveum role add --privs` takes them.
pub fn privs_list() -> String {
    ROLE.iter().map(|p| p.name).collect::<Vec<_>>().join(",")
}

/// What to tell an operator about PVE's `Permission check failed (PATH, PRIV)`: the
/// token lacks PRIV on PATH, and how to grant it; for PVE's bare `Permission check
/// failed` (an `or` of alternatives failed: clone's VM.Allocate, create's), the
/// role's privileges the call may need.
pub fn denied_hint(message: &str) -> String {
    let detail = message
        .split_once("Permission check failed (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .and_then(|(inner, _)| inner.rsplit_once(", "));
    match detail {
        Some((path, privs)) => format!(
            "the API token lacks {privs} on {path} in Proxmox VE (an operator problem on the PVE side, not a cradle \
             grant): grant it, e.g. add it to the token's role (`pveum role modify {ROLE_NAME} --append 1 --privs {}`) \
             or give the role on that path (`pveum acl modify {path} --roles {ROLE_NAME} --tokens USER@REALM!TOKEN`, \
             and to the user too when the token is privilege-separated); docs/CONFIG.md lists the role",
            privs.split('|').next().unwrap_or(privs)
        ),
        None => format!(
            "Proxmox VE's permission check failed without naming the privilege (an operator problem on the PVE side, \
             not a cradle grant): creating or cloning a VM needs VM.Allocate on /vms/VMID; the token needs the role \
             {ROLE_NAME} of docs/CONFIG.md ({})",
            privs_list()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_403_hint_names_the_privilege_and_path_pve_reported() {
        let h = denied_hint("Permission check failed (/vms/9000, VM.Clone)");
        assert!(h.contains("lacks VM.Clone on /vms/9000"), "{h}");
        assert!(h.contains("pveum acl modify /vms/9000"), "{h}");
        let h = denied_hint("Permission check failed (/vms/100, VM.GuestAgent.Audit|VM.GuestAgent.Unrestricted)");
        assert!(h.contains("--privs VM.GuestAgent.Audit`"), "{h}");
        let h = denied_hint("Permission check failed");
        assert!(h.contains("VM.Allocate on /vms/VMID"), "{h}");
    }

    /// docs/CONFIG.md's table of the role lists exactly [`ROLE`], in order.
    #[test]
    fn config_md_documents_exactly_this_role() {
        let doc = include_str!("../../../../../docs/CONFIG.md");
        let section = doc.split("## Proxmox VE permissions").nth(1).expect("docs/CONFIG.md has the section");
        let listed: Vec<&str> = section
            .lines()
            .take_while(|l| !l.starts_with("## "))
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .filter(|p| p.contains('.'))
            .collect();
        let role: Vec<&str> = ROLE.iter().map(|p| p.name).collect();
        assert_eq!(listed, role);
        assert!(section.contains(&privs_list()), "the pveum command lists the role's privileges");
    }
}
