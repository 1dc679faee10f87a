//! The `checkpoint` WIT adapter and the checkpoint calls workflows make: each
//! through the guard (a checkpoint is scoped to the call's VM), the store in
//! [`super::CheckpointStore`].
//!
//! Failures, besides the guard's: a checkpoint that records another VMID than
//! the one being cleared is `conflict`, a VM name that cannot be a file name
//! `invalid`, an unreadable or corrupt file or a failed write or removal
//! `failed`.

use super::scope::CheckpointCall;
use super::{CheckpointError, Finalization as StoredFinalization};
use crate::caps::Call;
use crate::caps::context::CapCtx;
use crate::contract::bindings::cradle::host::checkpoint::{self, Finalization};
use crate::contract::bindings::cradle::host::types::Error as WitError;
use crate::contract::{CapError, ErrorKind};

impl From<CheckpointError> for CapError {
    fn from(e: CheckpointError) -> CapError {
        let kind = match &e {
            CheckpointError::Mismatch { .. } => ErrorKind::Conflict,
            // A fenced write refused: another run holds the VM now.
            CheckpointError::Shared { source: crate::caps::coordination::etcd::EtcdFailure::Fenced { .. }, .. } => {
                ErrorKind::Conflict
            }
            CheckpointError::InvalidName { .. } => ErrorKind::Invalid,
            _ => ErrorKind::Failed,
        };
        CapError::new(kind, e.to_string())
    }
}

fn wit_finalization(f: StoredFinalization) -> Finalization {
    Finalization { vm_name: f.vm_name, vmid: f.vmid, node: f.node, stage: f.stage, written: f.written }
}

impl CapCtx {
    /// The checkpoint of `vm_name`, as stored (workflows see `host_key` too).
    pub fn checkpoint_read(&self, vm_name: &str) -> Result<Option<StoredFinalization>, CapError> {
        self.guard("read", Call::Checkpoint(CheckpointCall::Vm { vm_name, vmid: None }), || {
            Ok(self.services.checkpoints.read(vm_name)?)
        })
    }

    /// Write a checkpoint under the fencing token of the VM's lock (the store
    /// sets `written` and `fence`).
    pub fn checkpoint_write(&self, cp: StoredFinalization) -> Result<(), CapError> {
        let (vm_name, vmid) = (cp.vm_name.clone(), Some(cp.vmid));
        self.guard("write", Call::Checkpoint(CheckpointCall::Vm { vm_name: &vm_name, vmid }), || {
            self.services.checkpoints.under(self.vm_fence(&vm_name)).write(&cp)?;
            Ok(())
        })
    }

    /// Clear the checkpoint of `vm_name`/`vmid`.
    pub fn checkpoint_clear(&self, vm_name: &str, vmid: u32) -> Result<(), CapError> {
        self.guard("clear", Call::Checkpoint(CheckpointCall::Vm { vm_name, vmid: Some(vmid) }), || {
            Ok(self.services.checkpoints.under(self.vm_fence(vm_name)).clear(vm_name, vmid)?)
        })
    }
}

impl checkpoint::Host for CapCtx {
    fn read(&mut self, vm_name: String) -> Result<Option<Finalization>, WitError> {
        Ok(self.checkpoint_read(&vm_name)?.map(wit_finalization))
    }
    fn write(&mut self, cp: Finalization) -> Result<(), WitError> {
        let stored = StoredFinalization {
            vm_name: cp.vm_name,
            vmid: cp.vmid,
            node: cp.node,
            stage: cp.stage,
            written: String::new(),
            fence: None,
            host_key: None,
        };
        self.checkpoint_write(stored).map_err(Into::into)
    }
    fn clear(&mut self, vm_name: String, vmid: u32) -> Result<(), WitError> {
        self.checkpoint_clear(&vm_name, vmid).map_err(Into::into)
    }
}
