//! What a config update does to a RUNNING VM, as qemu-server e6352be67f70042a7433a3a3c712b36d02f9f7cb
//! decides it: `update_vm_api` (src/PVE/API2/Qemu.pm) writes every change to
//! `[PENDING]`, then `vmconfig_hotplug_pending` (src/PVE/QemuServer.pm:4617) moves into
//! the config what the `hotplug` features allow; the rest waits for a cold start.
//! Each test cites the lines it was written from.

use crate::common;

use common::{Api, start};
use serde_json::Value;

/// A linked clone of the seeded template (101: `cores: 2`, `memory: 2048`, `net0:
/// virtio=..,bridge=vmbr0`, `scsi0`, `ide2` cloud-init) with `extra` set while it is
/// stopped, then started.
async fn running(api: &Api, extra: &[(&str, &str)]) {
    assert_eq!(api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("name", "t")]).await, "OK");
    if !extra.is_empty() {
        let (s, b) = api.call("PUT", "/nodes/pve1/qemu/101/config", extra).await;
        assert_eq!(s, 200, "{b}");
    }
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/start", &[]).await, "OK");
}

/// `PUT config` must answer 200.
async fn put(api: &Api, form: &[(&str, &str)]) {
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/101/config", form).await;
    assert_eq!(s, 200, "PUT config {form:?}: {b}");
}

/// The config as it is now (`current=1`).
async fn current(api: &Api) -> Value {
    api.get("/nodes/pve1/qemu/101/config?current=1").await
}

/// The `GET pending` entry of `key`.
async fn pending_of(api: &Api, key: &str) -> Value {
    let all = api.get("/nodes/pve1/qemu/101/pending").await;
    all.as_array().expect("a list").iter().find(|e| e["key"] == key).cloned().unwrap_or(Value::Null)
}

