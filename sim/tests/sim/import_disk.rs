//! `qm disk import` / `qm importdisk` on a node over SSH: the VM gets the image as a
//! new volume, at `--target-disk` or as the next `unusedN`, visible through the API.

use crate::common;

use common::{Api, ssh_exec, start};

fn node_key(c: &cradle_sim::RunningCluster) -> russh::keys::PrivateKey {
    russh::keys::PrivateKey::from_openssh(std::fs::read_to_string(c.node_ssh_key_path()).unwrap()).unwrap()
}

async fn on(c: &cradle_sim::RunningCluster, node: &str, cmd: &str) -> common::Exec {
    ssh_exec(c.node_ssh_addr(node).unwrap(), "root", &node_key(c), cmd, b"").await.unwrap()
}

fn qcow2(virtual_size: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len.max(32)];
    b[..4].copy_from_slice(b"QFI\xfb");
    b[4..8].copy_from_slice(&3u32.to_be_bytes());
    b[24..32].copy_from_slice(&virtual_size.to_be_bytes());
    b
}

async fn create_vm(api: &Api, vmid: &str) {
    let form = [("vmid", vmid), ("name", "haos"), ("scsi0", "local-lvm:2")];
    let st = api.wait_task(api.post("/nodes/pve1/qemu", &form).await.as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qm_disk_import_adds_the_image_as_the_next_unused_disk_or_at_the_target_disk() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    create_vm(&api, "200").await;
    assert_eq!(c.node_path("pve1", "/var/tmp/haos.qcow2"), c.root().join("nodes/pve1/var/tmp/haos.qcow2"));
    std::fs::write(c.node_path("pve1", "/var/tmp/haos.qcow2"), qcow2(32 << 30, 8192)).unwrap();
    let before = api.get("/nodes/pve1/qemu/200/config").await["digest"].clone();

    let out = on(&c, "pve1", "sudo -n qm disk import 200 /var/tmp/haos.qcow2 local-lvm").await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "importing disk '/var/tmp/haos.qcow2' to VM 200 ...");
    assert_eq!(lines[1], "transferred 0.0 B of 32.0 GiB (0.00%)");
    assert!(lines.contains(&"transferred 32.0 GiB of 32.0 GiB (100.00%)"), "{}", out.stdout);
    assert_eq!(*lines.last().unwrap(), "unused0: successfully imported disk 'local-lvm:vm-200-disk-1'");
    let cfg = api.get("/nodes/pve1/qemu/200/config").await;
    assert_eq!(cfg["unused0"], "local-lvm:vm-200-disk-1");
    assert_ne!(cfg["digest"], before);

    // The alias, a raw image, a target disk: attached there, the next free number.
    std::fs::write(c.root().join("nodes/pve1/var/tmp/data.raw"), vec![0u8; 1 << 20]).unwrap();
    let out = on(&c, "pve1", "qm importdisk 200 /var/tmp/data.raw local-lvm --format qcow2 --target-disk scsi1").await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stderr, "format 'qcow2' is not supported by the target storage - using 'raw' instead\n");
    assert!(out.stdout.ends_with("scsi1: successfully imported disk 'local-lvm:vm-200-disk-2'\n"), "{out:?}");
    let cfg = api.get("/nodes/pve1/qemu/200/config").await;
    assert_eq!(cfg["scsi1"], "local-lvm:vm-200-disk-2");

    // The storage counts the imported volumes; content lists them with their sizes.
    let lvm = api.get("/nodes/pve1/storage/local-lvm/content").await;
    let vols: Vec<(String, u64)> = lvm
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["vmid"] == 200)
        .map(|v| (v["volid"].as_str().unwrap().to_string(), v["size"].as_u64().unwrap()))
        .collect();
    assert!(vols.contains(&("local-lvm:vm-200-disk-1".into(), 32 << 30)), "{vols:?}");
    assert!(vols.contains(&("local-lvm:vm-200-disk-2".into(), 1 << 20)), "{vols:?}");

    // A taken target key fails after the copy, as do_import's $create_drive does.
    let out = on(&c, "pve1", "qm disk import 200 /var/tmp/data.raw local-lvm --target-disk scsi0").await;
    assert_eq!(out.code, Some(255), "{out:?}");
    assert!(out.stdout.starts_with("importing disk '/var/tmp/data.raw' to VM 200 ...\n"), "{out:?}");
    assert_eq!(out.stderr, "cowardly refusing to overwrite existing entry: scsi0\n");
    let out = on(&c, "pve1", "qm disk import 200 /var/tmp/data.raw local-lvm").await;
    assert!(out.stdout.ends_with("unused1: successfully imported disk 'local-lvm:vm-200-disk-3'\n"), "{out:?}");

    // Start, stop and destroy still work with the imported disks.
    assert_eq!(api.run("/nodes/pve1/qemu/200/status/start", &[]).await, "OK");
    assert_eq!(api.run("/nodes/pve1/qemu/200/status/stop", &[]).await, "OK");
    let (s, b) = api.call("DELETE", "/nodes/pve1/qemu/200", &[]).await;
    assert_eq!(s, 200, "{b}");
    api.wait_task(b["data"].as_str().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qm_disk_import_fails_like_pve_for_other_nodes_locks_missing_sources_and_bad_storages() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    create_vm(&api, "200").await;
    std::fs::write(c.root().join("nodes/pve1/var/tmp/a.raw"), vec![1u8; 4096]).unwrap();
    let out = on(&c, "pve2", "qm disk import 200 /var/tmp/a.raw local-lvm").await;
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (Some(255), "Configuration file 'nodes/pve2/qemu-server/200.conf' does not exist\n")
    );
    let out = on(&c, "pve1", "qm disk import 200 /var/tmp/missing.raw local-lvm").await;
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (Some(255), "/var/tmp/missing.raw: non-existent or non-regular file\n")
    );
    let out = on(&c, "pve1", "qm disk import 200 /var/tmp/a.raw local").await;
    assert_eq!((out.code, out.stderr.as_str()), (Some(255), "storage local does not support vm images\n"));
    let out = on(&c, "pve1", "qm disk import 200 /var/tmp/a.raw nope").await;
    assert_eq!(out.stderr, "storage 'nope' does not exist\n");
    let out = on(&c, "pve1", "qm disk import 200 /var/tmp/a.raw").await;
    assert_eq!(out.stderr, "400 not enough arguments\nqm disk import <vmid> <source> <storage> [OPTIONS]\n");
    let out = on(&c, "pve1", "qm disk import 200 /var/tmp/a.raw local-lvm --target-disk bogus1").await;
    assert!(out.stderr.starts_with("400 Parameter verification failed.\ntarget-disk: "), "{out:?}");
    // Nothing was attached by the failures.
    let cfg = api.get("/nodes/pve1/qemu/200/config").await;
    assert!(cfg.get("unused0").is_none(), "{cfg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qm_disk_import_refuses_a_vm_locked_by_its_create_task() {
    let c = start(1.0, |_| {}).await;
    let api = Api::new(&c);
    std::fs::write(c.root().join("nodes/pve1/var/tmp/a.raw"), vec![1u8; 4096]).unwrap();
    let upid = api.post("/nodes/pve1/qemu", &[("vmid", "201"), ("scsi0", "local-lvm:1")]).await;
    let out = on(&c, "pve1", "qm disk import 201 /var/tmp/a.raw local-lvm").await;
    assert_eq!((out.code, out.stderr.as_str()), (Some(255), "VM is locked (create)\n"));
    api.wait_task(upid.as_str().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_pve_8_3_qm_importdisk_has_no_target_disk_and_prints_the_old_message() {
    let c = start(0.0, |cfg| cfg.pve_version = "8.2.4".into()).await;
    let api = Api::new(&c);
    create_vm(&api, "200").await;
    std::fs::write(c.root().join("nodes/pve1/var/tmp/a.raw"), vec![1u8; 4096]).unwrap();
    let out = on(&c, "pve1", "qm importdisk 200 /var/tmp/a.raw local-lvm").await;
    assert!(out.stdout.ends_with("Successfully imported disk as 'unused0:local-lvm:vm-200-disk-1'\n"), "{out:?}");
    let out = on(&c, "pve1", "qm importdisk 200 /var/tmp/a.raw local-lvm --target-disk scsi1").await;
    assert!(out.stderr.starts_with("Unknown option: target-disk\n400 unable to parse option\n"), "{out:?}");
}
