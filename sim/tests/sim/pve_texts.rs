//! Guest, HA and task behaviour held to the real Proxmox VE sources: each test
//! cites the line it was written from (repository, commit, path:line).
//! Tags, VM names, HA rule texts, clone and migrate refusals, unknown UPIDs and
//! the `user`/`tokenid` of a token's task.

use crate::common;

use common::{Api, start, urlencode};

/// pve-guest-common 4a8f6cb, src/PVE/GuestHelpers.pm:349-377 (`get_unique_tags`:
/// sorted by `lc`, lower-cased, first of equals kept, joined with `;`), called by
/// qemu-server e6352be src/PVE/API2/Qemu.pm:1538 (create) and :2496 (config update)
/// and pve-container 94f5585 src/PVE/LXC/Config.pm:1358; the list is split by
/// pve-common f665029 src/PVE/ParseUtils.pm:49-58 (`,`, `;`, whitespace).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_are_stored_lowercased_deduplicated_and_sorted() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    let (s, _) = api.call("PUT", "/nodes/pve1/qemu/101/config", &[("tags", "Web;cradle,web zeta")]).await;
    assert_eq!(s, 200);
    assert_eq!(api.get("/nodes/pve1/qemu/101/config").await["tags"], "cradle;web;zeta");
    let vms = api.get("/cluster/resources?type=vm").await;
    let vm = vms.as_array().unwrap().iter().find(|v| v["vmid"] == 101).unwrap().clone();
    assert_eq!(vm["tags"], "cradle;web;zeta");
    // pve-common f665029 src/PVE/JSONSchema.pm:890-903: `$PVE_TAG_RE`, else 400.
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/101/config", &[("tags", "ok;-bad")]).await;
    assert_eq!((s, b["errors"]["tags"].as_str()), (400, Some("invalid format - invalid characters in tag")));
}

/// pve-common f665029 src/PVE/JSONSchema.pm:675-685 (`pve_verify_dns_name`), the
/// format of qemu-server's `name` (src/PVE/QemuServer.pm:345-349, no maxLength).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm_names_are_dns_names_without_a_length_cap() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    let long = "a".repeat(70);
    assert_eq!(api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("name", &long)]).await, "OK");
    assert_eq!(api.get("/nodes/pve1/qemu/101/config").await["name"], long.as_str());
    for bad in ["web-", "a..b", "a_b"] {
        let (s, b) = api.call("PUT", "/nodes/pve1/qemu/101/config", &[("name", bad)]).await;
        assert_eq!(
            (s, b["errors"]["name"].as_str()),
            (400, Some("invalid format - value does not look like a valid DNS name")),
            "{bad}"
        );
    }
}

/// pve-ha-manager b71218f src/PVE/API2/HA/Rules.pm:340 (`HA rule 'x' does not exist`
/// under the lock prefix of :358, src/PVE/HA/Config.pm:317), :395 (DELETE removes
/// whatever is there, no check), :77 (`cannot use non-existent node(s) x.` under
/// the create prefix of :298), :25 (`no such ha rule` on GET).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ha_rule_texts_and_deleting_a_missing_rule_are_pves() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    api.post("/cluster/ha/resources", &[("sid", "vm:101"), ("state", "stopped")]).await;
    let (s, b) = api.call("PUT", "/cluster/ha/rules/gone", &[("type", "node-affinity"), ("resources", "vm:101")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("update HA rules failed: HA rule 'gone' does not exist\n")));
    let (s, b) = api.call("DELETE", "/cluster/ha/rules/gone", &[]).await;
    assert_eq!((s, &b["data"]), (200, &serde_json::Value::Null));
    let (s, b) = api.call("GET", "/cluster/ha/rules/gone", &[]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("no such ha rule 'gone'\n")));
    let form = [("type", "node-affinity"), ("rule", "r1"), ("resources", "vm:101"), ("nodes", "pve9:2,pve1,pve7")];
    let (s, b) = api.call("POST", "/cluster/ha/rules", &form).await;
    assert_eq!(
        (s, b["message"].as_str()),
        (500, Some("create ha rule failed: cannot use non-existent node(s) pve7, pve9.\n"))
    );
}

