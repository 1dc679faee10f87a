//! Cluster-wide calls: resources, nextid, storage definitions, HA resources and rules.
//!
//! Contract: reads are idempotent and may be repeated after transient errors;
//! HA writes are sent once. `next_id` never reserves (PVE does not): a taken hint is
//! a `conflict` naming the VMID. `put_ha_rule` writes only `node-affinity` rules —
//! the WIT record has no `affinity` field, which `resource-affinity` rules require.

use reqwest::Method;

use super::answers::{ha_resources, ha_rules, storage_in_index, vm_resources, vmid_value};
use super::{Call, Idempotency, ProxmoxClient, flag, segment};
use crate::caps::proxmox::errors::ProxmoxError;
use crate::contract::bindings::cradle::host::proxmox::{HaResource, HaRule, StorageDefinition, VmResource};

impl ProxmoxClient {
    /// `GET /cluster/resources?type=vm`. Callers of this client that list at
    /// the same time share a request sent after each of them asked (see
    /// `flights`): the listing holds every VM of the cluster.
    pub async fn list_vms(&self) -> Result<Vec<VmResource>, ProxmoxError> {
        self.inner
            .listing
            .get(|| {
                let call =
                    Call::new(Method::GET, "/cluster/resources".into(), Idempotency::Idempotent).param("type", "vm");
                self.fetch(call, vm_resources)
            })
            .await
    }

    /// `GET /cluster/nextid[?vmid=N]`: the first free VMID, or `hint` if it is free.
    /// A taken hint is [`ProxmoxError::VmidTaken`] (conflict). Nothing is reserved.
    pub async fn next_id(&self, hint: Option<u32>) -> Result<u32, ProxmoxError> {
        let call = Call::new(Method::GET, "/cluster/nextid".into(), Idempotency::Idempotent)
            .opt_param("vmid", hint.map(|v| v.to_string()));
        match (self.fetch(call, vmid_value).await, hint) {
            (Err(ProxmoxError::Api { status: 400, errors, message, .. }), Some(vmid)) => {
                let detail = errors.get("vmid").cloned().unwrap_or(message);
                Err(ProxmoxError::VmidTaken { vmid, detail })
            }
            (other, _) => other,
        }
    }

    /// One storage's definition (type, content types split on commas, path,
    /// shared) from the storage index `GET /storage`, not from `GET
    /// /storage/{storage}`: that one needs `Datastore.Allocate` on the storage
    /// (pve-storage `PVE/API2/Storage/Config.pm` `read`), which a
    /// least-privilege token has no reason to hold, while the index returns
    /// the same configuration of every storage the token has
    /// `Datastore.Audit` or `Datastore.AllocateSpace` on (`index`). A storage
    /// the index does not list is `invalid`, naming both causes.
    pub async fn storage_info(&self, storage: &str) -> Result<StorageDefinition, ProxmoxError> {
        segment("storage", storage)?;
        let call = Call::new(Method::GET, "/storage".into(), Idempotency::Idempotent);
        let found = self.fetch(call, |data| storage_in_index(storage, data)).await?;
        found.ok_or_else(|| {
            ProxmoxError::InvalidArgument(format!(
                "storage `{storage}` is not in the cluster's storage list (GET /storage): it is not configured \
                 (Datacenter → Storage), or the API token has neither Datastore.Audit nor Datastore.AllocateSpace \
                 on /storage/{storage}"
            ))
        })
    }

    /// `GET /cluster/ha/resources`.
    pub async fn list_ha_resources(&self) -> Result<Vec<HaResource>, ProxmoxError> {
        let call = Call::new(Method::GET, "/cluster/ha/resources".into(), Idempotency::Idempotent);
        self.fetch(call, ha_resources).await
    }

    /// `POST /cluster/ha/resources` with `sid=vm:N`, `state`, `comment`. Without
    /// `state` PVE uses `started` and HA starts the guest itself.
    pub async fn add_ha_resource(
        &self,
        vmid: u32,
        state: Option<&str>,
        comment: Option<&str>,
    ) -> Result<(), ProxmoxError> {
        let call = Call::new(Method::POST, "/cluster/ha/resources".into(), Idempotency::NotIdempotent)
            .param("sid", format!("vm:{vmid}"))
            .opt_param("state", state)
            .opt_param("comment", comment);
        self.call(&call).await.map(drop)
    }

    /// `DELETE /cluster/ha/resources/vm:N`.
    pub async fn remove_ha_resource(&self, vmid: u32) -> Result<(), ProxmoxError> {
        let call = Call::new(Method::DELETE, format!("/cluster/ha/resources/vm:{vmid}"), Idempotency::NotIdempotent);
        self.call(&call).await.map(drop)
    }

    /// `GET /cluster/ha/rules`.
    pub async fn list_ha_rules(&self) -> Result<Vec<HaRule>, ProxmoxError> {
        let call = Call::new(Method::GET, "/cluster/ha/rules".into(), Idempotency::Idempotent);
        self.fetch(call, ha_rules).await
    }

