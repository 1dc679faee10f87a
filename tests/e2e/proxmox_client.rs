//! The Proxmox client against the simulated cluster (`cradle-sim`) over real HTTPS:
//! a pinned fingerprint, a VM's whole life (clone → wait → config → start → status →
//! stop → destroy), and the trust and error paths a workflow depends on.
//! Everything listens on 127.0.0.0/8.

use std::time::Duration;

use cradle::caps::proxmox::client::{ClientSettings, ProxmoxClient, RetryPolicy};
use cradle::caps::proxmox::errors::ProxmoxError;
use cradle::caps::proxmox::tls::TlsVerify;
use cradle::contract::ErrorKind;
use cradle::contract::bindings::cradle::host::proxmox::{CloneRequest, PowerAction};
use cradle::contract::bindings::cradle::host::types::Entry;
use cradle_sim::{Cluster, RunningCluster, SimConfig};

/// Generous: only reached if the simulator hangs, never part of what is asserted.
const TASK_TIMEOUT: Duration = Duration::from_secs(120);

async fn start(time_scale: f64, tweak: impl FnOnce(&mut SimConfig)) -> RunningCluster {
    let mut cfg = SimConfig::with_nodes(2);
    cfg.time_scale = time_scale;
    cfg.node_ssh_port = 0;
    cfg.guest_ssh_port = 0;
    // The documented least-privilege role (docs/CONFIG.md), as in the rest of the suite.
    cfg.access = cradle::caps::proxmox::role::sim_access(&[]);
    tweak(&mut cfg);
    Cluster::start(cfg).await.expect("simulated cluster starts")
}

fn client(cluster: &RunningCluster, verify: TlsVerify) -> Result<ProxmoxClient, ProxmoxError> {
    ProxmoxClient::new(ClientSettings {
        endpoint: format!("https://{}", cluster.api_addr()),
        token: cluster.token(),
        verify,
        timeout: Duration::from_secs(30),
        retry: RetryPolicy::default(),
        task_time_scale: cluster.time_scale(),
    })
}

fn pinned(cluster: &RunningCluster) -> ProxmoxClient {
    client(cluster, TlsVerify::Fingerprint(cluster.fingerprint_sha256())).expect("pinned client")
}

fn clone_request(newid: u32, name: &str) -> CloneRequest {
    CloneRequest {
        node: "pve1".into(),
        template_vmid: 9000,
        newid,
        name: name.into(),
        full: true,
        storage: Some("local-lvm".into()),
        target: None,
        description: Some("made by the proxmox_client test".into()),
    }
}

