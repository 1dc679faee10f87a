//! The `proxmox` capability's WIT adapter: every call is described as a
//! [`ProxmoxCall`] (node, VMID, storage, template, destructive), checked by the
//! policy, journaled, and only then sent through the environment's client.
//!
//! Reading the cluster inventory (`list-vms`, `list-ha-resources`,
//! `list-ha-rules`) is not scoped: discovery must see name and VMID collisions
//! outside the grant. Every call's node and VMID argument is scoped, and so are
//! the storages and volumes `clone-vm` and `set-config` name. Not scoped beyond
//! the node: `list-tasks`'s VMID filter (it only narrows a read), the VM inside
//! a `wait-task` UPID, and the storage of the disk `resize-disk` grows (the
//! disk's storage was checked when it was attached). `move-disk`'s target
//! storage is scoped.
//! What the adapter reads to describe a call (a template's name, the HA rule
//! being rewritten, the config a deletion changes) is read through the same
//! guard and journaled. Every call is checked and journaled; a read the run
//! already holds ([`held`]) is answered without a request. `set-config` values are described by
//! [`config_scope`]; the policy compares them with the grant.

use std::future::Future;
use std::sync::Arc;

use super::client::ProxmoxClient;
use super::config_scope;
use super::errors::ProxmoxError;
use super::held;
use super::scope::{HaRuleScope, ProxmoxCall};
use crate::caps::Call;
use crate::caps::context::CapCtx;
use crate::contract::bindings::cradle::host::proxmox::{
    CloneRequest, HaResource, HaRule, Host, PendingEntry, PowerAction, StorageDefinition, StorageUsage, TaskStatus,
    TaskSummary, VmResource, VmRuntime, Volume,
};
use crate::contract::bindings::cradle::host::types::{Entry, Error as WitError};
use crate::contract::{CapError, ErrorKind};

impl CapCtx {
    /// Upload the control-node file `file` into `storage` on `node` through
    /// the API (`POST .../upload`, content `content`, checked by PVE against
    /// `sha256`); returns the `imgcopy` task's UPID. Host-only (no WIT
    /// function: a plugin names no control-node file); checked as a call
    /// naming the node and the storage, and journaled.
    #[allow(clippy::too_many_arguments, reason = "one upload's facts, each used once")]
    pub(crate) fn upload_volume(
        &self,
        node: &str,
        storage: &str,
        content: &str,
        file: &std::path::Path,
        filename: &str,
        sha256: &str,
        timeout: std::time::Duration,
    ) -> Result<String, WitError> {
        let call = ProxmoxCall { node: Some(node), storage: Some(storage), ..Default::default() };
        self.pve("upload-volume", call, |c| async move {
            c.upload_volume(node, storage, content, file, filename, sha256, timeout).await
        })
    }

    /// `resize-disk` with the config `digest` the caller read (`None`: none
    /// sent, the WIT function's behaviour): the same call description, guard
    /// and journal entry as the WIT function, so the policy check is the same.
    /// Workflows reach it as `proxmox::resize_disk(node, vmid, disk, size,
    /// digest)`; PVE refuses a stale digest inside the task (a failed task).
    pub(crate) fn resize_disk_at(
        &self,
        node: &str,
        vmid: u32,
        disk: &str,
        size: &str,
        digest: Option<&str>,
    ) -> Result<String, WitError> {
        self.pve(
            "resize-disk",
            vm_call(node, vmid),
            |c| async move { c.resize_disk(node, vmid, disk, size, digest).await },
        )
    }

    /// The environment's client, or a `failed` error saying there is none.
    fn pve_client(&self) -> Result<Arc<ProxmoxClient>, CapError> {
        self.services.proxmox.clone().ok_or_else(|| {
            CapError::failed("proxmox: this environment has no cluster connection (check its [clusters] entry)")
        })
    }

