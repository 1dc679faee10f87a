//! The creation service, record side: one VM's creation record read,
//! reserved, begun and released through the one guard, with typed inputs and
//! outputs ([`CreationView`], the reserved VMIDs) and [`CapError`] failures.
//! The snippet side ([`super::snippets`]) begins records through `begin`.
//!
//! Contract:
//! - Every access to a VM's record (it holds the guest's private host key) is
//!   checked as the `checkpoint` capability for that VM
//!   (`Call::Checkpoint(CheckpointCall::Vm)`: only a VM of the run) and
//!   journaled as `creation-read`, `creation-begin` or `creation-clear`; the
//!   reserved VMIDs of all records as `CheckpointCall::Reservations`,
//!   journaled as `creation-reservations` (only the VMIDs leave the host).
//! - The private key never leaves this module and [`super::snippets`]:
//!   [`CreationView`] is the record without it.
//! - The run's data comes from the [`CapCtx`] the caller passes
//!   (`RunData::workflow_caps` for a workflow): its `services` is the run's
//!   own `Arc<Services>`, so the record store (`services.checkpoints`), the
//!   node logins (`services.nodes`) and the guest keys (`services.guest_keys`)
//!   are read from the context every adapter call is checked against, and the
//!   service needs no second handle on the run and nothing of the script engine.
//!
//! Failure modes: a denied or over-budget call is the guard's [`CapError`]; a
//! record for another VMID is [`ErrorKind::Conflict`] ([`CreationError::Mismatch`]),
//! any other record trouble [`ErrorKind::Failed`] naming the file; a host key
//! that cannot be made fails as `ssh::generate_host_key` says; [`release`] is
//! a `conflict` while a VM of that name holds the recorded VMID.

use serde::Serialize;

use super::{Creation, CreationError, CreationStore};
use crate::caps::Call;
use crate::caps::checkpoint::scope::CheckpointCall;
use crate::caps::context::CapCtx;
use crate::caps::coordination::etcd::EtcdFailure;
use crate::contract::bindings::cradle::host::proxmox;
use crate::contract::{CapError, ErrorKind};

/// A creation record without its private key (`cloudinit::creation(vm)`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreationView {
    /// The VMID being created (reserved until the clone takes it).
    pub vmid: u32,
    /// The node the snippets go to.
    pub node: String,
    /// The guest's public host key line.
    pub host_key: String,
    /// When the record was first written (RFC 3339).
    pub written: String,
}

impl From<Creation> for CreationView {
    fn from(rec: Creation) -> CreationView {
        CreationView { vmid: rec.vmid, node: rec.node, host_key: rec.host_key_public, written: rec.written }
    }
}

/// The record store of the run (it lives with the checkpoints), writing
/// under the fencing token of `vm_name`'s lock when the run holds it.
fn store(c: &CapCtx, vm_name: Option<&str>) -> CreationStore {
    CreationStore::for_checkpoints(&c.services.checkpoints.under(vm_name.and_then(|vm| c.vm_fence(vm))))
}

fn record_err(e: CreationError) -> CapError {
    let kind = match e {
        CreationError::Mismatch { .. } | CreationError::Shared { source: EtcdFailure::Fenced { .. }, .. } => {
            ErrorKind::Conflict
        }
        _ => ErrorKind::Failed,
    };
    CapError::new(kind, e.to_string())
}

/// One access to `vm_name`'s creation record through the one guard: checked
/// as the `checkpoint` capability for that VM, journaled as
/// `creation-<function>`.
pub(super) fn with_record<T>(
    c: &CapCtx,
    function: &str,
    vm_name: &str,
    work: impl FnOnce(&CreationStore) -> Result<T, CreationError>,
) -> Result<T, CapError> {
    let store = store(c, Some(vm_name));
    c.guard(&format!("creation-{function}"), Call::Checkpoint(CheckpointCall::Vm { vm_name, vmid: None }), || {
        work(&store).map_err(record_err)
    })
}

/// `vm_name`'s record without the private key, or `None`: "the creation
/// stage of this VM started and did not finish" (`creation-read`).
pub fn creation(c: &CapCtx, vm_name: &str) -> Result<Option<CreationView>, CapError> {
    Ok(with_record(c, "read", vm_name, |s| s.read(vm_name))?.map(CreationView::from))
}

/// The VM's creation record: the stored one (`creation-read`), or one with a
/// host key generated now; either is stored with `vmid` (`creation-begin`,
/// durable before anything else happens: a rerun must find the same key).
pub(super) fn begin(c: &mut CapCtx, vm_name: &str, vmid: u32, node: &str) -> Result<Creation, CapError> {
    let fresh = match with_record(c, "read", vm_name, |s| s.read(vm_name))? {
        Some(rec) => rec,
        None => {
            let key = c.block_on(crate::caps::ssh::generate_host_key(&format!("cradle-{vm_name}")))?;
            Creation {
                vm_name: vm_name.to_string(),
                vmid,
                node: node.to_string(),
                host_key_public: key.public,
                host_key_private: key.private_openssh.expose().to_string(),
                written: String::new(),
            }
        }
    };
    with_record(c, "begin", vm_name, |s| s.begin(Creation { vmid, ..fresh }))
}

/// Reserve `vmid` for `vm_name` (snippets to go to `node`): `begin`, then
/// the record as [`creation`] reads it back.
pub fn reserve(c: &mut CapCtx, vm_name: &str, vmid: u32, node: &str) -> Result<Option<CreationView>, CapError> {
    begin(c, vm_name, vmid, node)?;
    creation(c, vm_name)
}

/// Drop the reservation of a VMID this VM has not taken (its creation failed
/// before the clone): no record is Ok; refused (`conflict`) while a VM of this
/// name holds the recorded VMID (`proxmox::list_vms`).
pub fn release(c: &mut CapCtx, vm_name: &str) -> Result<(), CapError> {
    let Some(rec) = with_record(c, "read", vm_name, |s| s.read(vm_name))? else { return Ok(()) };
    let vms = proxmox::Host::list_vms(c).map_err(CapError::from_wit)?;
    if let Some(taken) = vms.iter().find(|v| v.vmid == rec.vmid && v.name.as_deref() == Some(vm_name)) {
        return Err(CapError::new(
            ErrorKind::Conflict,
            format!(
                "the creation record of {vm_name} is not released: VM {} (VMID {}) exists; finish or remove it",
                taken.name.as_deref().unwrap_or("unnamed"),
                rec.vmid
            ),
        ));
    }
    with_record(c, "clear", vm_name, |s| s.clear(vm_name))
}

/// The VMIDs every creation record on this control node reserves, sorted by
/// VM name (`creation-reservations`).
pub fn reserved_vmids(c: &CapCtx) -> Result<Vec<u32>, CapError> {
    let store = store(c, None);
    c.guard("creation-reservations", Call::Checkpoint(CheckpointCall::Reservations), || {
        store.reserved_vmids().map_err(record_err)
    })
}
