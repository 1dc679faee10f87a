//! Least privilege, enforced (issue 31 §3): the simulator checks every call against
//! the token's ACL as PVE 9.1 does (sim/src/acl), the suite's token holds exactly
//! the role docs/CONFIG.md documents (`cradle::caps::proxmox::role::ROLE`, the
//! fixture's default), and a token missing one privilege of it fails the provision
//! with an error naming that privilege and the path PVE checked it on, presented
//! as an operator problem on the PVE side (kind `denied` and the `pveum` grant),
//! never as a cradle grant refusal.
//!
//! One case per privilege of the role, each on the path that needs it: a plain
//! provision (clone, configure, migrate, start, SSH, cloud-init, finalize) for most;
//! sizes other than the template's for `VM.Config.CPU` and `VM.Config.Memory`
//! (PVE checks an option only when it is written, and cradle writes only what
//! differs); the worked example of a VM type built from a disk image
//! (`examples/vm-types`, Home Assistant OS) for `VM.Config.HWType` (its `machine`
//! and `scsihw`), `Datastore.AllocateTemplate` (the image's upload) and
//! `VM.GuestAgent.Audit` (its verify step pings the guest agent); HA placement
//! (`workflows/lib/ha.rhai`, as the NetBox pipeline's `ha` step runs it) for
//! `Sys.Audit` and `Sys.Console`.

use cradle::caps::proxmox::role::ROLE;
use cradle::provision::{Action, HostResult};
use cradle_tests::fixture::{
    Cluster, LabInventory, Privileges, ProjectConfig, SimCluster, SimSession, Workflows, example_project,
};

/// The role minus `without` ("": the whole role).
fn role_without(without: &'static str) -> Privileges {
    Privileges::Cradle { without: if without.is_empty() { vec![] } else { vec![without] } }
}

/// Provision `lab` (VMID 300, cloned on pve1, migrated to pve2) with the role
/// minus `without` and the repository's workflows, or the project's `workflows/`
/// directory when `dir` holds one: the one host's result.
fn provision_lab(dir: &tempfile::TempDir, lab: LabInventory, without: &'static str) -> HostResult {
    lab.vmid_base(Some(300)).write(dir.path());
    let mut project = ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0))).privileges(role_without(without));
    if dir.path().join("workflows").is_dir() {
        project = project.workflows(Workflows::Dir("workflows".into()));
    }
    let session = SimSession::open(&project.write(dir.path()));
    let mut results = session.run(&dir.path().join("inventory"), None, Action::Provision, 1);
    assert_eq!(results.len(), 1);
    results.remove(0)
}

/// Provision one VM (`vm-0`) of the plain lab with the role minus `without`.
fn provision_without(subnet: u8, without: &'static str) -> HostResult {
    provision_lab(&tempfile::tempdir().expect("tempdir"), LabInventory::new("127.91", subnet), without)
}

/// `r` failed in `step`, naming what PVE's 403 named (`reported`: the privilege,
/// or the alternatives joined by `|`) on `path` and the `pveum` grant of
/// `privilege`, as an operator problem on the PVE side.
fn assert_denied(r: &HostResult, privilege: &str, reported: &str, step: &str, path: &str) {
    let e = r.error.clone().unwrap_or_else(|| panic!("the run without {privilege} succeeded: {r:?}"));
    assert!(e.contains(&format!("in step '{step}'")), "{privilege}: {e}");
    assert!(e.contains("denied: Proxmox API"), "a 403 is a Proxmox denial: {e}");
    assert!(e.contains(&format!("Permission check failed ({path}, {reported})")), "{e}");
    assert!(e.contains(&format!("lacks {reported} on {path}")), "{e}");
    assert!(e.contains("an operator problem on the PVE side, not a cradle grant"), "{e}");
    assert!(e.contains(&format!("--privs {privilege}`")), "the pveum grant: {e}");
    assert!(!e.contains("grant refused") && !e.contains("not granted"), "not a cradle policy denial: {e}");
}