    /// Creates the rule (`POST /cluster/ha/rules`) or, when `rule.digest` is set,
    /// replaces it (`PUT /cluster/ha/rules/{rule}` with the digest, so a concurrent
    /// change makes PVE refuse instead of being overwritten).
    pub async fn put_ha_rule(&self, rule: &HaRule) -> Result<(), ProxmoxError> {
        if rule.kind != "node-affinity" {
            return Err(ProxmoxError::InvalidArgument(format!(
                "HA rule {:?} has type {:?}; only node-affinity rules can be written (resource-affinity needs an affinity field the interface does not have)",
                rule.rule, rule.kind
            )));
        }
        let call = match &rule.digest {
            Some(digest) => Call::new(
                Method::PUT,
                format!("/cluster/ha/rules/{}", segment("HA rule", &rule.rule)?),
                Idempotency::NotIdempotent,
            )
            .param("digest", digest.clone()),
            None => {
                segment("HA rule", &rule.rule)?;
                Call::new(Method::POST, "/cluster/ha/rules".into(), Idempotency::NotIdempotent)
                    .param("rule", rule.rule.clone())
            }
        };
        let call = call
            .param("type", rule.kind.clone())
            .param("resources", rule.resources.clone())
            .opt_param("nodes", rule.nodes.clone())
            .param("strict", flag(rule.strict));
        self.call(&call).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::super::answers::storage_definition;
    use super::*;
    use serde_json::json;

    #[test]
    fn cluster_resources_become_vm_resources() {
        let data = json!([
            {"id": "qemu/100", "type": "qemu", "vmid": 100, "name": "test-0", "node": "pve1", "status": "running", "template": 0, "hastate": "started", "tags": "a;b"},
            {"id": "qemu/9000", "type": "qemu", "vmid": "9000", "name": "debian-13", "node": "pve1", "status": "stopped", "template": 1, "lock": "clone"}
        ]);
        let vms = vm_resources(&data).expect("resources");
        assert_eq!(vms.len(), 2);
        assert_eq!(
            (vms[0].vmid, vms[0].template, vms[0].hastate.as_deref(), vms[0].tags.as_deref()),
            (100, false, Some("started"), Some("a;b"))
        );
        assert_eq!((vms[1].vmid, vms[1].template, vms[1].lock.as_deref()), (9000, true, Some("clone")));
        assert!(vm_resources(&json!([{"vmid": 1}])).unwrap_err().to_string().contains("node"));
    }

    #[test]
    fn nextid_is_read_from_string_or_number() {
        assert_eq!(vmid_value(&json!("100")), Ok(100));
        assert_eq!(vmid_value(&json!(101)), Ok(101));
        assert!(vmid_value(&json!("abc")).is_err());
    }

    #[test]
    fn storage_content_is_split_on_commas_and_shared_is_a_flag() {
        let s = storage_definition(
            "local",
            &json!({"path": "/var/lib/vz", "content": "iso,vztmpl,backup,snippets", "shared": 0, "type": "dir"}),
        )
        .expect("storage");
        assert_eq!(s.content, ["iso", "vztmpl", "backup", "snippets"]);
        assert_eq!(
            (s.storage.as_str(), s.kind.as_str(), s.shared, s.path.as_deref()),
            ("local", "dir", false, Some("/var/lib/vz"))
        );
        let s =
            storage_definition("ceph", &json!({"storage": "ceph", "content": "images", "shared": 1, "type": "rbd"}))
                .expect("storage");
        assert!(s.shared);
    }

    /// pve-storage 0c56bad src/PVE/API2/Storage/Config.pm:26-41, :122-160: the
    /// index lists each visible storage's whole configuration (content
    /// encoded as a comma list, `storage` set to its id).
    #[test]
    fn a_storage_definition_is_read_from_the_storage_index() {
        let index = json!([
            {"storage": "local-lvm", "type": "lvmthin", "content": "images,rootdir", "thinpool": "data", "digest": "d"},
            {"storage": "local", "type": "dir", "path": "/var/lib/vz", "content": "iso,snippets", "digest": "d"}
        ]);
        let s = storage_in_index("local", &index).expect("decoded").expect("listed");
        assert_eq!((s.kind.as_str(), s.path.as_deref(), s.content.len()), ("dir", Some("/var/lib/vz"), 2));
        assert!(matches!(storage_in_index("nfs", &index), Ok(None)), "an unlisted storage is none");
    }

    #[test]
    fn ha_lists_read_resources_and_rules() {
        let r = ha_resources(&json!([{"sid": "vm:100", "state": "stopped", "comment": "x"}, {"sid": "vm:101"}]))
            .expect("resources");
        assert_eq!((r[0].state.as_str(), r[1].state.as_str()), ("stopped", "started"));
        let rules = ha_rules(&json!([{"rule": "web", "type": "node-affinity", "resources": "vm:100,vm:101", "nodes": "pve1:2,pve2", "strict": 1, "digest": "d1"}])).expect("rules");
        assert_eq!(
            (rules[0].resources.as_str(), rules[0].nodes.as_deref(), rules[0].strict),
            ("vm:100,vm:101", Some("pve1:2,pve2"), true)
        );
    }
}
