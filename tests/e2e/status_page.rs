//! `cradle serve`'s status page in a real headless Chromium (Debian's
//! `chromium`, driven over the DevTools protocol by `cradle_testkit::chromium`):
//! - a `cradle provision` started while the page is open appears as running,
//!   advances step by step and ends succeeded, all through server-sent events
//!   (the page reads its list once), with its timeline drawn as bars;
//! - NetBox pipeline runs are drawn as their stages, the current one lit as it
//!   moves; a VM that fails shows its failing stage and step in red with the
//!   error and what to inspect;
//! - hostile strings (`<script>`, markup with handlers, terminal escapes, a
//!   very long line) in errors render as text: nothing runs, the escapes are
//!   visible, the page does not grow sideways;
//! - a run's card says what it did (`WORKFLOW:FUNCTION`), so a
//!   maintenance-style `apply` is told from its `preview`, and its details
//!   name the function; the kind filter (API and select) keeps one function
//!   or every function of a workflow;
//! - off loopback the page, its data and its stream need credentials; a
//!   browser signs in with the token through the form, and the token reaches
//!   neither the page nor the log.
//!
//! Screenshots are saved under `target/test-artifacts/status-page/`.
//! Needs `target/debug/cradle` and chromium (scripts/test installs it).
//! Simulated guests bind port 22 on 127.56.1.0/24, a prefix no other test uses.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cradle::serve::WebhookKey;
use cradle_testkit::chromium::Browser;
use cradle_tests::fixture::{Backend, Cluster, LabInventory, ProjectConfig, SimCluster, Wait, Workflows, copy_tree};
use cradle_tests::serve_process::{Served, body_for, http_request};
use cradle_tests::{cradle_bin, workspace};
use serde_json::Value;

const SECRET: &str = "CANARY-WEBHOOK-SECRET-p4ge";
const TOKEN: &str = "CANARY-STATUS-TOKEN-77c1d0";
const LIVE: Duration = Duration::from_secs(60);

/// The pipeline of this test: the built-in stages' step names, each a short
/// pause; VM 98 fails at `dhcp` and VM 99 in `host`, both with hostile text.
const PAGEDEMO: &str = r#"
fn hostile() {
    let long = "";
    for i in 0..600 { long += "0123456789"; }
    // Back-quoted strings keep `\x1b` as text; a quoted one makes it ESC.
    let escapes = "\x1b[31mred\x1b[0m \x1b]0;title\x07";
    `UniFi said <script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> ${escapes} ${long}`
}
fn host(event) {
    if event.vm_id == 99 { throw `NetBox: ${hostile()}`; }
    #{ name: event.vm_name, vars: #{ target_node: "pve1", vms_vmid: 4000 + event.vm_id, ansible_host: "127.0.0.1" } }
}
fn staged(event, vm) {
    for s in ["validate", "lock", "decide", "vmid", "create", "mac", "netbox-mac", "dhcp", "ha", "start", "connect", "dns", "active"] {
        step(vm.name, s, || {
            if event.vm_id == 98 && s == "dhcp" { throw hostile(); }
            sleep(0.35);
        });
    }
    `ready ${vm.name}`
}
fn failed(event, failure) {
    log::info(`${event.vm_name} failed at ${failure.step}`);
}
"#;

const DEFAULTS: &str = "global_os:\n  debian12:\n    template: debian-12-cloud\n    cores: 1\n    memory: 512\n    storage: local-lvm\nvms_os: debian12\nvms_config:\n  nic0:\n    bridge: vmbr0\n    ip: dhcp\n";

fn write_secret(path: &Path, value: &str) {
    std::fs::write(path, value).expect("secret");
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
}

/// A project on the simulator (guests slow enough to watch) with the
/// repository's workflows plus `pagedemo`, served by source `netbox`, and
/// `[serve.status]` as given.
fn project(status: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    copy_tree(&workspace().join("workflows"), &dir.path().join("workflows"));
    std::fs::write(dir.path().join("workflows/pagedemo.rhai"), PAGEDEMO).expect("pagedemo");
    let serve = format!(
        "\n[serve]\nconcurrency = 2\nshutdown_grace_s = 1\n[serve.sources.netbox]\nsecret = {{ file = \"webhook.secret\" }}\n\
         defaults = \"netbox-defaults.yml\"\nworkflow = \"pagedemo\"\n{status}"
    );
    let sim = SimCluster { nodes: vec!["pve1", "pve2"], time_scale: 0.3, seed: None, faults: None, extra: Vec::new() };
    ProjectConfig::new(Cluster::Sim(sim))
        .workflows(Workflows::Dir("workflows".into()))
        .backend(Backend::BuiltIn)
        .append(&serve)
        .write(dir.path());
    write_secret(&dir.path().join("webhook.secret"), SECRET);
    write_secret(&dir.path().join("status.token"), TOKEN);
    std::fs::write(dir.path().join("netbox-defaults.yml"), DEFAULTS).expect("defaults");
    dir
}

