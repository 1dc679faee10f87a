//! `cradle serve` under systemd's `Type=notify`, through the real binary: a
//! unix datagram socket made by the test stands in for the service manager's
//! `$NOTIFY_SOCKET` (sd_notify(3)). `READY=1` arrives once the port accepts
//! and the unfinished events are loaded (its STATUS counts them), then
//! STATUS= follows the events running, waiting and ended, `STOPPING=1` once SIGTERM starts the shutdown, and the process exits 0
//! after the grace period; the event a kill left unfinished completes after
//! the restart, and so does the one a SIGTERM stopped mid-step.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cradle::serve::{EventState, EventStore};
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
    // Between READY and STOPPING only STATUS=, kept current: the resumed
    // event's end is counted (its start may come before READY, and is then
    // not sent: nothing precedes READY).
    let done = format!("STATUS=listening on {addr}: 0 running, 0 waiting; 1 done, 0 failed since the start");
    loop {
        let status = next(&manager);
        assert!(status.starts_with(&format!("STATUS=listening on {addr}: ")), "only STATUS= after READY: {status}");
        if status == done {
            break;
        }
    }
    assert_eq!(nothing_more(&manager), None, "one READY, the status, nothing else before SIGTERM");

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

/// A guest's health URL that the test holds shut: while shut, each probe is
/// held up to 5 s and answered `503` (so a workflow polling it waits without
/// spinning, and a probe is in flight when the service stops); once opened,
/// `200`, at once. It records the path of every probe.
struct Gate {
    addr: SocketAddr,
    open: Arc<AtomicBool>,
    asked: Arc<Mutex<Vec<String>>>,
}

impl Gate {
    fn shut() -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the gate");
        let addr = listener.local_addr().expect("gate address");
        let (open, asked) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
        let (o, a) = (open.clone(), asked.clone());
        std::thread::spawn(move || {
            for mut stream in listener.incoming().map_while(Result::ok) {
                let (open, asked) = (o.clone(), a.clone());
                std::thread::spawn(move || {
                    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    asked.lock().expect("asked").push(head.split(' ').nth(1).unwrap_or_default().to_string());
                    let held = Instant::now();
                    while !open.load(Ordering::SeqCst) && held.elapsed() < Duration::from_secs(5) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    let status = if open.load(Ordering::SeqCst) { "200 OK" } else { "503 Service Unavailable" };
                    let answer = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                    let _ = stream.write_all(answer.as_bytes());
                });
            }
        });
        Gate { addr, open, asked }
    }

    /// Wait (a minute at most) until a probe asked for `path`.
    fn wait_asked(&self, path: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.asked.lock().expect("asked").iter().any(|p| p == path) {
            assert!(Instant::now() < deadline, "no probe of {path}: {:?}", self.asked.lock().expect("asked"));
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The serve workflow with a `make` step that stays busy until the gate at
/// `port` opens: it polls `/attempt-N` (N the event's attempt) and only then
/// does its side effect, the `made` journal line.
fn gated_workflow(port: u16) -> String {
    r#"
fn host(event) {
    #{ name: event.vm_name, vars: #{ target_node: "pve1", vms_vmid: 4000 + event.vm_id, ansible_host: "127.0.0.1" } }
}
fn staged(event, vm) {
    step(vm.name, "make", || {
        log::info(`make of ${vm.name} started, attempt ${event.attempt}`);
        loop {
            if http::probe(`http://127.0.0.1:PORT/attempt-${event.attempt}`, 10000).status == 200 { break; }
        }
        log::info(`made ${vm.name}`);
    });
    `ready ${vm.name}`
}
fn failed(event, failure) {
    log::info(`RECORDED ${event.vm_name} failed at ${failure.step}: ${failure.message}`);
}
"#
    .replace("PORT", &port.to_string())
}

#[test]
fn sigterm_mid_pipeline_stops_after_the_grace_and_the_restart_finishes_the_event_once() {
    let dir = project();
    let gate = Gate::shut();
    std::fs::write(dir.path().join("workflows/netbox.rhai"), gated_workflow(gate.addr.port())).expect("workflow");
    let config = dir.path().join("cradle.toml");
    let mut toml = std::fs::read_to_string(&config).expect("cradle.toml");
    toml.push_str(&format!("\n[workflow.grants.http]\nguest_ports = [{}]\n", gate.addr.port()));
    std::fs::write(&config, toml).expect("cradle.toml");
    let path = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&path).expect("bind the notify socket");
    let notify = [("NOTIFY_SOCKET", path.to_str().expect("utf-8 path"))];

    let served = Served::start(dir.path(), &notify);
    assert!(next(&manager).starts_with("READY=1\n"), "ready first");
    assert_eq!(deliver(served.addr(), REAL_BODY).0, 202);
    // The step is running: it polls the gate, which stays shut.
    gate.wait_asked("/attempt-1");
    let addr = served.addr();
    let running = format!("STATUS=listening on {addr}: 1 running, 0 waiting; 0 done, 0 failed since the start");
    let accepted = format!("STATUS=listening on {addr}: 0 running, 1 waiting; 0 done, 0 failed since the start");
    // Accepted, then running, as `systemctl status` shows them (the
    // dispatcher may start it before the listener reports it accepted).
    let (first, second) = (next(&manager), next(&manager));
    assert!(first == accepted || first == running, "{first}");
    assert_eq!(second, running);
    let log = served.log.clone();
    let mut child = served.child;
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    let stopping = next(&manager);
    assert!(stopping.starts_with("STOPPING=1\nSTATUS=stopping: running pipelines get 1s"), "{stopping}");
    let status = child.wait().expect("wait");
    let printed = log.lock().expect("log").clone();
    assert!(status.success(), "SIGTERM with a pipeline running past the grace is a clean stop: {status:?}\n{printed}");
    assert!(printed.contains("1 pipeline(s) were still running and resume at the next start"), "{printed}");
    let events = EventStore::read(&dir.path().join("state/serve")).expect("events");
    assert_eq!((events.len(), events[0].state, events[0].attempts), (1, EventState::Running, 1), "{events:?}");
    let all = journals(dir.path());
    assert!(all.contains("make of probe-vm started, attempt 1"), "{all}");
    assert!(!all.contains("made probe-vm"), "the step had not finished: {all}");
    // Shutting the runtime down under the abandoned pipeline used to fail its
    // probe, hence its step, and run `failed()` (NetBox: status Failed) for an
    // event that then resumed and succeeded.
    assert!(!all.contains("RECORDED"), "a stop is no failure, nothing reached failed(): {all}");

    let served = Served::start(dir.path(), &notify);
    let addr = served.addr();
    assert_eq!(next(&manager), format!("READY=1\nSTATUS=listening on {addr}, 1 pending event(s) resumed"));
    gate.wait_asked("/attempt-2");
    assert_eq!(wait_events(dir.path(), |_| true)[0].state, EventState::Running, "held at the gate");
    gate.open.store(true, Ordering::SeqCst);
    let events = wait_events(dir.path(), |e| e.first().is_some_and(|e| !e.state.unfinished()));
    assert_eq!((events.len(), events[0].state, events[0].attempts), (1, EventState::Done, 2), "{events:?}");
    assert_eq!(events[0].detail.as_deref(), Some("\"ready probe-vm\""), "{events:?}");
    assert!(served.stop().success());
    let all = journals(dir.path());
    assert_eq!(all.matches("made probe-vm").count(), 1, "the step's side effect happened exactly once: {all}");
    assert!(!all.contains("RECORDED"), "{all}");
}