    /// Check, journal and run one Proxmox call.
    pub(super) fn pve_call<T, F, Fut>(&self, function: &str, call: ProxmoxCall<'_>, work: F) -> Result<T, WitError>
    where
        F: FnOnce(Arc<ProxmoxClient>) -> Fut,
        Fut: Future<Output = Result<T, ProxmoxError>>,
    {
        self.pve(function, call, work)
    }

    /// Check, journal and run one Proxmox call.
    fn pve<T, F, Fut>(&self, function: &str, call: ProxmoxCall<'_>, work: F) -> Result<T, WitError>
    where
        F: FnOnce(Arc<ProxmoxClient>) -> Fut,
        Fut: Future<Output = Result<T, ProxmoxError>>,
    {
        let result = self.guard(function, Call::Proxmox(call), || {
            let client = self.pve_client()?;
            self.block_on(work(client))
        });
        if held::changes_cluster(function) {
            // A write (even one that failed part-way) or a wait that ended
            // changed what was read.
            self.run.held_reads.forget_changeable();
        }
        result.map_err(Into::into)
    }

    /// The name of template `vmid`, for the template grant: read from the
    /// cluster inventory through the guard (journaled as `list-vms`). `None`
    /// when the VMID is not in the inventory; a failed read is the call's error.
    fn template_name(&mut self, vmid: u32) -> Result<Option<String>, WitError> {
        let vms = self.list_vms()?;
        Ok(vms.into_iter().find(|v| v.vmid == vmid).and_then(|v| v.name))
    }
}

fn vm_call(node: &str, vmid: u32) -> ProxmoxCall<'_> {
    ProxmoxCall { node: Some(node), vmid: Some(vmid), ..Default::default() }
}

impl Host for CapCtx {
    fn list_vms(&mut self) -> Result<Vec<VmResource>, WitError> {
        let held = &self.run.held_reads;
        self.pve("list-vms", ProxmoxCall::default(), |c| async move {
            if let Some(vms) = held.vms() {
                return Ok(vms);
            }
            let vms = c.list_vms().await?;
            held.keep_vms(&vms);
            Ok(vms)
        })
    }

    /// Without a hint: the first free VMID inside the caller's `vmids` grant.
    /// PVE's own answer is the lowest free VMID of the cluster (≥ 100), which
    /// may lie below the grant; then the lowest unused VMID of the granted
    /// range is confirmed with a hint. Nothing is reserved (PVE never does):
    /// callers hold a lock until the VMID is taken.
    fn next_id(&mut self, hint: Option<u32>) -> Result<u32, WitError> {
        let call = ProxmoxCall { vmid: hint, ..Default::default() };
        let first = self.pve("next-id", call, |c| async move { c.next_id(hint).await })?;
        let Some(range) = self.grants.proxmox.as_ref().map(|g| g.vmids) else { return Ok(first) };
        if hint.is_some() || range.contains(first) {
            return Ok(first);
        }
        let used: std::collections::BTreeSet<u32> = self.list_vms()?.into_iter().map(|v| v.vmid).collect();
        let Some(candidate) = (range.first..=range.last).find(|v| *v >= 100 && !used.contains(v)) else {
            return Err(CapError::new(
                crate::contract::ErrorKind::Conflict,
                format!(
                    "no free VMID in {}.proxmox.vmids = \"{range}\" (the cluster's next free one is {first}); \
                     widen the grant or give the host a vms_vmid",
                    self.origin
                ),
            )
            .into());
        };
        self.next_id(Some(candidate))
    }

    fn clone_vm(&mut self, req: CloneRequest) -> Result<String, WitError> {
        let req = &req;
        let name = self.template_name(req.template_vmid)?;
        let call = ProxmoxCall {
            node: Some(&req.node),
            target_node: req.target.as_deref(),
            vmid: Some(req.newid),
            storage: req.storage.as_deref(),
            template: Some((req.template_vmid, name.as_deref())),
            ..Default::default()
        };
        self.pve("clone-vm", call, |c| async move { c.clone_vm(req).await })
    }

    fn get_config(&mut self, node: String, vmid: u32) -> Result<Vec<Entry>, WitError> {
        let node = node.as_str();
        let held = &self.run.held_reads;
        self.pve("get-config", vm_call(node, vmid), |c| async move {
            if let Some(config) = held.config(node, vmid) {
                return Ok(config);
            }
            let config = c.get_config(node, vmid).await?;
            held.keep_config(node, vmid, &config);
            Ok(config)
        })
    }