fn value<'a>(config: &'a [Entry], key: &str) -> Option<&'a str> {
    config.iter().find(|e| e.key == key).map(|e| e.value.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_client_drives_a_vm_from_clone_to_destroy() {
    let cluster = start(0.01, |_| {}).await;
    let pve = pinned(&cluster);

    let vmid = pve.next_id(None).await.expect("nextid");
    let upid = pve.clone_vm(&clone_request(vmid, "e2e-0")).await.expect("clone accepted");
    let clone = pve.wait_task("pve1", &upid, TASK_TIMEOUT).await.expect("clone task polled");
    assert!(clone.ok, "clone failed: {:?}", clone.exitstatus);

    let config = pve.get_config("pve1", vmid).await.expect("config");
    assert_eq!(value(&config, "name"), Some("e2e-0"));
    assert!(value(&config, "digest").is_some(), "config carries its digest");
    assert_eq!(value(&config, "lock"), None, "the clone lock is gone once the task ended");
    assert!(config.windows(2).all(|w| w[0].key < w[1].key), "entries sorted by key");

    let vms = pve.list_vms().await.expect("resources");
    let vm = vms.iter().find(|v| v.vmid == vmid).expect("the clone is listed");
    assert_eq!((vm.node.as_str(), vm.name.as_deref(), vm.template), ("pve1", Some("e2e-0"), false));

    let set = [Entry { key: "onboot".into(), value: "1".into() }];
    pve.set_config("pve1", vmid, &set, &[], value(&config, "digest")).await.expect("config write with digest");
    assert_eq!(value(&pve.get_config("pve1", vmid).await.expect("config"), "onboot"), Some("1"));

    let started = pve.power("pve1", vmid, PowerAction::Start).await.expect("start accepted");
    assert!(pve.wait_task("pve1", &started, TASK_TIMEOUT).await.expect("start polled").ok);
    let status = pve.vm_status("pve1", vmid).await.expect("status");
    assert_eq!(status.status, "running");
    assert!(!status.ha_managed);

    let stopped = pve.power("pve1", vmid, PowerAction::Stop).await.expect("stop accepted");
    assert!(pve.wait_task("pve1", &stopped, TASK_TIMEOUT).await.expect("stop polled").ok);
    assert_eq!(pve.vm_status("pve1", vmid).await.expect("status").status, "stopped");

    let destroyed = pve.destroy("pve1", vmid, true).await.expect("destroy accepted");
    assert!(pve.wait_task("pve1", &destroyed, TASK_TIMEOUT).await.expect("destroy polled").ok);
    let gone = pve.get_config("pve1", vmid).await.expect_err("destroyed VM");
    assert_eq!(gone.kind(), ErrorKind::NotFound, "{gone}");

    // A restarted run finds its clone through the task list (the id is the SOURCE vmid).
    let tasks = pve.list_tasks("pve1", Some(9000), Some("qmclone")).await.expect("task list");
    assert!(tasks.iter().any(|t| t.upid == upid && t.kind == "qmclone" && t.id == "9000"), "{tasks:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_pin_is_refused_before_any_request_and_names_both_fingerprints() {
    let cluster = start(0.01, |_| {}).await;
    let pin = "00".repeat(32);
    let pve = client(&cluster, TlsVerify::Fingerprint(pin)).expect("client");
    let e = pve.list_vms().await.expect_err("mismatched pin");
    match &e {
        ProxmoxError::FingerprintMismatch { presented, expected, .. } => {
            assert_eq!(presented, &cluster.fingerprint_sha256());
            assert_eq!(expected, &["00"; 32].join(":"));
        }
        other => panic!("expected a fingerprint mismatch, got {other:?}"),
    }
    assert_eq!(e.kind(), ErrorKind::Failed, "a trust failure is not transient");
    assert!(!e.to_string().contains(&cluster.token()), "no token in the message");
    assert!(cluster.request_counts().values().all(|n| *n == 0), "{:?}", cluster.request_counts());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ca_trust_accepts_its_own_cluster_and_rejects_another() {
    let a = start(0.01, |_| {}).await;
    let b = start(0.01, |_| {}).await;
    let trusting_a = client(&a, TlsVerify::CaPem(a.ca_pem())).expect("client");
    assert!(trusting_a.list_vms().await.expect("verified against the CA").iter().any(|v| v.vmid == 9000));

    let wrong_ca = client(&b, TlsVerify::CaPem(a.ca_pem())).expect("client");
    let e = wrong_ca.list_vms().await.expect_err("B is not signed by A's CA");
    assert!(matches!(e, ProxmoxError::TlsRejected { .. }), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nextid_hint_of_an_existing_vm_is_a_conflict_naming_it() {
    let cluster = start(0.01, |_| {}).await;
    let e = pinned(&cluster).next_id(Some(9000)).await.expect_err("the template holds 9000");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    assert!(e.to_string().contains("VMID 9000"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloning_vm_is_locked_and_waiting_past_the_timeout_reports_it_running() {
    // The clone takes an hour of simulated time, so the lock is certainly held below.
    let cluster = start(1.0, |cfg| cfg.timings.clone = Duration::from_secs(3600)).await;
    let pve = pinned(&cluster);
    let upid = pve.clone_vm(&clone_request(200, "e2e-locked")).await.expect("clone accepted");

    let status = pve.wait_task("pve1", &upid, Duration::ZERO).await.expect("timeout is not an error");
    assert_eq!((status.status.as_str(), status.ok, status.exitstatus), ("running", false, None));

    let set = [Entry { key: "cores".into(), value: "4".into() }];
    let e = pve.set_config("pve1", 200, &set, &[], None).await.expect_err("clone lock");
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    assert!(e.to_string().contains("VM is locked (clone)"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_with_a_missing_snippet_is_a_failed_task_not_an_error() {
    let cluster = start(0.01, |_| {}).await;
    let pve = pinned(&cluster);
    let upid = pve.clone_vm(&clone_request(300, "e2e-snippet")).await.expect("clone accepted");
    assert!(pve.wait_task("pve1", &upid, TASK_TIMEOUT).await.expect("clone polled").ok);
    let set = [Entry { key: "cicustom".into(), value: "user=local:snippets/e2e-missing-user.yaml".into() }];
    pve.set_config("pve1", 300, &set, &[], None).await.expect("cicustom set");

    let started = pve.power("pve1", 300, PowerAction::Start).await.expect("start accepted");
    let status = pve.wait_task("pve1", &started, TASK_TIMEOUT).await.expect("start polled");
    assert_eq!(status.status, "stopped");
    assert!(!status.ok, "a start without its snippet must fail");
    assert!(status.exitstatus.as_deref().is_some_and(|t| t != "OK" && !t.is_empty()), "{:?}", status.exitstatus);
}

/// Real PVE refuses a resize or destroy of a locked VM inside the task (qemu-server
/// e6352be, src/PVE/API2/Qemu.pm:6008 and src/PVE/QemuServer.pm:1848), as the simulator
/// now does: the client classes the failed task as the HTTP error of that text, a conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_or_destroy_of_a_locked_vm_fails_in_its_task_and_is_a_conflict() {
    let cluster = start(1.0, |cfg| cfg.timings.clone = Duration::from_secs(3600)).await;
    let pve = pinned(&cluster);
    pve.clone_vm(&clone_request(210, "e2e-locked-task")).await.expect("clone accepted");
    for upid in [
        pve.resize_disk("pve1", 210, "scsi0", "+1G", None).await.expect("resize answers a task"),
        pve.destroy("pve1", 210, true).await.expect("destroy answers a task"),
    ] {
        let st = pve.wait_task("pve1", &upid, TASK_TIMEOUT).await.expect("polled");
        let exit = st.exitstatus.expect("stopped");
        assert_eq!((st.ok, exit.as_str()), (false, "VM is locked (clone)"));
        let e = pve.task_failure("pve1", &upid, &exit).await;
        assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
        assert!(e.to_string().contains("wait for it (list-tasks)"), "{e}");
    }
}

/// A linked clone on local storage cannot migrate (qemu-server e6352be,
/// src/PVE/QemuMigrate.pm:586): the task ends `migration aborted` and says why only in
/// its log; the client reads it and classes the refusal invalid, naming the volume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_clone_that_cannot_migrate_is_invalid_naming_its_volume_and_what_to_do() {
    let cluster = start(0.0, |_| {}).await;
    let pve = pinned(&cluster);
    let linked = CloneRequest { full: false, storage: None, ..clone_request(211, "e2e-linked") };
    let upid = pve.clone_vm(&linked).await.expect("clone");
    assert!(pve.wait_task("pve1", &upid, TASK_TIMEOUT).await.expect("clone polled").ok);
    let upid = pve.migrate("pve1", 211, "pve2", false, false).await.expect("migrate answers a task");
    let st = pve.wait_task("pve1", &upid, TASK_TIMEOUT).await.expect("polled");
    let exit = st.exitstatus.expect("stopped");
    assert_eq!(exit, "migration aborted");
    let e = pve.task_failure("pve1", &upid, &exit).await;
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("'local-lvm:base-9000-disk-0/vm-211-disk-0' as it's a clone of 'base-9000-disk-0'"),
        "{text}"
    );
    assert!(text.contains("clone it full"), "{text}");
}
