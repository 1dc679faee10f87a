//! `POST /nodes/{node}/qemu/{vmid}/move_disk` against qemu-server
//! e6352be67f70042a7433a3a3c712b36d02f9f7cb (`src/PVE/API2/Qemu.pm` `move_vm_disk`,
//! :4753-5205; `src/PVE/QemuServer.pm` `clone_disk`, :8005-8113): the early checks as
//! HTTP errors, the `qmmove` task, what the config and the storages hold afterwards,
//! and the VM's config file lock between two moves.

use std::time::Duration;

use serde_json::Value;

use crate::common::{self, Api, urlencode};
use cradle_sim::SimConfig;
use cradle_sim::config::StorageSpec;

/// A second lvmthin pool with `images`, `fast`, besides the default `local` (dir, no
/// `images`) and `local-lvm`.
fn with_fast(cfg: &mut SimConfig) {
    cfg.storages.push(StorageSpec {
        id: "fast".into(),
        kind: "lvmthin".into(),
        content: "images,rootdir".into(),
        path: None,
        shared: false,
        size_bytes: None,
    });
}

/// VM 101, a linked clone of the seed template on pve1 (`scsi0` 3G on local-lvm, the
/// cloud-init drive `ide2`), with a 4G data disk `scsi1` on local-lvm.
async fn vm_with_data_disk(api: &Api) {
    assert_eq!(api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("name", "t")]).await, "OK");
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/101/config", &[("scsi1", "local-lvm:4")]).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(config(api).await["scsi1"], "local-lvm:vm-101-disk-1,size=4G");
}

async fn config(api: &Api) -> Value {
    api.get("/nodes/pve1/qemu/101/config").await
}

/// `used` of a storage on pve1.
async fn used(api: &Api, storage: &str) -> u64 {
    api.get(&format!("/nodes/pve1/storage/{storage}/status")).await["used"].as_u64().expect("used")
}

/// The task's exit status and its log lines.
async fn outcome(api: &Api, upid: &Value) -> (String, Vec<String>) {
    let upid = upid.as_str().expect("a UPID");
    let st = api.wait_task(upid).await;
    let log = api.get(&format!("/nodes/pve1/tasks/{}/log?limit=500", urlencode(upid))).await;
    let lines =
        log.as_array().expect("lines").iter().map(|l| l["t"].as_str().unwrap_or_default().to_string()).collect();
    (st["exitstatus"].as_str().unwrap_or_default().to_string(), lines)
}

