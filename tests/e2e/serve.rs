//! `cradle serve`, through its library over real HTTP and through the real
//! binary: signed NetBox webhooks are recorded durably before `202`, anything
//! forged, unsigned, altered or oversized changes nothing, one VM is in flight
//! once, and events survive a stop or a kill -9 to run exactly once.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use cradle::serve::{Event, EventState, EventStore, Outcome, Pipeline, ServeConfig, Stopped, WebhookKey};
use cradle_tests::cradle_bin;
use cradle_tests::serve_process::{REAL_BODY, Served, body_for, http_request};

const SECRET: &str = "CANARY-WEBHOOK-SECRET-7f3a";

fn sign(body: &str) -> String {
    WebhookKey::new(SECRET.as_bytes()).sign(body.as_bytes())
}

/// One HTTP/1.1 request on its own connection; the status and the body.
fn request(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    let (status, _, body) = http_request(addr, head, body);
    (status, body)
}

fn post(addr: SocketAddr, path: &str, signature: Option<&str>, body: &str) -> (u16, String) {
    let sig = signature.map(|s| format!("X-Hook-Signature: {s}\r\n")).unwrap_or_default();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: cradle\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{sig}Connection: close\r\n\r\n",
        body.len()
    );
    request(addr, &head, body.as_bytes())
}

pub(crate) fn deliver(addr: SocketAddr, body: &str) -> (u16, String) {
    post(addr, "/hooks/netbox", Some(&sign(body)), body)
}

/// A pipeline that records each run and holds the VMs in `held` until released.
#[derive(Default)]
struct Gate {
    runs: Mutex<Vec<(u64, u64)>>,
    held: Mutex<Vec<u64>>,
    changed: Condvar,
}

impl Gate {
    fn holding(vm_ids: &[u64]) -> Arc<Gate> {
        Arc::new(Gate { held: Mutex::new(vm_ids.to_vec()), ..Gate::default() })
    }
    fn release_all(&self) {
        self.held.lock().expect("gate").clear();
        self.changed.notify_all();
    }
    fn runs(&self) -> Vec<(u64, u64)> {
        self.runs.lock().expect("gate").clone()
    }
    fn wait_runs(&self, n: usize) -> Vec<(u64, u64)> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.runs().len() < n {
            assert!(Instant::now() < deadline, "{} runs, wanted {n}", self.runs().len());
            std::thread::sleep(Duration::from_millis(10));
        }
        self.runs()
    }
}

impl Pipeline for Gate {
    fn run(&self, event: &Event) -> Outcome {
        self.runs.lock().expect("gate").push((event.seq, event.vm_id));
        let mut held = self.held.lock().expect("gate");
        while held.contains(&event.vm_id) {
            held = self.changed.wait(held).expect("gate");
        }
        Outcome { ok: true, run_id: None, detail: format!("made {}", event.vm_name) }
    }
}

/// `cradle serve`'s library on its own runtime thread.
struct Service {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Stopped>>,
}

impl Service {
    fn start(dir: &Path, config: ServeConfig, pipeline: Arc<Gate>) -> Service {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel();
        let dir = dir.to_path_buf();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
            let stopped = rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
                tx.send(listener.local_addr().expect("addr")).expect("send addr");
                let keys = [("netbox".to_string(), WebhookKey::new(SECRET.as_bytes()))].into_iter().collect();
                let shutdown = async {
                    let _ = stopped.await;
                };
                cradle::serve::run(listener, &config, keys, &dir, pipeline, shutdown).await.expect("serve")
            });
            // A pipeline left running stays parked: do not wait for it, as a
            // stopped process would not.
            rt.shutdown_background();
            stopped
        });
        let addr = rx.recv_timeout(Duration::from_secs(10)).expect("listening");
        Service { addr, stop: Some(stop), thread: Some(thread) }
    }

    fn stop(mut self) -> Stopped {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.thread.take().expect("thread").join().expect("service thread")
    }
}

fn config(tweak: impl FnOnce(&mut ServeConfig)) -> ServeConfig {
    let mut c = ServeConfig { shutdown_grace_s: 0, ..ServeConfig::default() };
    tweak(&mut c);
    c
}

fn store_events(dir: &Path) -> Vec<Event> {
    EventStore::read(dir).expect("read the event log")
}

fn serve_dir(tmp: &tempfile::TempDir) -> PathBuf {
    tmp.path().join("serve")
}