/// qemu-server e6352be src/PVE/API2/Qemu.pm:4471-4472 (`check_lock` of the source,
/// template or not), :4482-4483 (`storage` on a linked clone), :4442-4450 with
/// pve-cluster 7091d92 src/PVE/Cluster.pm:807 (unknown target: a plain die).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_refusals_use_qemu_servers_texts() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_path_buf();
    let s = state.clone();
    let c = start(0.0, move |cfg| cfg.state_dir = Some(s)).await;
    let api = Api::new(&c);
    let (s, b) = api.call("POST", "/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("storage", "local-lvm")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("parameter 'storage' not allowed for linked clones\n")));
    let (s, b) = api.call("POST", "/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("target", "pve9")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("no such cluster node 'pve9'\n")));
    c.shutdown().await;
    // A lock no task holds (a backup that died) on the template itself.
    let file = state.join("state.json");
    let mut st: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    st["vms"]["9000"]["config"]["lock"] = "backup".into();
    std::fs::write(&file, serde_json::to_vec(&st).unwrap()).unwrap();
    let s = state.clone();
    let c = start(0.0, move |cfg| cfg.state_dir = Some(s)).await;
    let api = Api::new(&c);
    let (s, b) = api.call("POST", "/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("VM is locked (backup)\n")));
}

/// qemu-server e6352be src/PVE/API2/Qemu.pm:4500-4503 checks only this node's
/// `qemu-server/<newid>.conf`; the worker's `file_set_contents` (:4615) then
/// fails on pmxcfs's EEXIST for a VMID on another node (pve-cluster 7091d92
/// src/pmxcfs/memdb.c:1099-1101; pve-common f665029 src/PVE/File.pm rename text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newid_taken_on_another_node_fails_inside_the_clone_task() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    // A full clone: a linked one on local storage cannot migrate (QemuMigrate.pm:586).
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("full", "1")]).await;
    assert_eq!(api.run("/nodes/pve1/qemu/101/migrate", &[("target", "pve2")]).await, "OK");
    let (s, b) = api.call("POST", "/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    assert_eq!(s, 200, "the clone is accepted: {b}");
    let st = api.wait_task(b["data"].as_str().unwrap()).await;
    assert_eq!(
        st["exitstatus"],
        "close (rename) atomic file '/etc/pve/nodes/pve1/qemu-server/101.conf' failed: File exists"
    );
    assert_eq!(api.get("/nodes/pve2/qemu/101/status/current").await["status"], "stopped", "101 untouched");
    // The same VMID on this node is refused before the task.
    let (s, b) = api.call("POST", "/nodes/pve2/qemu/101/clone", &[("newid", "101"), ("full", "1")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("unable to create VM 101: config file already exists\n")));
}

/// qemu-server e6352be src/PVE/API2/Qemu.pm:5567 (local target: a parameter error)
/// and :5571 (pve-cluster 7091d92 src/PVE/Cluster.pm:807, a plain die).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_to_the_local_node_is_a_parameter_error_and_to_an_unknown_node_a_500() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    let (s, b) = api.call("POST", "/nodes/pve1/qemu/101/migrate", &[("target", "pve1")]).await;
    assert_eq!((s, b["errors"]["target"].as_str()), (400, Some("target is local node.")));
    let (s, b) = api.call("POST", "/nodes/pve1/qemu/101/migrate", &[("target", "pve9")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("no such cluster node 'pve9'\n")));
}

/// pve-manager 14a22df3 PVE/API2/Tasks.pm:516-517 (`raise_param_exc({upid => "no such
/// task"})`, after "unable to parse worker upid") and :19-25 (`$convert_token_task`:
/// `user` without the token, `tokenid` beside it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_upids_are_parameter_errors_and_token_tasks_name_user_and_tokenid() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    let upid = api.post("/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    let upid = upid.as_str().unwrap();
    let st = api.wait_task(upid).await;
    assert_eq!((st["user"].as_str(), st["tokenid"].as_str()), (Some("root@pam"), Some("cradle")));
    let unknown = upid.replace(":qmclone:", ":qmstart:");
    let (s, b) = api.call("GET", &format!("/nodes/pve1/tasks/{}/status", urlencode(&unknown)), &[]).await;
    assert_eq!((s, b["errors"]["upid"].as_str()), (400, Some("no such task")));
    let (s, b) = api.call("GET", "/nodes/pve1/tasks/not-a-upid/status", &[]).await;
    assert_eq!((s, b["errors"]["upid"].as_str()), (400, Some("unable to parse worker upid")));
}