/// POST move_disk answering a UPID.
async fn move_task(api: &Api, form: &[(&str, &str)]) -> Value {
    let (s, b) = api.call("POST", "/nodes/pve1/qemu/101/move_disk", form).await;
    assert_eq!(s, 200, "move_disk answers a task: {b}");
    b["data"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_disk_of_a_stopped_vms_data_disk_makes_a_new_volume_on_the_target_and_keeps_the_old_as_unused0() {
    let c = common::start(0.0, with_fast).await;
    let api = Api::new(&c);
    vm_with_data_disk(&api).await;
    let before = config(&api).await;
    let (lvm_before, fast_before) = (used(&api, "local-lvm").await, used(&api, "fast").await);

    let upid = move_task(&api, &[("disk", "scsi1"), ("storage", "fast")]).await;
    assert!(upid.as_str().is_some_and(|u| u.contains(":qmmove:101:")), "{upid}");
    let (status, log) = outcome(&api, &upid).await;
    assert_eq!(status, "OK", "{log:?}");
    // Qemu.pm:4906-4907, QemuServer.pm:8033-8035 and :8084, Qemu.pm:4960.
    for line in [
        "copying volume 'local-lvm:vm-101-disk-1' from current storage 'local-lvm' to target storage 'fast'",
        "create full clone of drive scsi1 (local-lvm:vm-101-disk-1)",
        "allocated target volume 'fast:vm-101-disk-0'",
        "adding source volume 'local-lvm:vm-101-disk-1' as 'unused0' to config",
    ] {
        assert!(log.iter().any(|l| l == line), "{line:?} in {log:?}");
    }

    let after = config(&api).await;
    // clone_disk keeps the options and the size (QemuServer.pm:8105-8112); the old
    // volume is the first free unusedN (AbstractConfig.pm:428-446).
    assert_eq!(after["scsi1"], "fast:vm-101-disk-0,size=4G");
    assert_eq!(after["unused0"], "local-lvm:vm-101-disk-1");
    assert_eq!(after["scsi0"], before["scsi0"], "the other disks stay");
    assert_ne!(after["digest"], before["digest"], "a write changes the digest");
    // The new volume counts on the target; the old one, kept, still on its pool.
    assert_eq!(used(&api, "fast").await, fast_before + (4 << 30));
    assert_eq!(used(&api, "local-lvm").await, lvm_before);
    let content = api.get("/nodes/pve1/storage/fast/content").await;
    let volids: Vec<&str> = content.as_array().expect("list").iter().filter_map(|v| v["volid"].as_str()).collect();
    assert_eq!(volids, ["fast:vm-101-disk-0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_disk_with_delete_frees_the_old_volume_and_adds_no_unused() {
    let c = common::start(0.0, with_fast).await;
    let api = Api::new(&c);
    vm_with_data_disk(&api).await;
    let lvm_before = used(&api, "local-lvm").await;

    let upid = move_task(&api, &[("disk", "scsi1"), ("storage", "fast"), ("delete", "1")]).await;
    let (status, log) = outcome(&api, &upid).await;
    assert_eq!(status, "OK", "{log:?}");
    // Qemu.pm:4989-4995.
    assert!(
        log.iter().any(|l| l == "removing source volume 'local-lvm:vm-101-disk-1' after successful copy"),
        "{log:?}"
    );
    assert!(!log.iter().any(|l| l.starts_with("adding source volume")), "{log:?}");
    let after = config(&api).await;
    assert_eq!(after["scsi1"], "fast:vm-101-disk-0,size=4G");
    let keys: Vec<&String> = after.as_object().expect("config").keys().filter(|k| k.starts_with("unused")).collect();
    assert!(keys.is_empty(), "no unusedN: {after}");
    assert_eq!(used(&api, "local-lvm").await, lvm_before - (4 << 30));
    assert_eq!(used(&api, "fast").await, 4 << 30);
}

/// `drive_is_cdrom($drive, 1)` (Drive.pm:761-767) leaves the cloud-init drive out: it
/// moves like a disk, as `vm-V-cloudinit` of 4 MiB (QemuServer.pm:8053-8060).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_disk_moves_the_cloud_init_drive_which_is_no_cdrom() {
    let c = common::start(0.0, with_fast).await;
    let api = Api::new(&c);
    vm_with_data_disk(&api).await;
    let (status, log) = outcome(&api, &move_task(&api, &[("disk", "ide2"), ("storage", "fast")]).await).await;
    assert_eq!(status, "OK", "{log:?}");
    let after = config(&api).await;
    assert_eq!(after["ide2"], "fast:vm-101-cloudinit,media=cdrom,size=4M");
    assert_eq!(after["unused0"], "local-lvm:vm-101-cloudinit");
}

/// A format the target lacks: `resolve_dst_disk_format` falls back to the storage's
/// default and clone_disk warns (QemuServer.pm:8044-8049); a plain `warn`, so the task
/// ends OK. On the volume's own lvmthin pool `format=qcow2` is no "same format"
/// (Qemu.pm:4879-4880: the volume is raw), so the copy lands there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_disk_with_a_format_the_target_lacks_warns_and_copies_as_raw() {
    let c = common::start(0.0, with_fast).await;
    let api = Api::new(&c);
    vm_with_data_disk(&api).await;
    let upid = move_task(&api, &[("disk", "scsi1"), ("storage", "local-lvm"), ("format", "qcow2")]).await;
    let (status, log) = outcome(&api, &upid).await;
    assert_eq!(status, "OK", "{log:?}");
    let warning = "format 'qcow2' is not supported by the target storage 'local-lvm' - using 'raw' instead";
    assert!(log.iter().any(|l| l == warning), "{log:?}");
    let after = config(&api).await;
    assert_eq!(after["scsi1"], "local-lvm:vm-101-disk-2,size=4G", "disk-0 is the linked clone's");
    assert_eq!(after["unused0"], "local-lvm:vm-101-disk-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_disk_early_refusals_answer_pves_errors_and_change_nothing() {
    let c = common::start(0.0, with_fast).await;
    let api = Api::new(&c);
    vm_with_data_disk(&api).await;
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/101/config", &[("ide3", "none,media=cdrom")]).await;
    assert_eq!(s, 200, "{b}");
    let before = config(&api).await;
    let tasks_before = api.get("/nodes/pve1/tasks?typefilter=qmmove").await;
    let stale = "0".repeat(40);
    let path = "/nodes/pve1/qemu/101/move_disk";

    // $load_and_check_move (Qemu.pm:4862-4884), run before fork_worker (:5193): 500s.
    let dies: [(&[(&str, &str)], &str); 6] = [
        (&[("disk", "scsi1"), ("storage", "local-lvm")], "you can't move to the same storage with same format"),
        (
            &[("disk", "scsi1"), ("storage", "local-lvm"), ("format", "raw")],
            "you can't move to the same storage with same format",
        ),
        (&[("disk", "ide3"), ("storage", "fast")], "you can't move a cdrom"),
        (&[("disk", "scsi5"), ("storage", "fast")], "disk 'scsi5' does not exist"),
        (
            &[("disk", "scsi1"), ("storage", "fast"), ("digest", &stale)],
            "detected modified configuration - file changed by other user? Try again.",
        ),
        (&[("disk", "scsi1"), ("storage", "nowhere")], "storage 'nowhere' does not exist"),
    ];
    for (form, want) in dies {
        let (s, b) = api.call("POST", path, form).await;
        assert_eq!((s, b["message"].as_str()), (500, Some(format!("{want}\n").as_str())), "{form:?}");
    }
    // :4882-4884: the parameter exception.
    let (s, b) = api.call("POST", path, &[("disk", "scsi1"), ("storage", "local")]).await;
    assert_eq!((s, b["errors"]["storage"].as_str()), (400, Some("storage 'local' does not support vm images")), "{b}");
    // :5169-5171 and :5200-5202.
    let (s, b) = api.call("POST", path, &[("disk", "scsi1"), ("storage", "fast"), ("target-vmid", "9000")]).await;
    let both = "either set 'storage' or 'target-vmid', but not both";
    assert_eq!(
        (s, b["errors"]["storage"].as_str(), b["errors"]["target-vmid"].as_str()),
        (400, Some(both), Some(both))
    );
    let (s, b) = api.call("POST", path, &[("disk", "scsi1")]).await;
    let neither = "both 'storage' and 'target-vmid' missing, either needs to be set";
    assert_eq!((s, b["errors"]["storage"].as_str()), (400, Some(neither)), "{b}");
    // The reassign form is not modelled.
    let (s, b) = api.call("POST", path, &[("disk", "scsi1"), ("target-vmid", "9000")]).await;
    assert_eq!(s, 501, "{b}");
    let (s, b) = api.call("POST", path, &[("disk", "scsi99"), ("storage", "fast")]).await;
    assert_eq!(s, 400, "{b}");
    assert!(
        b["errors"]["disk"]
            .as_str()
            .is_some_and(|e| e.starts_with("value 'scsi99' does not have a value in the enumeration 'ide0, ide1,")),
        "{b}"
    );

    assert_eq!(config(&api).await, before, "nothing changed");
    assert_eq!(api.get("/nodes/pve1/tasks?typefilter=qmmove").await, tasks_before, "no task started");
}

/// `check_lock` (Qemu.pm:4864, AbstractConfig.pm:336-340) among the early checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_disk_of_a_locked_vm_answers_vm_is_locked() {
    // The clone runs for an hour: the new VM holds `lock: clone` throughout.
    let c = common::start(1.0, |cfg| {
        with_fast(cfg);
        cfg.timings.clone = Duration::from_secs(3600);
    })
    .await;
    let api = Api::new(&c);
    api.post("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("name", "t")]).await;
    let (s, b) = api.call("POST", "/nodes/pve1/qemu/101/move_disk", &[("disk", "scsi0"), ("storage", "fast")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("VM is locked (clone)\n")));
    assert_eq!(config(&api).await["lock"], "clone");
}

/// The worker runs `$load_and_check_move` again under the config file lock (Qemu.pm:4897,
/// :5195-5197): a second move that had to wait for the first finds the config the first
/// wrote, and its digest stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_disk_task_fails_when_the_digest_went_stale_before_its_worker_took_the_lock() {
    // Copies take 0.1 s, the lock timeout 1 s.
    let c = common::start(0.1, |cfg| {
        with_fast(cfg);
        cfg.timings.move_disk = Duration::from_secs(1);
    })
    .await;
    let api = Api::new(&c);
    vm_with_data_disk(&api).await;
    let digest = config(&api).await["digest"].as_str().expect("digest").to_string();
    let first = move_task(&api, &[("disk", "scsi1"), ("storage", "fast")]).await;
    let second = move_task(&api, &[("disk", "scsi0"), ("storage", "fast"), ("digest", &digest)]).await;
    let (status, log) = outcome(&api, &second).await;
    assert_eq!(status, "detected modified configuration - file changed by other user? Try again.", "{log:?}");
    // pve-common Tools.pm:217-218, :231.
    assert_eq!(log[..2], ["trying to acquire lock...", " OK"], "{log:?}");
    assert_eq!(outcome(&api, &first).await.0, "OK");
    let after = config(&api).await;
    assert_eq!(after["scsi1"], "fast:vm-101-disk-0,size=4G");
    assert_eq!(after["scsi0"], "local-lvm:base-9000-disk-0/vm-101-disk-0,size=3G", "the second move wrote nothing");
}

/// `lock_config` waits 10 s for the flock (AbstractConfig.pm:329-333), then fails with
/// pve-common's `can't lock file '...' - got timeout` (Tools.pm:167, :264).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_move_disk_while_the_first_runs_fails_with_the_lock_timeout_and_the_first_completes() {
    // The first copy takes 3 s, the lock timeout 0.1 s.
    let c = common::start(0.01, |cfg| {
        with_fast(cfg);
        cfg.timings.move_disk = Duration::from_secs(300);
    })
    .await;
    let api = Api::new(&c);
    vm_with_data_disk(&api).await;
    let first = move_task(&api, &[("disk", "scsi1"), ("storage", "fast")]).await;
    let second = move_task(&api, &[("disk", "scsi0"), ("storage", "fast")]).await;
    let (status, log) = outcome(&api, &second).await;
    assert_eq!(status, "can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout", "{log:?}");
    assert_eq!(log[0], "trying to acquire lock...");
    let running = api.get(&format!("/nodes/pve1/tasks/{}/status", urlencode(first.as_str().expect("UPID")))).await;
    assert_eq!(running["status"], "running", "the first still copies");
    assert_eq!(outcome(&api, &first).await.0, "OK");
    let after = config(&api).await;
    assert_eq!(after["scsi1"], "fast:vm-101-disk-0,size=4G");
    assert_eq!(after["unused0"], "local-lvm:vm-101-disk-1");
    assert_eq!(after["scsi0"], "local-lvm:base-9000-disk-0/vm-101-disk-0,size=3G");
}

/// apidata.js: VM.Config.Disk on the VM; Qemu.pm:5191: Datastore.AllocateSpace on the
/// target storage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_disk_needs_datastore_allocatespace_on_the_target_storage() {
    let c = common::start(0.0, |cfg| {
        with_fast(cfg);
        cfg.access =
            cradle_sim::acl::AccessConfig::single_role("cradle@pve", "Cradle", &["VM.Audit", "VM.Config.Disk"]);
    })
    .await;
    let api = Api::new(&c);
    let (s, b) = api.call("POST", "/nodes/pve1/qemu/9000/move_disk", &[("disk", "scsi0"), ("storage", "fast")]).await;
    assert_eq!(
        (s, b["message"].as_str()),
        (403, Some("Permission check failed (/storage/fast, Datastore.AllocateSpace)\n"))
    );
}