    fn get_pending(&mut self, node: String, vmid: u32) -> Result<Vec<PendingEntry>, WitError> {
        let node = node.as_str();
        self.pve("get-pending", vm_call(node, vmid), |c| async move { c.get_pending(node, vmid).await })
    }

    fn set_config(
        &mut self,
        node: String,
        vmid: u32,
        set: Vec<Entry>,
        delete: Vec<String>,
        digest: Option<String>,
    ) -> Result<(), WitError> {
        let node = node.as_str();
        // Deleting a drive is described from what it holds now; that read
        // goes through the guard like any other, and its digest makes PVE
        // refuse the write if the config changed in between.
        let mut digest = digest;
        let current = if config_scope::deletion_needs_config(&delete) {
            let current = self.get_config(node.to_string(), vmid)?;
            if digest.is_none() {
                digest = current.iter().find(|e| e.key == "digest").map(|e| e.value.clone());
            }
            Some(current)
        } else {
            None
        };
        let scope = config_scope::describe(&set, &delete, current.as_deref());
        let call = ProxmoxCall { config: Some(&scope), ..vm_call(node, vmid) };
        self.pve(
            "set-config",
            call,
            |c| async move { c.set_config(node, vmid, &set, &delete, digest.as_deref()).await },
        )
    }

    fn resize_disk(&mut self, node: String, vmid: u32, disk: String, size: String) -> Result<String, WitError> {
        self.resize_disk_at(&node, vmid, &disk, &size, None)
    }

    /// The target storage is scoped like a clone's: a move allocates a new
    /// volume there. The source volume stays the VM's (an `unusedN` disk).
    fn move_disk(
        &mut self,
        node: String,
        vmid: u32,
        disk: String,
        storage: String,
        digest: Option<String>,
    ) -> Result<String, WitError> {
        let (node, disk, storage) = (node.as_str(), disk.as_str(), storage.as_str());
        let call = ProxmoxCall { storage: Some(storage), ..vm_call(node, vmid) };
        self.pve("move-disk", call, |c| async move { c.move_disk(node, vmid, disk, storage, digest.as_deref()).await })
    }

    fn migrate(
        &mut self,
        node: String,
        vmid: u32,
        target: String,
        online: bool,
        with_local_disks: bool,
    ) -> Result<String, WitError> {
        let node = node.as_str();
        let target = target.as_str();
        let call = ProxmoxCall { target_node: Some(target), ..vm_call(node, vmid) };
        self.pve("migrate", call, |c| async move { c.migrate(node, vmid, target, online, with_local_disks).await })
    }

    fn vm_status(&mut self, node: String, vmid: u32) -> Result<VmRuntime, WitError> {
        let node = node.as_str();
        self.pve("vm-status", vm_call(node, vmid), |c| async move { c.vm_status(node, vmid).await })
    }

    fn power(&mut self, node: String, vmid: u32, action: PowerAction) -> Result<String, WitError> {
        let node = node.as_str();
        let destructive = matches!(action, PowerAction::Stop | PowerAction::Reset);
        let call = ProxmoxCall { destructive, ..vm_call(node, vmid) };
        self.pve("power", call, |c| async move { c.power(node, vmid, action).await })
    }

    fn destroy(&mut self, node: String, vmid: u32, purge: bool) -> Result<String, WitError> {
        let node = node.as_str();
        let call = ProxmoxCall { destructive: true, ..vm_call(node, vmid) };
        self.pve("destroy", call, |c| async move { c.destroy(node, vmid, purge).await })
    }

    fn wait_task(&mut self, node: String, upid: String, timeout_ms: u64) -> Result<TaskStatus, WitError> {
        let node = node.as_str();
        let upid = upid.as_str();
        let call = ProxmoxCall { node: Some(node), ..Default::default() };
        let timeout = self.clamp_timeout(timeout_ms, crate::caps::budget::TimeoutArg::WaitTask);
        self.pve("wait-task", call, |c| async move { c.wait_task(node, upid, timeout).await })
    }

