//! Creating VMs (`POST /nodes/{node}/qemu`) with new and imported disks, and storage
//! status and content as the node's filesystems and VM disks make them.

use crate::common;

use common::{Api, start};

/// A minimal qcow2 header: magic, version 3, no backing file, virtual size.
fn qcow2(virtual_size: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len.max(32)];
    b[..4].copy_from_slice(b"QFI\xfb");
    b[4..8].copy_from_slice(&3u32.to_be_bytes());
    b[24..32].copy_from_slice(&virtual_size.to_be_bytes());
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_created_with_an_imported_qcow2_gets_its_virtual_size_and_can_be_resized_started_and_destroyed() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    std::fs::write(c.root().join("nodes/pve1/var/lib/vz/import/haos.qcow2"), qcow2(32 << 30, 4096)).unwrap();
    let form = [
        ("vmid", "200"),
        ("name", "haos"),
        ("memory", "4096"),
        ("cores", "2"),
        ("bios", "ovmf"),
        ("machine", "q35"),
        ("efidisk0", "local-lvm:1,efitype=4m,pre-enrolled-keys=0"),
        ("scsi0", "local-lvm:0,import-from=local:import/haos.qcow2,discard=on"),
        ("net0", "virtio,bridge=vmbr0"),
        ("agent", "1"),
    ];
    let upid = api.post("/nodes/pve1/qemu", &form).await;
    let upid = upid.as_str().unwrap();
    assert!(upid.contains(":qmcreate:200:"), "{upid}");
    let st = api.wait_task(upid).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let cfg = api.get("/nodes/pve1/qemu/200/config").await;
    assert_eq!(cfg["efidisk0"], "local-lvm:vm-200-disk-0,efitype=4m,pre-enrolled-keys=0,size=4M");
    assert_eq!(cfg["scsi0"], "local-lvm:vm-200-disk-1,discard=on,size=32G");
    assert_eq!(cfg["boot"], "order=scsi0;net0");
    assert!(cfg["net0"].as_str().unwrap().starts_with("virtio=BC:24:11:"), "{cfg}");
    assert!(cfg.get("lock").is_none() && cfg["smbios1"].as_str().unwrap().starts_with("uuid="));
    let listed = api.get("/nodes/pve1/qemu").await;
    assert!(listed.as_array().unwrap().iter().any(|v| v["vmid"] == 200 && v["name"] == "haos"));
    let res = api.get("/cluster/resources").await;
    assert!(res.as_array().unwrap().iter().any(|v| v["id"] == "qemu/200"));
    // lvmthin reports its configured size minus the VM disks on it.
    let lvm = api.get("/nodes/pve1/storage/local-lvm/status").await;
    assert_eq!(lvm["total"], 100u64 << 30);
    assert_eq!(lvm["used"], (32u64 << 30) + (4 << 20) + (3 << 30), "template 9000's 3G base disk too");
    let (s, _) = api.call("PUT", "/nodes/pve1/qemu/200/resize", &[("disk", "scsi0"), ("size", "+8G")]).await;
    assert_eq!(s, 200);
    assert_eq!(api.run("/nodes/pve1/qemu/200/status/start", &[]).await, "OK");
    assert_eq!(api.run("/nodes/pve1/qemu/200/status/stop", &[]).await, "OK");
    let cfg = api.get("/nodes/pve1/qemu/200/config").await;
    assert_eq!(cfg["scsi0"], "local-lvm:vm-200-disk-1,discard=on,size=40G");
    let (s, b) = api.call("DELETE", "/nodes/pve1/qemu/200", &[]).await;
    assert_eq!(s, 200, "{b}");
    api.wait_task(b["data"].as_str().unwrap()).await;
    let (s, _) = api.call("GET", "/nodes/pve1/qemu/200/config", &[]).await;
    assert_eq!(s, 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_fails_like_pve_for_taken_ids_missing_sources_absolute_paths_and_bad_syntax() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    let (s, b) = api.call("POST", "/nodes/pve1/qemu", &[("vmid", "9000"), ("memory", "512")]).await;
    assert_eq!(
        (s, b["message"].as_str()),
        (500, Some("unable to create VM 9000 - VM 9000 already exists on node 'pve1'\n"))
    );
    let (s, b) = api
        .call("POST", "/nodes/pve1/qemu", &[("vmid", "201"), ("scsi0", "local-lvm:0,import-from=/var/tmp/x.qcow2")])
        .await;
    assert_eq!(s, 500);
    assert!(b["message"].as_str().unwrap().starts_with("Only root can pass arbitrary filesystem paths."), "{b}");
    let (s, b) = api
        .call("POST", "/nodes/pve1/qemu", &[("vmid", "201"), ("scsi0", "local-lvm:4,import-from=local:import/a.qcow2")])
        .await;
    assert_eq!(s, 400);
    assert!(b["errors"]["scsi0"].as_str().unwrap().contains("requires special syntax"), "{b}");
    let (s, b) = api.call("POST", "/nodes/pve1/qemu", &[("vmid", "201"), ("scsi0", "local:8")]).await;
    assert_eq!((s, b["errors"]["storage"].as_str()), (400, Some("storage 'local' does not support vm images")));
    let (s, b) = api.call("POST", "/nodes/pve1/qemu", &[("vmid", "201"), ("ide2", "local:iso/win.iso")]).await;
    assert_eq!((s, b["errors"]["ide2"].as_str()), (400, Some("explicit 'media=cdrom' is required for iso images")));
    // The source must exist on THAT node: the task fails and the VM is gone.
    std::fs::write(c.root().join("nodes/pve2/var/lib/vz/import/only-on-pve2.raw"), vec![0u8; 4096]).unwrap();
    let upid = api
        .post(
            "/nodes/pve1/qemu",
            &[("vmid", "201"), ("scsi0", "local-lvm:0,import-from=local:import/only-on-pve2.raw")],
        )
        .await;
    let st = api.wait_task(upid.as_str().unwrap()).await;
    let err = st["exitstatus"].as_str().unwrap();
    assert!(
        err.starts_with("unable to create VM 201 - failed to stat '")
            && err.ends_with("/var/lib/vz/import/only-on-pve2.raw'"),
        "{err}"
    );
    let (s, _) = api.call("GET", "/nodes/pve1/qemu/201/config", &[]).await;
    assert_eq!(s, 500, "a failed create leaves no VM");
    // On pve2 it works; a raw image's size is its length.
    let upid = api
        .post(
            "/nodes/pve2/qemu",
            &[
                ("vmid", "201"),
                ("sata0", "local-lvm:0,import-from=local:import/only-on-pve2.raw"),
                ("ide2", "local-lvm:cloudinit"),
            ],
        )
        .await;
    assert_eq!(api.wait_task(upid.as_str().unwrap()).await["exitstatus"], "OK");
    let cfg = api.get("/nodes/pve2/qemu/201/config").await;
    assert_eq!(cfg["sata0"], "local-lvm:vm-201-disk-0,size=4K");
    assert_eq!(cfg["ide2"], "local-lvm:vm-201-cloudinit,media=cdrom");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_content_lists_import_images_and_dir_status_is_the_root_filesystem() {
    let c = start(0.0, |cfg| cfg.node_disk.root_bytes = 1 << 30).await;
    let api = Api::new(&c);
    let import = c.root().join("nodes/pve1/var/lib/vz/import");
    std::fs::write(import.join("haos.qcow2"), qcow2(1 << 30, 1 << 20)).unwrap();
    std::fs::write(import.join("notes.txt"), b"x").unwrap();
    let items = api.get("/nodes/pve1/storage/local/content?content=import").await;
    let items = items.as_array().unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["volid"], "local:import/haos.qcow2");
    assert_eq!(items[0]["format"], "qcow2");
    assert_eq!(items[0]["content"], "import");
    assert_eq!(items[0]["size"], 1 << 20);
    let st = api.get("/nodes/pve1/storage/local/status").await;
    assert_eq!(st["total"], 1u64 << 30);
    let used = st["used"].as_u64().unwrap();
    assert!(used > 1 << 20 && used < (1 << 20) + 4096, "{st}");
    assert_eq!(st["avail"].as_u64().unwrap(), (1 << 30) - used);
    let local = api.get("/storage/local").await;
    assert!(local["content"].as_str().unwrap().split(',').any(|c| c == "import"), "PVE 9's installer enables import");
    let v = api.get("/version").await;
    assert_eq!((v["version"].as_str(), v["release"].as_str()), (Some("9.0.3"), Some("9.0")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_content_lists_container_templates_with_their_compression_as_format() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    let cache = c.root().join("nodes/pve1/var/lib/vz/template/cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::write(cache.join("debian-12-standard_12.7-1_amd64.tar.zst"), b"rootfs").unwrap();
    std::fs::write(cache.join("alpine.tar"), b"rootfs").unwrap();
    std::fs::write(cache.join("notes.txt"), b"x").unwrap();
    let items = api.get("/nodes/pve1/storage/local/content?content=vztmpl").await;
    let got: Vec<(String, String)> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["volid"].as_str().unwrap().to_string(), i["format"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(
        got,
        [
            ("local:vztmpl/alpine.tar".to_string(), "tar".to_string()),
            ("local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst".into(), "tzst".into())
        ]
    );
}