/// A template's moved disk becomes a base volume (`template_create`, Qemu.pm:4963-4965);
/// with `delete=1` its old base, which a linked clone still uses, is not freed
/// (pve-storage Storage.pm:1203-1205, a `warn` in the task: it still ends OK).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_disk_of_a_template_makes_a_base_volume_and_keeps_the_old_base_its_linked_clones_use() {
    let c = common::start(0.0, with_fast).await;
    let api = Api::new(&c);
    vm_with_data_disk(&api).await;
    let lvm_before = used(&api, "local-lvm").await;
    let (s, b) = api
        .call("POST", "/nodes/pve1/qemu/9000/move_disk", &[("disk", "scsi0"), ("storage", "fast"), ("delete", "1")])
        .await;
    assert_eq!(s, 200, "{b}");
    let (status, log) = outcome(&api, &b["data"]).await;
    assert_eq!(status, "OK", "{log:?}");
    assert!(log.iter().any(|l| l == "base volume 'base-9000-disk-0' is still in use by linked clones"), "{log:?}");
    let template = api.get("/nodes/pve1/qemu/9000/config").await;
    assert_eq!(template["scsi0"], "fast:base-9000-disk-0,size=3G");
    assert!(template["unused0"].is_null(), "{template}");
    assert_eq!(used(&api, "local-lvm").await, lvm_before, "the old base stays on its pool");
    assert_eq!(used(&api, "fast").await, 3 << 30);
}
