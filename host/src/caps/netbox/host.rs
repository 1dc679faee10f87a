//! The WIT adapter of `cradle:host/netbox`: every call goes through
//! [`CapCtx::guard`] (the `netbox` grant: present, and for `set-status` the
//! status listed) and runs on a [`NetboxClient`] for the endpoint the grant
//! names, over the environment's `[endpoints]` (the host attaches the
//! token), each request's timeout clamped to the plugin call's time left.

use super::NetboxClient;
use super::scope::{NetboxCall, NetboxOp, NetboxTarget};
use crate::caps::budget::TimeoutArg;
use crate::caps::context::CapCtx;
use crate::caps::{Call, policy};
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::netbox::{
    Host, IpAddress, JournalKind, MacWrite, Vm, VmInterface, VmSummary,
};
use crate::contract::bindings::cradle::host::types::{Entry, Error as WitError};

impl CapCtx {
    /// The client of the granted endpoint (called inside the guard, so the
    /// grant is there).
    fn netbox(&self) -> Result<NetboxClient, CapError> {
        let grant = self.grants.netbox.as_ref().ok_or_else(|| {
            CapError::failed(format!("netbox: no [{}.netbox] section names the endpoint", self.origin))
        })?;
        let limit = TimeoutArg::Http.max().as_millis() as u64;
        let timeout = self.clamp_timeout(limit, TimeoutArg::Http);
        Ok(NetboxClient::new(self.services.http.clone(), &grant.endpoint, timeout))
    }

    /// Run `op`'s `work` on the granted client, checked and journaled as
    /// `function`. When the grant lists clusters and the call touches a VM
    /// (`on`), the VM's cluster is read first and the call checked again with
    /// it ([`super::scope`]), before `work` sends anything.
    fn netbox_call<T, F>(
        &self,
        function: &str,
        op: NetboxOp<'_>,
        on: On,
        work: impl FnOnce(NetboxClient) -> F,
    ) -> Result<T, WitError>
    where
        F: Future<Output = Result<T, CapError>>,
    {
        self.guard(function, Call::Netbox(NetboxCall { op, target: NetboxTarget::Unresolved }), || {
            let client = self.netbox()?;
            let scoped = self.grants.netbox.as_ref().is_some_and(|g| g.scopes_clusters());
            let vm = match on {
                On::Nothing => None,
                On::Vm(vm) => Some(vm),
                On::Interface(iface) if scoped => Some(self.block_on(client.interface_vm(iface))?),
                On::Interface(_) => None,
            };
            if let Some(vm) = vm.filter(|_| scoped) {
                let cluster = self.block_on(client.vm_cluster(vm))?;
                let resolved = NetboxCall { op, target: NetboxTarget::Vm { id: vm, cluster: cluster.as_deref() } };
                policy::check(&self.grants, &self.origin, &self.scope, &Call::Netbox(resolved))?;
            }
            self.block_on(work(client))
        })
        .map_err(Into::into)
    }
}

/// The VM a call touches, for the cluster check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum On {
    /// No one VM (an IP address, a listing).
    Nothing,
    /// This VM.
    Vm(u64),
    /// This VM interface's VM.
    Interface(u64),
}

impl Host for CapCtx {
    fn read_vm(&mut self, id: u64) -> Result<Vm, WitError> {
        self.netbox_call("read-vm", NetboxOp::Read, On::Vm(id), |c| async move { c.read_vm(id).await })
    }

    fn read_ip(&mut self, id: u64) -> Result<IpAddress, WitError> {
        self.netbox_call("read-ip", NetboxOp::Read, On::Nothing, |c| async move { c.read_ip(id).await })
    }

    fn interfaces(&mut self, vm: u64) -> Result<Vec<VmInterface>, WitError> {
        self.netbox_call("interfaces", NetboxOp::Read, On::Vm(vm), |c| async move { c.interfaces(vm).await })
    }

    fn list_vms(&mut self, status: String, filters: Vec<Entry>, limit: u32) -> Result<Vec<VmSummary>, WitError> {
        self.netbox_call("list-vms", NetboxOp::Read, On::Nothing, |c| async move {
            c.list_vms(&status, &filters, limit).await
        })
    }

    fn set_mac(&mut self, iface: u64, mac: String, how: MacWrite) -> Result<(), WitError> {
        self.netbox_call("set-mac", NetboxOp::SetMac, On::Interface(iface), |c| async move {
            c.set_mac(iface, &mac, how).await
        })
    }

    fn set_status(&mut self, vm: u64, status: String) -> Result<(), WitError> {
        let op = NetboxOp::SetStatus(&status);
        let owned = status.clone();
        self.netbox_call("set-status", op, On::Vm(vm), |c| async move { c.set_status(vm, &owned).await })
    }

    fn journal(&mut self, vm: u64, kind: JournalKind, comments: String) -> Result<(), WitError> {
        self.netbox_call(
            "journal",
            NetboxOp::Journal,
            On::Vm(vm),
            |c| async move { c.journal(vm, kind, &comments).await },
        )
    }
}
