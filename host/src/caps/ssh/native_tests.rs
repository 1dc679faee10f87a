//! The built-in client (`native`) against a real OpenSSH server: the same
//! contract as the OpenSSH path (`tests.rs`), and no `ssh` process.

use std::fs;
use std::process::Command;
use std::time::Duration;

use super::sshd_fixture::{Sshd, available, write_private};
use super::tests::futures_join_all;
use super::*;
use crate::contract::ErrorKind;

const T: Duration = Duration::from_secs(20);

#[tokio::test]
async fn builtin_exec_passes_stdin_reports_exit_codes_over_a_socket_of_its_own() {
    if !available("builtin exec") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_builtin("kh");
    let out = c.exec(&s.target(), "cat; echo oops >&2; exit 3", Some(b"hello\n"), T).await.expect("exec");
    assert_eq!(
        (out.exit_code, out.stdout.as_slice(), out.stderr.as_slice()),
        (Some(3), &b"hello\n"[..], &b"oops\n"[..])
    );
    let out = c.exec(&s.target(), "exit 255", None, T).await.expect("remote 255");
    assert_eq!(out.exit_code, Some(255), "the remote command's own 255 is its output");
    let out = c.exec(&s.target(), "cat", None, T).await.expect("cat");
    assert_eq!((out.exit_code, out.stdout.len()), (Some(0), 0), "no input: stdin is closed at once");
    // A remote command killed by a signal: exit 255, as `ssh` reports it.
    let out = c.exec(&s.target(), "kill -KILL $$", None, T).await.expect("signal");
    assert_eq!(out.exit_code, Some(255));
    // Large input and output at once: the input is written while the output is read.
    let big = vec![b'x'; 3 * 1024 * 1024];
    let out = c.exec(&s.target(), "cat", Some(&big), T).await.expect("big cat");
    assert!(out.stdout.starts_with(&big[..MAX_STREAM]), "the first MiB kept");
    let note = String::from_utf8_lossy(&out.stdout[MAX_STREAM..]).into_owned();
    assert!(note.contains("output cut at") && note.contains(&(2 * 1024 * 1024).to_string()), "{note}");
    // The connection is this process's own socket, not an `ssh` child's
    // (sshd tells the command which client port it came from).
    let out = c.exec(&s.target(), "echo $SSH_CLIENT", None, T).await.expect("SSH_CLIENT");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let port: u16 = text.split_whitespace().nth(1).and_then(|p| p.parse().ok()).expect("a client port");
    assert!(own_socket(port, s.port), "the connection from port {port} is not this process's socket");
    assert_eq!(s.logins(), 1, "every call shared one connection");
}

#[tokio::test]
async fn builtin_refuses_an_unpinned_host_before_connecting_and_a_changed_key_as_a_conflict() {
    if !available("builtin host keys") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.builtin_client("kh", Some(s.client_key.clone()), true);
    let marker = s.dir.path().join("marker");
    let touch = format!("touch {}", marker.display());
    let e = c.exec(&s.target(), &touch, None, T).await.expect_err("unknown");
    assert_eq!(e.kind, ErrorKind::Failed, "{e}");
    assert!(e.message.contains("trust-host-key") && e.message.contains(&format!("[127.0.0.1]:{}", s.port)), "{e}");
    assert!(!s.log().contains("Connection from"), "no connection was made: {}", s.log());
    assert!(fs::read_to_string(c.known_hosts().path()).unwrap_or_default().is_empty(), "nothing learned");
    // Another key pinned: the server's is a change, refused before login.
    let other = generate_host_key("someone-else").await.unwrap();
    c.trust_host_key("127.0.0.1", s.port, &other.public).unwrap();
    let before = fs::read(c.known_hosts().path()).unwrap();
    let e = c.exec(&s.target(), &touch, None, T).await.expect_err("mismatch");
    assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
    assert!(e.message.contains(&s.host_key.fingerprint().unwrap()), "offered key: {e}");
    assert!(e.message.contains(&other.fingerprint().unwrap()), "pinned key: {e}");
    assert!(!marker.exists(), "the command must not run");
    assert_eq!(s.logins(), 0);
    assert_eq!(fs::read(c.known_hosts().path()).unwrap(), before, "known_hosts untouched");
    assert_eq!(c.wait_for(&s.target(), T).await.expect_err("no waiting").kind, ErrorKind::Conflict);
    // The right pin: reachable; the shared connection follows the pin.
    assert!(c.forget_host_key("127.0.0.1", s.port).unwrap());
    c.trust_host_key("127.0.0.1", s.port, &s.host_key.public).unwrap();
    c.wait_for(&s.target(), T).await.expect("pinned");
    assert!(c.forget_host_key("127.0.0.1", s.port).unwrap());
    assert_eq!(c.exec(&s.target(), "true", None, T).await.expect_err("forgotten").kind, ErrorKind::Failed);
}

