//! Tests against a real OpenSSH server started on loopback (see `sshd_fixture`).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::sshd_fixture::{Sshd, available, write_private};
use super::upload::upload_command;
use super::*;
use crate::contract::ErrorKind;

const T: Duration = Duration::from_secs(20);

fn mode_of(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn exec_passes_stdin_and_reports_remote_exit_codes_as_output() {
    if !available("exec") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_client("kh");
    let out = c.exec(&s.target(), "cat; echo oops >&2; exit 3", Some(b"hello\n"), T).await.expect("exec");
    assert_eq!(
        (out.exit_code, out.stdout.as_slice(), out.stderr.as_slice()),
        (Some(3), &b"hello\n"[..], &b"oops\n"[..])
    );
    let out = c.exec(&s.target(), "true", None, T).await.expect("true");
    assert_eq!(out.exit_code, Some(0));
    // The remote command's own 255 (no ssh diagnostic) is its output, not a transport error.
    let out = c.exec(&s.target(), "exit 255", None, T).await.expect("remote 255");
    assert_eq!(out.exit_code, Some(255));
    // stdin is closed when not given: `cat` ends at once.
    let out = c.exec(&s.target(), "cat", None, T).await.expect("cat");
    assert_eq!((out.exit_code, out.stdout.len()), (Some(0), 0));
}

#[tokio::test]
async fn a_command_over_its_timeout_is_killed_and_transient() {
    if !available("timeout") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_client("kh");
    let started = Instant::now();
    let e = c.exec(&s.target(), "sleep 30", None, Duration::from_millis(1500)).await.expect_err("timeout");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(e.message.contains("sleep 30") && e.message.contains("1500 ms"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let e = c.exec(&s.target(), "true", None, Duration::ZERO).await.expect_err("zero");
    assert_eq!(e.kind, ErrorKind::Invalid);
}

#[tokio::test]
async fn output_is_capped_with_a_note() {
    if !available("cap") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_client("kh");
    let out = c.exec(&s.target(), "head -c 1100000 /dev/zero", None, T).await.expect("exec");
    assert_eq!(out.exit_code, Some(0));
    let note = String::from_utf8_lossy(&out.stdout[MAX_STREAM..]).into_owned();
    assert!(note.contains("output cut at 1048576 bytes; 51424 more bytes discarded"), "{note}");
}

#[tokio::test]
async fn upload_is_atomic_sets_the_mode_and_handles_quotes() {
    if !available("upload") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_client("kh");
    let dir = s.dir.path().join("snippets");
    fs::create_dir(&dir).unwrap();
    for (name, body) in [("user-data.yaml", &b"#cloud-config\n"[..]), ("it's \"odd\" $x.yaml", &b"two"[..])] {
        let path = dir.join(name);
        let p = path.to_str().unwrap();
        c.upload(&s.target(), p, body, 0o640, false).await.expect("upload");
        assert_eq!((fs::read(&path).unwrap().as_slice(), mode_of(&path)), (body, 0o640));
        c.upload(&s.target(), p, b"replaced", 0o600, false).await.expect("replace");
        assert_eq!((fs::read(&path).unwrap().as_slice(), mode_of(&path)), (&b"replaced"[..], 0o600));
    }
    let names: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "temp files left: {names:?}");
    let missing = s.dir.path().join("nope/x.yaml");
    let e = c.upload(&s.target(), missing.to_str().unwrap(), b"x", 0o600, false).await.expect_err("no dir");
    assert_eq!(e.kind, ErrorKind::Failed);
    assert!(e.message.contains("nope") && e.message.contains("exists and is writable"), "{e}");
    let e = c.upload(&s.target(), dir.to_str().unwrap(), b"x", 0o600, false).await.expect_err("dir");
    assert!(e.message.contains("is a directory"), "{e}");
    for bad in ["relative/x", "/a/../b", "/a/b\nc", "/a/b/", "/"] {
        let e = c.upload(&s.target(), bad, b"x", 0o600, false).await.expect_err(bad);
        assert_eq!(e.kind, ErrorKind::Invalid, "{bad}: {e}");
    }
    let e = c.upload(&s.target(), "/tmp/x", b"x", 0o17777, false).await.expect_err("mode");
    assert_eq!(e.kind, ErrorKind::Invalid);
}

#[test]
fn the_upload_command_runs_under_sh_and_wraps_sudo_n() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("a 'b'.txt");
    let cmd = upload_command(path.to_str().unwrap(), 0o644, true, "abc");
    let plain = upload_command(path.to_str().unwrap(), 0o644, false, "abc");
    assert_eq!(cmd, format!("sudo -n {}", plain.replace(" && ", " && sudo -n ")));
    let plain = plain.as_str();
    let mut child = Command::new("sh").args(["-c", plain]).stdin(std::process::Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"content").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!((fs::read(&path).unwrap().as_slice(), mode_of(&path)), (&b"content"[..], 0o644));
}

#[tokio::test]
async fn upload_through_sudo_works_and_a_missing_sudo_is_named() {
    if !available("sudo upload") {
        return;
    }
    let has_sudo = Command::new("sudo").args(["-n", "true"]).status().map(|st| st.success()).unwrap_or(false);
    if has_sudo {
        let s = Sshd::start().await;
        let c = s.pinned_client("kh");
        let path = s.dir.path().join("sudo.txt");
        c.upload(&s.target(), path.to_str().unwrap(), b"root", 0o600, true).await.expect("sudo upload");
        assert_eq!(fs::read(&path).unwrap(), b"root");
    } else {
        eprintln!("sudo -n is not usable here: only the missing-sudo path is tested");
    }
    // A server whose sessions cannot find `sudo`.
    let key = generate_host_key("no-sudo").await.unwrap();
    let s = Sshd::start_with(key, "SetEnv PATH=/nonexistent\n");
    let c = s.pinned_client("kh");
    let path = s.dir.path().join("sudo.txt");
    let e = c.upload(&s.target(), path.to_str().unwrap(), b"root", 0o600, true).await.expect_err("no sudo");
    assert!(e.message.contains("sudo is not installed on 127.0.0.1"), "{e}");
    assert!(!path.exists());
}

#[tokio::test]
async fn pinning_is_idempotent_and_a_different_key_is_a_conflict() {
    let tmp = tempfile::tempdir().unwrap();
    let kh = KnownHosts::new(tmp.path().join("known_hosts"));
    let a = generate_host_key("a").await.unwrap();
    let b = generate_host_key("b").await.unwrap();
    assert!(kh.trust("Guest1.lab", 2222, &a.public).unwrap());
    assert!(!kh.trust("guest1.lab", 2222, &a.public).unwrap(), "same key again is a no-op");
    assert!(kh.trust("guest1.lab", 22, &b.public).unwrap(), "port 22 is another entry");
    let text = fs::read_to_string(kh.path()).unwrap();
    let first: Vec<&str> = a.public.split_whitespace().take(2).collect();
    assert_eq!(text.lines().next().unwrap(), format!("[guest1.lab]:2222 {} {}", first[0], first[1]));
    assert!(text.lines().nth(1).unwrap().starts_with("guest1.lab ssh-ed25519 "));
    assert_eq!(mode_of(kh.path()), 0o600);
    let e = kh.trust("guest1.lab", 2222, &b.public).expect_err("conflict");
    assert_eq!(e.kind, ErrorKind::Conflict);
    for part in [a.fingerprint().unwrap(), b.fingerprint().unwrap(), "[guest1.lab]:2222".into(), "ssh-keygen -R".into()]
    {
        assert!(e.message.contains(&part), "{part} missing: {e}");
    }
    assert_eq!(fs::read_to_string(kh.path()).unwrap(), text, "nothing replaced");
    assert!(kh.forget("guest1.lab", 2222).unwrap());
    assert!(!kh.forget("guest1.lab", 2222).unwrap());
    assert!(kh.trust("guest1.lab", 2222, &b.public).unwrap());
    assert_eq!(kh.pinned("guest1.lab", 22).unwrap().len(), 1);
    fs::set_permissions(kh.path(), fs::Permissions::from_mode(0o644)).unwrap();
    assert!(kh.trust("x", 22, &a.public).expect_err("too open").message.contains("chmod 600"));
    assert_eq!(kh.trust("-oProxyCommand=x", 22, &a.public).expect_err("host").kind, ErrorKind::Invalid);
}

#[tokio::test]
async fn a_changed_host_key_is_a_conflict_and_nothing_runs() {
    if !available("changed key") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.client("kh");
    let other = generate_host_key("someone-else").await.unwrap();
    c.trust_host_key("127.0.0.1", s.port, &other.public).unwrap();
    let before = fs::read(c.known_hosts().path()).unwrap();
    let marker = s.dir.path().join("marker");
    let cmd = format!("touch {}", marker.display());
    let e = c.exec(&s.target(), &cmd, None, T).await.expect_err("mismatch");
    assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
    assert!(e.message.contains(&s.host_key.fingerprint().unwrap()), "offered key: {e}");
    assert!(e.message.contains(&other.fingerprint().unwrap()), "pinned key: {e}");
    assert!(!marker.exists(), "the command must not run");
    assert_eq!(fs::read(c.known_hosts().path()).unwrap(), before, "known_hosts untouched");
    assert_eq!(c.wait_for(&s.target(), T).await.expect_err("no waiting").kind, ErrorKind::Conflict);
}

#[tokio::test]
async fn an_unpinned_host_is_refused_and_not_learned() {
    if !available("unknown host") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.client("kh");
    let marker = s.dir.path().join("marker");
    let e = c.exec(&s.target(), &format!("touch {}", marker.display()), None, T).await.expect_err("unknown");
    assert_eq!(e.kind, ErrorKind::Failed, "{e}");
    assert!(e.message.contains("trust-host-key") && e.message.contains(&format!("[127.0.0.1]:{}", s.port)), "{e}");
    assert!(!marker.exists());
    let learned = fs::read_to_string(c.known_hosts().path()).unwrap_or_default();
    assert!(learned.is_empty(), "nothing may be added: {learned}");
    // Once pinned the same server is reachable; once forgotten it is refused again.
    c.trust_host_key("127.0.0.1", s.port, &s.host_key.public).unwrap();
    c.wait_for(&s.target(), T).await.expect("pinned");
    assert!(c.forget_host_key("127.0.0.1", s.port).unwrap());
    assert_eq!(c.exec(&s.target(), "true", None, T).await.expect_err("forgotten").kind, ErrorKind::Failed);
}

#[tokio::test]
async fn refused_connections_are_transient_and_wait_for_gives_up() {
    let tmp = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let c = SshClient::new(SshSettings {
        known_hosts: tmp.path().join("kh"),
        identity: None,
        connect_timeout: Duration::from_secs(2),
        control_dir: None,
        client: super::ClientKind::OpenSsh,
    })
    .unwrap();
    let t = Target { host: "127.0.0.1".into(), port, user: "root".into() };
    let e = c.exec(&t, "true", None, T).await.expect_err("refused");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(e.message.contains("Connection refused") && e.message.contains(&format!("port {port}")), "{e}");
    let started = Instant::now();
    let e = c.wait_for(&t, Duration::from_millis(1500)).await.expect_err("gives up");
    assert_eq!(e.kind, ErrorKind::Transient);
    assert!(e.message.contains("no SSH session within 1500 ms"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let bad = Target { host: "-oProxyCommand=touch".into(), port: 22, user: "root".into() };
    assert_eq!(c.exec(&bad, "true", None, T).await.expect_err("option").kind, ErrorKind::Invalid);
    let bad = Target { host: "h".into(), port: 22, user: "-oX".into() };
    assert_eq!(c.exec(&bad, "true", None, T).await.expect_err("user").kind, ErrorKind::Invalid);
}

/// What sshguard and fail2ban count as attacks never comes from waiting: a
/// port that refuses is probed at the TCP level only (no sshd sees it), and
/// the probe that finds it open identifies itself before it hangs up, so the
/// server logs at most one connection that did not authenticate.
#[tokio::test]
async fn waiting_for_a_host_never_looks_like_an_attack_to_its_sshd() {
    if !available("quiet wait") {
        return;
    }
    let s = Sshd::start().await;
    // The fixture's own readiness check connected bare; only what follows counts.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = s.log().len();
    let c = s.pinned_client("kh");
    c.wait_for(&s.target(), T).await.expect("up");
    c.wait_for(&s.target(), T).await.expect("again, through the master");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = s.log()[before..].to_string();
    for attack in ["Did not receive identification string", "Bad protocol version", "invalid protocol identifier"] {
        assert!(!log.contains(attack), "sshd logged `{attack}`:\n{log}");
    }
    let unauthenticated = log
        .lines()
        .filter(|l| l.contains("[preauth]"))
        .filter(|l| ["Connection closed by", "Connection reset by", "Disconnected from"].iter().any(|m| l.contains(m)))
        .count();
    assert!(unauthenticated <= 1, "at most the one probe that found the port open:\n{log}");
    assert_eq!(s.logins(), 1, "one real session, shared by the second wait");
}

#[tokio::test]
async fn a_wrong_key_fails_authentication_naming_user_and_key() {
    if !available("auth") {
        return;
    }
    let s = Sshd::start().await;
    let wrong = s.dir.path().join("wrong_key");
    let st = Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(&wrong).status().unwrap();
    assert!(st.success());
    let c = s.client_with("kh", Some(wrong.clone()), None);
    c.trust_host_key("127.0.0.1", s.port, &s.host_key.public).unwrap();
    let e = c.exec(&s.target(), "true", None, T).await.expect_err("auth");
    assert_eq!(e.kind, ErrorKind::Failed, "{e}");
    assert!(e.message.contains(&format!("user `{}`", s.user)) && e.message.contains(wrong.to_str().unwrap()), "{e}");
    assert_eq!(c.wait_for(&s.target(), T).await.expect_err("no waiting").kind, ErrorKind::Failed);
    fs::set_permissions(&wrong, fs::Permissions::from_mode(0o644)).unwrap();
    let e = SshClient::new(c.settings().clone()).expect_err("too open");
    assert!(e.message.contains("chmod 600"), "{e}");
}

/// The processes whose parent is `pid` (from /proc).
pub(super) fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()) {
        let Ok(child) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let stat = fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // `pid (comm) state ppid …`; comm may contain spaces, so split after the last `)`.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

/// Awaits every future (no `futures` dependency: they are polled together by `join!`-ing a vec).
pub(super) async fn futures_join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut pinned: Vec<std::pin::Pin<Box<F>>> = futs.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in pinned.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    out.into_iter().map(|o| o.expect("ready")).collect()
}

/// Whether `pid` runs (a zombie does not count).
fn running(pid: u32) -> bool {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_some_and(|state| state != "Z")
}

/// Waits up to 5 s for `pid` to end.
fn ended(pid: u32) -> bool {
    let started = Instant::now();
    while running(pid) {
        if started.elapsed() > Duration::from_secs(5) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// The pid of the master listening at `socket` (`ssh -O check`).
fn master_pid(socket: &Path) -> Option<u32> {
    let out = Command::new("ssh")
        .args(["-F", "/dev/null", "-o"])
        .arg(format!("ControlPath={}", socket.display()))
        .args(["-O", "check", "x"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    said.split("pid=").nth(1)?.split(')').next()?.parse().ok()
}

/// Every `ssh` master process serving a socket in `dir`.
fn masters_in(dir: &Path) -> Vec<u32> {
    let dir = dir.to_string_lossy().into_owned();
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()) {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&dir) && cmdline.contains("[mux]") && running(pid) {
            out.push(pid);
        }
    }
    out
}

#[tokio::test]
async fn calls_share_one_connection_and_the_master_ends_with_the_client() {
    if !available("multiplexing") {
        return;
    }
    let s = Sshd::start().await;
    let dir = s.mux_dir();
    assert_eq!(mode_of(&dir), 0o700, "the control directory is owner-only");
    let c = s.pinned_client("kh");
    assert_eq!(c.settings().control_dir.as_deref(), Some(dir.as_path()));
    for i in 0..3 {
        let started = Instant::now();
        let out = c.exec(&s.target(), &format!("echo {i}"), None, T).await.expect("exec");
        assert_eq!((out.stdout, out.stderr), (format!("{i}\n").into_bytes(), Vec::new()));
        assert!(started.elapsed() < Duration::from_secs(5), "a background master must not hold the call");
    }
    let out = c.exec(&s.target(), "cat", Some(b"through the master"), T).await.expect("stdin");
    assert_eq!(out.stdout, b"through the master");
    c.wait_for(&s.target(), T).await.expect("wait_for");
    assert_eq!(s.logins(), 1, "one authentication for every call");
    let socket = c.control_path(&s.target()).unwrap().expect("a pinned host gets a master");
    // Calls after the first speak the mux protocol on the socket themselves (no `ssh` process).
    let big = vec![b'x'; 3 * 1024 * 1024];
    let cmd = "wc -c; echo err >&2; head -c 1100000 /dev/zero; exit 3";
    let super::mux_client::Via::Ran(out) = super::mux_client::exec(&socket, &s.target(), cmd, Some(&big), T).await
    else {
        panic!("the master is listening: the native client must open a session")
    };
    let out = out.expect("ran");
    assert_eq!((out.exit_code, out.stderr.as_slice()), (Some(3), &b"err\n"[..]));
    assert!(out.stdout.starts_with(b"3145728\n"), "all of stdin arrived");
    assert!(String::from_utf8_lossy(&out.stdout).contains("output cut at 1048576 bytes"), "capped as with ssh");
    // A remote command killed by a signal: no exit status, the connection lives on.
    let out = c.exec(&s.target(), "kill -9 $$", None, T).await.expect("a signal is output");
    assert_eq!(out.exit_code, Some(255));
    let none = s.dir.path().join("no-such-socket");
    assert!(matches!(
        super::mux_client::exec(&none, &s.target(), "true", None, T).await,
        super::mux_client::Via::Unavailable
    ));
    assert_eq!(s.logins(), 1);
    assert!(socket.starts_with(&dir));
    assert!(socket.as_os_str().len() + 17 < 104, "room for ssh's temporary suffix: {}", socket.display());
    let pid = master_pid(&socket).expect("a master listens");
    assert_eq!(masters_in(&dir), vec![pid]);
    drop(c);
    assert!(ended(pid), "the master ends with its client");
    assert!(!socket.exists());
    assert!(masters_in(&dir).is_empty());
    // Without a pin there is no master; a client without a control directory never makes one.
    let c = s.client("kh2");
    assert_eq!(c.control_path(&s.target()).unwrap(), None);
    let d = s.direct_client("kh3");
    d.trust_host_key("127.0.0.1", s.port, &s.host_key.public).unwrap();
    assert_eq!(d.control_path(&s.target()).unwrap(), None);
    d.exec(&s.target(), "true", None, T).await.expect("direct");
    d.exec(&s.target(), "true", None, T).await.expect("direct");
    assert_eq!(s.logins(), 3, "a direct client authenticates per call");
}

/// The first call on a new master runs as that master's mux client: `ssh`
/// exits on the exit status while the master may still be writing the
/// session's output. Output that arrives after the status (a background job
/// still holding stdout, as a loaded guest or master delays it) is read to its
/// end, never cut at a grace period; output that never ends within the call's
/// timeout is an error naming the host and the command, never an empty success.
#[tokio::test]
async fn output_after_the_exit_status_is_never_lost_through_a_shared_connection() {
    if !available("late output") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_client("kh");
    let socket = c.control_path(&s.target()).unwrap().expect("a pinned host gets a master");
    assert!(!socket.exists(), "no master yet: this call runs `ssh`, which makes it");
    let late = "(sleep 2; echo late) & echo early";
    let out = c.exec(&s.target(), late, None, T).await.expect("exec");
    assert_eq!((out.exit_code, String::from_utf8_lossy(&out.stdout).as_ref()), (Some(0), "early\nlate\n"));
    assert!(socket.exists(), "the call made the master");
    // Through the master (no `ssh` process) the same holds.
    let out = c.exec(&s.target(), late, None, T).await.expect("exec on the master");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "early\nlate\n");
    // Output that outlives the call's time is an error, on either path.
    let endless = "(sleep 30; echo never) & echo early";
    let e = c.exec(&s.target(), endless, None, Duration::from_millis(1500)).await.expect_err("incomplete");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(e.message.contains("sleep 30") && e.message.contains("127.0.0.1"), "{e}");
    drop(c);
    let c = s.pinned_client("kh2");
    let e = c.exec(&s.target(), endless, None, Duration::from_millis(1500)).await.expect_err("incomplete via ssh");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(e.message.contains("sleep 30") && e.message.contains("127.0.0.1"), "{e}");
}

/// One command running past its timeout loses its own session only: the
/// master and a concurrent session on it (another VM's upload to the same
/// node) carry on, and the next call needs no new login.
#[tokio::test]
async fn a_timed_out_command_does_not_end_the_shared_connection_or_its_other_sessions() {
    if !available("multiplexing") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_client("kh");
    c.exec(&s.target(), "true", None, T).await.expect("the first call makes the master");
    let socket = c.control_path(&s.target()).unwrap().expect("a master");
    let pid = master_pid(&socket).expect("a master listens");
    let target = s.target();
    let slow = c.exec(&target, "sleep 30", None, Duration::from_millis(500));
    let other = c.exec(&target, "sleep 1; echo still here", None, T);
    let (slow, other) = tokio::join!(slow, other);
    assert_eq!(slow.expect_err("over its timeout").kind, ErrorKind::Transient);
    assert_eq!(other.expect("the other session finished").stdout, b"still here\n");
    assert_eq!(master_pid(&socket), Some(pid), "the same master still serves");
    c.exec(&s.target(), "true", None, T).await.expect("and takes the next call");
    assert_eq!(s.logins(), 1, "no new login");
}

#[tokio::test]
async fn clients_of_one_process_share_a_master_until_the_last_is_dropped() {
    if !available("shared master") {
        return;
    }
    let s = Sshd::start().await;
    let a = s.pinned_client("kh");
    let b = SshClient::new(a.settings().clone()).unwrap();
    // Concurrent first calls wait for one master instead of each connecting.
    let target = s.target();
    let calls = (0..3).map(|i| {
        let c = if i % 2 == 0 { &a } else { &b };
        c.exec(&target, "sleep 0.3; true", None, T)
    });
    for r in futures_join_all(calls).await {
        r.expect("concurrent first calls");
    }
    assert_eq!(s.logins(), 1, "one master for both runs");
    let socket = a.control_path(&s.target()).unwrap().unwrap();
    assert_eq!(b.control_path(&s.target()).unwrap().as_ref(), Some(&socket));
    let pid = master_pid(&socket).expect("a master");
    drop(a);
    assert!(running(pid) && socket.exists(), "b still uses the master");
    b.exec(&s.target(), "true", None, T).await.expect("b again");
    drop(b);
    assert!(ended(pid), "the last client stops the master");
    assert!(!socket.exists());
}

/// Security: the master is the connection that checked the host key. Once the
/// pin changes, no call may ride on a master that authenticated the old key.
#[tokio::test]
async fn a_changed_pin_never_reaches_a_master_opened_under_the_old_one() {
    if !available("pin change") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_client("kh");
    c.exec(&s.target(), "true", None, T).await.expect("the master comes up");
    let old = c.control_path(&s.target()).unwrap().unwrap();
    let pid = master_pid(&old).expect("a master");
    let marker = s.dir.path().join("marker");
    let touch = format!("touch {}", marker.display());
    // The pin changes behind the client's back (another cradle process, or an
    // operator's `ssh-keygen -R`), so the client cannot close the master itself.
    let kh = KnownHosts::new(c.known_hosts().path().to_path_buf());
    assert!(kh.forget("127.0.0.1", s.port).unwrap());
    let e = c.exec(&s.target(), &touch, None, T).await.expect_err("nothing pinned: refused");
    assert_eq!(e.kind, ErrorKind::Failed, "{e}");
    assert!(e.message.contains("trust-host-key"), "{e}");
    let other = generate_host_key("another-machine").await.unwrap();
    assert!(kh.trust("127.0.0.1", s.port, &other.public).unwrap());
    let e = c.exec(&s.target(), &touch, None, T).await.expect_err("a different pin: refused");
    assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
    assert!(e.message.contains(&other.fingerprint().unwrap()), "{e}");
    assert_eq!(c.wait_for(&s.target(), T).await.expect_err("no waiting").kind, ErrorKind::Conflict);
    let e = c.upload(&s.target(), marker.to_str().unwrap(), b"x", 0o600, false).await.expect_err("upload");
    assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
    assert!(!marker.exists(), "nothing ran");
    assert!(running(pid) && master_pid(&old) == Some(pid), "the old master was there, and bypassed");
    assert_eq!(s.logins(), 1, "no call authenticated");
    // Through the client, a pin change also closes the host's masters at once.
    assert!(c.forget_host_key("127.0.0.1", s.port).unwrap());
    assert!(ended(pid), "forget-host-key closes the old master");
    assert!(!old.exists());
    assert!(c.trust_host_key("127.0.0.1", s.port, &s.host_key.public).unwrap());
    c.exec(&s.target(), &touch, None, T).await.expect("pinned again: a new, checked connection");
    assert!(marker.exists());
    assert_eq!(s.logins(), 2);
}

#[tokio::test]
async fn a_dead_master_or_a_dropped_connection_costs_a_reconnect_not_an_error() {
    if !available("dead master") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_client("kh");
    c.exec(&s.target(), "true", None, T).await.expect("the master comes up");
    let socket = c.control_path(&s.target()).unwrap().unwrap();
    // A master killed without cleanup leaves a stale socket: ssh replaces it.
    let pid = master_pid(&socket).expect("a master");
    assert!(Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap().success());
    assert!(ended(pid));
    assert!(socket.exists(), "the killed master's socket stays behind");
    let out = c.exec(&s.target(), "echo again", None, T).await.expect("a stale socket is replaced");
    assert_eq!((out.exit_code, out.stdout, out.stderr), (Some(0), b"again\n".to_vec(), Vec::new()));
    assert_eq!(s.logins(), 2);
    // The server drops the connection (a guest that reboots): the master ends
    // with it and the next call connects anew.
    let pid = master_pid(&socket).expect("a new master");
    s.drop_connections();
    assert!(ended(pid), "the master ends with its connection");
    c.wait_for(&s.target(), T).await.expect("reconnects");
    let out = c.exec(&s.target(), "echo back", None, T).await.expect("after the drop");
    assert_eq!((out.stdout, out.stderr), (b"back\n".to_vec(), Vec::new()));
    assert_eq!(s.logins(), 3);
    // A call that times out on a connection that still works keeps the master.
    let pid = master_pid(&socket).expect("a master again");
    let e = c.exec(&s.target(), "sleep 30", None, Duration::from_millis(1500)).await.expect_err("timeout");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert_eq!(master_pid(&socket), Some(pid), "a working connection is kept");
    assert_eq!(s.logins(), 3);
    // A hung connection (the server stops answering) is ended after the
    // timeout: whatever hung behind it is not reused.
    s.freeze_connections();
    let e = c.exec(&s.target(), "true", None, Duration::from_millis(1500)).await.expect_err("hung");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(ended(pid), "a hung connection's master is closed");
    c.exec(&s.target(), "true", None, T).await.expect("a fresh connection");
    assert_eq!(s.logins(), 4);
}

#[tokio::test]
async fn generated_host_keys_are_valid_match_their_public_half_and_stay_secret() {
    let key = generate_host_key("test-0").await.expect("generate");
    assert!(key.public.starts_with("ssh-ed25519 AAAA") && key.public.ends_with(" test-0"), "{}", key.public);
    let private = key.private_openssh.expose().to_string();
    assert!(private.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"));
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("k");
    write_private(&file, private.as_bytes());
    let derived = Command::new("ssh-keygen").args(["-y", "-f"]).arg(&file).output().unwrap();
    let derived = String::from_utf8(derived.stdout).unwrap();
    assert_eq!(
        derived.split_whitespace().take(2).collect::<Vec<_>>(),
        key.public.split_whitespace().take(2).collect::<Vec<_>>()
    );
    fs::write(tmp.path().join("k.pub"), &key.public).unwrap();
    let listed = Command::new("ssh-keygen").args(["-l", "-f"]).arg(tmp.path().join("k.pub")).output().unwrap();
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert_eq!(listed.split_whitespace().nth(1), Some(key.fingerprint().unwrap().as_str()), "as ssh-keygen -l prints");
    // Canary: the private body never shows in Debug, errors or redacted text.
    let body = private.lines().nth(1).unwrap().to_string();
    assert!(!format!("{key:?}").contains(&body));
    let e = KnownHosts::new(tmp.path().join("kh")).trust("h", 22, &private).expect_err("private key");
    assert!(!e.message.contains(&body) && !format!("{e:?}").contains(&body), "{e}");
    assert!(!crate::secrets::redact(&format!("x {private} y")).contains(&body));
    let leftovers = fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("cradle-keygen-{}-", std::process::id())))
        .count();
    assert_eq!(leftovers, 0, "temporary key directories must be removed");
    assert_eq!(generate_host_key("a\nb").await.expect_err("comment").kind, ErrorKind::Invalid);
}

#[tokio::test]
async fn uploaded_secrets_do_not_appear_in_errors() {
    if !available("secret upload") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_client("kh");
    let body = s.host_key.private_openssh.expose().lines().nth(1).unwrap().to_string();
    let path = s.dir.path().join("missing/dir/key");
    let e = c
        .upload(&s.target(), path.to_str().unwrap(), s.host_key.private_openssh.expose().as_bytes(), 0o600, false)
        .await
        .expect_err("no dir");
    assert!(!e.message.contains(&body), "{e}");
}

fn confine(dir: &Path) -> Confine {
    Confine { dir: dir.display().to_string(), key: "plugins.p.grants.ssh.upload_dirs".into() }
}

/// A granted upload dir (`snippets`) and a directory outside it, on the sshd's host.
fn granted_and_outside(s: &Sshd) -> (std::path::PathBuf, std::path::PathBuf) {
    let granted = s.dir.path().join("snippets");
    let outside = s.dir.path().join("outside");
    fs::create_dir(&granted).unwrap();
    fs::create_dir(&outside).unwrap();
    (granted, outside)
}

#[tokio::test]
async fn an_upload_through_a_symlinked_directory_inside_the_granted_dir_is_denied() {
    if !available("upload-symlink-dir") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_client("kh");
    let (granted, outside) = granted_and_outside(&s);
    std::os::unix::fs::symlink(&outside, granted.join("evil")).unwrap();
    let path = granted.join("evil/x.yaml");
    let e = c
        .upload_within(&s.target(), path.to_str().unwrap(), b"pwned", 0o600, false, Some(&confine(&granted)))
        .await
        .expect_err("the directory resolves outside the grant");
    assert_eq!(e.kind, ErrorKind::Denied, "{e}");
    assert!(e.message.contains(&format!("resolves to {} on the remote host", outside.display())), "{e}");
    assert!(e.message.contains("plugins.p.grants.ssh.upload_dirs"), "{e}");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0, "nothing was written outside the granted dir");
    // A real subdirectory is fine, and is written in place.
    fs::create_dir(granted.join("sub")).unwrap();
    let ok = granted.join("sub/y.yaml");
    c.upload_within(&s.target(), ok.to_str().unwrap(), b"fine", 0o600, false, Some(&confine(&granted)))
        .await
        .expect("a subdirectory that resolves inside");
    assert_eq!(fs::read(&ok).unwrap(), b"fine");
}

#[tokio::test]
async fn an_upload_onto_a_planted_symlink_replaces_it_instead_of_writing_through_it() {
    if !available("upload-symlink-file") {
        return;
    }
    let s = Sshd::start().await;
    let c = s.pinned_client("kh");
    let (granted, outside) = granted_and_outside(&s);
    fs::write(outside.join("victim"), b"original").unwrap();
    let file = granted.join("vm-user.yaml");
    std::os::unix::fs::symlink(outside.join("victim"), &file).unwrap();
    c.upload_within(&s.target(), file.to_str().unwrap(), b"new", 0o600, false, Some(&confine(&granted)))
        .await
        .expect("upload");
    assert_eq!(fs::read(outside.join("victim")).unwrap(), b"original", "the symlink's target is untouched");
    assert!(!fs::symlink_metadata(&file).unwrap().file_type().is_symlink(), "the symlink was replaced");
    assert_eq!(fs::read(&file).unwrap(), b"new");
}

#[test]
fn node_targets_parse_with_defaults() {
    assert_eq!(
        super::NodeSsh::parse("pve1.lab").expect("t"),
        super::NodeSsh { host: "pve1.lab".into(), port: 22, user: "root".into(), host_key: None }
    );
    assert_eq!(
        super::NodeSsh::parse("admin@10.0.0.11:2222").expect("t"),
        super::NodeSsh { host: "10.0.0.11".into(), port: 2222, user: "admin".into(), host_key: None }
    );
    assert!(super::NodeSsh::parse("root@:22").is_err());
    assert!(super::NodeSsh::parse("root@h:x").is_err());
}