#[test]
fn a_signed_delivery_is_recorded_before_202_and_its_pipeline_runs_once() {
    let tmp = tempfile::tempdir().expect("tmp");
    let gate = Gate::holding(&[]);
    let svc = Service::start(&serve_dir(&tmp), config(|_| {}), gate.clone());
    let (status, text) = deliver(svc.addr, REAL_BODY);
    assert_eq!(status, 202, "{text}");
    assert!(text.contains("\"accepted\""), "{text}");
    assert_eq!(gate.wait_runs(1), vec![(0, 1)]);
    svc.stop();
    let events = store_events(&serve_dir(&tmp));
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].vm_name.as_str(), events[0].state), ("probe-vm", EventState::Done));
    assert_eq!(events[0].request_id.as_deref(), Some("951c9de5-b5c8-45e5-8b16-5628f1f957df"));
}

#[test]
fn forged_unsigned_altered_or_oversized_deliveries_change_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let gate = Gate::holding(&[]);
    let svc = Service::start(&serve_dir(&tmp), config(|c| c.max_body_bytes = 8 * 1024), gate.clone());
    let forged = WebhookKey::new(b"not-the-secret").sign(REAL_BODY.as_bytes());
    let altered = REAL_BODY.replace("probe-vm", "evil-vm");
    let big = format!("{{\"pad\": \"{}\"}}", "x".repeat(20_000));
    let cases: Vec<(&str, (u16, String))> = vec![
        ("forged", post(svc.addr, "/hooks/netbox", Some(&forged), REAL_BODY)),
        ("unsigned", post(svc.addr, "/hooks/netbox", None, REAL_BODY)),
        ("altered body, original signature", post(svc.addr, "/hooks/netbox", Some(&sign(REAL_BODY)), &altered)),
        ("garbage signature", post(svc.addr, "/hooks/netbox", Some("sha512=deadbeef"), REAL_BODY)),
        ("oversized, signed", post(svc.addr, "/hooks/netbox", Some(&sign(&big)), &big)),
        ("unknown source", post(svc.addr, "/hooks/gitlab", Some(&sign(REAL_BODY)), REAL_BODY)),
    ];
    let chunked = format!(
        "POST /hooks/netbox HTTP/1.1\r\nHost: c\r\nTransfer-Encoding: chunked\r\nX-Hook-Signature: {}\r\nConnection: close\r\n\r\n",
        sign(&big)
    );
    let chunked_body = format!("{:x}\r\n{big}\r\n0\r\n\r\n", big.len());
    let streamed = request(svc.addr, &chunked, chunked_body.as_bytes());
    let get = request(svc.addr, "GET /hooks/netbox HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n", b"");
    let want = [401, 401, 401, 401, 413, 404];
    for ((what, (status, text)), want) in cases.iter().zip(want) {
        assert_eq!(*status, want, "{what}: {text}");
        assert!(!text.contains(SECRET), "{what}: the answer holds no secret");
    }
    assert_eq!(streamed.0, 413, "a chunked body over the limit: {}", streamed.1);
    assert_eq!(get.0, 405, "{}", get.1);
    // A valid one afterwards still works: the refusals left no state behind.
    assert_eq!(deliver(svc.addr, REAL_BODY).0, 202);
    gate.wait_runs(1);
    svc.stop();
    let events = store_events(&serve_dir(&tmp));
    assert_eq!(events.len(), 1, "only the valid delivery was recorded: {events:?}");
    assert_eq!(gate.runs().len(), 1);
}

#[test]
fn a_second_delivery_for_a_vm_in_flight_starts_no_second_run_and_a_replay_is_a_duplicate() {
    let tmp = tempfile::tempdir().expect("tmp");
    let gate = Gate::holding(&[5]);
    let svc = Service::start(&serve_dir(&tmp), config(|_| {}), gate.clone());
    let first = body_for(5, "web-5");
    assert_eq!(deliver(svc.addr, &first).0, 202);
    gate.wait_runs(1);
    // NetBox sends the change again (another request id: another body).
    let again = first.replace("951c9de5", "0000aaaa");
    let (status, text) = deliver(svc.addr, &again);
    assert_eq!((status, text.contains("in-flight")), (202, true), "{text}");
    gate.release_all();
    std::thread::sleep(Duration::from_millis(200));
    let (status, text) = deliver(svc.addr, &first);
    assert_eq!((status, text.contains("duplicate")), (200, true), "an exact replay: {text}");
    svc.stop();
    assert_eq!(gate.runs().len(), 1, "one run for the VM");
}

