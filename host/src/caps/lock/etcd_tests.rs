//! The etcd lock store against a real etcd on loopback (Debian's etcd-server).

use std::time::{Duration, Instant};

use cradle_testkit::etcd::Etcd;

use super::*;
use crate::caps::coordination::{CoordinationBackend, CoordinationConfig};

const KEY: &str = "sim://lab|web-0";

fn config(etcd: &Etcd, ttl_s: u64) -> CoordinationConfig {
    CoordinationConfig {
        backend: CoordinationBackend::Etcd,
        endpoints: vec![etcd.url.clone()],
        lease_ttl_s: Some(ttl_s),
        ..CoordinationConfig::default()
    }
}

fn node(etcd: &Etcd, ttl_s: u64) -> EtcdLockStore {
    EtcdLockStore::connect(&config(etcd, ttl_s), std::path::Path::new("/")).expect("connect to etcd")
}

fn holder(host: &str, run_id: &str) -> Holder {
    Holder {
        host: host.into(),
        pid: 4242,
        started: "2026-12-03T10:00:00Z".into(),
        run_id: run_id.into(),
        pid_start_ticks: None,
        version: Some("0.1.0".into()),
    }
}

/// Poll `f` until it is true or `limit` passes.
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[test]
fn a_lock_is_taken_once_across_two_control_nodes_and_names_its_holder() {
    let etcd = Etcd::start();
    let (a, b) = (node(&etcd, 10), node(&etcd, 10));
    let first = a.acquire(KEY, &holder("control-a", "run-a")).expect("a takes it");
    assert!(!first.reentrant && first.fence.is_some(), "{first:?}");
    let err = b.acquire(KEY, &holder("control-b", "run-b")).expect_err("b must not");
    assert!(
        matches!(&err, LockError::Held { holder, .. } if holder.host == "control-a" && holder.run_id == "run-a"),
        "{err}"
    );
    assert!(err.to_string().contains("run run-a (host control-a"), "{err}");
    assert_eq!(
        b.holder(KEY).expect("read").map(|h| h.version),
        Some(Some("0.1.0".into())),
        "the value names the version"
    );
    a.release(KEY, "run-a").expect("release");
    let second = b.acquire(KEY, &holder("control-b", "run-b")).expect("b takes it after the release");
    assert!(second.fence > first.fence, "fencing tokens grow with every holder: {first:?} then {second:?}");
    b.release(KEY, "run-b").expect("release");
    assert_eq!(a.holder(KEY).expect("read"), None);
}

#[test]
fn a_run_taking_its_own_lock_again_is_reentrant_and_others_cannot_release_it() {
    let etcd = Etcd::start();
    let (a, b) = (node(&etcd, 10), node(&etcd, 10));
    let first = a.acquire(KEY, &holder("control-a", "run-a")).expect("take");
    let again = a.acquire(KEY, &holder("control-a", "run-a")).expect("again");
    assert_eq!(again, Acquired { reentrant: true, fence: first.fence });
    let err = b.release(KEY, "run-b").expect_err("not the holder");
    assert!(matches!(err, LockError::NotHolder { .. }), "{err}");
    b.release("sim://lab|free", "run-b").expect("releasing a free lock is a no-op");
    a.release(KEY, "run-a").expect("release");
}

#[test]
fn a_crashed_holders_lock_frees_itself_after_the_lease_ttl() {
    let etcd = Etcd::start();
    let b = node(&etcd, 2);
    {
        let a = node(&etcd, 2);
        a.acquire(KEY, &holder("control-a", "run-a")).expect("take");
        // The process ends without releasing: no revoke, the keep-alive stops.
    }
    assert!(matches!(b.acquire(KEY, &holder("control-b", "run-b")), Err(LockError::Held { .. })), "held until the TTL");
    let started = Instant::now();
    assert!(
        eventually(Duration::from_secs(10), || b.acquire(KEY, &holder("control-b", "run-b")).is_ok()),
        "the lock frees itself after the lease TTL"
    );
    assert!(started.elapsed() >= Duration::from_millis(500), "not before the lease could end");
    b.release(KEY, "run-b").expect("release");
}

