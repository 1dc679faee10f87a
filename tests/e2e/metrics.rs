//! `cradle serve`'s `GET /metrics`, through the real binary: after pipeline
//! runs against the simulated cluster (one succeeds, one fails in `host`, one
//! is denied a capability and fails), a scrape parsed by a real Prometheus
//! text-format parser (`prometheus-parse`) says what the journals say (runs
//! by result, calls and denials per capability, step durations) and what the
//! listener answered (deliveries accepted and refused), each run under the
//! workflow and function it called (a maintenance-style `apply` apart from
//! its `preview` and from the pipeline's functions); without the token a
//! listener that is not open gets `401`, without `[serve.status]` `/metrics`
//! is `404`, and the token reaches neither the metrics nor the log.
//!
//! The listener binds 127.0.0.2 with `open_on_loopback = false`: that is the
//! access rule of a non-loopback address (credentials required) on an address
//! every test machine has; a non-loopback interface cannot be counted on.
//! That a non-loopback listen address without credentials refuses to start is
//! checked with `0.0.0.0`, refused before anything is bound.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use cradle::serve::{EventStore, WebhookKey};
use cradle_tests::serve_process::{REAL_BODY, Served, body_for, http_request};
use prometheus_parse::{Sample, Scrape, Value};
use serde_json::Value as Json;

const SECRET: &str = "CANARY-WEBHOOK-SECRET-m3tr";
const TOKEN: &str = "CANARY-METRICS-TOKEN-5b1e9c";

const PROJECT: &str = r#"
default_environment = "test"
state_dir = "state"
[clusters.sim]
kind = "sim"
[environments.test]
cluster = "sim"
backend = "direct"
[workflow.grants.lock]
prefixes = ["allowed/"]
[serve]
concurrency = 2
shutdown_grace_s = 1
[serve.sources.netbox]
secret = { file = "webhook.secret" }
defaults = "netbox-defaults.yml"
"#;

const STATUS: &str = "[serve.status]\ntoken = { file = \"metrics.token\" }\nopen_on_loopback = false\n";

/// VM 99 fails in `host`; VM 97 is denied a lock outside the workflow's
/// grant in its `make` step; the others are made.
const NETBOX_RHAI: &str = r#"
fn host(event) {
    if event.vm_id == 99 { throw `${event.vm_name} has no primary IPv4 in NetBox`; }
    #{ name: event.vm_name, vars: #{ target_node: "pve1", vms_vmid: 4000 + event.vm_id, ansible_host: "127.0.0.1" } }
}
fn staged(event, vm) {
    step(vm.name, "make", || {
        if event.vm_id == 97 { lock::acquire("forbidden/x"); }
        log::info(`made ${vm.name}`);
    });
    `ready ${vm.name}`
}
fn failed(event, failure) {
    log::info(`RECORDED ${event.vm_name} failed at ${failure.step}`);
}
"#;

const DEFAULTS: &str = "global_os:\n  debian12:\n    template: debian-12-cloud\n    cores: 1\n    memory: 512\n    storage: local-lvm\nvms_os: debian12\nvms_config:\n  nic0:\n    bridge: vmbr0\n    ip: dhcp\n";

fn write_secret(path: &Path, value: &str) {
    std::fs::write(path, value).expect("secret");
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
}

fn project(extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("cradle.toml"), format!("{PROJECT}{extra}")).expect("config");
    write_secret(&dir.path().join("webhook.secret"), SECRET);
    write_secret(&dir.path().join("metrics.token"), TOKEN);
    std::fs::create_dir_all(dir.path().join("workflows")).expect("workflows");
    std::fs::write(dir.path().join("workflows/netbox.rhai"), NETBOX_RHAI).expect("netbox.rhai");
    std::fs::write(dir.path().join("netbox-defaults.yml"), DEFAULTS).expect("defaults");
    dir
}

fn deliver(addr: SocketAddr, body: &str, signature: Option<String>) -> u16 {
    let sig = signature.map(|s| format!("X-Hook-Signature: {s}\r\n")).unwrap_or_default();
    let head = format!(
        "POST /hooks/netbox HTTP/1.1\r\nHost: cradle\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{sig}Connection: close\r\n\r\n",
        body.len()
    );
    http_request(addr, &head, body.as_bytes()).0
}