#[tokio::test]
async fn builtin_authentication_failures_name_user_and_key_and_an_encrypted_key_says_why() {
    if !available("builtin auth") {
        return;
    }
    let s = Sshd::start().await;
    let keygen = |path: &std::path::Path, pass: &str| {
        let st = Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", pass, "-f"]).arg(path).status();
        assert!(st.unwrap().success());
    };
    let wrong = s.dir.path().join("wrong_key");
    keygen(&wrong, "");
    let c = s.builtin_client("kh", Some(wrong.clone()), true);
    c.trust_host_key("127.0.0.1", s.port, &s.host_key.public).unwrap();
    let e = c.exec(&s.target(), "true", None, T).await.expect_err("auth");
    assert_eq!(e.kind, ErrorKind::Failed, "{e}");
    assert!(e.message.contains(&format!("user `{}`", s.user)) && e.message.contains(wrong.to_str().unwrap()), "{e}");
    assert_eq!(c.wait_for(&s.target(), T).await.expect_err("no waiting").kind, ErrorKind::Failed);
    let locked = s.dir.path().join("locked_key");
    keygen(&locked, "CANARY-PASSPHRASE-3c1");
    let c = s.builtin_client("kh2", Some(locked.clone()), true);
    c.trust_host_key("127.0.0.1", s.port, &s.host_key.public).unwrap();
    let e = c.exec(&s.target(), "true", None, T).await.expect_err("encrypted");
    assert_eq!(e.kind, ErrorKind::Failed, "{e}");
    assert!(e.message.contains("encrypted") && e.message.contains(locked.to_str().unwrap()), "{e}");
    assert!(!e.message.contains("CANARY"), "{e}");
    // RSA identities sign with SHA-2.
    let rsa = s.dir.path().join("rsa_key");
    let st = Command::new("ssh-keygen").args(["-q", "-t", "rsa", "-b", "2048", "-N", "", "-f"]).arg(&rsa).status();
    assert!(st.unwrap().success());
    let mut keys = fs::read(s.dir.path().join("authorized_keys")).unwrap();
    keys.extend(fs::read(rsa.with_extension("pub")).unwrap());
    write_private(&s.dir.path().join("authorized_keys"), &keys);
    let c = s.builtin_client("kh3", Some(rsa), true);
    c.trust_host_key("127.0.0.1", s.port, &s.host_key.public).unwrap();
    let out = c.exec(&s.target(), "echo rsa", None, T).await.expect("an RSA identity logs in");
    assert_eq!(out.stdout, b"rsa\n");
}

#[tokio::test]
async fn builtin_keeps_output_after_the_exit_status_and_times_out_as_transient() {
    if !available("builtin late output") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_builtin("kh");
    let late = "(sleep 2; echo late) & echo early";
    let out = c.exec(&s.target(), late, None, T).await.expect("exec");
    assert_eq!((out.exit_code, String::from_utf8_lossy(&out.stdout).as_ref()), (Some(0), "early\nlate\n"));
    let endless = "(sleep 30; echo never) & echo early";
    let e = c.exec(&s.target(), endless, None, Duration::from_millis(1500)).await.expect_err("incomplete");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(e.message.contains("sleep 30") && e.message.contains("127.0.0.1"), "{e}");
    let e = c.exec(&s.target(), "sleep 30", None, Duration::from_millis(1500)).await.expect_err("timeout");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(e.message.contains("sleep 30") && e.message.contains("1500 ms"), "{e}");
    // After a timeout the next call still works (on a new connection).
    let out = c.exec(&s.target(), "echo fine", None, T).await.expect("after a timeout");
    assert_eq!(out.stdout, b"fine\n");
}