#[test]
fn a_holder_whose_lease_lapsed_is_stopped_and_cannot_free_the_new_holders_lock() {
    let etcd = Etcd::start();
    let (a, b) = (node(&etcd, 2), node(&etcd, 2));
    a.acquire(KEY, &holder("control-a", "run-a")).expect("take");
    a.check_held(KEY, "run-a").expect("held while renewed");
    std::thread::sleep(Duration::from_millis(1500));
    a.check_held(KEY, "run-a").expect("still held: the keep-alive renews it");
    a.stop_keep_alive(KEY);
    assert!(
        eventually(Duration::from_secs(5), || a.check_held(KEY, "run-a").is_err()),
        "the holder learns of the lapse"
    );
    let err = a.check_held(KEY, "run-a").expect_err("lost").to_string();
    assert!(err.contains("was lost") && err.contains("stops before its next side effect"), "{err}");
    assert!(
        eventually(Duration::from_secs(10), || b.acquire(KEY, &holder("control-b", "run-b")).is_ok()),
        "b takes over"
    );
    a.release(KEY, "run-a").expect("the old holder's release is harmless");
    assert_eq!(b.holder(KEY).expect("read").map(|h| h.run_id), Some("run-b".into()), "the new holder's lock stays");
    b.release(KEY, "run-b").expect("release");
}

#[test]
fn unlock_refuses_a_lock_under_a_live_lease() {
    let etcd = Etcd::start();
    let (a, b) = (node(&etcd, 10), node(&etcd, 10));
    a.acquire(KEY, &holder("control-a", "run-a")).expect("take");
    let err = b.remove_stale(KEY, &|_| Liveness::Gone).expect_err("live lease").to_string();
    assert!(err.contains("live etcd lease"), "{err}");
    assert_eq!(b.remove_stale("sim://lab|free", &|_| Liveness::Gone).expect("free"), Removal::NotLocked);
    a.release(KEY, "run-a").expect("release");
}

#[test]
fn an_unanswering_etcd_is_an_error_naming_the_endpoints_never_a_lock() {
    let etcd = Etcd::start();
    let a = node(&etcd, 3);
    etcd.pause();
    let started = Instant::now();
    let err = a.acquire(KEY, &holder("control-a", "run-a")).expect_err("no quorum, no lock");
    etcd.resume();
    let text = err.to_string();
    assert!(matches!(err, LockError::Etcd { .. }) && text.contains(&etcd.url), "{text}");
    assert!(started.elapsed() < Duration::from_secs(10), "the request deadline holds: {:?}", started.elapsed());
    assert_eq!(a.holder(KEY).expect("read after the resume"), None, "nothing was taken");
}

#[test]
fn an_unreachable_endpoint_is_passed_over_for_the_next_one() {
    let etcd = Etcd::start();
    // A port nobody listens on: connection refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
    let dead = format!("http://127.0.0.1:{closed}");
    let both = CoordinationConfig { endpoints: vec![dead.clone(), etcd.url.clone()], ..config(&etcd, 10) };
    let store = EtcdLockStore::connect(&both, std::path::Path::new("/")).expect("connect");
    store.acquire(KEY, &holder("control-a", "run-a")).expect("taken through the second endpoint");
    assert_eq!(store.holder(KEY).expect("read").map(|h| h.run_id), Some("run-a".into()));
    store.release(KEY, "run-a").expect("release");
    // With none reachable: an error naming every endpoint, nothing taken.
    let none = CoordinationConfig { endpoints: vec![dead.clone()], ..config(&etcd, 10) };
    let err = EtcdLockStore::connect(&none, std::path::Path::new("/"))
        .expect("connecting sends nothing without a user")
        .acquire(KEY, &holder("control-b", "run-b"))
        .expect_err("no etcd")
        .to_string();
    assert!(err.contains(&dead) && err.contains("no endpoint could be reached"), "{err}");
}

#[test]
fn a_server_certificate_without_client_auth_is_named_as_the_cause_when_the_gateway_is_refused() {
    let etcd = Etcd::start_tls_server_auth_only();
    let files = etcd.tls.clone().expect("tls files");
    let store =
        EtcdLockStore::connect(&tls_config(&etcd, &files.client_cert, &files.client_key), std::path::Path::new("/"))
            .expect("connecting sends nothing without a user");
    let err = store.acquire(KEY, &holder("control-a", "run-a")).expect_err("the gateway cannot reach etcd").to_string();
    assert!(err.contains(&etcd.url) && err.contains("clientAuth extended key usage"), "{err}");
}

fn tls_config(etcd: &Etcd, cert: &std::path::Path, key: &std::path::Path) -> CoordinationConfig {
    let files = etcd.tls.as_ref().expect("a TLS etcd");
    CoordinationConfig {
        ca_file: Some(files.ca.clone()),
        cert_file: Some(cert.to_path_buf()),
        key_file: Some(key.to_path_buf()),
        ..config(etcd, 10)
    }
}

