//! Every `wit/proxmox.wit` function, called as a plugin's call arrives (the host
//! adapter: grant check, journal, client), against the simulator recording what it
//! was sent: each request must conform to PVE 9.1's API schema
//! (`cradle_sim::conformance`), and together they must reach every endpoint the
//! functions are documented to use.

use std::collections::BTreeSet;
use std::sync::Arc;

use cradle_sim::conformance::{Schema, record};

use crate::caps::Grants;
use crate::caps::context::{CapCtx, Services};
use crate::caps::policy::{RunScope, ScopedVm};
use crate::contract::bindings::cradle::host::proxmox::{CloneRequest, HaRule, Host, PowerAction};
use crate::contract::bindings::cradle::host::types::Entry;

fn entries(kv: &[(&str, &str)]) -> Vec<Entry> {
    kv.iter().map(|(k, v)| Entry { key: (*k).into(), value: (*v).into() }).collect()
}

const CT_TEMPLATE: &str = "debian-12-standard_12.7-1_amd64.tar.zst";

#[test]
fn every_proxmox_wit_function_sends_requests_that_conform_to_the_pve_schema() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("recordings");
    let (cluster, client) = super::held_tests::sim_with_client(&rt, |cfg| {
        cfg.record_dir = Some(rec.clone());
        // Two more images storages: `fast` granted, `slow` not (move-disk's target).
        for id in ["fast", "slow"] {
            cfg.storages.push(cradle_sim::StorageSpec {
                id: id.into(),
                kind: "lvmthin".into(),
                content: "images,rootdir".into(),
                path: None,
                shared: false,
                size_bytes: None,
            });
        }
    });
    std::fs::write(cluster.node_path("pve1", &format!("/var/lib/vz/template/cache/{CT_TEMPLATE}")), b"tar")
        .expect("plant the container template");
    let grants: Grants = toml::from_str(
        "[proxmox]\nnodes = [\"pve1\", \"pve2\"]\nvmids = \"100-999\"\nstorages = [\"local\", \"local-lvm\", \"fast\"]\n\
         templates = [\"debian-12-cloud\"]\ndestructive = true\n",
    )
    .expect("grants");
    let services = Services { proxmox: Some(Arc::new(client)), ..Services::for_tests(dir.path(), &rt) };
    // VM 321 is the run's (its snippets are `wit-0-*`).
    let vm = ScopedVm { name: "wit-0".into(), vmid: 321, ssh: None, owned: true, allow_replacement: false };
    let scope = RunScope { vms: vec![vm], operator: true, ..RunScope::default() };
    let mut c = CapCtx::for_tests(grants, scope, services, "wit-conformance");
    let n = || "pve1".to_string();
    let wait = |c: &mut CapCtx, upid: String| {
        let st = c.wait_task(n(), upid, 60_000).expect("wait-task");
        assert!(st.ok, "{st:?}");
    };

    // Discovery and reads.
    c.pve_version().expect("pve-version");
    let template = c.list_vms().expect("list-vms").into_iter().find(|v| v.template).expect("a template");
    let id = c.next_id(None).expect("next-id");
    c.next_id(Some(id)).expect("next-id with a hint");
    c.storage_info("local".into()).expect("storage-info");
    c.storage_status(n(), "local".into()).expect("storage-status");
    c.storage_content(n(), "local".into(), Some("vztmpl".into())).expect("storage-content");
    c.storage_content(n(), "local-lvm".into(), None).expect("storage-content without a type");

    // A VM's life.
    let req = CloneRequest {
        node: template.node.clone(),
        template_vmid: template.vmid,
        newid: 321,
        name: "wit-0".into(),
        // Full: PVE refuses to migrate a linked clone on local storage.
        full: true,
        storage: None,
        target: None,
        description: Some("made by the conformance test".into()),
    };
    let upid = c.clone_vm(req).expect("clone-vm");
    c.list_tasks(n(), Some(template.vmid), Some("qmclone".into())).expect("list-tasks");
    c.list_tasks(n(), None, None).expect("list-tasks unfiltered");
    wait(&mut c, upid.clone());
    c.task_log(n(), upid).expect("task-log");
    let digest = c.get_config(n(), 321).expect("get-config").into_iter().find(|e| e.key == "digest").map(|e| e.value);
    let set = entries(&[
        ("cores", "2"),
        ("memory", "2048"),
        ("net0", "virtio,bridge=vmbr0,tag=20"),
        ("ipconfig0", "ip=127.0.90.5/24,gw=127.0.90.1"),
        ("cicustom", "user=local:snippets/wit-0-user.yaml"),
        ("startup", "order=2,up=30"),
        ("tags", "cradle;web"),
    ]);
    c.set_config(n(), 321, set, vec![], digest).expect("set-config");
    c.set_config(n(), 321, vec![], vec!["cicustom".into()], None).expect("set-config delete");
    c.get_pending(n(), 321).expect("get-pending");
    let upid = c.resize_disk(n(), 321, "scsi0".into(), "+1G".into()).expect("resize-disk");
    wait(&mut c, upid);
    let upid = c.migrate(n(), 321, "pve2".into(), false, true).expect("migrate");
    wait(&mut c, upid);
    let back = c.migrate("pve2".into(), 321, n(), false, true).expect("migrate back");
    c.wait_task("pve2".into(), back, 60_000).expect("wait-task on pve2");
    // A move to an ungranted storage is denied before any request; to a
    // granted one it is PVE's `qmmove` task.
    let denied = c.move_disk(n(), 321, "scsi0".into(), "slow".into(), None).expect_err("slow is not granted");
    assert!(
        matches!(&denied, crate::contract::bindings::cradle::host::types::Error::Denied(m) if m.contains("slow")),
        "{denied:?}"
    );
    let digest = c.get_config(n(), 321).expect("get-config").into_iter().find(|e| e.key == "digest").map(|e| e.value);
    let upid = c.move_disk(n(), 321, "scsi0".into(), "fast".into(), digest).expect("move-disk");
    wait(&mut c, upid);
    let upid = c.power(n(), 321, PowerAction::Start).expect("power start");
    wait(&mut c, upid);
    c.vm_status(n(), 321).expect("vm-status");
    let _ = c.agent_ping(n(), 321); // the guest may still be booting: only the request matters
    let upid = c.power(n(), 321, PowerAction::Stop).expect("power stop");
    wait(&mut c, upid);

    // HA.
    c.add_ha_resource(321, Some("stopped".into()), Some("cradle".into())).expect("add-ha-resource");
    c.list_ha_resources().expect("list-ha-resources");
    let rule = HaRule {
        rule: "cradle-wit".into(),
        kind: "node-affinity".into(),
        resources: "vm:321".into(),
        nodes: Some("pve1:2,pve2".into()),
        strict: false,
        digest: None,
    };
    c.put_ha_rule(rule).expect("put-ha-rule");
    c.list_ha_rules().expect("list-ha-rules");
    c.remove_ha_resource(321).expect("remove-ha-resource");
    let upid = c.destroy(n(), 321, true).expect("destroy");
    wait(&mut c, upid);

    // A VM from scratch, and a container's life.
    let vm =
        entries(&[("name", "wit-1"), ("scsi0", "local-lvm:4"), ("net0", "virtio,bridge=vmbr0"), ("ostype", "l26")]);
    let upid = c.create_vm(n(), 322, vm).expect("create-vm");
    wait(&mut c, upid);
    let upid = c.destroy(n(), 322, false).expect("destroy the created VM");
    wait(&mut c, upid);
    let ct = entries(&[
        ("ostemplate", &format!("local:vztmpl/{CT_TEMPLATE}")),
        ("hostname", "wit-ct"),
        ("rootfs", "local-lvm:8"),
        ("net0", "name=eth0,bridge=vmbr0,ip=127.0.91.5/24,gw=127.0.91.1"),
        ("unprivileged", "1"),
    ]);
    let upid = c.create_container(n(), 323, ct).expect("create-container");
    wait(&mut c, upid);
    c.get_container_config(n(), 323).expect("get-container-config");
    c.set_container_config(n(), 323, entries(&[("memory", "1024")]), vec![], None).expect("set-container-config");
    let upid = c.container_power(n(), 323, PowerAction::Start).expect("container-power start");
    wait(&mut c, upid);
    c.container_status(n(), 323).expect("container-status");
    let upid = c.container_power(n(), 323, PowerAction::Stop).expect("container-power stop");
    wait(&mut c, upid);
    let upid = c.destroy_container(n(), 323, true).expect("destroy-container");
    wait(&mut c, upid);
    drop(c);
    rt.block_on(cluster.shutdown());

    let schema = Schema::pve();
    let found = record::check_dir(schema, &rec).expect("recordings");
    let list: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert!(list.is_empty(), "requests of the proxmox.wit functions that PVE 9.1 would refuse:\n{}", list.join("\n"));

    // Every endpoint the functions document was reached (the recording saw them).
    let mut reached = BTreeSet::new();
    for entry in std::fs::read_dir(&rec).unwrap() {
        for line in std::fs::read_to_string(entry.unwrap().path()).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let path = v["path"].as_str().unwrap();
            let t = schema.template_of(path).unwrap_or(path);
            reached.insert(format!("{} {t}", v["method"].as_str().unwrap()));
        }
    }
    for want in [
        "GET /version",
        "GET /cluster/resources",
        "GET /cluster/nextid",
        "POST /nodes/{node}/qemu/{vmid}/clone",
        "GET /nodes/{node}/qemu/{vmid}/config",
        "PUT /nodes/{node}/qemu/{vmid}/config",
        "GET /nodes/{node}/qemu/{vmid}/pending",
        "PUT /nodes/{node}/qemu/{vmid}/resize",
        "POST /nodes/{node}/qemu/{vmid}/move_disk",
        "POST /nodes/{node}/qemu/{vmid}/migrate",
        "GET /nodes/{node}/qemu/{vmid}/status/current",
        "POST /nodes/{node}/qemu/{vmid}/status/start",
        "POST /nodes/{node}/qemu/{vmid}/status/stop",
        "POST /nodes/{node}/qemu/{vmid}/agent/ping",
        "DELETE /nodes/{node}/qemu/{vmid}",
        "GET /nodes/{node}/tasks",
        "GET /nodes/{node}/tasks/{upid}/status",
        "GET /nodes/{node}/tasks/{upid}/log",
        "GET /nodes/{node}/storage/{storage}/status",
        "GET /nodes/{node}/storage/{storage}/content",
        "POST /nodes/{node}/qemu",
        "POST /nodes/{node}/lxc",
        "GET /nodes/{node}/lxc/{vmid}/config",
        "PUT /nodes/{node}/lxc/{vmid}/config",
        "GET /nodes/{node}/lxc/{vmid}/status/current",
        "POST /nodes/{node}/lxc/{vmid}/status/start",
        "DELETE /nodes/{node}/lxc/{vmid}",
        "GET /cluster/ha/resources",
        "POST /cluster/ha/resources",
        "DELETE /cluster/ha/resources/{sid}",
        "GET /cluster/ha/rules",
        "POST /cluster/ha/rules",
    ] {
        assert!(reached.contains(want), "no proxmox.wit function reached {want}; reached: {reached:?}");
    }
}