fn signed(addr: SocketAddr, body: &str) -> u16 {
    deliver(addr, body, Some(WebhookKey::new(SECRET.as_bytes()).sign(body.as_bytes())))
}

fn scrape(addr: SocketAddr, auth: Option<&str>) -> (u16, String, String) {
    let auth = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    http_request(addr, &format!("GET /metrics HTTP/1.1\r\nHost: cradle\r\n{auth}Connection: close\r\n\r\n"), b"")
}

/// Every journal's events, once every run has finished.
fn finished_journals(dir: &Path, runs: usize) -> Vec<Vec<Json>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut all = Vec::new();
        for entry in std::fs::read_dir(dir.join("state/runs")).expect("runs").flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            all.push(text.lines().filter_map(|l| serde_json::from_str::<Json>(l).ok()).collect::<Vec<_>>());
        }
        let done = all.iter().filter(|j| j.iter().any(|e| e["event"] == "run_finished")).count();
        if all.len() >= runs && done == all.len() {
            return all;
        }
        assert!(Instant::now() < deadline, "{done} of {} runs finished", all.len());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sum of the samples of `metric` whose labels include `want`.
fn sum(samples: &[Sample], metric: &str, want: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.metric == metric && want.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            _ => 0.0,
        })
        .sum()
}