#[test]
fn locks_work_over_tls_with_a_client_certificate_and_a_stranger_is_refused() {
    let etcd = Etcd::start_tls();
    let files = etcd.tls.clone().expect("tls files");
    let config = tls_config(&etcd, &files.client_cert, &files.client_key);
    assert!(config.validate().is_err(), "the test config lacks records_key; the store itself does not need it");
    let store = EtcdLockStore::connect(&config, std::path::Path::new("/")).expect("connect over TLS");
    store.acquire(KEY, &holder("control-a", "run-a")).expect("take over TLS");
    assert_eq!(store.holder(KEY).expect("read").map(|h| h.run_id), Some("run-a".into()));
    store.release(KEY, "run-a").expect("release");
    // A client certificate from another CA: etcd refuses the handshake, and
    // the error names the endpoint; nothing is taken.
    let stranger = tls_config(&etcd, &files.stranger_cert, &files.stranger_key);
    let refused = EtcdLockStore::connect(&stranger, std::path::Path::new("/"))
        .and_then(|s| s.acquire(KEY, &holder("control-b", "run-b")).map(|_| ()));
    let err = refused.expect_err("a certificate of another CA is refused").to_string();
    assert!(err.contains(&etcd.url), "{err}");
    // Relative TLS paths are read relative to cradle.toml's directory.
    let dir = files.ca.parent().expect("dir");
    let relative = CoordinationConfig {
        ca_file: Some("etcd-ca.pem".into()),
        cert_file: Some("client.pem".into()),
        key_file: Some("client.key".into()),
        ..config.clone()
    };
    EtcdLockStore::connect(&relative, dir).expect("relative paths").holder(KEY).expect("read");
    let missing = CoordinationConfig { ca_file: Some("nope.pem".into()), ..relative };
    let err = EtcdLockStore::connect(&missing, dir).expect_err("missing CA file").to_string();
    assert!(err.contains("nope.pem"), "{err}");
}

