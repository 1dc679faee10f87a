//! Admission of a NetBox VM: the pipeline builds a Staged VM that has the
//! three required custom fields and a primary IPv4 assigned to a VM
//! interface; it skips a VM that is not Staged, and a VM created as Staged
//! that has everything but its address (NetBox cannot give a new VM a primary
//! IPv4 at creation: the update that sets it starts the pipeline again,
//! trigger `primary-ip`, docs/SERVE.md). Anything else missing is refused
//! with one sentence listing all of it, for the NetBox user's journal.

use crate::{Problem, words};

/// The NetBox VM as the `netbox` capability reads it (the fields admission needs).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Vm {
    /// Its NetBox id.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Its status value (`staged`, `active`, ...).
    pub status: String,
    /// vCPUs (NetBox keeps a decimal).
    pub vcpus: Option<f64>,
    /// Memory in MB.
    pub memory_mb: Option<u64>,
    /// Custom field `proxmox_node`.
    pub node: Option<String>,
    /// Custom field `proxmox_template`.
    pub template: Option<String>,
    /// Custom field `proxmox_datastore`.
    pub datastore: Option<String>,
    /// Custom field `proxmox_vmid`.
    pub vmid: Option<u32>,
    /// Custom field `semaphore_template`.
    pub semaphore_template: Option<u32>,
    /// Its primary IPv4, read in full.
    pub primary_ip4: Option<Ip>,
}

/// An IP address object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ip {
    /// The address in CIDR form, `10.0.10.5/24`.
    pub address: String,
    /// The VM interface it is assigned to, if any.
    pub vm_interface: Option<u64>,
}

/// A VM to build: what the workflow turns into inventory variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Build {
    pub name: String,
    pub netbox_id: u64,
    pub node: String,
    pub template: String,
    pub datastore: String,
    pub cores: Option<u32>,
    pub memory_mb: Option<u64>,
    pub vmid: Option<u32>,
    pub interface: u64,
    /// The address without its prefix length.
    pub address: String,
    /// The address as NetBox has it (CIDR).
    pub cidr: String,
    pub semaphore_template: Option<u32>,
}

/// What to do with the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Nothing to do; the reason.
    Skip(String),
    /// Build it.
    Build(Build),
}

/// The trigger of an event for a VM created as Staged (`cradle serve`'s
/// *Object created* event).
pub const CREATED: &str = "created";

/// Decide for `vm`, the VM of an event started by `trigger`.
pub fn admit(vm: &Vm, trigger: &str) -> Result<Admission, Problem> {
    if vm.status != "staged" {
        return Ok(Admission::Skip(format!("{} is {} in NetBox, not staged", vm.name, vm.status)));
    }
    let given = |v: &Option<String>| v.as_deref().filter(|s| !s.is_empty()).map(str::to_string);
    let (node, template, datastore) = (given(&vm.node), given(&vm.template), given(&vm.datastore));
    let mut missing = Vec::new();
    if node.is_none() {
        missing.push("custom field proxmox_node");
    }
    if template.is_none() {
        missing.push("custom field proxmox_template");
    }
    if datastore.is_none() {
        missing.push("custom field proxmox_datastore");
    }
    if vm.primary_ip4.is_none() {
        if missing.is_empty() && trigger == CREATED {
            return Ok(Admission::Skip(format!(
                "{} has no primary IPv4 yet; setting one starts the pipeline",
                vm.name
            )));
        }
        missing.push("a primary IPv4 address (primary_ip4)");
    }
    let (Some(node), Some(template), Some(datastore), Some(ip)) = (node, template, datastore, &vm.primary_ip4) else {
        return Err(Problem::invalid(format!("{} cannot be built: NetBox has no {}", vm.name, words(&missing))));
    };
    let Some(interface) = ip.vm_interface else {
        return Err(Problem::invalid(format!(
            "{}: its primary IP {} is not assigned to one of its interfaces",
            vm.name, ip.address
        )));
    };
    let address = ip.address.split('/').next().unwrap_or_default().to_string();
    Ok(Admission::Build(Build {
        name: vm.name.clone(),
        netbox_id: vm.id,
        node,
        template,
        datastore,
        cores: vm.vcpus.map(cores),
        memory_mb: vm.memory_mb,
        vmid: vm.vmid,
        interface,
        address,
        cidr: ip.address.clone(),
        semaphore_template: vm.semaphore_template,
    }))
}

