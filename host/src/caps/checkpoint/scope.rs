//! The `checkpoint` capability's scope: its grant section
//! (`[...grants.checkpoint]`: [`CheckpointGrant`], empty), what of a call
//! the grant looks at ([`CheckpointCall`]: the VM, or the creation records'
//! reservations), and the rule: a checkpoint (and a creation record, which
//! lives with the checkpoints) only of a VM the call is bound to, and a
//! write or clear only with that VM's VMID once the run knows it; the
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
        /// The VMID a write or clear names (none for a read).
        vmid: Option<u32>,
    },
    /// The VMIDs reserved by this control node's creation records (VMIDs
    /// only; the records' keys never leave the host).
    Reservations,
}

impl Grant for CheckpointGrant {
    type Call<'a> = CheckpointCall<'a>;

    fn check(&self, caller: &Caller<'_>, call: &CheckpointCall<'_>) -> Result<(), OutOfScope> {
        match *call {
            CheckpointCall::Vm { vm_name, vmid } => {
                let Some(vm) = caller.scope.vms.iter().find(|vm| vm.name == vm_name) else {
                    return Err(format!("VM `{vm_name}` is not a VM of this call (checkpoints are per VM)").into());
                };
                // A VMID the run has not chosen yet (probed under the lock) is 0.
                match vmid {
                    Some(id) if vm.vmid != 0 && id != vm.vmid => Err(format!(
                        "VM `{vm_name}` of this call has vmid {}, not {id} (a checkpoint names its VM's own VMID)",
                        vm.vmid
                    )
                    .into()),
                    _ => Ok(()),
                }
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
        assert!(
            denied(Call::Checkpoint(CheckpointCall::Vm { vm_name: "prod-db", vmid: None })).contains("VM `prod-db`")
        );
        allowed(Call::Checkpoint(CheckpointCall::Vm { vm_name: "test-0", vmid: None }));
    }

    #[test]
    fn a_checkpoint_of_the_calls_vm_under_another_vmid_is_denied() {
        let m = denied(Call::Checkpoint(CheckpointCall::Vm { vm_name: "test-0", vmid: Some(151) }));
        assert!(m.contains("has vmid 150, not 151"), "{m}");
        allowed(Call::Checkpoint(CheckpointCall::Vm { vm_name: "test-0", vmid: Some(150) }));
        // A VMID the run has not chosen yet (0) cannot be compared: the name decides.
        let mut probing = scope();
        probing.vms[0].vmid = 0;
        let call = Call::Checkpoint(CheckpointCall::Vm { vm_name: "test-0", vmid: Some(151) });
        assert!(check(&crate::caps::policy::fixture::grants(), "workflow.grants", &probing, &call).is_ok());
    }
}