/// The provision without `privilege` fails in `step`, naming `privilege` and
/// `path` as PVE's 403 and cradle's hint do.
fn fails_naming(subnet: u8, privilege: &'static str, step: &str, path: &str) {
    assert_denied(&provision_without(subnet, privilege), privilege, privilege, step, path);
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

/// The lab's `vms_config` with `sizes` (e.g. `cores: 4`) added: sizes other than the
/// template's (2 cores, 2048 MiB), which cradle then writes on the clone.
fn sized_lab(subnet: u8, sizes: &str) -> LabInventory {
    let config = format!(
        "vms_config:\n  {sizes}\n  disk: 12\n  startup_order: 10\n  network:\n    nic0:\n      bridge: vmbr0\n      \
         vlan: 20\n      ip: \"{{{{ ansible_host }}}}/24\"\n      gateway: 127.91.{subnet}.1\n"
    );
    LabInventory::new("127.91", subnet).host_vars("vm-0", &config)
}

/// qemu-server checks `cores` against VM.Config.CPU (Qemu.pm l. 789-799, 1010-1011;
/// e6352be67f70042a7433a3a3c712b36d02f9f7cb) when the config write carries it.
#[test]
fn without_vm_config_cpu_a_vm_with_other_cores_than_the_template_fails_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = provision_lab(&dir, sized_lab(15, "cores: 4"), "VM.Config.CPU");
    assert_denied(&r, "VM.Config.CPU", "VM.Config.CPU", "create", "/vms/300");
}

/// ... and `memory` against VM.Config.Memory (Qemu.pm l. 801-806, 1012-1013).
#[test]
fn without_vm_config_memory_a_vm_with_other_memory_than_the_template_fails_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = provision_lab(&dir, sized_lab(16, "memory: 4096"), "VM.Config.Memory");
    assert_denied(&r, "VM.Config.Memory", "VM.Config.Memory", "create", "/vms/300");
}

#[test]
fn the_documented_role_is_enough_for_other_sizes_than_the_templates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = provision_lab(&dir, sized_lab(17, "cores: 4\n  memory: 4096"), "");
    assert!(r.ok(), "{r:?}");
}

/// Provision `ha-1` (VMID 200 on pve1) of the worked VM-type example (Home
/// Assistant OS from a 1 MiB image, uploaded through the API, verified by its
/// guest agent) with the role minus `without`.
fn provision_image_type_without(without: &'static str) -> HostResult {
    let dir = example_project("vm-types");
    std::fs::create_dir_all(dir.path().join("images")).expect("images dir");
    std::fs::write(dir.path().join("images/haos.qcow2"), crate::vm_types::qcow2(1 << 20, 6 << 30)).expect("image");
    let config = ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0)))
        .workflows(Workflows::Dir("workflows".into()))
        .privileges(role_without(without))
        .write(dir.path());
    let session = SimSession::open(&config);
    let mut results = session.run(&dir.path().join("inventory"), Some("ha-1"), Action::Provision, 1);
    assert_eq!(results.len(), 1);
    results.remove(0)
}

#[test]
fn the_documented_role_is_enough_for_a_vm_type_built_from_a_disk_image() {
    let r = provision_image_type_without("");
    assert!(r.ok(), "{r:?}");
}

/// The create of a VM from an image sets `machine` and `scsihw`, hardware-type
/// options (Qemu.pm l. 808-821, 1014-1015): VM.Config.HWType.
#[test]
fn without_vm_config_hwtype_the_create_from_a_disk_image_fails_naming_it() {
    let r = provision_image_type_without("VM.Config.HWType");
    assert_denied(&r, "VM.Config.HWType", "VM.Config.HWType", "create", "/vms/200");
}

/// The image goes to the storage through `POST .../storage/local/upload`, which
/// needs Datastore.AllocateTemplate on the storage (apidata.js, pve-docs
/// e5010dcea566a205770572cfbc5fe0af220d5077, `/nodes/{node}/storage/{storage}/upload`).
#[test]
fn without_datastore_allocatetemplate_the_image_upload_fails_naming_it_and_the_storage() {
    let r = provision_image_type_without("Datastore.AllocateTemplate");
    assert_denied(&r, "Datastore.AllocateTemplate", "Datastore.AllocateTemplate", "stage-image", "/storage/local");
}

