//! Held reads through the real adapter against the simulator: a repeated read
//! costs no request until the run's next change, and a read after a change
//! (a clone, a config write, a failed write) always asks the cluster.

use std::sync::Arc;

use cradle_sim::{Cluster, SimConfig};

use super::client::{ClientSettings, ProxmoxClient, RetryPolicy};
use super::tls::TlsVerify;
use crate::caps::Grants;
use crate::caps::context::{CapCtx, Services};
use crate::caps::policy::RunScope;
use crate::contract::bindings::cradle::host::proxmox::{CloneRequest, HaRule, Host};
use crate::contract::bindings::cradle::host::types::Entry;

/// A two-node simulator at time scale 0 (no SSH ports) and a client pinned to it:
/// the set-up of the tests that drive the real adapter (here and in
/// `wit_conformance_tests`). `tweak` adjusts the simulator's configuration.
pub(super) fn sim_with_client(
    rt: &tokio::runtime::Runtime,
    tweak: impl FnOnce(&mut SimConfig),
) -> (cradle_sim::RunningCluster, ProxmoxClient) {
    let mut cfg = SimConfig::with_nodes(2);
    cfg.time_scale = 0.0;
    cfg.node_ssh_port = 0;
    cfg.guest_ssh_port = 0;
    tweak(&mut cfg);
    let cluster = rt.block_on(Cluster::start(cfg)).expect("simulator");
    let client = ProxmoxClient::new(ClientSettings {
        endpoint: format!("https://{}", cluster.api_addr()),
        token: cluster.token(),
        verify: TlsVerify::Fingerprint(cluster.fingerprint_sha256()),
        timeout: std::time::Duration::from_secs(30),
        retry: RetryPolicy::default(),
        task_time_scale: 0.0,
    })
    .expect("client");
    (cluster, client)
}

fn count(cluster: &cradle_sim::RunningCluster, key: &str) -> u64 {
    cluster.request_counts().get(key).copied().unwrap_or(0)
}

#[test]
fn repeated_reads_cost_one_request_until_the_run_changes_the_cluster() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cluster, client) = sim_with_client(&rt, |_| {});
    let grants: Grants = toml::from_str(
        "[proxmox]\nnodes = [\"pve1\", \"pve2\"]\nvmids = \"100-999\"\nstorages = [\"local\", \"local-lvm\"]\n\
         templates = [\"debian-12-cloud\"]\n",
    )
    .expect("grants");
    let services = Services { proxmox: Some(Arc::new(client)), ..Services::for_tests(dir.path(), &rt) };
    let scope = RunScope { operator: true, ..RunScope::default() };
    let mut c = CapCtx::for_tests(grants, scope, services, "held-test");
    const LIST: &str = "GET /cluster/resources";
    const CONFIG: &str = "GET /nodes/{node}/qemu/{vmid}/config";
    // The storage index: `GET /storage/{storage}` needs Datastore.Allocate.
    const STORAGE: &str = "GET /storage";

    let before = c.list_vms().expect("list").len();
    assert_eq!(c.list_vms().expect("list again").len(), before);
    assert_eq!(count(&cluster, LIST), 1, "the second listing was answered from what the run holds");
    c.storage_info("local".into()).expect("storage");
    c.storage_info("local".into()).expect("storage again");
    assert_eq!(count(&cluster, STORAGE), 1);
    assert_eq!(count(&cluster, "GET /storage/{storage}"), 0, "a least-privilege token may not read it");

    // A clone changes the cluster: the next listing asks and sees the new VM.
    let template = c.list_vms().unwrap().into_iter().find(|v| v.template).expect("a template");
    let req = CloneRequest {
        node: template.node.clone(),
        template_vmid: template.vmid,
        newid: 321,
        name: "held-0".into(),
        full: false,
        storage: None,
        target: None,
        description: None,
    };
    let upid = c.clone_vm(req).expect("clone");
    assert!(c.list_vms().expect("list").iter().any(|v| v.vmid == 321), "the listing after the clone is fresh");
    assert_eq!(count(&cluster, LIST), 2);
    c.wait_task(template.node.clone(), upid, 60_000).expect("clone task");

    // A config read is held until the run writes it; the read after shows the write.
    let node = template.node.clone();
    c.get_config(node.clone(), 321).expect("config");
    c.get_config(node.clone(), 321).expect("config again");
    assert_eq!(count(&cluster, CONFIG), 1);
    let set = vec![Entry { key: "cores".into(), value: "3".into() }];
    c.set_config(node.clone(), 321, set, vec![], None).expect("set");
    let cores = c.get_config(node.clone(), 321).unwrap().into_iter().find(|e| e.key == "cores").map(|e| e.value);
    assert_eq!(cores.as_deref(), Some("3"));
    assert_eq!(count(&cluster, CONFIG), 2, "asked again after the write");
    // A write that fails still drops what was held (it may have changed something).
    c.get_config(node.clone(), 321).unwrap();
    assert!(c.set_config(node.clone(), 321, vec![], vec!["no-such-key".into()], Some("00".into())).is_err());
    c.get_config(node, 321).unwrap();
    assert_eq!(count(&cluster, CONFIG), 3);
    // The storage definition is held for the whole run, across changes.
    c.storage_info("local".into()).expect("storage");
    assert_eq!(count(&cluster, STORAGE), 1);
    // Writing an HA rule is a change too (the listing carries each VM's HA
    // state), whether PVE takes it or not.
    c.list_vms().expect("list");
    let lists = count(&cluster, LIST);
    let rule = HaRule {
        rule: "cradle-pve1".into(),
        kind: "node-affinity".into(),
        resources: "vm:321".into(),
        nodes: Some("pve1".into()),
        strict: false,
        digest: None,
    };
    let _ = c.put_ha_rule(rule);
    c.list_vms().expect("list after the rule");
    assert_eq!(count(&cluster, LIST), lists + 1, "the listing after an HA rule write asks again");
    drop(c);
    rt.block_on(cluster.shutdown());
}
