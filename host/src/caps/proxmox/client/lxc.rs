//! Container calls under `/nodes/{node}/lxc` (pve-container): create, config,
//! status, power, destroy; and a task's log.
//!
//! Contract: each method is one request. Writes are sent once (never retried
//! after an ambiguous failure: the caller discovers first); reads may be
//! repeated after transient errors. Calls that start a task return its UPID,
//! checked to be one. Config keys are checked as for VMs (no request
//! parameter such as `skiplock`, none twice); `reset` is refused before
//! anything is sent (containers have none).

use reqwest::Method;

use super::answers::{config_entries, log_lines, upid_from, vm_runtime};
use super::vms::{config_put, create_post};
use super::{Call, Idempotency, ProxmoxClient, segment};
use crate::caps::proxmox::errors::ProxmoxError;
use crate::contract::bindings::cradle::host::proxmox::{PowerAction, VmRuntime};
use crate::contract::bindings::cradle::host::types::Entry;

/// Create parameters that restore a backup instead of creating a container.
const CREATE_REFUSED: &[&str] = &["restore", "unique", "force"];

/// At most this many task log lines are read.
const TASK_LOG_LIMIT: usize = 5000;

impl ProxmoxClient {
    fn ct_path(&self, node: &str, vmid: u32, tail: &str) -> Result<String, ProxmoxError> {
        Ok(format!("/nodes/{}/lxc/{vmid}{tail}", segment("node", node)?))
    }

    /// `POST /nodes/{node}/lxc` with `vmid` and the config keys; the UPID of `vzcreate`. Never retried.
    pub async fn create_container(&self, node: &str, vmid: u32, config: &[Entry]) -> Result<String, ProxmoxError> {
        let call =
            create_post(node, vmid, "lxc", config, CREATE_REFUSED, "it restores or overwrites instead of creating")?;
        self.fetch(call, upid_from).await
    }

    /// `GET .../lxc/{vmid}/config`, sorted by key.
    pub async fn get_container_config(&self, node: &str, vmid: u32) -> Result<Vec<Entry>, ProxmoxError> {
        let call = Call::new(Method::GET, self.ct_path(node, vmid, "/config")?, Idempotency::Idempotent);
        self.fetch(call, config_entries).await
    }

    /// `PUT .../lxc/{vmid}/config` with `delete=a,b` and `digest`. Never retried.
    pub async fn set_container_config(
        &self,
        node: &str,
        vmid: u32,
        set: &[Entry],
        delete: &[String],
        digest: Option<&str>,
    ) -> Result<(), ProxmoxError> {
        let call = config_put(node, vmid, self.ct_path(node, vmid, "/config")?, set, delete, digest)?;
        self.call(&call).await.map(drop)
    }

    /// `GET .../lxc/{vmid}/status/current`.
    pub async fn container_status(&self, node: &str, vmid: u32) -> Result<VmRuntime, ProxmoxError> {
        let call = Call::new(Method::GET, self.ct_path(node, vmid, "/status/current")?, Idempotency::Idempotent);
        self.fetch(call, vm_runtime).await
    }

    /// `POST .../lxc/{vmid}/status/{action}`; the UPID. Never retried.
    pub async fn container_power(&self, node: &str, vmid: u32, action: PowerAction) -> Result<String, ProxmoxError> {
        let action = match action {
            PowerAction::Start => "start",
            PowerAction::Stop => "stop",
            PowerAction::Shutdown => "shutdown",
            PowerAction::Reboot => "reboot",
            PowerAction::Reset => {
                return Err(ProxmoxError::InvalidArgument(format!(
                    "container {vmid} on node {node}: containers have no `reset`; use stop and start"
                )));
            }
        };
        let call = Call::new(
            Method::POST,
            self.ct_path(node, vmid, &format!("/status/{action}"))?,
            Idempotency::NotIdempotent,
        );
        self.fetch(call, upid_from).await
    }

    /// `DELETE /nodes/{node}/lxc/{vmid}` (`?purge=1&destroy-unreferenced-disks=1` when `purge`); the UPID.
    pub async fn destroy_container(&self, node: &str, vmid: u32, purge: bool) -> Result<String, ProxmoxError> {
        let mut call = Call::new(Method::DELETE, self.ct_path(node, vmid, "")?, Idempotency::NotIdempotent);
        if purge {
            call = call.param("purge", "1").param("destroy-unreferenced-disks", "1");
        }
        self.fetch(call, upid_from).await
    }

    /// `GET /nodes/{node}/tasks/{upid}/log?start=0&limit=5000`: the lines in order.
    pub async fn task_log(&self, node: &str, upid: &str) -> Result<Vec<String>, ProxmoxError> {
        let parsed = super::answers::parse_upid(upid)?;
        if parsed.node != node {
            return Err(ProxmoxError::InvalidArgument(format!(
                "task {upid} ran on node {}, not on {node}; ask that node",
                parsed.node
            )));
        }
        let path = format!("/nodes/{}/tasks/{}/log", segment("node", node)?, segment("UPID", upid)?);
        let call = Call::new(Method::GET, path, Idempotency::Idempotent)
            .param("start", "0")
            .param("limit", TASK_LOG_LIMIT.to_string());
        self.fetch(call, log_lines).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn task_log_lines_come_in_line_order() {
        let data = json!([{"n": 2, "t": "done: SHA256:abc root@ct"}, {"n": 1, "t": "Creating SSH host key"}]);
        assert_eq!(log_lines(&data).expect("log"), ["Creating SSH host key", "done: SHA256:abc root@ct"]);
        assert!(log_lines(&json!({"n": 1})).is_err());
    }
}
