//! A state dir keeps VMs, tasks, the token and the certificate across restarts, in
//! owner-only files.

use crate::common;

use std::os::unix::fs::PermissionsExt;

use common::{Api, start};

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_sees_the_vms_token_and_certificate_of_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("sim");
    let s = state.clone();
    let c = start(0.0, move |cfg| cfg.state_dir = Some(s)).await;
    let api = Api::new(&c);
    assert_eq!(api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("name", "keep-me")]).await, "OK");
    let (token, fp) = (c.token(), c.fingerprint_sha256());
    assert_eq!(fp.len(), 32 * 3 - 1);
    c.shutdown().await;

    for f in ["state.json", "token", "pve-ssl.key", "pve-ssl.pem", "pve-root-ca.pem", "node_id_ed25519"] {
        assert_eq!(mode(&state.join(f)), 0o600, "{f}");
    }
    assert_eq!(mode(&state), 0o700);
    let on_disk = std::fs::read_to_string(state.join("state.json")).unwrap();
    assert!(!on_disk.contains(token.split('=').nth(1).unwrap()), "the token secret is not in the state file");

    let s = state.clone();
    let c = start(0.0, move |cfg| cfg.state_dir = Some(s)).await;
    assert_eq!((c.token(), c.fingerprint_sha256()), (token, fp));
    let api = Api::new(&c);
    assert_eq!(api.get("/nodes/pve1/qemu/101/config").await["name"], "keep-me");
    assert_eq!(api.get("/cluster/nextid").await, "100");
    assert_eq!(api.call("GET", "/cluster/nextid", &[("vmid", "101")]).await.0, 400);
    // The clone's task, listed under the template's VMID (the UPID's id) as on PVE.
    let tasks = api.get("/nodes/pve1/tasks?vmid=9000").await;
    assert_eq!(tasks[0]["status"], "OK");
}

/// What a client was told is on disk before it was told: every clone's VM is
/// in `state.json` the moment its response arrives, however many run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_leaves_only_once_its_change_is_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("sim");
    let s = state.clone();
    let c = start(0.0, move |cfg| cfg.state_dir = Some(s)).await;
    let api = std::sync::Arc::new(Api::new(&c));
    let mut clones = tokio::task::JoinSet::new();
    for i in 0..40u32 {
        let (api, state) = (api.clone(), state.clone());
        clones.spawn(async move {
            let newid = (500 + i).to_string();
            api.post("/nodes/pve1/qemu/9000/clone", &[("newid", &newid), ("name", &format!("c{i}"))]).await;
            // Read the file right after the response, before anything else happens.
            let on_disk: serde_json::Value =
                serde_json::from_slice(&std::fs::read(state.join("state.json")).unwrap()).unwrap();
            assert!(on_disk["vms"].get(&newid).is_some(), "VM {newid} answered but not persisted");
        });
    }
    let done = clones.join_all().await;
    assert_eq!(done.len(), 40);
    assert!(c.state_writes() >= 1);
    c.shutdown().await;
}