#[test]
fn events_in_flight_at_shutdown_resume_at_the_next_start_and_run_exactly_once_each() {
    let tmp = tempfile::tempdir().expect("tmp");
    let gate = Gate::holding(&[11, 12, 13]);
    let svc = Service::start(&serve_dir(&tmp), config(|c| c.concurrency = 1), gate.clone());
    for id in [11, 12, 13] {
        assert_eq!(deliver(svc.addr, &body_for(id, &format!("vm-{id}"))).0, 202);
    }
    gate.wait_runs(1);
    let stopped = svc.stop();
    assert_eq!(stopped.left_running, 1, "one was running, two waited");
    // The stopped service's pipeline thread is still parked: a real process
    // would be gone. A new service with a free pipeline takes over.
    let after = Gate::holding(&[]);
    let svc = Service::start(&serve_dir(&tmp), config(|_| {}), after.clone());
    let mut runs: Vec<u64> = after.wait_runs(3).into_iter().map(|(_, vm)| vm).collect();
    runs.sort_unstable();
    assert_eq!(runs, vec![11, 12, 13], "each resumed once");
    svc.stop();
    gate.release_all();
    let events = store_events(&serve_dir(&tmp));
    assert!(events.iter().all(|e| e.state == EventState::Done), "{events:?}");
    assert_eq!(events.iter().find(|e| e.vm_id == 11).map(|e| e.attempts), Some(2), "the interrupted one ran twice");
}

#[test]
fn the_request_rate_and_the_queue_are_bounded() {
    let tmp = tempfile::tempdir().expect("tmp");
    let gate = Gate::holding(&[21, 22, 23]);
    let svc = Service::start(
        &serve_dir(&tmp),
        config(|c| {
            c.max_queued = 2;
            c.concurrency = 1;
        }),
        gate.clone(),
    );
    assert_eq!(deliver(svc.addr, &body_for(21, "a")).0, 202);
    assert_eq!(deliver(svc.addr, &body_for(22, "b")).0, 202);
    let (status, text) = deliver(svc.addr, &body_for(23, "c"));
    assert_eq!(status, 503, "a full queue: {text}");
    gate.release_all();
    svc.stop();
    let tmp = tempfile::tempdir().expect("tmp");
    let svc = Service::start(&serve_dir(&tmp), config(|c| c.max_requests_per_s = 3), Gate::holding(&[]));
    let statuses: Vec<u16> = (0..10).map(|_| post(svc.addr, "/hooks/netbox", None, "{}").0).collect();
    assert!(statuses.contains(&429), "over the rate: {statuses:?}");
    assert!(statuses.iter().all(|s| *s == 401 || *s == 429), "{statuses:?}");
    svc.stop();
}

// ---- the real binary ----

const PROJECT: &str = r#"
default_environment = "test"
state_dir = "state"
[clusters.sim]
kind = "sim"
[environments.test]
cluster = "sim"
backend = "direct"
[serve]
concurrency = 2
shutdown_grace_s = 1
[serve.sources.netbox]
secret = { file = "webhook.secret" }
defaults = "netbox-defaults.yml"
"#;

/// The test workflow: `host` describes the VM from the event (a real one
/// reads NetBox), refuses VM 99 and skips VM 98; `staged` does one step;
/// `failed` records the failure in its run's journal.
const NETBOX_RHAI: &str = r#"
fn host(event) {
    if event.vm_id == 99 { throw `${event.vm_name} has no primary IPv4 in NetBox`; }
    if event.vm_id == 98 { return #{ skip: `${event.vm_name} is active, not staged` }; }
    #{ name: event.vm_name, vars: #{ target_node: "pve1", vms_vmid: 4000 + event.vm_id, ansible_host: "127.0.0.1" } }
}
fn staged(event, vm) {
    log::info(`pipeline for ${vm.name} (NetBox id ${event.vm_id}, VMID ${vm.spec.vmid}), attempt ${event.attempt}`);
    step(vm.name, "make", || log::info(`made ${vm.name}`));
    `ready ${vm.name}`
}
fn failed(event, failure) {
    log::info(`RECORDED ${event.vm_name} failed at ${failure.step}: ${failure.message}`);
}
"#;

const DEFAULTS: &str = "global_os:\n  debian12:\n    template: debian-12-cloud\n    cores: 1\n    memory: 512\n    storage: local-lvm\nvms_os: debian12\nvms_config:\n  nic0:\n    bridge: vmbr0\n    ip: dhcp\n";

pub(crate) fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("cradle.toml"), PROJECT).expect("config");
    let secret = dir.path().join("webhook.secret");
    std::fs::write(&secret, SECRET).expect("secret");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    std::fs::create_dir_all(dir.path().join("workflows")).expect("workflows");
    std::fs::write(dir.path().join("workflows/netbox.rhai"), NETBOX_RHAI).expect("netbox.rhai");
    std::fs::write(dir.path().join("netbox-defaults.yml"), DEFAULTS).expect("defaults");
    dir
}