#[test]
fn an_etcd_with_authentication_takes_the_user_and_its_secret_and_a_wrong_password_is_refused_unshown() {
    const PASSWORD: &str = "CANARY-etcd-password-7c1e";
    let etcd = Etcd::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
    rt.block_on(async {
        use serde_json::{Value, json};
        let admin = crate::caps::coordination::etcd::gateway::Client::new(
            std::slice::from_ref(&etcd.url),
            None,
            None,
            Duration::from_secs(5),
        )
        .expect("client");
        for (path, body) in [
            ("/v3/auth/user/add", json!({ "name": "root", "password": PASSWORD })),
            ("/v3/auth/role/add", json!({ "name": "root" })),
            ("/v3/auth/user/grant", json!({ "user": "root", "role": "root" })),
            ("/v3/auth/enable", json!({})),
        ] {
            admin.post::<Value>(path, &body).await.unwrap_or_else(|e| panic!("{path}: {e}"));
        }
    });
    let dir = tempfile::tempdir().expect("tmp");
    let secret = dir.path().join("etcd.password");
    std::fs::write(&secret, PASSWORD).expect("secret");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let with = |password: &std::path::Path| CoordinationConfig {
        user: Some("root".into()),
        password: Some(crate::secrets::SecretRef::File(password.to_path_buf())),
        ..config(&etcd, 10)
    };
    let store = EtcdLockStore::connect(&with(&secret), std::path::Path::new("/")).expect("authenticated");
    store.acquire(KEY, &holder("control-a", "run-a")).expect("take as root");
    // etcd forgets a token left unused (5 minutes by default): the client
    // logs in again and the request goes through.
    store.conn.client().set_token("expired.1");
    assert_eq!(store.holder(KEY).expect("read after the token expired").map(|h| h.run_id), Some("run-a".into()));
    store.release(KEY, "run-a").expect("release");

    let wrong = dir.path().join("wrong.password");
    std::fs::write(&wrong, "CANARY-wrong-password-0b9a").expect("secret");
    std::fs::set_permissions(&wrong, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let err = EtcdLockStore::connect(&with(&wrong), std::path::Path::new("/")).expect_err("wrong password").to_string();
    assert!(err.contains(&etcd.url) && !err.contains("CANARY"), "names etcd, never the secret: {err}");
    // Without a user, etcd refuses the request: an error, never a lock.
    let anonymous = node(&etcd, 10);
    let err = anonymous.acquire(KEY, &holder("control-b", "run-b")).expect_err("no user").to_string();
    assert!(err.contains("etcd"), "{err}");
}

#[test]
fn a_write_under_a_lapsed_lock_is_refused_by_the_fencing_check_and_overwrites_nothing() {
    use crate::caps::checkpoint::{CheckpointStore, Finalization};
    use crate::caps::coordination::etcd::{EtcdConn, EtcdFailure};
    use crate::caps::coordination::records::{Sealer, SharedRecords};
    use crate::caps::creation::{Creation, CreationError, CreationStore};

    let etcd = Etcd::start();
    let dir = tempfile::tempdir().expect("tmp");
    let node_a = Arc::new(EtcdConn::connect(&config(&etcd, 2), std::path::Path::new("/")).expect("a"));
    let node_b = Arc::new(EtcdConn::connect(&config(&etcd, 2), std::path::Path::new("/")).expect("b"));
    let sealer = Arc::new(Sealer::from_secret(&crate::secrets::Secret::new("k".repeat(40))).expect("sealer"));
    let (locks_a, locks_b) = (EtcdLockStore::new(node_a.clone()), EtcdLockStore::new(node_b.clone()));
    let records = |conn: &Arc<EtcdConn>| {
        CheckpointStore::new(dir.path().join("unused"))
            .shared(Some(SharedRecords { conn: conn.clone(), sealer: sealer.clone() }))
    };
    let cp = |stage: &str| Finalization {
        vm_name: "web-0".into(),
        vmid: 150,
        node: "pve1".into(),
        stage: stage.into(),
        written: String::new(),
        fence: None,
        host_key: None,
    };
    locks_a.acquire(KEY, &holder("control-a", "run-a")).expect("a takes it");
    let fence_a = locks_a.fence(KEY, "run-a").expect("a's token");
    let store_a = records(&node_a).under(Some(fence_a.clone()));
    store_a.write(&cp("drive-removal")).expect("a writes under its token");
    assert_eq!(
        store_a.read("web-0").expect("read").and_then(|c| c.fence),
        Some(fence_a.revision),
        "the token is stored"
    );
    // a is stopped: its lease lapses and b takes the VM.
    locks_a.stop_keep_alive(KEY);
    assert!(eventually(Duration::from_secs(10), || locks_b.acquire(KEY, &holder("control-b", "run-b")).is_ok()));
    let fence_b = locks_b.fence(KEY, "run-b").expect("b's token");
    assert!(fence_b.revision > fence_a.revision);
    let store_b = records(&node_b).under(Some(fence_b));
    store_b.write(&cp("reboot")).expect("b writes");
    // a resumes and writes: refused in the same transaction, nothing overwritten.
    let err = store_a.write(&cp("drive-removal")).expect_err("fenced");
    assert!(
        matches!(&err, crate::caps::checkpoint::CheckpointError::Shared { source: EtcdFailure::Fenced { .. }, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("taken over by another run"), "{err}");
    assert!(store_a.clear("web-0", 150).is_err(), "nor can a clear it");
    assert_eq!(store_b.read("web-0").expect("read").map(|c| c.stage), Some("reboot".into()), "b's checkpoint stands");
    // The same for creation records, and their key is sealed.
    let rec = Creation {
        vm_name: "web-0".into(),
        vmid: 150,
        node: "pve1".into(),
        host_key_public: "ssh-ed25519 AAAA".into(),
        host_key_private: "-----BEGIN OPENSSH PRIVATE KEY-----\nCANARY\n".into(),
        written: String::new(),
    };
    let err = CreationStore::for_checkpoints(&store_a).begin(rec.clone()).expect_err("fenced");
    assert!(matches!(err, CreationError::Shared { source: EtcdFailure::Fenced { .. }, .. }), "{err}");
    let b_records = CreationStore::for_checkpoints(&store_b);
    b_records.begin(rec).expect("b begins");
    let raw = node_b.get("cradle/creation/web-0", "read").expect("get").expect("stored");
    assert!(!String::from_utf8_lossy(&raw).contains("CANARY"), "the private key is sealed in etcd");
    assert!(b_records.read("web-0").expect("read").expect("record").host_key_private.contains("CANARY"));
    assert_eq!(b_records.reserved_vmids().expect("reservations"), vec![150]);
    locks_b.release(KEY, "run-b").expect("release");
}