    fn task_failure(&mut self, node: String, upid: String, exitstatus: String) -> WitError {
        let (node, upid, exit) = (node.as_str(), upid.as_str(), exitstatus.as_str());
        let call = ProxmoxCall { node: Some(node), ..Default::default() };
        // The classification itself cannot fail; a refused or failed log read
        // is the call's error.
        match self.pve("task-failure", call, |c| async move { Ok(c.task_failure(node, upid, exit).await) }) {
            Ok(failure) => crate::contract::CapError::from(failure).into(),
            Err(e) => e,
        }
    }

    fn list_tasks(
        &mut self,
        node: String,
        vmid: Option<u32>,
        kind: Option<String>,
    ) -> Result<Vec<TaskSummary>, WitError> {
        let node = node.as_str();
        let call = ProxmoxCall { node: Some(node), ..Default::default() };
        self.pve("list-tasks", call, |c| async move { c.list_tasks(node, vmid, kind.as_deref()).await })
    }

    fn storage_info(&mut self, storage: String) -> Result<StorageDefinition, WitError> {
        let storage = storage.as_str();
        let call = ProxmoxCall { storage: Some(storage), ..Default::default() };
        let held = &self.run.held_reads;
        self.pve("storage-info", call, |c| async move {
            if let Some(def) = held.storage(storage) {
                return Ok(def);
            }
            let def = c.storage_info(storage).await?;
            held.keep_storage(storage, &def);
            Ok(def)
        })
    }

    fn storage_status(&mut self, node: String, storage: String) -> Result<StorageUsage, WitError> {
        let (node, storage) = (node.as_str(), storage.as_str());
        let call = ProxmoxCall { node: Some(node), storage: Some(storage), ..Default::default() };
        self.pve("storage-status", call, |c| async move { c.storage_status(node, storage).await })
    }

    fn storage_content(
        &mut self,
        node: String,
        storage: String,
        content: Option<String>,
    ) -> Result<Vec<Volume>, WitError> {
        let (node, storage) = (node.as_str(), storage.as_str());
        let call = ProxmoxCall { node: Some(node), storage: Some(storage), ..Default::default() };
        self.pve("storage-content", call, |c| async move { c.storage_content(node, storage, content.as_deref()).await })
    }

    fn pve_version(&mut self) -> Result<String, WitError> {
        self.pve("pve-version", ProxmoxCall::default(), |c| async move { c.pve_version().await })
    }

    fn create_vm(&mut self, node: String, vmid: u32, config: Vec<Entry>) -> Result<String, WitError> {
        let node = node.as_str();
        // Every value is described as a config write's are: the disks it
        // allocates or imports, ISOs, snippets, node keys.
        let scope = config_scope::describe(&config, &[], None);
        let call = ProxmoxCall { config: Some(&scope), ..vm_call(node, vmid) };
        self.pve("create-vm", call, |c| async move { c.create_vm(node, vmid, &config).await })
    }

    fn create_container(&mut self, node: String, vmid: u32, config: Vec<Entry>) -> Result<String, WitError> {
        self.ct_create(&node, vmid, config)
    }

    fn get_container_config(&mut self, node: String, vmid: u32) -> Result<Vec<Entry>, WitError> {
        self.ct_config(&node, vmid)
    }

    fn set_container_config(
        &mut self,
        node: String,
        vmid: u32,
        set: Vec<Entry>,
        delete: Vec<String>,
        digest: Option<String>,
    ) -> Result<(), WitError> {
        self.ct_set_config(&node, vmid, set, delete, digest)
    }

    fn container_status(&mut self, node: String, vmid: u32) -> Result<VmRuntime, WitError> {
        self.ct_status(&node, vmid)
    }

    fn container_power(&mut self, node: String, vmid: u32, action: PowerAction) -> Result<String, WitError> {
        self.ct_power(&node, vmid, action)
    }

    fn destroy_container(&mut self, node: String, vmid: u32, purge: bool) -> Result<String, WitError> {
        self.ct_destroy(&node, vmid, purge)
    }

    fn task_log(&mut self, node: String, upid: String) -> Result<Vec<String>, WitError> {
        self.task_log_lines(&node, &upid)
    }

    fn list_ha_resources(&mut self) -> Result<Vec<HaResource>, WitError> {
        self.pve("list-ha-resources", ProxmoxCall::default(), |c| async move { c.list_ha_resources().await })
    }