/// `cradle serve --listen 127.0.0.1:0`, and the address it printed.
fn spawn_serve(dir: &Path) -> (Child, SocketAddr, Arc<Mutex<String>>) {
    spawn_serve_with(dir, &[])
}

fn spawn_serve_with(dir: &Path, env: &[(&str, &str)]) -> (Child, SocketAddr, Arc<Mutex<String>>) {
    let served = Served::start(dir, env);
    let addr = served.addr();
    (served.child, addr, served.log)
}

pub(crate) fn wait_events(dir: &Path, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
    let serve = dir.join("state/serve");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let events = EventStore::read(&serve).unwrap_or_default();
        if done(&events) {
            return events;
        }
        assert!(Instant::now() < deadline, "events never got there: {events:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn cradle_serve_runs_the_netbox_workflow_for_a_staged_vm_and_stops_cleanly_on_sigterm() {
    let dir = project();
    let (mut child, addr, log) = spawn_serve(dir.path());
    assert_eq!(deliver(addr, REAL_BODY).0, 202);
    assert_eq!(deliver(addr, &body_for(99, "broken-vm")).0, 202);
    assert_eq!(deliver(addr, &body_for(98, "stale-vm")).0, 202);
    let events = wait_events(dir.path(), |e| e.len() == 3 && e.iter().all(|e| !e.state.unfinished()));
    let of = |id: u64| events.iter().find(|e| e.vm_id == id).expect("event");
    let ok = of(1);
    assert_eq!((ok.state, ok.detail.as_deref()), (EventState::Done, Some("\"ready probe-vm\"")), "{events:?}");
    let failed = of(99);
    assert_eq!(failed.state, EventState::Failed);
    let detail = failed.detail.clone().unwrap_or_default();
    assert!(detail.contains("failed at `validate`") && detail.contains("no primary IPv4"), "{failed:?}");
    let skipped = of(98);
    assert_eq!(skipped.state, EventState::Done);
    assert!(skipped.detail.as_deref().unwrap_or_default().contains("skipped: stale-vm is active"), "{skipped:?}");
    // Each phase is a run with its journal; the VM's run is scoped to it.
    let all = journals(dir.path());
    assert!(all.contains("pipeline for probe-vm (NetBox id 1, VMID 4001), attempt 1"), "{all}");
    assert!(all.contains("RECORDED broken-vm failed at validate"), "the failure reached failed(): {all}");
    let run = ok.run_id.clone().expect("run id");
    let shown =
        Command::new(cradle_bin()).current_dir(dir.path()).args(["runs", "show", &run]).output().expect("runs show");
    let shown = format!("{}{}", String::from_utf8_lossy(&shown.stdout), String::from_utf8_lossy(&shown.stderr));
    assert!(shown.contains("made probe-vm"), "{shown}");
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    let status = child.wait().expect("wait");
    assert!(status.success(), "SIGTERM is a clean stop: {status:?}");
    let log = log.lock().expect("log").clone();
    assert!(log.contains("cradle serve: stopped"), "{log}");
    assert!(!log.contains(SECRET), "the webhook secret never reaches the log");
    assert!(!all.contains(SECRET), "nor a journal");
}

#[test]
fn a_failure_in_a_step_of_the_pipeline_reaches_failed_with_the_step() {
    let dir = project();
    std::fs::write(
        dir.path().join("workflows/netbox.rhai"),
        NETBOX_RHAI.replace(
            "step(vm.name, \"make\", || log::info(`made ${vm.name}`));",
            "step(vm.name, \"make\", || { throw `the clone of ${vm.name} failed`; });",
        ),
    )
    .expect("write");
    let (mut child, addr, _) = spawn_serve(dir.path());
    assert_eq!(deliver(addr, REAL_BODY).0, 202);
    let events = wait_events(dir.path(), |e| e.first().is_some_and(|e| !e.state.unfinished()));
    assert_eq!(events[0].state, EventState::Failed);
    assert!(events[0].detail.as_deref().unwrap_or_default().starts_with("failed at `make`"), "{events:?}");
    assert!(journals(dir.path()).contains("RECORDED probe-vm failed at make: "), "failed() got the step");
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    child.wait().expect("wait");
}

#[test]
fn failed_gets_what_went_wrong_without_the_workflows_file_line_or_kind() {
    let dir = project();
    std::fs::write(
        dir.path().join("workflows/netbox.rhai"),
        NETBOX_RHAI.replace(
            "if event.vm_id == 99 { throw `${event.vm_name} has no primary IPv4 in NetBox`; }",
            "throw #{ kind: \"invalid\", message: `${event.vm_name} cannot be built: NetBox has no custom field proxmox_template` };",
        ),
    )
    .expect("write");
    let (mut child, addr, _) = spawn_serve(dir.path());
    assert_eq!(deliver(addr, REAL_BODY).0, 202);
    let events = wait_events(dir.path(), |e| e.first().is_some_and(|e| !e.state.unfinished()));
    // The event's outcome keeps the error in full, with where it was thrown.
    let detail = events[0].detail.clone().unwrap_or_default();
    assert!(detail.contains("netbox.rhai:") && detail.contains("invalid: probe-vm cannot be built"), "{detail}");
    // failed() gets the message alone: what a NetBox journal entry shows.
    let all = journals(dir.path());
    let want =
        "RECORDED probe-vm failed at validate: probe-vm cannot be built: NetBox has no custom field proxmox_template\"";
    assert!(all.contains(want), "{all}");
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    child.wait().expect("wait");
}

#[test]
fn cradle_serve_refuses_to_start_without_its_workflow_or_secret_naming_what_is_missing() {
    let dir = project();
    std::fs::remove_file(dir.path().join("workflows/netbox.rhai")).expect("rm");
    let err = Served::refused(dir.path(), "127.0.0.1:0");
    assert!(err.contains("serve.sources.netbox") && err.contains("workflows/netbox.rhai"), "{err}");
    std::fs::write(dir.path().join("workflows/netbox.rhai"), NETBOX_RHAI).expect("restore");
    std::fs::set_permissions(dir.path().join("webhook.secret"), std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    let err = Served::refused(dir.path(), "127.0.0.1:0");
    assert!(err.contains("serve.sources.netbox.secret") && err.contains("chmod 600"), "{err}");
    assert!(!err.contains(SECRET), "{err}");
}

/// Every journal line of the project's runs, as text.
pub(crate) fn journals(dir: &Path) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(dir.join("state/runs")).expect("runs").flatten() {
        all.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
    }
    all
}

#[test]
fn kill_9_of_cradle_serve_mid_pipeline_and_a_restart_complete_the_event_exactly_once() {
    let dir = project();
    // The first process kills itself as the pipeline reaches its `make` step.
    let (mut child, addr, _) = spawn_serve_with(dir.path(), &[("CRADLE_CRASH_AT", "before:make@probe-vm")]);
    assert_eq!(deliver(addr, REAL_BODY).0, 202, "acknowledged, so it is on disk");
    let status = child.wait().expect("wait");
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "killed mid-pipeline");
    assert!(!journals(dir.path()).contains("made probe-vm"), "the step had not run");
    let (mut child, addr, log) = spawn_serve(dir.path());
    let events = wait_events(dir.path(), |e| e.first().is_some_and(|e| !e.state.unfinished()));
    assert_eq!((events.len(), events[0].state, events[0].attempts), (1, EventState::Done, 2), "{events:?}");
    // A redelivery of the same change after the fact starts nothing.
    assert_eq!(deliver(addr, REAL_BODY).0, 200);
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    assert!(child.wait().expect("wait").success(), "{}", log.lock().expect("log"));
    assert_eq!(journals(dir.path()).matches("made probe-vm").count(), 1, "the step ran exactly once");
}

#[test]
fn a_webhook_vm_name_with_escape_sequences_reaches_the_serve_log_escaped() {
    let dir = project();
    let (mut child, addr, log) = spawn_serve(dir.path());
    // ESC [2J clears the screen, OSC 0 sets the window title, CSI (C1) and a
    // CR-forged line: as JSON escapes in the body, real control characters in the name.
    let name = "evil\\u001b]0;pwned\\u0007\\u001b[2J\\u009b31m\\rerror: forged-vm";
    assert_eq!(deliver(addr, &body_for(5, name)).0, 202);
    wait_events(dir.path(), |e| e.len() == 1 && e.iter().all(|e| !e.state.unfinished()));
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    assert!(child.wait().expect("wait").success());
    let log = log.lock().expect("log").clone();
    assert!(log.contains("webhook accepted") && log.contains("pipeline started"), "{log}");
    assert!(
        log.contains("vm=evil\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{9b}31m\\rerror: forged-vm"),
        "shown escaped: {log}"
    );
    let raw: Vec<char> = log.chars().filter(|c| c.is_control() && *c != '\n').collect();
    assert!(raw.is_empty(), "raw control characters {raw:?} in the log:\n{log}");
}
