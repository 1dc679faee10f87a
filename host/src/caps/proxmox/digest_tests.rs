//! The config digest fences a write: `set-config` and `resize-disk` given a
//! digest the VM's config no longer has are refused with PVE's own text, and
//! the VM is left as it was. The simulator follows qemu-server e6352be,
//! src/PVE/API2/Qemu.pm:2211 (`update_vm_api`: the digest is checked first) and
//! :6006 (the resize worker checks it before the lock).

use std::sync::Arc;

use crate::caps::Grants;
use crate::caps::context::{CapCtx, Services};
use crate::caps::policy::{RunScope, ScopedVm};
use crate::contract::bindings::cradle::host::proxmox::{CloneRequest, Host};
use crate::contract::bindings::cradle::host::types::Entry;

fn value(c: &mut CapCtx, key: &str) -> Option<String> {
    c.get_config("pve1".into(), 321).expect("get-config").into_iter().find(|e| e.key == key).map(|e| e.value)
}

#[test]
fn a_stale_digest_is_refused_with_pves_message_and_nothing_changes() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_cluster, client) = super::held_tests::sim_with_client(&rt, |_| {});
    let grants: Grants = toml::from_str(
        "[proxmox]\nnodes = [\"pve1\"]\nvmids = \"300-399\"\nstorages = [\"local\", \"local-lvm\"]\n\
         templates = [\"debian-12-cloud\"]\n",
    )
    .expect("grants");
    let services = Services { proxmox: Some(Arc::new(client)), ..Services::for_tests(dir.path(), &rt) };
    let vm = ScopedVm { name: "fence-0".into(), vmid: 321, ssh: None, owned: true, allow_replacement: false };
    let scope = RunScope { vms: vec![vm], operator: true, ..RunScope::default() };
    let mut c = CapCtx::for_tests(grants, scope, services, "digest-fence");
    let template = c.list_vms().expect("list-vms").into_iter().find(|v| v.template).expect("a template");
    let req = CloneRequest {
        node: template.node.clone(),
        template_vmid: template.vmid,
        newid: 321,
        name: "fence-0".into(),
        full: true,
        storage: None,
        target: None,
        description: None,
    };
    let upid = c.clone_vm(req).expect("clone-vm");
    assert!(c.wait_task("pve1".into(), upid, 60_000).expect("wait").ok);

    let stale = value(&mut c, "digest").expect("a digest");
    let set = |k: &str, v: &str| vec![Entry { key: k.into(), value: v.into() }];
    c.set_config("pve1".into(), 321, set("memory", "3072"), vec![], Some(stale.clone())).expect("a fresh digest");
    let current = value(&mut c, "digest").expect("a digest");
    assert_ne!(current, stale, "the write changed the digest");

    // set-config with the digest read before that write: refused, nothing written.
    let err = c
        .set_config("pve1".into(), 321, set("memory", "4096"), vec![], Some(stale.clone()))
        .expect_err("a stale digest is refused");
    let err = crate::contract::CapError::from_wit(err);
    assert!(err.message.contains("checksum mismatch"), "{}", err.message);
    assert_eq!(err.kind, crate::contract::ErrorKind::Conflict, "{err:?}");
    assert_eq!(value(&mut c, "memory").as_deref(), Some("3072"));
    assert_eq!(value(&mut c, "digest").as_deref(), Some(current.as_str()));

    // resize-disk with it: the task fails with PVE's text, the disk keeps its size.
    let before = value(&mut c, "scsi0").expect("scsi0");
    let upid = c.resize_disk_at("pve1", 321, "scsi0", "+1G", Some(&stale)).expect("the resize task starts");
    let st = c.wait_task("pve1".into(), upid, 60_000).expect("wait");
    assert!(!st.ok, "{st:?}");
    assert!(st.exitstatus.as_deref().unwrap_or("").contains("checksum mismatch"), "{st:?}");
    assert_eq!(value(&mut c, "scsi0").as_deref(), Some(before.as_str()));
    assert_eq!(value(&mut c, "digest").as_deref(), Some(current.as_str()));

    // With the current digest both go through.
    let upid = c.resize_disk_at("pve1", 321, "scsi0", "+1G", Some(&current)).expect("resize");
    assert!(c.wait_task("pve1".into(), upid, 60_000).expect("wait").ok);
    assert_ne!(value(&mut c, "scsi0").as_deref(), Some(before.as_str()));
}