    fn add_ha_resource(&mut self, vmid: u32, state: Option<String>, comment: Option<String>) -> Result<(), WitError> {
        let call = ProxmoxCall { vmid: Some(vmid), ..Default::default() };
        self.pve("add-ha-resource", call, |c| async move {
            c.add_ha_resource(vmid, state.as_deref(), comment.as_deref()).await
        })
    }

    fn remove_ha_resource(&mut self, vmid: u32) -> Result<(), WitError> {
        let call = ProxmoxCall { vmid: Some(vmid), destructive: true, ..Default::default() };
        self.pve("remove-ha-resource", call, |c| async move { c.remove_ha_resource(vmid).await })
    }

    fn list_ha_rules(&mut self) -> Result<Vec<HaRule>, WitError> {
        self.pve("list-ha-rules", ProxmoxCall::default(), |c| async move { c.list_ha_rules().await })
    }

    /// A rule is written whole (PUT replaces its resources), so a rewrite
    /// takes its current members out as surely as it puts the new ones in:
    /// both, and every node it names, must be inside the grant. The current
    /// members are read through the guard (`list-ha-rules`); then one call
    /// is checked and journaled.
    fn put_ha_rule(&mut self, rule: HaRule) -> Result<(), WitError> {
        let new_members = ha_members(&rule.rule, &rule.resources)?;
        let current = self.list_ha_rules()?;
        let existing = current.iter().find(|r| r.rule == rule.rule);
        // A replacement is written with a digest, and PVE refuses it unless the
        // rules file still has that digest. Requiring it to be the digest of
        // the read checked here makes check and write one step: the rule
        // replaced is exactly the one whose members were checked.
        let stale = match (existing, &rule.digest) {
            (Some(existing), Some(theirs)) if existing.digest.as_deref() != Some(theirs.as_str()) => {
                Some(CapError::new(
                    ErrorKind::Conflict,
                    format!(
                        "HA rule `{}` changed since it was read (digest {theirs}, now {}): read it again and rewrite it",
                        rule.rule,
                        existing.digest.as_deref().unwrap_or("none")
                    ),
                ))
            }
            _ => None,
        };
        let current_members = match existing {
            Some(existing) => ha_members(&existing.rule, &existing.resources)?,
            None => Vec::new(),
        };
        let nodes: Vec<&str> = rule
            .nodes
            .iter()
            .flat_map(|n| n.split(','))
            .map(|n| n.split(':').next().unwrap_or(n).trim())
            .filter(|n| !n.is_empty())
            .collect();
        let call = ProxmoxCall {
            ha_rule: Some(HaRuleScope { rule: &rule.rule, new_members, current_members, nodes }),
            ..Default::default()
        };
        // Checked (and journaled) inside the guard, after the scope.
        let result = self.guard("put-ha-rule", Call::Proxmox(call), || {
            if let Some(stale) = stale {
                return Err(stale);
            }
            let client = self.pve_client()?;
            self.block_on(client.put_ha_rule(&rule))
        });
        // A write, as in `pve`: what the run held may have changed.
        self.run.held_reads.forget_changeable();
        result.map_err(Into::into)
    }

    fn agent_ping(&mut self, node: String, vmid: u32) -> Result<(), WitError> {
        let node = node.as_str();
        self.pve("agent-ping", vm_call(node, vmid), |c| async move { c.agent_ping(node, vmid).await })
    }
}

/// The VMIDs of an HA rule's `resources` (`vm:150,vm:151`).
fn ha_members(rule: &str, resources: &str) -> Result<Vec<u32>, WitError> {
    resources
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|sid| {
            sid.strip_prefix("vm:")
                .and_then(|v| v.parse::<u32>().ok())
                .ok_or_else(|| CapError::invalid(format!("HA rule `{rule}`: resource `{sid}` is not vm:<vmid>")).into())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::ha_members;

    #[test]
    fn ha_members_are_vmids_and_anything_else_is_invalid() {
        assert_eq!(ha_members("r", "vm:150, vm:151,").expect("members"), [150, 151]);
        assert!(ha_members("r", "ct:150").is_err());
    }
}
