//! Least privilege, enforced (issue 31 §3): the simulator checks every call against
//! the token's ACL as PVE 9.1 does (sim/src/acl), the suite's token holds exactly
//! the role docs/CONFIG.md documents (`cradle::caps::proxmox::role::ROLE`, the
//! fixture's default), and a token missing one privilege of it fails the provision
//! with an error naming that privilege and the path PVE checked it on, presented
//! as an operator problem on the PVE side (kind `denied` and the `pveum` grant),
//! never as a cradle grant refusal.
//!
//! One case per privilege that a plain provision (clone, configure, migrate,
//! start, SSH, cloud-init, finalize) checks; the others (`VM.Config.CPU`,
//! `VM.Config.Memory` when the VM's sizes equal the template's, `VM.Config.HWType`,
//! `VM.GuestAgent.Audit`, `Datastore.AllocateTemplate`, `Sys.Audit`, `Sys.Console`)
//! belong to image, appliance and HA features, whose e2e tests run with the whole
//! role; [`FEATURE_ONLY`] names them so the table below stays complete.

use cradle::caps::proxmox::role::ROLE;
use cradle::provision::Action;
use cradle_tests::fixture::{Cluster, LabInventory, Privileges, ProjectConfig, SimCluster, SimSession};

/// Provision one VM (`vm-0`, VMID 300, cloned on pve1, migrated to pve2) with the
/// role minus `without`: the host's result.
fn provision_without(subnet: u8, without: &'static str) -> cradle::provision::HostResult {
    let dir = tempfile::tempdir().expect("tempdir");
    LabInventory::new("127.91", subnet).vmid_base(Some(300)).write(dir.path());
    let config = ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0)))
        .privileges(Privileges::Cradle { without: if without.is_empty() { vec![] } else { vec![without] } })
        .write(dir.path());
    let session = SimSession::open(&config);
    let mut results = session.run(&dir.path().join("inventory"), None, Action::Provision, 1);
    assert_eq!(results.len(), 1);
    results.remove(0)
}

/// The privileges of the role a plain provision does not check (see the module docs).
const FEATURE_ONLY: &[&str] = &[
    "VM.Config.CPU",
    "VM.Config.Memory",
    "VM.Config.HWType",
    "VM.GuestAgent.Audit",
    "Datastore.AllocateTemplate",
    "Sys.Audit",
    "Sys.Console",
];

/// The provision without `privilege` fails in `step`, naming `privilege` and
/// `path` as PVE's 403 and cradle's hint do.
fn fails_naming(subnet: u8, privilege: &'static str, step: &str, path: &str) {
    let r = provision_without(subnet, privilege);
    let e = r.error.clone().unwrap_or_else(|| panic!("the provision without {privilege} succeeded: {r:?}"));
    assert!(e.contains(&format!("in step '{step}'")), "{privilege}: {e}");
    assert!(e.contains("denied: Proxmox API"), "a 403 is a Proxmox denial: {e}");
    assert!(e.contains(&format!("Permission check failed ({path}, {privilege})")), "{e}");
    assert!(e.contains(&format!("lacks {privilege} on {path}")), "{e}");
    assert!(e.contains("an operator problem on the PVE side, not a cradle grant"), "{e}");
    assert!(e.contains(&format!("--privs {privilege}")), "the pveum grant: {e}");
    assert!(!e.contains("grant refused") && !e.contains("not granted"), "not a cradle policy denial: {e}");
}

#[test]
fn the_documented_role_is_enough_for_a_provision() {
    let r = provision_without(1, "");
    assert!(r.ok(), "{r:?}");
}

#[test]
fn without_vm_clone_the_clone_fails_naming_it() {
    fails_naming(2, "VM.Clone", "create", "/vms/9000");
}

#[test]
fn without_vm_config_disk_the_resize_fails_naming_it() {
    fails_naming(3, "VM.Config.Disk", "create", "/vms/300");
}

#[test]
fn without_vm_config_cdrom_the_cloud_init_drive_removal_fails_naming_it() {
    fails_naming(4, "VM.Config.CDROM", "drive-removal", "/vms/300");
}

