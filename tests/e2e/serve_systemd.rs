//! `cradle serve` under systemd's `Type=notify`, through the real binary: a
//! unix datagram socket made by the test stands in for the service manager's
//! `$NOTIFY_SOCKET` (sd_notify(3)). `READY=1` arrives once the port accepts
//! and the unfinished events are loaded (its STATUS counts them),
//! `STOPPING=1` once SIGTERM starts the shutdown, and the process exits 0
//! after the grace period; the event a kill left unfinished completes after
//! the restart.

use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::Duration;

use cradle::serve::EventState;
use cradle_tests::serve_process::{REAL_BODY, Served, http_request};

use crate::serve::{deliver, journals, project, wait_events};

/// The next datagram on `socket`, as text (a minute at most).
fn next(socket: &UnixDatagram) -> String {
    socket.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).expect("a notification within a minute");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Nothing more on `socket` right now.
fn nothing_more(socket: &UnixDatagram) -> Option<String> {
    socket.set_nonblocking(true).expect("nonblocking");
    let mut buf = [0u8; 4096];
    let got = socket.recv(&mut buf).ok().map(|n| String::from_utf8_lossy(&buf[..n]).into_owned());
    socket.set_nonblocking(false).expect("blocking");
    got
}

#[test]
fn cradle_serve_notifies_ready_once_listening_with_the_resumed_events_and_stopping_on_sigterm() {
    let dir = project();
    // The first process is killed as its pipeline reaches `make`: one event
    // is left unfinished for the next start to resume.
    let crashed = Served::start(dir.path(), &[("CRADLE_CRASH_AT", "before:make@probe-vm")]);
    assert_eq!(deliver(crashed.addr(), REAL_BODY).0, 202);
    let mut child = crashed.child;
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&child.wait().expect("wait")), Some(9));

    let path = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&path).expect("bind the notify socket");
    let served = Served::start(dir.path(), &[("NOTIFY_SOCKET", path.to_str().expect("utf-8 path"))]);
    let ready = next(&manager);
    let addr = served.addr();
    assert_eq!(ready, format!("READY=1\nSTATUS=listening on {addr}, 1 pending event(s) resumed"));
    // Ready means the port answers.
    let (status, _, _) = http_request(addr, "GET /healthz HTTP/1.1\r\nHost: cradle\r\nConnection: close\r\n\r\n", b"");
    assert_eq!(status, 200);
    let events = wait_events(dir.path(), |e| e.first().is_some_and(|e| !e.state.unfinished()));
    assert_eq!((events[0].state, events[0].attempts), (EventState::Done, 2), "{events:?}");
    assert_eq!(nothing_more(&manager), None, "one READY, nothing before SIGTERM");

    let log = served.log.clone();
    let mut child = served.child;
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    let stopping = next(&manager);
    assert!(stopping.starts_with("STOPPING=1\nSTATUS=stopping: running pipelines get 1s"), "{stopping}");
    assert!(child.wait().expect("wait").success(), "{}", log.lock().expect("log"));
    assert_eq!(journals(dir.path()).matches("made probe-vm").count(), 1, "the step ran exactly once");
}

#[test]
fn without_notify_socket_cradle_serve_sends_nothing_and_stops_as_before() {
    let dir = project();
    let served = Served::start(dir.path(), &[]);
    let (status, _, _) =
        http_request(served.addr(), "GET /healthz HTTP/1.1\r\nHost: cradle\r\nConnection: close\r\n\r\n", b"");
    assert_eq!(status, 200);
    assert!(served.stop().success());
}
