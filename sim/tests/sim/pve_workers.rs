//! Refusals that real Proxmox VE makes inside a task's worker, not in the HTTP answer
//! (qemu-server e6352be67f70042a7433a3a3c712b36d02f9f7cb): the request answers a UPID
//! and the task fails with the reason. And qemu-server's own text for a stale digest.

use crate::common;

use common::{Api, start, urlencode};
use serde_json::Value;

/// The task's exit status and its log lines.
async fn outcome(api: &Api, upid: &Value) -> (String, Vec<String>) {
    let upid = upid.as_str().expect("a UPID");
    let st = api.wait_task(upid).await;
    let node = upid.split(':').nth(1).expect("node");
    let log = api.get(&format!("/nodes/{node}/tasks/{}/log?limit=500", urlencode(upid))).await;
    let lines =
        log.as_array().expect("lines").iter().map(|l| l["t"].as_str().unwrap_or_default().to_string()).collect();
    (st["exitstatus"].as_str().unwrap_or_default().to_string(), lines)
}

/// `method path` must answer 200 with a UPID.
async fn task_of(api: &Api, method: &str, path: &str, form: &[(&str, &str)]) -> Value {
    let (s, b) = api.call(method, path, form).await;
    assert_eq!(s, 200, "{method} {path} answers a task, not an error: {b}");
    b["data"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_vm_digest_says_checksum_mismatch_in_a_config_write_and_in_a_resize_task() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    assert_eq!(api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("name", "t")]).await, "OK");
    let stale = "0".repeat(40);
    // src/PVE/API2/Qemu.pm:2211, in update_vm_api's early checks (before any worker):
    // `die "checksum mismatch (file change by other user?)\n" if $digest && $digest ne $conf->{digest};`
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/101/config", &[("cores", "2"), ("digest", &stale)]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("checksum mismatch (file change by other user?)\n")));
    // Qemu.pm:6006, inside the resize worker.
    let upid =
        task_of(&api, "PUT", "/nodes/pve1/qemu/101/resize", &[("disk", "scsi0"), ("size", "+1G"), ("digest", &stale)])
            .await;
    assert_eq!(outcome(&api, &upid).await.0, "checksum mismatch (file change by other user?)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_and_destroy_of_a_locked_vm_answer_a_task_that_fails_vm_is_locked() {
    // The clone runs for an hour: the new VM holds `lock: clone` throughout.
    let c = start(1.0, |cfg| cfg.timings.clone = std::time::Duration::from_secs(3600)).await;
    let api = Api::new(&c);
    api.post("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("name", "t")]).await;

    // Qemu.pm:6068-6071: `fork_worker('resize', ...)` runs `$updatefn`, whose
    // `check_lock` (Qemu.pm:6008) fails the task.
    let upid = task_of(&api, "PUT", "/nodes/pve1/qemu/101/resize", &[("disk", "scsi0"), ("size", "+1G")]).await;
    assert_eq!(outcome(&api, &upid).await.0, "VM is locked (clone)");
    // src/PVE/QemuServer.pm:1847-1848: destroy_vm's `check_lock`, run in the
    // `qmdestroy` worker (Qemu.pm:2862); the early checks (Qemu.pm:2826-2845) pass.
    let upid = task_of(&api, "DELETE", "/nodes/pve1/qemu/101", &[("purge", "1")]).await;
    assert_eq!(outcome(&api, &upid).await.0, "VM is locked (clone)");
    assert_eq!(api.get("/nodes/pve1/qemu/101/config").await["lock"], "clone", "nothing was destroyed");

    // The other resize checks run in the worker too (Qemu.pm:6010, :6021, :6048).
    let clone = task_of(&api, "PUT", "/nodes/pve1/qemu/9000/resize", &[("disk", "scsi9"), ("size", "+1G")]).await;
    assert_eq!(outcome(&api, &clone).await.0, "disk 'scsi9' does not exist");
    let shrink = task_of(&api, "PUT", "/nodes/pve1/qemu/9000/resize", &[("disk", "scsi0"), ("size", "1G")]).await;
    assert_eq!(outcome(&api, &shrink).await.0, "shrinking disks is not supported");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_migration_with_local_disks_is_a_task_that_aborts_with_the_reason_in_its_log() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    let full = [("newid", "101"), ("name", "t"), ("full", "1")];
    assert_eq!(api.run("/nodes/pve1/qemu/9000/clone", &full).await, "OK");
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/start", &[]).await, "OK");
    // Qemu.pm:5588-5596 check the lock and `online` before the worker; the local
    // disks are found inside it, by src/PVE/QemuMigrate.pm:540-543 (logged per disk),
    // then :563-564 `die "can't migrate VM - check log\n"`, :605 wraps it, and
    // pve-guest-common 4a8f6cb src/PVE/AbstractMigrate.pm:241-242 logs it and ends the
    // task `migration aborted`.
    let upid = task_of(&api, "POST", "/nodes/pve1/qemu/101/migrate", &[("target", "pve2"), ("online", "1")]).await;
    let (exit, log) = outcome(&api, &upid).await;
    assert_eq!(exit, "migration aborted");
    let has = |needle: &str| log.iter().any(|l| l.contains(needle));
    assert!(
        has(
            "can't migrate local disk 'local-lvm:vm-101-disk-0': can't live migrate attached local disks without with-local-disks option"
        ),
        "{log:#?}"
    );
    assert!(
        has(
            " ERROR: migration aborted (duration 00:00:00): Problem found while scanning volumes - can't migrate VM - check log"
        ),
        "{log:#?}"
    );
    let vm = api.get("/nodes/pve1/qemu/101/status/current").await;
    assert_eq!((vm["status"].as_str(), vm.get("lock")), (Some("running"), None), "still on pve1, unlocked: {vm}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_migration_of_a_linked_clone_on_local_storage_aborts_naming_the_volume_and_its_base() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    // A template's clone is linked by default (Qemu.pm:4480, `$param->{full} // !is_template`).
    let linked = [("newid", "102"), ("name", "linked")];
    assert_eq!(api.run("/nodes/pve1/qemu/9000/clone", &linked).await, "OK");
    // src/PVE/QemuMigrate.pm:584-586 (no newline: Perl appends the place):
    // `die "can't migrate '$volid' as it's a clone of '$basename'";`
    let upid = task_of(&api, "POST", "/nodes/pve1/qemu/102/migrate", &[("target", "pve2")]).await;
    let (exit, log) = outcome(&api, &upid).await;
    assert_eq!(exit, "migration aborted");
    let cause = "Problem found while scanning volumes - can't migrate 'local-lvm:base-9000-disk-0/vm-102-disk-0' \
                 as it's a clone of 'base-9000-disk-0' at /usr/share/perl5/PVE/QemuMigrate.pm line 586.";
    assert!(
        log.iter().any(|l| l.ends_with(&format!(" ERROR: migration aborted (duration 00:00:00): {cause}"))),
        "{log:#?}"
    );
    let vm = api.get("/nodes/pve1/qemu/102/status/current").await;
    assert_eq!(vm.get("lock"), None, "phase 1's cleanup leaves no lock: {vm}");
    // A full clone on the same storage migrates.
    let full = [("newid", "103"), ("name", "full"), ("full", "1")];
    assert_eq!(api.run("/nodes/pve1/qemu/9000/clone", &full).await, "OK");
    assert_eq!(api.run("/nodes/pve1/qemu/103/migrate", &[("target", "pve2")]).await, "OK");
}