fn deliver(addr: SocketAddr, id: u64, name: &str) {
    let body = body_for(id, name);
    let sig = WebhookKey::new(SECRET.as_bytes()).sign(body.as_bytes());
    let head = format!(
        "POST /hooks/netbox HTTP/1.1\r\nHost: cradle\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         X-Hook-Signature: {sig}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    assert_eq!(http_request(addr, &head, body.as_bytes()).0, 202, "delivery of VM {id}");
}

fn get(addr: SocketAddr, path: &str, extra: &str) -> (u16, String, String) {
    http_request(addr, &format!("GET {path} HTTP/1.1\r\nHost: cradle\r\n{extra}Connection: close\r\n\r\n"), b"")
}

fn artifact(name: &str, png: &[u8]) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace().join("target"), PathBuf::from);
    let dir = target.join("test-artifacts/status-page");
    std::fs::create_dir_all(&dir).expect("artifact dir");
    let path = dir.join(name);
    std::fs::write(&path, png).expect("screenshot");
    eprintln!("screenshot: {}", path.display());
    path
}

/// JS: the `data-result` of the run whose VMs include `vm` (null if none).
fn result_of(vm: &str) -> String {
    format!(
        "(() => {{ const s = Array.from(document.querySelectorAll('section.run')).find(s => \
         s.querySelector('.vms').textContent.split(', ').includes({vm:?})); return s ? s.dataset.result : null; }})()"
    )
}

/// JS: the current stage of the pipeline run of `vm` (null if none).
fn current_stage(vm: &str) -> String {
    format!(
        "(() => {{ const s = Array.from(document.querySelectorAll('section.run')).find(s => \
         s.querySelector('.vms').textContent === {vm:?} && s.querySelector('.pipeline')); \
         const c = s && s.querySelector('.stage.current'); return c ? c.dataset.stage : null; }})()"
    )
}

/// Type the token into the sign-in form and send it.
fn sign_in(browser: &mut Browser) {
    browser
        .eval(&format!(
            "document.querySelector('input[name=token]').value = {TOKEN:?}; document.querySelector('form.login').submit()"
        ))
        .expect("submit the sign-in form");
}

fn string(v: Value) -> String {
    v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())
}