#[test]
fn without_vm_config_network_the_nic_configuration_fails_naming_it() {
    fails_naming(5, "VM.Config.Network", "create", "/vms/300");
}

#[test]
fn without_vm_config_options_the_configuration_fails_naming_it() {
    fails_naming(6, "VM.Config.Options", "create", "/vms/300");
}

#[test]
fn without_vm_config_cloudinit_the_cloud_init_drive_removal_fails_naming_it() {
    fails_naming(7, "VM.Config.Cloudinit", "drive-removal", "/vms/300");
}

#[test]
fn without_vm_powermgmt_the_start_fails_naming_it() {
    fails_naming(8, "VM.PowerMgmt", "start", "/vms/300");
}

#[test]
fn without_vm_migrate_the_migration_fails_naming_it() {
    fails_naming(9, "VM.Migrate", "migrate", "/vms/300");
}

/// Without Datastore.AllocateSpace (and no Datastore.Audit) PVE's storage list
/// leaves the storages out (Storage/Status.pm l. 244-245): the preflight stops
/// before any change, naming both privileges and the storage's path.
#[test]
fn without_datastore_allocatespace_the_preflight_fails_naming_it_and_the_storage() {
    let r = provision_without(10, "Datastore.AllocateSpace");
    let e = r.error.unwrap_or_default();
    assert!(e.contains("in step 'preflight'"), "{e}");
    assert!(e.contains("neither Datastore.Audit nor Datastore.AllocateSpace on /storage/local"), "{e}");
}

#[test]
fn without_sdn_use_the_clone_fails_naming_the_bridge() {
    fails_naming(11, "SDN.Use", "create", "/sdn/zones/localnetwork/vmbr0");
}

#[test]
fn without_sys_modify_the_startup_order_fails_naming_it() {
    fails_naming(12, "Sys.Modify", "create", "/");
}

/// PVE's clone check of VM.Allocate on the new VMID is an `or` (or a pool), whose
/// failure names nothing: cradle's error says what the call needs.
#[test]
fn without_vm_allocate_the_clone_fails_and_the_error_names_vm_allocate() {
    let r = provision_without(13, "VM.Allocate");
    let e = r.error.unwrap_or_default();
    assert!(
        e.contains("denied: Proxmox API POST /nodes/pve1/qemu/9000/clone: HTTP 403 Permission check failed —"),
        "{e}"
    );
    assert!(e.contains("needs VM.Allocate on /vms/VMID"), "{e}");
    assert!(e.contains("an operator problem on the PVE side"), "{e}");
}

/// Without VM.Audit PVE lists no VMs to the token (Cluster.pm resources), so the
/// template is not seen: the preflight says so and names VM.Audit.
#[test]
fn without_vm_audit_the_preflight_does_not_see_the_template_and_names_vm_audit() {
    let r = provision_without(14, "VM.Audit");
    let e = r.error.unwrap_or_default();
    assert!(e.contains("in step 'preflight'") && e.contains("template debian-12-cloud does not exist"), "{e}");
    assert!(e.contains("without VM.Audit on /vms/VMID of the template"), "{e}");
}

/// Every privilege of the role has a case above or is a feature's.
#[test]
fn every_privilege_of_the_role_has_a_case() {
    let cases = [
        "VM.Audit",
        "VM.Clone",
        "VM.Allocate",
        "VM.Config.Disk",
        "VM.Config.CDROM",
        "VM.Config.Network",
        "VM.Config.Options",
        "VM.Config.Cloudinit",
        "VM.PowerMgmt",
        "VM.Migrate",
        "Datastore.AllocateSpace",
        "SDN.Use",
        "Sys.Modify",
    ];
    for p in ROLE {
        assert!(cases.contains(&p.name) || FEATURE_ONLY.contains(&p.name), "{} has no case", p.name);
    }
    assert_eq!(cases.len() + FEATURE_ONLY.len(), ROLE.len());
}
