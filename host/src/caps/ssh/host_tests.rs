//! The WIT adapter: scope checks come before any connection, and allowed calls
//! reach the real server.

use std::sync::Arc;

use super::sshd_fixture::{Sshd, available};
use crate::caps::Grants;
use crate::caps::context::{CapCtx, Services};
use crate::caps::policy::RunScope;
use crate::contract::bindings::cradle::host::ssh::{Host, Target};
use crate::contract::bindings::cradle::host::types::Error as WitError;

/// A workflow's context (operator scope) granted `127.0.0.1:port`.
fn ctx(rt: &tokio::runtime::Runtime, dir: &std::path::Path, port: u16, client: Option<super::SshClient>) -> CapCtx {
    let grants: Grants =
        toml::from_str(&format!("[ssh]\nhosts = [\"127.0.0.1:{port}\"]\nupload_dirs = [\"{}\"]\n", dir.display()))
            .expect("grants");
    let services = Services { ssh: client.map(Arc::new), ..Services::for_tests(dir, rt) };
    CapCtx::for_tests(grants, RunScope { operator: true, ..RunScope::default() }, services, "ssh-test")
}

#[test]
fn the_adapter_checks_scope_first_then_runs_through_the_client() {
    if !available("adapter") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let s = rt.block_on(Sshd::start());
    let dir = s.dir.path().to_path_buf();
    let mut c = ctx(&rt, &dir, s.port, Some(s.client("kh")));
    let t = Target { host: "127.0.0.1".into(), port: s.port, user: s.user.clone() };
    c.trust_host_key("127.0.0.1".into(), s.port, s.host_key.public.clone()).expect("pin");
    let out = c.exec(t.clone(), "cat".into(), Some(b"hi".to_vec()), 20_000).expect("exec");
    assert_eq!((out.exit_code, out.stdout.as_str()), (Some(0), "hi"));
    c.wait_for(t.clone(), 20_000).expect("wait");
    let file = dir.join("snippet.yaml");
    c.upload(t.clone(), file.display().to_string(), b"x".to_vec(), 0o600, false).expect("upload");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");

    let elsewhere = Target { host: "10.9.9.9".into(), ..t.clone() };
    assert!(matches!(c.exec(elsewhere, "true".into(), None, 1000), Err(WitError::Denied(_))));
    let other_port = Target { port: s.port.wrapping_add(1).max(1), ..t.clone() };
    assert!(matches!(c.exec(other_port, "true".into(), None, 1000), Err(WitError::Denied(_))), "port is scoped");
    let r = c.upload(t.clone(), "/etc/cradle-test".into(), b"x".to_vec(), 0o600, false);
    assert!(matches!(r, Err(WitError::Denied(_))), "{r:?}");
    assert!(!std::path::Path::new("/etc/cradle-test").exists());
    assert!(matches!(c.trust_host_key("10.9.9.9".into(), 22, s.host_key.public.clone()), Err(WitError::Denied(_))));
    assert!(matches!(c.forget_host_key("127.0.0.1".into(), s.port), Ok(())));

    let mut none = ctx(&rt, &dir, s.port, None);
    match none.wait_for(t, 1000) {
        Err(WitError::Failed(m)) => assert!(m.contains("no SSH client"), "{m}"),
        other => panic!("expected failed, got {other:?}"),
    }
}

#[test]
fn a_host_call_without_a_timeout_argument_ends_when_the_plugin_calls_time_does() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().expect("dir");
    // Accepts and never sends a banner: `ssh` alone would wait out its
    // ConnectTimeout (60 s here); an upload has no timeout argument to clamp.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let held: Vec<_> = listener.incoming().collect();
        drop(held);
    });
    let client = super::SshClient::new(super::SshSettings {
        known_hosts: dir.path().join("kh"),
        identity: None,
        connect_timeout: std::time::Duration::from_secs(60),
        control_dir: None,
        client: super::ClientKind::OpenSsh,
    })
    .expect("client");
    let mut c = ctx(&rt, dir.path(), port, Some(client));
    let key = rt.block_on(super::generate_host_key("silent")).expect("key");
    c.trust_host_key("127.0.0.1".into(), port, key.public).expect("pin");
    let limits = crate::plugin::limits::Limits {
        call_timeout: std::time::Duration::from_millis(1500),
        ..crate::plugin::limits::Limits::default()
    };
    let clock = crate::caps::budget::GuestClock::start("hostile", limits.budget());
    c.clock = Some(clock.clone());
    let t = Target { host: "127.0.0.1".into(), port, user: "root".into() };
    let file = dir.path().join("snippet.yaml").display().to_string();
    match c.upload(t, file, b"x".to_vec(), 0o600, false) {
        Err(WitError::Failed(m)) => assert!(m.contains("call_timeout_ms in [plugins.hostile]"), "{m}"),
        other => panic!("expected the call's budget to end the upload, got {other:?}"),
    }
    assert!(clock.exhausted().is_some(), "the budget is exhausted, so the plugin's next host call is refused");
}