/// The verify step pings the guest agent: `POST .../agent/ping` needs
/// VM.GuestAgent.Audit or VM.GuestAgent.Unrestricted (apidata.js,
/// `/nodes/{node}/qemu/{vmid}/agent/ping`, `any`). The 403 fails the step at once,
/// never read as a guest still booting until verify's 10-minute bound.
#[test]
fn without_vm_guestagent_audit_the_verify_by_the_guest_agent_fails_naming_it_at_once() {
    let r = provision_image_type_without("VM.GuestAgent.Audit");
    let reported = "VM.GuestAgent.Audit|VM.GuestAgent.Unrestricted";
    assert_denied(&r, "VM.GuestAgent.Audit", reported, "verify", "/vms/200");
}

/// A VM type that provisions as the built-in type does and then places the VM with
/// HA (`workflows/lib/ha.rhai`, the NetBox pipeline's `ha` step), on a project
/// holding the repository's workflows (`provision.rhai` also as `lib/base.rhai`:
/// a workflow imports modules from `lib/` only).
const HA_PLACED: &str = r#"import "lib/base" as base;
import "lib/ha" as ha;

fn provision(vm) {
    let r = base::provision(vm);
    step(vm.name, "ha", || ha::manage(vm.spec.vmid, vm.node, "cradle-" + vm.node));
    r
}
"#;

/// Provision `vm-0` of the type [`HA_PLACED`] with the role minus `without`.
fn provision_ha_placed_without(subnet: u8, without: &'static str) -> HostResult {
    let dir = tempfile::tempdir().expect("tempdir");
    cradle_tests::fixture::copy_tree(&cradle_tests::workspace().join("workflows"), &dir.path().join("workflows"));
    let workflows = dir.path().join("workflows");
    std::fs::copy(workflows.join("provision.rhai"), workflows.join("lib/base.rhai")).expect("lib/base.rhai");
    std::fs::write(workflows.join("ha_placed.rhai"), HA_PLACED).expect("type file");
    provision_lab(&dir, LabInventory::new("127.91", subnet).var("vms_type=ha_placed"), without)
}

#[test]
fn the_documented_role_is_enough_for_ha_placement() {
    let r = provision_ha_placed_without(18, "");
    assert!(r.ok(), "{r:?}");
}

/// HA reads need Sys.Audit on / (apidata.js `GET /cluster/ha/resources`,
/// `GET /cluster/ha/rules`).
#[test]
fn without_sys_audit_ha_placement_fails_naming_it() {
    let r = provision_ha_placed_without(19, "Sys.Audit");
    assert_denied(&r, "Sys.Audit", "Sys.Audit", "ha", "/");
}

/// HA writes need Sys.Console on / (apidata.js `POST /cluster/ha/resources`,
/// `POST /cluster/ha/rules`, `PUT /cluster/ha/rules/{rule}`).
#[test]
fn without_sys_console_ha_placement_fails_naming_it() {
    let r = provision_ha_placed_without(20, "Sys.Console");
    assert_denied(&r, "Sys.Console", "Sys.Console", "ha", "/");
}

/// Every privilege of the role has a case above.
#[test]
fn every_privilege_of_the_role_has_a_case() {
    let cases = [
        "VM.Audit",
        "VM.Clone",
        "VM.Allocate",
        "VM.Config.Disk",
        "VM.Config.CDROM",
        "VM.Config.CPU",
        "VM.Config.Memory",
        "VM.Config.Network",
        "VM.Config.HWType",
        "VM.Config.Options",
        "VM.Config.Cloudinit",
        "VM.PowerMgmt",
        "VM.Migrate",
        "VM.GuestAgent.Audit",
        "Datastore.AllocateSpace",
        "Datastore.AllocateTemplate",
        "SDN.Use",
        "Sys.Audit",
        "Sys.Modify",
        "Sys.Console",
    ];
    let role: Vec<&str> = ROLE.iter().map(|p| p.name).collect();
    assert_eq!(role, cases, "one case per privilege of the role, in its order");
}