#[test]
fn a_provision_started_while_the_page_is_open_appears_and_advances_live() {
    let Some(mut browser) = Browser::start("status page") else { return };
    let dir = project("[serve.status]\n");
    let served = Served::start(dir.path(), &[]);
    served.wait_for_log("status page at http://");
    browser.navigate(&format!("{}/status", served.url)).expect("page");
    browser.wait_for("window.cradleStatus && window.cradleStatus.firstRender !== null", LIVE).expect("first render");
    browser.wait_for("document.getElementById('live').textContent === 'live'", LIVE).expect("the stream is open");
    let empty = string(browser.eval("document.getElementById('runs').textContent").expect("text"));
    assert!(empty.contains("No runs"), "{empty}");

    let wait = Wait { reboot_attempts: None, ..Wait::fast() };
    let inv = LabInventory::new("127.56", 1).name_prefix("live").vmid_base(Some(330)).target_node("pve1").wait(wait);
    let inventory = inv.write(dir.path());
    let provision = Command::new(cradle_bin())
        .current_dir(dir.path())
        .args(["--output", "json", "provision", "-i"])
        .arg(&inventory)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cradle provision");

    browser.wait_for(&format!("{} === 'running'", result_of("live-0")), LIVE).expect("the run appears as running");
    // It advances: the step it is at changes while it runs, without a reload.
    let now =
        "(() => { const n = document.querySelector('section.run.running .now'); return n ? n.textContent : ''; })()";
    let first = string(browser.wait_for(now, LIVE).expect("a running step"));
    browser
        .wait_for(&format!("{now} !== {first:?} && {now} !== ''"), LIVE)
        .unwrap_or_else(|e| panic!("the page never moved past {first}: {e}"));
    let running_png = browser.screenshot_png().expect("screenshot");
    artifact("provision-running.png", &running_png);

    let out = provision.wait_with_output().expect("provision");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    browser.wait_for(&format!("{} === 'succeeded'", result_of("live-0")), LIVE).expect("the run ends succeeded");
    // The run stays open with its timeline: a bar per step, all ok.
    let rows = "(() => Array.from(document.querySelectorAll('section.run.succeeded .step')).map(r => \
                r.dataset.step + ':' + r.dataset.outcome))()";
    let rows = browser.wait_for(&format!("{rows}.includes('reconcile:ok') && {rows}"), LIVE).expect("timeline rows");
    let rows: Vec<String> = serde_json::from_value(rows).expect("rows");
    for step in ["validate:ok", "create:ok", "reboot:ok"] {
        assert!(rows.iter().any(|r| r == step), "{step} in {rows:?}");
    }
    let widths = browser
        .eval("Array.from(document.querySelectorAll('section.run.succeeded .step .bar')).map(b => b.getBoundingClientRect().width)")
        .expect("bars");
    assert!(widths.as_array().is_some_and(|w| w.iter().all(|x| x.as_f64().is_some_and(|x| x >= 1.0))), "{widths}");
    let probe = browser.eval("window.cradleStatus").expect("probe");
    assert_eq!(probe["listLoads"], 1, "the list was read once; the rest came as events: {probe}");
    assert!(probe["updates"].as_array().is_some_and(|u| u.len() >= 3), "{probe}");
    let facts =
        string(browser.eval("document.querySelector('section.run.succeeded .facts').textContent").expect("facts"));
    for fact in ["provision", "test", "control node"] {
        assert!(facts.contains(fact), "{fact} in {facts}");
    }
    assert!(browser.console_errors().is_empty(), "{:?}", browser.console_errors());
    artifact("provision-done.png", &browser.screenshot_png().expect("screenshot"));
    served.stop();
}

