//! Per-VM calls under `/nodes/{node}/qemu/{vmid}`.
//!
//! Contract: each method is one request with its idempotency stated at the call.
//! Writes (clone, config, resize, migrate, power, destroy) are sent once; reads and
//! the agent ping may be repeated after transient errors. Calls that start a task
//! return its UPID, checked to be one. Arguments that would change the meaning of
//! the request (`skiplock`, a key set twice) are refused before anything is sent.

use std::collections::BTreeSet;

use reqwest::Method;

use super::answers::{config_entries, pending_entries, upid_from, vm_runtime};
use super::{Call, Idempotency, ProxmoxClient, flag, segment};
use crate::caps::proxmox::errors::ProxmoxError;
use crate::contract::bindings::cradle::host::proxmox::{CloneRequest, PendingEntry, PowerAction, VmRuntime};
use crate::contract::bindings::cradle::host::types::Entry;

/// Config keys `set_config` refuses: they are request parameters, not config, and
/// `skiplock` would bypass the VM lock that keeps concurrent changes apart.
const RESERVED_KEYS: &[&str] = &["delete", "digest", "revert", "skiplock", "force", "background_delay", "node", "vmid"];
/// The action's path segment.
pub fn power_path(action: PowerAction) -> &'static str {
    match action {
        PowerAction::Start => "start",
        PowerAction::Stop => "stop",
        PowerAction::Shutdown => "shutdown",
        PowerAction::Reboot => "reboot",
        PowerAction::Reset => "reset",
    }
}

/// Every key must be a config key (not a request parameter such as
/// `skiplock`), named once.
const CREATE_REFUSED: &[&str] = &["archive", "live-restore", "unique"];

pub(crate) fn check_keys<'k>(node: &str, vmid: u32, keys: impl Iterator<Item = &'k str>) -> Result<(), ProxmoxError> {
    let mut seen = BTreeSet::new();
    for key in keys {
        let well_formed = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !well_formed || RESERVED_KEYS.contains(&key) {
            return Err(ProxmoxError::InvalidArgument(format!(
                "config key {key:?} cannot be set on VM {vmid} on node {node}: it is not a config key or is reserved"
            )));
        }
        if !seen.insert(key) {
            return Err(ProxmoxError::InvalidArgument(format!(
                "config key {key:?} of VM {vmid} on node {node} is set or deleted twice in one call"
            )));
        }
    }
    Ok(())
}

/// The `POST /nodes/{node}/{kind}` creating VM or container `vmid` with
/// `config`: the keys checked, none of `refused` (`why` says what they do).
pub(crate) fn create_post(
    node: &str,
    vmid: u32,
    kind: &str,
    config: &[Entry],
    refused: &[&str],
    why: &str,
) -> Result<Call, ProxmoxError> {
    check_keys(node, vmid, config.iter().map(|e| e.key.as_str()))?;
    if let Some(e) = config.iter().find(|e| refused.contains(&e.key.as_str())) {
        return Err(ProxmoxError::InvalidArgument(format!(
            "`{}` cannot be given when creating {vmid} on node {node}: {why}",
            e.key
        )));
    }
    let path = format!("/nodes/{}/{kind}", segment("node", node)?);
    let mut call = Call::new(Method::POST, path, Idempotency::NotIdempotent).param("vmid", vmid.to_string());
    for e in config {
        call = call.param(&e.key, e.value.clone());
    }
    Ok(call)
}

/// The `PUT .../config` of a VM or a container: the keys checked, `delete`
/// joined, the `digest` when given.
pub(crate) fn config_put(
    node: &str,
    vmid: u32,
    path: String,
    set: &[Entry],
    delete: &[String],
    digest: Option<&str>,
) -> Result<Call, ProxmoxError> {
    check_keys(node, vmid, set.iter().map(|e| e.key.as_str()).chain(delete.iter().map(String::as_str)))?;
    let mut call = Call::new(Method::PUT, path, Idempotency::NotIdempotent);
    for e in set {
        call = call.param(&e.key, e.value.clone());
    }
    if !delete.is_empty() {
        call = call.param("delete", delete.join(","));
    }
    Ok(call.opt_param("digest", digest))
}

impl ProxmoxClient {
    fn vm_path(&self, node: &str, vmid: u32, tail: &str) -> Result<String, ProxmoxError> {
        Ok(format!("/nodes/{}/qemu/{vmid}{tail}", segment("node", node)?))
    }

