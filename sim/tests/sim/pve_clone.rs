//! The clone's target while the clone task runs, as qemu-server writes it
//! (qemu-server e6352be67f70042a7433a3a3c712b36d02f9f7cb, src/PVE/API2/Qemu.pm
//! `clone_vm`): a temporary config with no name and no disks first, the name
//! and each cloned drive after that drive, the lock deleted at the end.

use std::time::Duration;

use crate::common;

use common::{Api, start};
use serde_json::Value;

/// `cluster/resources`' entry of `vmid`.
async fn resource(api: &Api, vmid: u64) -> Value {
    let all = api.get("/cluster/resources?type=vm").await;
    all.as_array().expect("list").iter().find(|r| r["vmid"] == vmid).cloned().unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_clone_copies_its_first_drive_the_target_is_the_temporary_config_without_a_name() {
    // The clone runs for two hours: it is still on its first drive throughout.
    let c = start(1.0, |cfg| cfg.timings.clone = Duration::from_secs(7200)).await;
    let api = Api::new(&c);
    let upid = api.post("/nodes/pve1/qemu/9000/clone", &[("newid", "150"), ("name", "web-1"), ("full", "1")]).await;

    // Qemu.pm:4615: `file_set_contents($conffile, "# qmclone temporary file\nlock: clone\n")`;
    // src/PVE/QemuServer.pm:2022-2024 reads a `#` line as the description (trailing
    // whitespace trimmed, :1971).
    let mut config = api.get("/nodes/pve1/qemu/150/config").await;
    assert!(config["digest"].is_string(), "{config}");
    config.as_object_mut().expect("object").remove("digest");
    assert_eq!(config, serde_json::json!({ "description": " qmclone temporary file", "lock": "clone" }));

    // pve-manager 14a22df, PVE/API2Tools.pm:98 takes the name from pvestatd's
    // status, which is `$conf->{name} || "VM $vmid"` (QemuServer.pm:2574); the
    // lock comes from the config (PVE/API2/Cluster.pm:554-593). The config is on
    // the node the clone runs on (Qemu.pm:4501).
    let entry = resource(&api, 150).await;
    assert_eq!((&entry["name"], &entry["lock"], &entry["node"]), (&"VM 150".into(), &"clone".into(), &"pve1".into()));

    // Qemu.pm:4749: the task is the SOURCE's (`fork_worker('qmclone', $vmid, ...)`).
    let id = upid.as_str().expect("UPID").split(':').nth(6).expect("id");
    assert_eq!(id, "9000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_clone_has_the_name_every_cloned_drive_and_no_lock() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    assert_eq!(
        api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "150"), ("name", "web-1"), ("full", "1")]).await,
        "OK"
    );
    let config = api.get("/nodes/pve1/qemu/150/config").await;
    // Qemu.pm:4674-4689: every drive cloned into the new config, then the lock deleted.
    assert_eq!(config["name"], "web-1");
    assert_eq!(config["scsi0"], "local-lvm:vm-150-disk-0,size=3G");
    assert_eq!(config["ide2"], "local-lvm:vm-150-cloudinit,media=cdrom");
    assert!(config.get("lock").is_none() && config.get("template").is_none(), "{config}");
    assert!(config.get("description").is_none(), "the temporary file's comment is gone: {config}");
    assert_eq!(resource(&api, 150).await["name"], "web-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulator_stopped_mid_clone_finishes_it_at_load_with_the_config_the_worker_would_have_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = dir.path().to_path_buf();
    let c = start(1.0, move |cfg| {
        cfg.state_dir = Some(s);
        cfg.timings.clone = Duration::from_secs(7200);
    })
    .await;
    let api = Api::new(&c);
    api.post("/nodes/pve1/qemu/9000/clone", &[("newid", "150"), ("name", "web-1"), ("full", "1")]).await;
    assert_eq!(api.get("/nodes/pve1/qemu/150/config").await["lock"], "clone");
    c.shutdown().await;

    // On PVE the worker does not die with its client: it writes the last config
    // and deletes the lock (Qemu.pm:4680-4689); the restarted simulator does so.
    let s = dir.path().to_path_buf();
    let c = start(0.0, move |cfg| cfg.state_dir = Some(s)).await;
    let api = Api::new(&c);
    let config = api.get("/nodes/pve1/qemu/150/config").await;
    assert_eq!(config["name"], "web-1", "{config}");
    assert_eq!(config["scsi0"], "local-lvm:vm-150-disk-0,size=3G");
    assert!(config.get("lock").is_none(), "{config}");
}