/// Cores from NetBox's decimal vCPUs: the whole part, as the workflow took it
/// (`parse_float(..).to_int()`); the cast saturates (a negative or absurd
/// value then fails the inventory's own check, naming `cores`).
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "truncation is the rule; the cast saturates"
)]
fn cores(vcpus: f64) -> u32 {
    vcpus.trunc() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged() -> Vm {
        Vm {
            id: 7,
            name: "web-1".into(),
            status: "staged".into(),
            vcpus: Some(2.0),
            memory_mb: Some(2048),
            node: Some("pve1".into()),
            template: Some("debian-12-cloud".into()),
            datastore: Some("local-lvm".into()),
            vmid: None,
            semaphore_template: None,
            primary_ip4: Some(Ip { address: "10.0.10.5/24".into(), vm_interface: Some(31) }),
        }
    }

    fn build(vm: &Vm, trigger: &str) -> Build {
        match admit(vm, trigger) {
            Ok(Admission::Build(b)) => b,
            other => panic!("expected a build, got {other:?}"),
        }
    }

    fn refusal(vm: &Vm, trigger: &str) -> String {
        match admit(vm, trigger) {
            Err(p) => {
                assert_eq!(p.kind, crate::Kind::Invalid, "{p:?}");
                p.message
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_staged_vm_with_everything_is_built_with_its_fields_and_address() {
        let mut vm = staged();
        vm.vmid = Some(140);
        vm.semaphore_template = Some(3);
        let b = build(&vm, "status");
        assert_eq!(
            b,
            Build {
                name: "web-1".into(),
                netbox_id: 7,
                node: "pve1".into(),
                template: "debian-12-cloud".into(),
                datastore: "local-lvm".into(),
                cores: Some(2),
                memory_mb: Some(2048),
                vmid: Some(140),
                interface: 31,
                address: "10.0.10.5".into(),
                cidr: "10.0.10.5/24".into(),
                semaphore_template: Some(3),
            }
        );
    }

    #[test]
    fn a_vm_that_is_not_staged_is_skipped_naming_its_status() {
        let mut vm = staged();
        vm.status = "active".into();
        assert_eq!(admit(&vm, "status"), Ok(Admission::Skip("web-1 is active in NetBox, not staged".into())));
        // Not Staged wins over anything missing: nothing is reported.
        vm.node = None;
        assert!(matches!(admit(&vm, "status"), Ok(Admission::Skip(_))));
    }

    #[test]
    fn every_missing_thing_is_listed_in_one_sentence_in_field_order() {
        let mut vm = staged();
        vm.node = None;
        vm.template = Some(String::new());
        vm.datastore = None;
        vm.primary_ip4 = None;
        assert_eq!(
            refusal(&vm, "status"),
            "web-1 cannot be built: NetBox has no custom field proxmox_node, custom field proxmox_template, \
             custom field proxmox_datastore and a primary IPv4 address (primary_ip4)"
        );
    }

    #[test]
    fn one_missing_field_is_named_alone_as_a_word_not_a_list_literal() {
        let mut vm = staged();
        vm.template = None;
        let said = refusal(&vm, "status");
        assert_eq!(said, "web-1 cannot be built: NetBox has no custom field proxmox_template");
        assert!(!said.contains('['), "{said}");
    }

    #[test]
    fn an_empty_custom_field_counts_as_missing() {
        let mut vm = staged();
        vm.datastore = Some(String::new());
        assert!(refusal(&vm, "status").ends_with("has no custom field proxmox_datastore"));
    }

    #[test]
    fn a_vm_created_staged_waiting_only_for_its_address_is_skipped() {
        let mut vm = staged();
        vm.primary_ip4 = None;
        assert_eq!(
            admit(&vm, CREATED),
            Ok(Admission::Skip("web-1 has no primary IPv4 yet; setting one starts the pipeline".into()))
        );
        // Set to Staged (or synced) without an address: refused.
        assert!(refusal(&vm, "status").ends_with("has no a primary IPv4 address (primary_ip4)"));
        assert!(refusal(&vm, "sync").contains("primary_ip4"));
    }

    #[test]
    fn a_vm_created_staged_missing_a_field_too_is_refused_not_skipped() {
        let mut vm = staged();
        vm.primary_ip4 = None;
        vm.node = None;
        assert_eq!(
            refusal(&vm, CREATED),
            "web-1 cannot be built: NetBox has no custom field proxmox_node and a primary IPv4 address (primary_ip4)"
        );
    }

    #[test]
    fn a_primary_ip_assigned_to_no_vm_interface_is_refused_naming_it() {
        let mut vm = staged();
        vm.primary_ip4 = Some(Ip { address: "10.0.10.5/24".into(), vm_interface: None });
        assert_eq!(
            refusal(&vm, "status"),
            "web-1: its primary IP 10.0.10.5/24 is not assigned to one of its interfaces"
        );
    }

    #[test]
    fn cores_are_the_whole_part_of_netbox_vcpus_and_absent_stays_absent() {
        let mut vm = staged();
        vm.vcpus = Some(2.5);
        assert_eq!(build(&vm, "status").cores, Some(2));
        vm.vcpus = None;
        vm.memory_mb = None;
        let b = build(&vm, "status");
        assert_eq!((b.cores, b.memory_mb), (None, None));
    }

    #[test]
    fn an_address_without_prefix_length_is_kept_as_it_is() {
        let mut vm = staged();
        vm.primary_ip4 = Some(Ip { address: "10.0.10.5".into(), vm_interface: Some(1) });
        let b = build(&vm, "status");
        assert_eq!((b.address.as_str(), b.cidr.as_str()), ("10.0.10.5", "10.0.10.5"));
    }
}