    /// `POST .../{template}/clone`; returns the UPID. Never retried.
    pub async fn clone_vm(&self, req: &CloneRequest) -> Result<String, ProxmoxError> {
        let call =
            Call::new(Method::POST, self.vm_path(&req.node, req.template_vmid, "/clone")?, Idempotency::NotIdempotent)
                .param("newid", req.newid.to_string())
                .param("name", req.name.clone())
                .param("full", flag(req.full))
                .opt_param("storage", req.storage.clone())
                .opt_param("target", req.target.clone())
                .opt_param("description", req.description.clone());
        self.fetch(call, upid_from).await
    }

    /// `POST /nodes/{node}/qemu` with `vmid` and the config keys; returns the
    /// UPID of the `qmcreate` task. Never retried: after an ambiguous failure
    /// the caller discovers whether the VM exists. Keys are checked as for
    /// [`ProxmoxClient::set_config`] (no request parameters, none twice).
    pub async fn create_vm(&self, node: &str, vmid: u32, config: &[Entry]) -> Result<String, ProxmoxError> {
        let call =
            create_post(node, vmid, "qemu", config, CREATE_REFUSED, "it restores a backup instead of creating a VM")?;
        self.fetch(call, upid_from).await
    }

    /// `GET .../config`: every key (including `digest`), sorted by key.
    pub async fn get_config(&self, node: &str, vmid: u32) -> Result<Vec<Entry>, ProxmoxError> {
        let call = Call::new(Method::GET, self.vm_path(node, vmid, "/config")?, Idempotency::Idempotent);
        self.fetch(call, config_entries).await
    }

    /// `GET .../pending`, sorted by key.
    pub async fn get_pending(&self, node: &str, vmid: u32) -> Result<Vec<PendingEntry>, ProxmoxError> {
        let call = Call::new(Method::GET, self.vm_path(node, vmid, "/pending")?, Idempotency::Idempotent);
        self.fetch(call, pending_entries).await
    }

    /// `PUT .../config` (synchronous) with `delete=a,b` and `digest`. Never retried:
    /// after an ambiguous failure the caller re-reads the config (and its digest).
    pub async fn set_config(
        &self,
        node: &str,
        vmid: u32,
        set: &[Entry],
        delete: &[String],
        digest: Option<&str>,
    ) -> Result<(), ProxmoxError> {
        let call = config_put(node, vmid, self.vm_path(node, vmid, "/config")?, set, delete, digest)?;
        self.call(&call).await.map(drop)
    }

    /// `PUT .../resize` with `disk`, `size` (`+10G` or absolute) and, when
    /// given, the config `digest` the caller read; returns the UPID. PVE checks
    /// the digest inside the task's worker (qemu-server e6352be,
    /// src/PVE/API2/Qemu.pm:6006), so a stale one is a failed task, not an
    /// error of this call.
    pub async fn resize_disk(
        &self,
        node: &str,
        vmid: u32,
        disk: &str,
        size: &str,
        digest: Option<&str>,
    ) -> Result<String, ProxmoxError> {
        let call = Call::new(Method::PUT, self.vm_path(node, vmid, "/resize")?, Idempotency::NotIdempotent)
            .param("disk", disk)
            .param("size", size)
            .opt_param("digest", digest);
        self.fetch(call, upid_from).await
    }

    /// `POST .../move_disk` with `disk`, `storage` and, when given, the config
    /// `digest` the caller read; returns the `qmmove` task's UPID. `delete` is
    /// never sent: PVE keeps the source volume as an `unusedN` disk (its
    /// default), so a move loses nothing. PVE checks the digest, lock, disk
    /// and storage before forking (an error of this call) and again inside
    /// the worker (a failed task): qemu-server src/PVE/API2/Qemu.pm
    /// `move_vm_disk`, `$load_and_check_move`.
    pub async fn move_disk(
        &self,
        node: &str,
        vmid: u32,
        disk: &str,
        storage: &str,
        digest: Option<&str>,
    ) -> Result<String, ProxmoxError> {
        let call = Call::new(Method::POST, self.vm_path(node, vmid, "/move_disk")?, Idempotency::NotIdempotent)
            .param("disk", disk)
            .param("storage", storage)
            .opt_param("digest", digest);
        self.fetch(call, upid_from).await
    }

