//! The `checkpoint` capability's scope: its grant section
//! (`[...grants.checkpoint]`: [`CheckpointGrant`], empty), what of a call
//! the grant looks at ([`CheckpointCall`]: the VM, or the creation records'
//! reservations), and the rule: a checkpoint (and a creation record, which
//! lives with the checkpoints) only of a VM the call is bound to; the
//! reserved VMIDs of all records with the grant alone, since VMID allocation
//! must see every reservation. Checked through
//! [`crate::caps::policy::check`] like every call.

use serde::Deserialize;

use crate::caps::policy::{Caller, Grant, OutOfScope};

/// `[...grants.checkpoint]`: checkpoints of the VMs the call is bound to.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointGrant {}

/// The scope-relevant arguments of a checkpoint call.
#[derive(Debug, Clone, Copy)]
pub enum CheckpointCall<'a> {
    /// The checkpoint (or the creation record) of one VM.
    Vm {
        /// The VM the checkpoint belongs to.
        vm_name: &'a str,
    },
    /// The VMIDs reserved by this control node's creation records (VMIDs
    /// only; the records' keys never leave the host).
    Reservations,
}

impl Grant for CheckpointGrant {
    type Call<'a> = CheckpointCall<'a>;

    fn check(&self, caller: &Caller<'_>, call: &CheckpointCall<'_>) -> Result<(), OutOfScope> {
        match *call {
            CheckpointCall::Vm { vm_name } => {
                if !caller.scope.vms.iter().any(|vm| vm.name == vm_name) {
                    return Err(format!("VM `{vm_name}` is not a VM of this call (checkpoints are per VM)").into());
                }
                Ok(())
            }
            // Granted with the capability: VMID allocation must see every reservation.
            CheckpointCall::Reservations => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::policy::check;
    use crate::caps::policy::fixture::{allowed, denied, scope};
    use crate::caps::{Call, Grants};

    #[test]
    fn creation_reservations_need_the_checkpoint_grant() {
        let reservations = Call::Checkpoint(CheckpointCall::Reservations);
        allowed(reservations.clone());
        let m = check(&Grants::default(), "workflow.grants", &scope(), &reservations).expect_err("denied");
        assert!(m.to_string().contains("add [workflow.grants.checkpoint]"), "{m}");
    }

    #[test]
    fn checkpoints_of_other_vms_are_denied() {
        assert!(denied(Call::Checkpoint(CheckpointCall::Vm { vm_name: "prod-db" })).contains("VM `prod-db`"));
        allowed(Call::Checkpoint(CheckpointCall::Vm { vm_name: "test-0" }));
    }
}
