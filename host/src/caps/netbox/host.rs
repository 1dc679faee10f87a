//! The WIT adapter of `cradle:host/netbox`: every call goes through
//! [`CapCtx::guard`] (the `netbox` grant: present, and for `set-status` the
//! status listed) and runs on a [`NetboxClient`] for the endpoint the grant
//! names, over the environment's `[endpoints]` (the host attaches the
//! token), each request's timeout clamped to the plugin call's time left.

use super::NetboxClient;
use super::scope::{NetboxCall, NetboxOp};
use crate::caps::Call;
use crate::caps::budget::TimeoutArg;
use crate::caps::context::CapCtx;
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

    /// Run `op`'s `work` on the granted client, checked and journaled as `function`.
    fn netbox_call<T, F>(
        &self,
        function: &str,
        op: NetboxOp<'_>,
        work: impl FnOnce(NetboxClient) -> F,
    ) -> Result<T, WitError>
    where
        F: Future<Output = Result<T, CapError>>,
    {
        self.guard(function, Call::Netbox(NetboxCall { op }), || {
            let client = self.netbox()?;
            self.block_on(work(client))
        })
        .map_err(Into::into)
    }
}

impl Host for CapCtx {
    fn read_vm(&mut self, id: u64) -> Result<Vm, WitError> {
        self.netbox_call("read-vm", NetboxOp::Read, |c| async move { c.read_vm(id).await })
    }

    fn read_ip(&mut self, id: u64) -> Result<IpAddress, WitError> {
        self.netbox_call("read-ip", NetboxOp::Read, |c| async move { c.read_ip(id).await })
    }

    fn interfaces(&mut self, vm: u64) -> Result<Vec<VmInterface>, WitError> {
        self.netbox_call("interfaces", NetboxOp::Read, |c| async move { c.interfaces(vm).await })
    }

    fn list_vms(&mut self, status: String, filters: Vec<Entry>, limit: u32) -> Result<Vec<VmSummary>, WitError> {
        self.netbox_call("list-vms", NetboxOp::Read, |c| async move { c.list_vms(&status, &filters, limit).await })
    }

    fn set_mac(&mut self, iface: u64, mac: String, how: MacWrite) -> Result<(), WitError> {
        self.netbox_call("set-mac", NetboxOp::SetMac, |c| async move { c.set_mac(iface, &mac, how).await })
    }

    fn set_status(&mut self, vm: u64, status: String) -> Result<(), WitError> {
        let op = NetboxOp::SetStatus(&status);
        let owned = status.clone();
        self.netbox_call("set-status", op, |c| async move { c.set_status(vm, &owned).await })
    }

    fn journal(&mut self, vm: u64, kind: JournalKind, comments: String) -> Result<(), WitError> {
        self.netbox_call("journal", NetboxOp::Journal, |c| async move { c.journal(vm, kind, &comments).await })
    }
}