#[test]
fn pipeline_runs_light_their_stage_and_a_failed_vm_shows_its_error_as_text() {
    let Some(mut browser) = Browser::start("status page") else { return };
    let dir = project("[serve.status]\n");
    let served = Served::start(dir.path(), &[]);
    let addr = served.addr();
    browser.navigate(&format!("{}/status", served.url)).expect("page");
    browser.wait_for("document.getElementById('live').textContent === 'live'", LIVE).expect("the stream is open");

    deliver(addr, 7, "pipe-ok");
    // The current stage moves through the pipeline as the run goes.
    browser.wait_for(&format!("{} === 'create'", current_stage("pipe-ok")), LIVE).expect("create lit");
    browser.wait_for(&format!("{} === 'boot'", current_stage("pipe-ok")), LIVE).expect("boot lit");
    browser.wait_for(&format!("{} === 'succeeded'", result_of("pipe-ok")), LIVE).expect("done");
    let stages = browser
        .eval(
            "Array.from(document.querySelector('section.run.succeeded .pipeline').children).map(s => \
             s.dataset.stage + ':' + s.title)",
        )
        .expect("stages");
    let stages: Vec<String> = serde_json::from_value(stages).expect("stages");
    assert_eq!(
        stages,
        [
            "validate:done",
            "create:done",
            "mac:done",
            "dhcp:done",
            "ha:done",
            "boot:done",
            "os-config:skipped",
            "dns:done",
            "active:done"
        ]
    );

    deliver(addr, 98, "pipe-bad");
    deliver(addr, 99, "pipe-nohost");
    browser.wait_for(&format!("{} === 'failed'", result_of("pipe-bad")), LIVE).expect("pipe-bad failed");
    let bad = "Array.from(document.querySelectorAll('section.run.failed')).find(s => \
               s.querySelector('.vms').textContent === 'pipe-bad' && s.querySelector('.pipeline'))";
    let failed_stage = browser.eval(&format!("{bad}.querySelector('.stage.failed').dataset.stage")).expect("stage");
    assert_eq!(failed_stage, "dhcp");
    let message = string(browser.eval(&format!("{bad}.querySelector('.error .message').textContent")).expect("msg"));
    assert!(message.starts_with("failed at pipe-bad › dhcp: "), "{message}");
    assert!(message.contains("<script>window.__pwned = 1</script>"), "markup shown as text: {message}");
    assert!(message.contains("onerror=\"window.__pwned = 2\""), "{message}");
    assert!(message.contains("\\u{1b}[31mred") && !message.contains('\u{1b}'), "escapes visible: {message}");
    assert!(message.contains("more characters: the journal has all of it"), "a long line is cut: {message:.200}");
    let hint = string(browser.eval(&format!("{bad}.querySelector('.error .hint').textContent")).expect("hint"));
    assert!(hint.starts_with("Inspect: cradle runs show ") && hint.ends_with(" --timeline"), "{hint}");
    // The failing step is red in the timeline. The page opened the run when
    // it saw it running; a click closes it and another opens it again.
    let head = format!("{bad}.querySelector('button.head')");
    assert_eq!(browser.eval(&format!("{head}.getAttribute('aria-expanded')")).expect("open"), "true");
    browser.eval(&format!("{head}.click()")).expect("close");
    browser.wait_for(&format!("{bad}.querySelector('.details') === null"), LIVE).expect("closed");
    browser.eval(&format!("{head}.click()")).expect("open");
    browser
        .wait_for(
            &format!("{bad}.querySelector('.step.failing') && {bad}.querySelector('.step.failing').dataset.step"),
            LIVE,
        )
        .expect("failing row");
    let color = string(
        browser
            .eval(&format!("getComputedStyle({bad}.querySelector('.step.failing .bar')).backgroundColor"))
            .expect("color"),
    );
    assert_eq!(color, "rgb(201, 42, 42)", "the failing step's bar is red");

    // VM 99 failed in `host`: a run-level error, also as text.
    browser
        .wait_for(
            "Array.from(document.querySelectorAll('section.run.failed .error .message')).some(m => \
             m.textContent.includes('NetBox: UniFi said <script>'))",
            LIVE,
        )
        .unwrap_or_else(|e| {
            let msgs = browser.eval("Array.from(document.querySelectorAll('section.run .error .message')).map(m => m.textContent.slice(0, 120))");
            panic!("the host() failure: {e}\nerrors on the page: {msgs:?}")
        });
    let pwned = browser.eval("window.__pwned === undefined && document.scripts.length === 1").expect("scripts");
    assert_eq!(pwned, true, "no hostile script or handler ran");
    let overflow = browser.eval("document.documentElement.scrollWidth <= window.innerWidth + 1").expect("width");
    assert_eq!(overflow, true, "the long line wraps instead of widening the page");

    // The filters: by result, then by VM.
    browser
        .eval("const r = document.getElementById('f-result'); r.value = 'failed'; r.dispatchEvent(new Event('change'))")
        .expect("filter");
    browser
        .wait_for("Array.from(document.querySelectorAll('section.run')).every(s => s.dataset.result === 'failed') && document.querySelectorAll('section.run').length >= 2", LIVE)
        .expect("only failed runs");
    assert!(string(browser.eval("location.search").expect("url")).contains("result=failed"));
    browser
        .eval("const v = document.getElementById('f-vm'); v.value = 'pipe-bad'; v.dispatchEvent(new Event('input'))")
        .expect("filter vm");
    browser
        .wait_for(
            "Array.from(document.querySelectorAll('section.run .vms')).every(v => v.textContent.includes('pipe-bad'))",
            LIVE,
        )
        .expect("only pipe-bad");
    assert!(browser.console_errors().is_empty(), "{:?}", browser.console_errors());
    artifact("pipeline-failed.png", &browser.screenshot_png().expect("screenshot"));
    served.stop();
}

/// A small maintenance-style workflow: `preview` reads, `apply` changes
/// (not `plan(vm)`: the backend has a method of that name and arity).
const UPKEEP: &str = r#"
fn preview(name) { step(name, "diff", || {}); "changes" }
fn apply(name) { step(name, "config", || {}); step(name, "verify", || {}); "applied" }
"#;