#[tokio::test]
async fn builtin_reconnects_after_a_dropped_connection_and_clients_share_until_the_last_is_dropped() {
    if !available("builtin reconnect") {
        return;
    }
    let s = Sshd::start().await;
    let a = s.pinned_builtin("kh");
    let b = s.builtin_client("kh", Some(s.client_key.clone()), true);
    a.exec(&s.target(), "true", None, T).await.expect("first");
    b.exec(&s.target(), "true", None, T).await.expect("second client, same connection");
    assert_eq!(s.logins(), 1);
    // The server drops the connection (a guest that reboots): the next call
    // reconnects, no error.
    s.drop_connections();
    let out = a.exec(&s.target(), "echo back", None, T).await.expect("after the drop");
    assert_eq!((out.stdout, out.stderr), (b"back\n".to_vec(), Vec::new()));
    assert_eq!(s.logins(), 2);
    drop(a);
    b.exec(&s.target(), "true", None, T).await.expect("b still uses it");
    assert_eq!(s.logins(), 2, "the connection lives while a client uses it");
    drop(b);
    let c = s.builtin_client("kh", Some(s.client_key.clone()), true);
    c.exec(&s.target(), "true", None, T).await.expect("a new client");
    assert_eq!(s.logins(), 3, "the last client's drop ended the connection");
    // Without sharing, one connection per call.
    let d = s.builtin_client("kh", Some(s.client_key.clone()), false);
    d.exec(&s.target(), "true", None, T).await.expect("one");
    d.exec(&s.target(), "true", None, T).await.expect("two");
    assert_eq!(s.logins(), 5);
    // Nothing stays open once the clients are gone: no connection per VM left behind.
    drop((c, d));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while connections_to(s.port) > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(connections_to(s.port), 0, "a connection outlived its clients");
}

/// Whether this process holds the TCP socket from local port `from` to `to`.
fn own_socket(from: u16, to: u16) -> bool {
    let table = fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let (local, remote) = (format!(":{from:04X}"), format!(":{to:04X}"));
    let inode = table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1)?.ends_with(&local) && f.get(2)?.ends_with(&remote)).then(|| f.get(9).map(|s| s.to_string()))?
    });
    let Some(inode) = inode else { return false };
    let wanted = format!("socket:[{inode}]");
    fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .any(|e| fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == wanted))
}

/// This machine's established TCP connections to 127.0.0.1:`port` (client side).
fn connections_to(port: u16) -> usize {
    let table = fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let remote = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(2) == Some(&remote.as_str()) && f.get(3) == Some(&"01")
        })
        .count()
}

#[tokio::test]
async fn builtin_refused_ports_are_transient_and_a_file_streams_as_input() {
    if !available("builtin refused") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_builtin("kh");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    c.trust_host_key("127.0.0.1", closed, &s.host_key.public).unwrap();
    let t = Target { host: "127.0.0.1".into(), port: closed, user: s.user.clone() };
    let e = c.exec(&t, "true", None, T).await.expect_err("refused");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(e.message.contains("Connection refused"), "{e}");
    let e = c.wait_for(&t, Duration::from_secs(2)).await.expect_err("gives up");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    let src = s.dir.path().join("payload");
    fs::write(&src, vec![b'y'; 5 * 1024 * 1024 + 3]).unwrap();
    let out = c.exec_with_file(&s.target(), "wc -c", fs::File::open(&src).unwrap(), T).await.expect("streams the file");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), (5 * 1024 * 1024 + 3).to_string());
}