/// Whether `key` has a pending value or delete.
async fn is_pending(api: &Api, key: &str) -> bool {
    let e = pending_of(api, key).await;
    e.get("pending").is_some() || e.get("delete").is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_on_a_running_vm_stays_pending_without_the_memory_hotplug_feature() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    running(&api, &[]).await;
    // QemuServer.pm:4876-4877: `die "skip\n" if !$hotplug_features->{memory};` and the
    // default `network,disk,usb` (:253-262) has no memory.
    put(&api, &[("memory", "4096")]).await;
    assert_eq!(current(&api).await["memory"], "2048");
    assert_eq!(pending_of(&api, "memory").await["pending"], "4096");
    // GET config (current=0) shows the effective value, pending applied.
    assert_eq!(api.get("/nodes/pve1/qemu/101/config").await["memory"], "4096");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_hotplugs_with_the_memory_feature_and_numa() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    running(&api, &[("hotplug", "network,disk,memory"), ("numa", "1")]).await;
    // QemuServer.pm:4876-4878 with the feature: `qemu_memory_hotplug`
    // (src/PVE/QemuServer/Memory.pm:201-305) plugs 512 MiB DIMMs on top of the static
    // 1024 MiB up to the first size >= the request: 3000 ends as 3072.
    put(&api, &[("memory", "3000")]).await;
    assert_eq!(current(&api).await["memory"], "3072");
    assert!(!is_pending(&api, "memory").await);
    // Memory.pm:219: below the static memory the hotplug dies; PVE keeps the value
    // pending and raises it as a parameter error after the pending write (Qemu.pm:2588,
    // `hotplug problem - ` from QemuServer.pm:4630).
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/101/config", &[("memory", "512")]).await;
    assert_eq!(s, 400, "{b}");
    assert_eq!(
        b["errors"]["memory"],
        "hotplug problem - memory can't be lower than 1024 MB at /usr/share/perl5/PVE/QemuServer/Memory.pm line 219."
    );
    assert_eq!(pending_of(&api, "memory").await["pending"], "512");
    assert_eq!(current(&api).await["memory"], "3072");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_hotplug_without_numa_refuses_to_start_as_memory_pm_does() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    assert_eq!(api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("name", "t")]).await, "OK");
    put(&api, &[("hotplug", "memory")]).await;
    // Memory.pm:364: `die "NUMA needs to be enabled for memory hotplug\n" if !$conf->{numa};`
    // when the QEMU command line is built at start.
    let exit = api.run("/nodes/pve1/qemu/101/status/start", &[]).await;
    assert_eq!(exit, "NUMA needs to be enabled for memory hotplug");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vlan_tag_change_applies_live_even_with_hotplug_0() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    running(&api, &[("hotplug", "0")]).await;
    let net0 = current(&api).await["net0"].as_str().expect("net0").to_string();
    // QemuServer.pm:5123-5190 (`vmconfig_update_net`): bridge, tag, trunks, firewall,
    // rate and link_down are changed on the tap device, without the network feature.
    let tagged = format!("{net0},tag=20,firewall=1");
    put(&api, &[("net0", &tagged)]).await;
    assert_eq!(current(&api).await["net0"], tagged.as_str());
    assert!(!is_pending(&api, "net0").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nic_model_change_needs_the_network_feature() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    running(&api, &[("hotplug", "disk")]).await;
    let net0 = current(&api).await["net0"].as_str().expect("net0").to_string();
    let mac = net0.split(['=', ',']).nth(1).expect("mac").to_string();
    // QemuServer.pm:5113-5122: a model (or MAC, queues, mtu) change unplugs the NIC,
    // `die "skip\n" if !$hotplug;` without the feature: pending.
    let e1000 = format!("e1000={mac},bridge=vmbr0");
    put(&api, &[("net0", &e1000)]).await;
    assert_eq!(current(&api).await["net0"], net0.as_str());
    assert_eq!(pending_of(&api, "net0").await["pending"], e1000.as_str());
    // QemuServer.pm:4766-4767: deleting a NIC needs the feature too; a new NIC as well
    // (:5194-5204).
    put(&api, &[("delete", "net0")]).await;
    assert_eq!(pending_of(&api, "net0").await["delete"], 1);
    put(&api, &[("net1", "virtio,bridge=vmbr0")]).await;
    assert!(current(&api).await.get("net1").is_none());
    // With the feature (the default), the same model change is an unplug + plug: live.
    put(&api, &[("revert", "net0")]).await;
    put(&api, &[("hotplug", "network,disk,usb")]).await;
    assert_eq!(current(&api).await["hotplug"], "network,disk,usb", "hotplug without cpu/memory applies");
    put(&api, &[("net0", &e1000)]).await;
    assert_eq!(current(&api).await["net0"], e1000.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_disk_delete_with_disk_hotplug_becomes_unused0_and_keeps_the_volume() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    running(&api, &[("scsi1", "local-lvm:4")]).await;
    let scsi1 = current(&api).await["scsi1"].as_str().expect("scsi1").to_string();
    let volid = scsi1.split(',').next().expect("volid").to_string();
    // QemuServer.pm:4775-4779: with the disk feature a drive (not efidisk/ide/sata/
    // tpmstate) is unplugged and `vmconfig_delete_or_detach_drive` without force
    // registers its volume (`vmconfig_register_unused_drive`, :1583-1603).
    put(&api, &[("delete", "scsi1")]).await;
    let cfg = current(&api).await;
    assert!(cfg.get("scsi1").is_none(), "{cfg}");
    assert_eq!(cfg["unused0"], volid.as_str(), "the data is kept: {cfg}");
    assert!(!is_pending(&api, "scsi1").await);
    // A new data disk is plugged at once (QemuServer.pm:5334-5338).
    put(&api, &[("scsi2", "local-lvm:2")]).await;
    assert!(current(&api).await.get("scsi2").is_some());
    // Deleting the unused volume frees it (Qemu.pm:2312-2324, `try_deallocate_drive`).
    put(&api, &[("delete", "unused0")]).await;
    assert!(current(&api).await.get("unused0").is_none());
    // Without the disk feature the delete waits for a cold start.
    put(&api, &[("hotplug", "network")]).await;
    put(&api, &[("delete", "scsi2")]).await;
    assert_eq!(pending_of(&api, "scsi2").await["delete"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ide2_delete_stays_pending_even_with_disk_hotplug() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    running(&api, &[]).await;
    // QemuServer.pm:4776-4777: `die "skip\n" if ... $opt =~ m/(efidisk|ide|sata|tpmstate)(\d+)/;`
    put(&api, &[("delete", "ide2")]).await;
    assert_eq!(pending_of(&api, "ide2").await["delete"], 1);
    assert!(current(&api).await.get("ide2").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cores_stay_pending_until_a_cold_start_and_the_api_reboot_applies_them() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    running(&api, &[]).await;
    // QemuServer.pm:4888-4889: `cores`, `sockets`, `cpu` are not hot-pluggable (`die "skip\n"`).
    put(&api, &[("cores", "4"), ("sockets", "2")]).await;
    assert_eq!(current(&api).await["cores"], 2);
    assert_eq!(pending_of(&api, "cores").await["pending"], 4);
    assert_eq!(pending_of(&api, "sockets").await["pending"], 2);
    // The API reboot is a shutdown + start; the start applies `[PENDING]`
    // (`vmconfig_apply_pending`, QemuServer.pm:4985).
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/reboot", &[]).await, "OK");
    let cfg = current(&api).await;
    assert_eq!((cfg["cores"].clone(), cfg["sockets"].clone()), (4.into(), 2.into()), "{cfg}");
    assert!(!is_pending(&api, "cores").await);
    // `vcpus` only with the cpu feature (:4755-4757, :4829-4831).
    put(&api, &[("vcpus", "4")]).await;
    assert_eq!(pending_of(&api, "vcpus").await["pending"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_and_onboot_apply_at_once_on_a_running_vm() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    running(&api, &[("hotplug", "0")]).await;
    // QemuServer.pm:4594-4611 `$fast_plug_option` (and every cloud-init option), moved
    // to the config first whatever `hotplug` says (:4699-4711).
    put(&api, &[("tags", "Web;db"), ("onboot", "1"), ("startup", "order=3"), ("ciuser", "ops"), ("cores", "3")]).await;
    let cfg = current(&api).await;
    assert_eq!(cfg["tags"], "db;web");
    assert_eq!(cfg["onboot"], 1);
    assert_eq!(cfg["startup"], "order=3");
    assert_eq!(cfg["ciuser"], "ops");
    assert_eq!(cfg["cores"], 2, "cores wait for a cold start");
    // A `tags` delete goes straight to the config (Qemu.pm:2375-2378).
    put(&api, &[("delete", "tags")]).await;
    assert!(current(&api).await.get("tags").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hotplug_error_in_a_post_fails_the_qmconfig_task_after_the_pending_write() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    running(&api, &[("hotplug", "cpu")]).await;
    // QemuServer.pm:4309-4323 `qemu_cpu_hotplug`: more vcpus than sockets * cores.
    // pve-common f665029 src/PVE/Exception.pm:98-116 stringifies the parameter
    // exception; RESTEnvironment.pm:655-658 joins its lines for `TASK ERROR:`.
    let upid = api.post("/nodes/pve1/qemu/101/config", &[("vcpus", "8")]).await;
    let st = api.wait_task(upid.as_str().expect("a UPID")).await;
    assert_eq!(
        st["exitstatus"],
        "400 Parameter verification failed. vcpus: hotplug problem - you can't add more vcpus than maxcpus"
    );
    assert_eq!(pending_of(&api, "vcpus").await["pending"], 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_vm_takes_every_change_into_its_config_and_a_replaced_disk_becomes_unused() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    assert_eq!(api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("name", "t")]).await, "OK");
    put(&api, &[("scsi1", "local-lvm:4")]).await;
    let old = current(&api).await["scsi1"].as_str().expect("scsi1").split(',').next().expect("volid").to_string();
    // QemuServer.pm:4985-5100 `vmconfig_apply_pending`: nothing stays pending; a drive
    // given another volume registers the old one unused (:5033-5036), and an option
    // change on the same volume leaves no `unusedN` (`write_vm_config`, :2145-2150).
    put(&api, &[("cores", "4"), ("memory", "4096"), ("scsi1", &format!("{old},cache=writeback,size=4G"))]).await;
    let cfg = current(&api).await;
    assert_eq!((cfg["cores"].clone(), cfg["memory"].clone()), (4.into(), "4096".into()));
    assert!(cfg.get("unused0").is_none(), "{cfg}");
    put(&api, &[("scsi1", "local-lvm:vm-101-disk-7,size=1G")]).await;
    assert_eq!(current(&api).await["unused0"], old.as_str());
    assert!(
        api.get("/nodes/pve1/qemu/101/pending")
            .await
            .as_array()
            .expect("list")
            .iter()
            .all(|e| e.get("pending").is_none() && e.get("delete").is_none())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_with_a_stale_digest_fails_the_task_with_pves_message() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    running(&api, &[]).await;
    let before = api.get("/nodes/pve1/qemu/101/config").await["digest"].as_str().expect("digest").to_string();
    // A pending write changes the file, so its digest (QemuServer.pm:1946,
    // `sha1_hex($raw)` over the whole file, `[PENDING]` included).
    put(&api, &[("cores", "4")]).await;
    let after = api.get("/nodes/pve1/qemu/101/config").await["digest"].as_str().expect("digest").to_string();
    assert_ne!(before, after);
    // Qemu.pm:6006-6007, inside the resize worker.
    let upid = api
        .call("PUT", "/nodes/pve1/qemu/101/resize", &[("disk", "scsi0"), ("size", "+1G"), ("digest", &before)])
        .await
        .1["data"]
        .clone();
    let st = api.wait_task(upid.as_str().expect("a UPID")).await;
    assert_eq!(st["exitstatus"], "checksum mismatch (file change by other user?)");
    // Qemu.pm:6050: `return if $size == $newsize;` — an OK task that writes nothing.
    let size = current(&api).await["scsi0"].as_str().expect("scsi0").split("size=").nth(1).expect("size").to_string();
    let upid = api
        .call("PUT", "/nodes/pve1/qemu/101/resize", &[("disk", "scsi0"), ("size", &size), ("digest", &after)])
        .await
        .1["data"]
        .clone();
    assert_eq!(api.wait_task(upid.as_str().expect("a UPID")).await["exitstatus"], "OK");
    assert_eq!(api.get("/nodes/pve1/qemu/101/config").await["digest"], after.as_str(), "nothing written");
    // Qemu.pm:5962 (`\+?\d+(\.\d+)?[KMGT]?`) and :6036-6048: no unit is bytes, so an
    // absolute `1` is a shrink.
    let upid =
        api.call("PUT", "/nodes/pve1/qemu/101/resize", &[("disk", "scsi0"), ("size", "1")]).await.1["data"].clone();
    assert_eq!(api.wait_task(upid.as_str().expect("a UPID")).await["exitstatus"], "shrinking disks is not supported");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_device_leaves_the_boot_order_through_pending() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    running(&api, &[("scsi1", "local-lvm:4"), ("boot", "order=scsi0;scsi1;net0")]).await;
    // Qemu.pm:2265-2270 reads the order from the config; :2304-2309 drops a
    // deleted device from it and writes `boot` to [PENDING] (`print_bootorder`,
    // QemuServer.pm:1036), which a running VM does not hotplug (`boot` is no
    // fast-plug option, QemuServer.pm:4594-4606).
    put(&api, &[("delete", "scsi1")]).await;
    assert_eq!(pending_of(&api, "boot").await["pending"], "order=scsi0;net0");
    assert_eq!(current(&api).await["boot"], "order=scsi0;scsi1;net0", "the running VM keeps its order");
    // The effective config (`current=0`) shows the new order.
    assert_eq!(api.get("/nodes/pve1/qemu/101/config").await["boot"], "order=scsi0;net0");
}
