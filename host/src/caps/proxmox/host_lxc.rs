//! The container half of the `proxmox` WIT adapter (`host.rs` delegates):
//! every call is described as a [`ProxmoxCall`] — node and VMID; a create's
//! and a config write's values as [`config_scope::describe_container`] reads
//! them (root and mount-point volumes, the template, privileged containers
//! and `features`) — checked by the policy, journaled, then sent.
//!
//! Not scoped beyond the node: `task-log` (it reads what a task of that node
//! printed, like `wait-task`).

use super::config_scope;
use super::scope::ProxmoxCall;
use crate::caps::context::CapCtx;
use crate::contract::bindings::cradle::host::proxmox::{PowerAction, VmRuntime};
use crate::contract::bindings::cradle::host::types::{Entry, Error as WitError};

fn ct_call(node: &str, vmid: u32) -> ProxmoxCall<'_> {
    ProxmoxCall { node: Some(node), vmid: Some(vmid), ..Default::default() }
}

impl CapCtx {
    pub(super) fn ct_create(&mut self, node: &str, vmid: u32, config: Vec<Entry>) -> Result<String, WitError> {
        let scope = config_scope::describe_container(&config, &[]);
        let call = ProxmoxCall { config: Some(&scope), ..ct_call(node, vmid) };
        self.pve_call("create-container", call, |c| async move { c.create_container(node, vmid, &config).await })
    }

    pub(super) fn ct_config(&mut self, node: &str, vmid: u32) -> Result<Vec<Entry>, WitError> {
        self.pve_call("get-container-config", ct_call(node, vmid), |c| async move {
            c.get_container_config(node, vmid).await
        })
    }

    pub(super) fn ct_set_config(
        &mut self,
        node: &str,
        vmid: u32,
        set: Vec<Entry>,
        delete: Vec<String>,
        digest: Option<String>,
    ) -> Result<(), WitError> {
        let scope = config_scope::describe_container(&set, &delete);
        let call = ProxmoxCall { config: Some(&scope), ..ct_call(node, vmid) };
        self.pve_call("set-container-config", call, |c| async move {
            c.set_container_config(node, vmid, &set, &delete, digest.as_deref()).await
        })
    }

    pub(super) fn ct_status(&mut self, node: &str, vmid: u32) -> Result<VmRuntime, WitError> {
        self.pve_call("container-status", ct_call(node, vmid), |c| async move { c.container_status(node, vmid).await })
    }

    pub(super) fn ct_power(&mut self, node: &str, vmid: u32, action: PowerAction) -> Result<String, WitError> {
        let destructive = matches!(action, PowerAction::Stop | PowerAction::Reset);
        let call = ProxmoxCall { destructive, ..ct_call(node, vmid) };
        self.pve_call("container-power", call, |c| async move { c.container_power(node, vmid, action).await })
    }

    pub(super) fn ct_destroy(&mut self, node: &str, vmid: u32, purge: bool) -> Result<String, WitError> {
        let call = ProxmoxCall { destructive: true, ..ct_call(node, vmid) };
        self.pve_call("destroy-container", call, |c| async move { c.destroy_container(node, vmid, purge).await })
    }

    pub(super) fn task_log_lines(&mut self, node: &str, upid: &str) -> Result<Vec<String>, WitError> {
        let call = ProxmoxCall { node: Some(node), ..Default::default() };
        self.pve_call("task-log", call, |c| async move { c.task_log(node, upid).await })
    }
}