#[tokio::test]
async fn builtin_without_an_identity_logs_in_with_the_agents_key() {
    if !available("builtin agent") {
        return;
    }
    let s = Sshd::start().await;
    let sock = s.dir.path().join("agent.sock");
    let mut agent =
        Command::new("ssh-agent").arg("-D").arg("-a").arg(&sock).stdout(std::process::Stdio::null()).spawn();
    let Ok(agent) = agent.as_mut() else {
        eprintln!("skipping: ssh-agent is missing (openssh-client)");
        return;
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !sock.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let add = |args: &[&str]| {
        let st = Command::new("ssh-add")
            .args(args)
            .env("SSH_AUTH_SOCK", &sock)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "ssh-add {args:?}");
    };
    add(&[s.client_key.to_str().unwrap()]);
    let c = s.builtin_with_agent("kh", &sock);
    c.trust_host_key("127.0.0.1", s.port, &s.host_key.public).unwrap();
    let out = c.exec(&s.target(), "echo via-agent", None, T).await.expect("the agent's key logs in");
    assert_eq!(out.stdout, b"via-agent\n");
    // An agent without the key: the login fails as any refused key does.
    add(&["-D"]);
    let c = s.builtin_with_agent("kh2", &sock);
    c.trust_host_key("127.0.0.1", s.port, &s.host_key.public).unwrap();
    let e = c.exec(&s.target(), "true", None, T).await.expect_err("no key");
    assert_eq!(e.kind, ErrorKind::Failed, "{e}");
    assert!(e.message.contains("authentication failed") || e.message.contains("no identity"), "{e}");
    let _ = agent.kill();
    let _ = agent.wait();
}

#[tokio::test]
async fn builtin_carries_more_concurrent_calls_than_sshds_max_sessions_without_an_error() {
    if !available("builtin sessions") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_builtin("kh");
    let target = s.target();
    let calls = (0..24).map(|i| {
        let (c, target) = (&c, &target);
        async move { c.exec(target, &format!("sleep 0.3; echo {i}"), None, T).await }
    });
    let outs = futures_join_all(calls).await;
    for (i, out) in outs.into_iter().enumerate() {
        let out = out.unwrap_or_else(|e| panic!("call {i}: {e}"));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), i.to_string());
    }
    // 8 sessions per connection (sshd refuses an eleventh), so 24 at once take
    // three connections, never an error.
    assert_eq!(s.logins(), 3, "one login per 8 concurrent sessions");
}

#[tokio::test]
async fn builtin_a_call_that_times_out_or_is_given_up_hangs_up_its_command_and_the_connection_goes_on() {
    if !available("builtin hang-up") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_builtin("kh");
    // A flood of output past the timeout: the call ends, nothing hangs.
    let e = c.exec(&s.target(), "yes cradle-flood", None, Duration::from_millis(1500)).await.expect_err("flood");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    let out = c.exec(&s.target(), "echo after-flood", None, T).await.expect("the client goes on");
    assert_eq!(out.stdout, b"after-flood\n");
    // The caller gives up on a call (a plugin's deadline): its channel is closed,
    // and a command writing to it gets its hang-up.
    let loop_cmd = "while true; do echo cradle-given-up; sleep 0.1; done";
    let gave_up = tokio::time::timeout(Duration::from_millis(800), c.exec(&s.target(), loop_cmd, None, T)).await;
    assert!(gave_up.is_err(), "the call was still running");
    let running = || {
        let out = Command::new("pgrep").args(["-f", "cradle-given-up"]).output().expect("pgrep");
        !out.stdout.is_empty()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while running() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!running(), "the remote loop outlived the call its caller gave up on");
    let out = c.exec(&s.target(), "echo still", None, T).await.expect("the connection goes on");
    assert_eq!(out.stdout, b"still\n");
}

#[tokio::test]
async fn builtin_a_host_that_offers_none_of_the_pinned_key_types_is_failed_not_retried() {
    if !available("builtin key type") {
        return;
    }
    let s = Sshd::start().await;
    let other = s.dir.path().join("ecdsa_host");
    let st = Command::new("ssh-keygen").args(["-q", "-t", "ecdsa", "-N", "", "-f"]).arg(&other).status();
    assert!(st.unwrap().success());
    let c = s.builtin_client("kh", Some(s.client_key.clone()), true);
    let ecdsa = fs::read_to_string(other.with_extension("pub")).unwrap();
    c.trust_host_key("127.0.0.1", s.port, &ecdsa).unwrap();
    let e = c.exec(&s.target(), "true", None, T).await.expect_err("no common key type");
    assert_eq!(e.kind, ErrorKind::Failed, "{e}");
    assert!(e.message.contains("trust-host-key"), "{e}");
    assert_eq!(c.wait_for(&s.target(), T).await.expect_err("no waiting").kind, ErrorKind::Failed);
    assert_eq!(s.logins(), 0);
}
