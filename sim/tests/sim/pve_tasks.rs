//! Task lists as real Proxmox VE gives them (pve-manager `PVE/API2/Tasks.pm`): a
//! running task's entry says `RUNNING`, and `vmid` matches the UPID's id only.

use crate::common;

use common::{Api, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_is_listed_with_status_running_under_its_own_id_only() {
    // The clone runs for an hour, so it is certainly active below.
    let c = start(1.0, |cfg| cfg.timings.clone = std::time::Duration::from_secs(3600)).await;
    let api = Api::new(&c);
    let upid = api.post("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("name", "t")]).await;
    let upid = upid.as_str().expect("UPID");

    // pve-manager 14a22df35955d97dfc1af21e117dc894a29df0c9, PVE/API2/Tasks.pm:233:
    // `$task->{status} = 'RUNNING' if !$task->{status}; # otherwise it would be archived`
    let all = api.get("/nodes/pve1/tasks?source=all&vmid=9000&typefilter=qmclone").await;
    let entry = all.as_array().expect("list").iter().find(|t| t["upid"] == upid).expect("listed").clone();
    assert_eq!((entry["status"].as_str(), entry["id"].as_str()), (Some("RUNNING"), Some("9000")), "{entry}");
    assert!(entry.get("exitstatus").is_none(), "{entry}");

    // Tasks.pm:194: `return 1 if $param->{vmid} && (!$task->{id} || $task->{id} ne $param->{vmid});`
    // The clone's UPID id is the template (Qemu.pm clone_vm: fork_worker('qmclone', $vmid, ...)),
    // so listing by the new VM's id does not find it.
    let by_target = api.get("/nodes/pve1/tasks?source=all&vmid=101").await;
    assert_eq!(by_target.as_array().expect("list").len(), 0, "{by_target}");

    // Tasks.pm:177-179: `errors` drops only the `ok` tasks; a running one (status type
    // `unknown`, pve-common UPID.pm normalize_status_type) stays.
    let errors = api.get("/nodes/pve1/tasks?source=all&errors=1").await;
    assert!(errors.as_array().expect("list").iter().any(|t| t["upid"] == upid), "{errors}");
    let ok_only = api.get("/nodes/pve1/tasks?source=all&statusfilter=ok").await;
    assert!(!ok_only.as_array().expect("list").iter().any(|t| t["upid"] == upid), "{ok_only}");

    // The status endpoint keeps its own lower-case `running` (Tasks.pm:532).
    let st = api.get(&format!("/nodes/pve1/tasks/{}/status", common::urlencode(upid))).await;
    assert_eq!(st["status"], "running");
}