#[test]
fn a_runs_card_names_its_workflow_and_function_so_an_apply_is_told_from_a_preview() {
    let Some(mut browser) = Browser::start("status page") else { return };
    let dir = project("[serve.status]\n");
    std::fs::write(dir.path().join("workflows/upkeep.rhai"), UPKEEP).expect("upkeep");
    for function in ["preview", "apply"] {
        let out = Command::new(cradle_bin())
            .current_dir(dir.path())
            .args(["run", "upkeep", "--fn", function, "db-1"])
            .output()
            .expect("cradle run");
        assert!(out.status.success(), "{function}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let served = Served::start(dir.path(), &[]);
    served.wait_for_log("status page at http://");
    browser.navigate(&format!("{}/status", served.url)).expect("page");
    let kinds = "Array.from(document.querySelectorAll('section.run')).map(s => s.dataset.kind + '|' + \
                 s.querySelector('.meta').textContent)";
    let kinds = browser.wait_for(&format!("{kinds}.length === 2 && {kinds}"), LIVE).expect("both runs");
    let kinds: Vec<String> = serde_json::from_value(kinds).expect("kinds");
    assert_eq!(kinds, ["upkeep:apply|upkeep:apply · test · direct", "upkeep:preview|upkeep:preview · test · direct"]);
    browser.eval("document.querySelector('section.run[data-kind=\"upkeep:apply\"] .head').click()").expect("open");
    let facts = "(() => { const f = document.querySelector('section.run[data-kind=\"upkeep:apply\"] .facts'); \
                 return f ? Array.from(f.querySelectorAll('dt')).map(dt => dt.textContent + '=' + \
                 dt.nextElementSibling.textContent) : null; })()";
    let facts: Vec<String> = serde_json::from_value(browser.wait_for(facts, LIVE).expect("details")).expect("facts");
    assert!(facts.iter().any(|f| f == "function=apply"), "{facts:?}");
    assert!(facts.iter().any(|f| f.starts_with("workflow=upkeep (")), "{facts:?}");

    // The kind filter: the API keeps one function, or every function of a bare workflow.
    let api = |q: &str| {
        format!("fetch('/status/api/runs?{q}').then(r => r.json()).then(d => [d.kinds, d.runs.map(r => r.function)])")
    };
    let (kinds, functions): (Vec<String>, Vec<String>) =
        serde_json::from_value(browser.eval(&api("kind=upkeep%3Aapply")).expect("kind=")).expect("list");
    assert_eq!((kinds, functions), (vec!["upkeep:apply".to_string(), "upkeep:preview".into()], vec!["apply".into()]));
    let (_, functions): (Vec<String>, Vec<String>) =
        serde_json::from_value(browser.eval(&api("kind=upkeep")).expect("kind=")).expect("list");
    assert_eq!(functions, ["apply", "preview"]);
    // ... and so does the page's select, kept in the address.
    browser
        .eval("const k = document.getElementById('f-kind'); k.value = 'upkeep:preview'; k.dispatchEvent(new Event('change'))")
        .expect("filter kind");
    browser
        .wait_for(
            "Array.from(document.querySelectorAll('section.run')).map(s => s.dataset.kind).join() === 'upkeep:preview'",
            LIVE,
        )
        .expect("only the preview");
    assert!(string(browser.eval("location.search").expect("url")).contains("kind=upkeep%3Apreview"));
    assert!(browser.console_errors().is_empty(), "{:?}", browser.console_errors());
    artifact("maintenance-kinds.png", &browser.screenshot_png().expect("screenshot"));
    served.stop();
}

#[test]
fn off_loopback_the_page_needs_the_token_and_a_browser_signs_in_with_it() {
    let Some(mut browser) = Browser::start("status page") else { return };
    let dir = project("[serve.status]\ntoken = { file = \"status.token\" }\nopen_on_loopback = false\n");
    let served = Served::start_on(dir.path(), "127.0.0.2:0", &[]);
    let addr = served.addr();
    deliver(addr, 7, "locked-vm");

    // Without credentials: the form, and no data; the code itself is public.
    for path in ["/status", "/status/api/runs", "/status/events", "/status/api/runs/x"] {
        let (status, head, body) = get(addr, path, "");
        assert_eq!(status, 401, "{path}: {head}");
        assert!(body.contains("<form") && !body.contains("locked-vm") && !body.contains(TOKEN), "{path}: {body}");
    }
    assert_eq!(get(addr, "/status/app.js", "").0, 200);
    let (status, head, body) = get(addr, "/status/api/runs", &format!("Authorization: Bearer {TOKEN}\r\n"));
    assert_eq!(status, 200, "{head}");
    assert!(
        head.to_ascii_lowercase().contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{head}"
    );
    let list: Value = serde_json::from_str(&body).expect("json");
    assert!(list["total"].as_u64().is_some(), "{list}");
    let (status, _, _) = get(addr, "/status/api/runs", "X-Forwarded-User: admin\r\n");
    assert_eq!(status, 401, "no proxy is trusted");
    let wrong = http_request(
        addr,
        "POST /status/login HTTP/1.1\r\nHost: cradle\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 11\r\nConnection: close\r\n\r\n",
        b"token=wrong",
    );
    assert_eq!(wrong.0, 401);

    // A browser: the form, the token typed in, then the runs.
    browser.navigate(&format!("{}/status", served.url)).expect("page");
    let has_form = browser.eval("!!document.querySelector('form.login input[name=token]')").expect("form");
    assert_eq!(has_form, true);
    sign_in(&mut browser);
    browser
        .wait_for(&format!("{} === 'succeeded'", result_of("locked-vm")), LIVE)
        .expect("signed in, the runs show and the stream is open");
    let cookie = browser.eval("document.cookie").expect("cookie");
    assert_eq!(cookie, "", "the session cookie is HttpOnly");
    let html = string(browser.eval("document.documentElement.outerHTML").expect("html"));
    assert!(!html.contains(TOKEN), "the token is not in the page");
    let stopped_log = served.log();
    assert!(!stopped_log.contains(TOKEN), "{stopped_log}");
    served.stop();
}

#[test]
fn a_foreign_host_name_is_refused_on_an_open_listener_and_a_stalled_login_is_cut_off() {
    let dir = project("[serve.status]\n");
    let served = Served::start(dir.path(), &[]);
    let addr = served.addr();
    // DNS rebinding: a hostile page's own name, resolved to 127.0.0.1.
    for path in ["/status", "/status/api/runs", "/status/events", "/metrics"] {
        let (status, _, body) = http_request(
            addr,
            &format!("GET {path} HTTP/1.1\r\nHost: evil.example:8085\r\nConnection: close\r\n\r\n"),
            b"",
        );
        assert_eq!(status, 403, "{path}: {body}");
        assert!(body.contains("DNS rebinding") && body.contains("serve.status.token"), "{path}: {body}");
    }
    let (status, _, _) =
        http_request(addr, "GET /status/api/runs HTTP/1.1\r\nHost: localhost:1\r\nConnection: close\r\n\r\n", b"");
    assert_eq!(status, 200, "a loopback name is fine");
    // A login whose body never comes: answered 408 once the body time is up.
    let started = std::time::Instant::now();
    let (status, _, _) = http_request(
        addr,
        "POST /status/login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 4000\r\nConnection: close\r\n\r\n",
        b"token=",
    );
    assert_eq!(status, 408);
    assert!(started.elapsed() < Duration::from_secs(30));
    served.stop();
}

#[test]
fn after_a_restart_the_page_asks_for_the_token_again_and_then_goes_on_live() {
    let Some(mut browser) = Browser::start("status page") else { return };
    let dir = project("[serve.status]\ntoken = { file = \"status.token\" }\nopen_on_loopback = false\n");
    let port = std::net::TcpListener::bind("127.0.0.2:0").expect("a free port").local_addr().expect("addr").port();
    let listen = format!("127.0.0.2:{port}");
    let served = Served::start_on(dir.path(), &listen, &[]);
    let url = served.url.clone();
    browser.navigate(&format!("{url}/status")).expect("page");
    sign_in(&mut browser);
    browser
        .wait_for("document.getElementById('live') && document.getElementById('live').textContent === 'live'", LIVE)
        .expect("signed in");
    // A restart forgets every session: the stream is refused, and the page
    // sends the reader to the sign-in form instead of waiting forever.
    served.stop();
    let served = Served::start_on(dir.path(), &listen, &[]);
    browser.wait_for("!!document.querySelector('form.login input[name=token]')", LIVE).expect("the sign-in form again");
    sign_in(&mut browser);
    browser
        .wait_for("document.getElementById('live') && document.getElementById('live').textContent === 'live'", LIVE)
        .expect("live again");
    deliver(served.addr(), 7, "after-restart");
    browser.wait_for(&format!("{} === 'succeeded'", result_of("after-restart")), LIVE).expect("a new run shows live");
    served.stop();
}