    /// `POST .../migrate` with `target`, `online`, `with-local-disks`; returns the UPID.
    pub async fn migrate(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        online: bool,
        with_local_disks: bool,
    ) -> Result<String, ProxmoxError> {
        let call = Call::new(Method::POST, self.vm_path(node, vmid, "/migrate")?, Idempotency::NotIdempotent)
            .param("target", target)
            .param("online", flag(online))
            .param("with-local-disks", flag(with_local_disks));
        self.fetch(call, upid_from).await
    }

    /// `GET .../status/current`.
    pub async fn vm_status(&self, node: &str, vmid: u32) -> Result<VmRuntime, ProxmoxError> {
        let call = Call::new(Method::GET, self.vm_path(node, vmid, "/status/current")?, Idempotency::Idempotent);
        self.fetch(call, vm_runtime).await
    }

    /// `POST .../status/{action}`; returns the UPID. Never retried.
    pub async fn power(&self, node: &str, vmid: u32, action: PowerAction) -> Result<String, ProxmoxError> {
        let tail = format!("/status/{}", power_path(action));
        let call = Call::new(Method::POST, self.vm_path(node, vmid, &tail)?, Idempotency::NotIdempotent);
        self.fetch(call, upid_from).await
    }

    /// `DELETE .../qemu/{vmid}` (`?purge=1&destroy-unreferenced-disks=1` when `purge`); returns the UPID.
    pub async fn destroy(&self, node: &str, vmid: u32, purge: bool) -> Result<String, ProxmoxError> {
        let mut call = Call::new(Method::DELETE, self.vm_path(node, vmid, "")?, Idempotency::NotIdempotent);
        if purge {
            call = call.param("purge", "1").param("destroy-unreferenced-disks", "1");
        }
        self.fetch(call, upid_from).await
    }

    /// `POST .../agent/ping`. Idempotent: a ping changes nothing in the guest.
    pub async fn agent_ping(&self, node: &str, vmid: u32) -> Result<(), ProxmoxError> {
        let call = Call::new(Method::POST, self.vm_path(node, vmid, "/agent/ping")?, Idempotency::Idempotent);
        self.call(&call).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn config_entries_are_sorted_strings_with_numbers_rendered_plainly() {
        let data = json!({"name": "test-0", "cores": 2, "memory": "2048", "digest": "abc", "ide2": "local-lvm:vm-100-cloudinit,media=cdrom", "onboot": 1});
        let keys: Vec<(String, String)> =
            config_entries(&data).expect("config").into_iter().map(|e| (e.key, e.value)).collect();
        assert_eq!(
            keys,
            [
                ("cores", "2"),
                ("digest", "abc"),
                ("ide2", "local-lvm:vm-100-cloudinit,media=cdrom"),
                ("memory", "2048"),
                ("name", "test-0"),
                ("onboot", "1")
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
    }

    #[test]
    fn pending_deletes_count_forced_deletes_too() {
        let data = json!([{"key": "ide2", "value": "local-lvm:vm-100-cloudinit,media=cdrom", "delete": 1}, {"key": "cores", "value": 2, "pending": 4}, {"key": "sata0", "delete": 2}]);
        let p = pending_entries(&data).expect("pending");
        assert_eq!(
            p.iter().map(|e| (e.key.as_str(), e.delete)).collect::<Vec<_>>(),
            [("cores", false), ("ide2", true), ("sata0", true)]
        );
        assert_eq!(p[0].pending.as_deref(), Some("4"));
    }

    #[test]
    fn vm_status_reads_ha_managed_as_bool() {
        let r = vm_runtime(&json!({"status": "running", "qmpstatus": "running", "uptime": 42, "ha": {"managed": 1, "state": "started"}})).expect("status");
        assert!(r.ha_managed);
        assert_eq!(r.uptime, 42);
        let r = vm_runtime(&json!({"status": "stopped", "ha": {"managed": 0}, "lock": "clone"})).expect("status");
        assert!(!r.ha_managed);
        assert_eq!(r.lock.as_deref(), Some("clone"));
    }

    #[test]
    fn task_starting_calls_must_answer_a_upid() {
        assert!(upid_from(&json!("UPID:pve1:000A1B2C:0042F1E3:6745A0B1:qmstart:100:root@pam!cradle:")).is_ok());
        assert!(upid_from(&Value::Null).is_err());
        assert!(upid_from(&json!("started")).is_err());
    }
}