#[test]
fn a_scrape_says_what_the_journals_and_the_listener_say_and_needs_the_token() {
    let dir = project(STATUS);
    let served = Served::start_on(dir.path(), "127.0.0.2:0", &[]);
    let addr = served.addr();
    assert_eq!(addr.ip().to_string(), "127.0.0.2");
    served.wait_for_log("/metrics (credentials required)");

    // Not open: no credentials, a wrong token or scheme, a forged proxy header.
    for auth in [None, Some("Bearer CANARY-METRICS-TOKEN-5b1e9"), Some(&*format!("Basic {TOKEN}"))] {
        let (status, head, body) = scrape(addr, auth);
        assert_eq!(status, 401, "{auth:?}: {body}");
        assert!(head.to_ascii_lowercase().contains("www-authenticate: bearer"), "{head}");
        assert!(!body.contains(TOKEN));
    }
    let forged = http_request(
        addr,
        "GET /metrics HTTP/1.1\r\nHost: cradle\r\nX-Forwarded-User: admin\r\nConnection: close\r\n\r\n",
        b"",
    );
    assert_eq!(forged.0, 401, "no proxy is trusted");

    // Three accepted (one made, one failing in host, one denied a lock),
    // two refused as unauthorized, then a replay.
    assert_eq!(signed(addr, REAL_BODY), 202);
    assert_eq!(signed(addr, &body_for(99, "broken-vm")), 202);
    assert_eq!(signed(addr, &body_for(97, "denied-vm")), 202);
    assert_eq!(deliver(addr, &body_for(5, "forged-vm"), Some("0".repeat(128))), 401);
    assert_eq!(deliver(addr, &body_for(6, "unsigned-vm"), None), 401);
    let serve = dir.path().join("state/serve");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !EventStore::read(&serve).is_ok_and(|e| e.len() == 3 && e.iter().all(|e| !e.state.unfinished())) {
        assert!(Instant::now() < deadline, "the events never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(signed(addr, REAL_BODY), 200, "a replay is a duplicate");
    // host + staged for VM 1 and 97, host for 99, failed() for 99 and 97.
    let journals = finished_journals(dir.path(), 7);

    let (status, head, text) = scrape(addr, Some(&format!("Bearer {TOKEN}")));
    assert_eq!(status, 200, "{text}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    let samples = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("a valid exposition").samples;

    // Runs by result, as the journals say.
    let mut runs: BTreeMap<String, f64> = BTreeMap::new();
    let mut calls: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut make_steps = 0.0;
    let mut kinds: BTreeMap<(String, String), f64> = BTreeMap::new();
    for events in &journals {
        for e in events {
            match e["event"].as_str() {
                Some("run_started") => {
                    let key = (
                        e["workflow"].as_str().expect("workflow").into(),
                        e["function"].as_str().expect("function").into(),
                    );
                    *kinds.entry(key).or_default() += 1.0;
                }
                Some("run_finished") => *runs.entry(e["status"].as_str().expect("status").into()).or_default() += 1.0,
                Some("capability_call") => {
                    let key = (
                        e["capability"].as_str().expect("cap").into(),
                        e["outcome"]["result"].as_str().expect("r").into(),
                    );
                    *calls.entry(key).or_default() += 1.0;
                }
                Some("step_finished") if e["step"] == "make" => make_steps += 1.0,
                _ => {}
            }
        }
    }
    assert!(runs.get("failed").is_some_and(|n| *n >= 2.0) && runs.contains_key("succeeded"), "{runs:?}");
    for result in ["succeeded", "failed", "interrupted"] {
        let want = runs.get(result).copied().unwrap_or(0.0);
        assert_eq!(sum(&samples, "cradle_runs_total", &[("result", result)]), want, "runs {result}:\n{text}");
    }
    assert_eq!(
        sum(&samples, "cradle_runs_total", &[("environment", "test"), ("backend", "direct")]),
        runs.values().sum::<f64>(),
        "labelled with the sources' environment and the backend:\n{text}"
    );
    // What each run did: the pipeline's functions, each under its own label.
    assert_eq!(
        kinds.keys().map(|(w, f)| format!("{w}:{f}")).collect::<Vec<_>>(),
        ["netbox:failed", "netbox:host", "netbox:staged"],
        "{kinds:?}"
    );
    for ((workflow, function), n) in &kinds {
        let got = sum(&samples, "cradle_runs_total", &[("workflow", workflow), ("function", function)]);
        assert_eq!(got, *n, "{workflow}:{function}:\n{text}");
    }
    assert_eq!(calls.get(&("lock".into(), "denied".into())), Some(&1.0), "{calls:?}");
    for ((cap, result), n) in &calls {
        let got = sum(&samples, "cradle_capability_calls_total", &[("capability", cap), ("result", result)]);
        assert_eq!(got, *n, "{cap} {result}:\n{text}");
    }
    let all_calls = sum(&samples, "cradle_capability_calls_total", &[]);
    assert_eq!(all_calls, calls.values().sum::<f64>(), "no call counted that the journals lack");

    // Step durations: a histogram whose count is the journals' `make` steps.
    let make = samples
        .iter()
        .find(|s| s.metric == "cradle_step_duration_seconds" && s.labels.get("step") == Some("make"))
        .expect("the make histogram");
    let Value::Histogram(buckets) = &make.value else { panic!("{make:?}") };
    let inf = buckets.iter().find(|b| b.less_than.is_infinite()).expect("+Inf");
    assert_eq!(inf.count, make_steps);
    assert!(buckets.windows(2).all(|w| w[0].count <= w[1].count), "cumulative: {buckets:?}");

    // Deliveries: the listener's own counters.
    let deliveries = |result: &str| sum(&samples, "cradle_webhook_deliveries_total", &[("result", result)]);
    assert_eq!(
        (deliveries("accepted"), deliveries("unauthorized"), deliveries("duplicate")),
        (3.0, 2.0, 1.0),
        "{text}"
    );
    assert_eq!(sum(&samples, "cradle_webhook_queue_depth", &[]), 0.0);

    // A second scrape counts nothing twice.
    let (_, _, again) = scrape(addr, Some(&format!("Bearer {TOKEN}")));
    let again = Scrape::parse(again.lines().map(|l| Ok(l.to_string()))).expect("valid").samples;
    assert_eq!(sum(&again, "cradle_runs_total", &[]), runs.values().sum::<f64>());
    assert_eq!(sum(&again, "cradle_capability_calls_total", &[]), all_calls);

    let log = served.log.clone();
    served.stop();
    let log = log.lock().expect("log").clone();
    assert!(!text.contains(TOKEN) && !text.contains(SECRET), "no secret in the metrics");
    assert!(!log.contains(TOKEN), "the token never reaches the log:\n{log}");
    assert!(log.contains("metrics refused"), "refusals are logged:\n{log}");
}

/// A small maintenance-style workflow: `preview` reads, `apply` changes
/// (not `plan(vm)`: the backend has a method of that name and arity).
const UPKEEP_RHAI: &str = r#"
fn preview(name) { step(name, "diff", || {}); "changes" }
fn apply(name) {
    step(name, "config", || {});
    if name == "db-2" { step(name, "verify", || { throw `${name}: memory is still pending`; }); }
    "applied"
}
"#;

/// `cradle ARGS` in `dir`: its exit code and output.
fn cradle_in(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(cradle_tests::cradle_bin())
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run cradle");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// The issue's "`/metrics` counts them": runs of another workflow's
/// functions (a preview and two applies, one failing) are counted under
/// `workflow`/`function` labels of their own, apart from each other.
#[test]
fn runs_of_another_workflow_function_are_counted_under_their_own_labels() {
    let dir = project(STATUS);
    std::fs::write(dir.path().join("workflows/upkeep.rhai"), UPKEEP_RHAI).expect("upkeep.rhai");
    for (function, vm, ok) in [("preview", "db-1", true), ("apply", "db-1", true), ("apply", "db-2", false)] {
        let (code, out) = cradle_in(dir.path(), &["run", "upkeep", "--fn", function, vm]);
        assert_eq!(code == 0, ok, "{function} {vm}: {out}");
    }
    let served = Served::start_on(dir.path(), "127.0.0.2:0", &[]);
    let (status, _, text) = scrape(served.addr(), Some(&format!("Bearer {TOKEN}")));
    served.stop();
    assert_eq!(status, 200, "{text}");
    let samples = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("a valid exposition").samples;
    let runs = |labels: &[(&str, &str)]| sum(&samples, "cradle_runs_total", labels);
    let upkeep = |function, result| runs(&[("workflow", "upkeep"), ("function", function), ("result", result)]);
    assert_eq!(
        (upkeep("preview", "succeeded"), upkeep("apply", "succeeded"), upkeep("apply", "failed")),
        (1.0, 1.0, 1.0),
        "{text}"
    );
    assert_eq!(runs(&[("environment", "test")]), 3.0, "the other labels as before:\n{text}");
    assert!(text.contains("# HELP cradle_runs_total") && text.contains("workflow and function"), "{text}");
}

#[test]
fn without_serve_status_there_is_no_metrics_path() {
    let dir = project("");
    let served = Served::start(dir.path(), &[]);
    let (status, _, body) = scrape(served.addr(), Some(&format!("Bearer {TOKEN}")));
    assert_eq!(status, 404, "{body}");
    let (status, _, _) = scrape(served.addr(), None);
    assert_eq!(status, 404);
    assert!(!served.log().contains("/metrics"));
    assert!(served.stop().success());
}

#[test]
fn a_status_view_off_loopback_without_credentials_does_not_start() {
    let dir = project("[serve.status]\n");
    let err = Served::refused(dir.path(), "0.0.0.0:0");
    assert!(err.contains("serve.status.token") && err.contains("not a loopback"), "{err}");
}

/// `[serve.status]` stands alone: with no webhook source, `cradle serve`
/// serves the status page and `/metrics` over the journals of provision runs
/// (before, it refused to start until a NetBox source existed). With neither,
/// it says what to add.
#[test]
fn the_status_view_serves_without_any_webhook_source() {
    let dir = tempfile::tempdir().expect("tmp");
    let bare = PROJECT.split("[serve.sources.netbox]").next().expect("the project before its source");
    std::fs::write(dir.path().join("cradle.toml"), format!("{bare}[serve.status]\n")).expect("config");
    let served = Served::start(dir.path(), &[]);
    assert!(served.log().contains("no webhook sources"), "{}", served.log());
    // Open on loopback, for a Host that names loopback (the rebinding guard).
    let get = |path: &str| {
        http_request(
            served.addr(),
            &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
            b"",
        )
    };
    let (status, _, body) = get("/metrics");
    assert_eq!(status, 200, "/metrics answers: {body}");
    assert_eq!(get("/status").0, 200, "the status page answers");
    assert!(served.stop().success());

    std::fs::write(dir.path().join("cradle.toml"), bare).expect("config");
    let err = Served::refused(dir.path(), "127.0.0.1:0");
    assert!(err.contains("[serve.sources.netbox]") && err.contains("[serve.status]"), "{err}");
}
