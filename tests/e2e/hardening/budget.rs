//! Hardening: per-call budgets (issue 8 item 7), http confinement (item 8) and
//! terminal escaping of plugin text (item 9).
//!
//! Budgets: a plugin call that keeps calling the host is ended by its
//! wall-clock limit, host-call count or journal bytes, with a message naming
//! the `[plugins.hostile]` key; the run releases the lock the plugin took.
//! http: against two real servers on 127.0.0.1 (two ports, two origins).
//! Escaping: the real binary prints a hostile error message escaped.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use cradle::project::RunRequest;
use cradle_tests::fixture::held_locks;
use cradle_tests::{Fixture, Harness, Out, PROBE_RHAI, VM_SPEC_RHAI, cradle_bin};

const CONFIG: &str = r#"
default_environment = "test"
state_dir = "state"
[workflow.grants.lock]
prefixes = ["*"]
[clusters.sim]
kind = "sim"
[environments.test]
cluster = "sim"
backend = "hostile"
[plugins.hostile]
path = "@HOSTILE@"
timeout_ms = 300
@LIMITS@
[plugins.hostile.grants.proxmox]
nodes = ["pve1"]
vmids = "100-199"
[plugins.hostile.grants.lock]
prefixes = ["vm/"]
[plugins.hostile.grants.ssh]
# The wait-for attack's login (the guest address, a port nothing listens on),
# granted literally: this file tests budgets, not the ssh scope.
hosts = ["guests", "root@127.0.10.5:9"]
[plugins.hostile.grants.dns]
zones = []
[plugins.hostile.grants.checkpoint]
[plugins.hostile.grants.terraform]
module_root = "terraform"
[plugins.hostile.grants.http]
endpoints = @ENDPOINTS@
@ENDPOINT_TABLE@
"#;

/// What the test script adds to [`PROBE_RHAI`].
const SCRIPT: &str = r#"
"#;

fn config(limits: &str, endpoints: &str, endpoint_table: &str) -> String {
    CONFIG.replace("@LIMITS@", limits).replace("@ENDPOINTS@", endpoints).replace("@ENDPOINT_TABLE@", endpoint_table)
}

fn env(limits: &str) -> Harness {
    Harness::new(
        &config(limits, "[]", ""),
        &[("probe.rhai", &format!("{PROBE_RHAI}{SCRIPT}")), ("lib/vm.rhai", VM_SPEC_RHAI)],
    )
}

/// Run `probe(name, extra)`; the error text and the journal. Gives up (and
/// fails) after `limit`: without the budget these calls never end.
fn probe(env: &Harness, name: &str, extra: &str, limit: Duration) -> (Result<String, String>, String) {
    let (tx, rx) = mpsc::channel();
    let (project, loaded) = (env.project.clone(), env.loaded.clone());
    let req = RunRequest {
        env: Some("test".into()),
        script: "probe".into(),
        func: "probe".into(),
        args: vec![name.into(), extra.into()],
        ..Default::default()
    };
    let handle = env.rt.handle().clone();
    std::thread::spawn(move || {
        let report =
            handle.block_on(async move { tokio::task::spawn_blocking(move || project.run(&loaded, req)).await });
        let _ = tx.send(report);
    });
    let Ok(report) = rx.recv_timeout(limit) else {
        // A panic would unwind into the runtime's drop, which waits for the
        // endless call forever: end the test process instead.
        eprintln!("FAILED: `{name}` still running after {limit:?}: nothing bounds the plugin call");
        std::process::exit(101);
    };
    let report = report.expect("join").expect("run");
    let journal = std::fs::read_to_string(&report.journal).expect("journal");
    let result = match report.result {
        Ok(v) => Ok(v.to_string()),
        Err(e) => Err(e.to_string()),
    };
    (result, journal)
}

fn events(journal: &str) -> Vec<serde_json::Value> {
    journal.lines().map(|l| serde_json::from_str(l).expect("json line")).collect()
}

/// The budget refusal the journal recorded (once).
fn budget_refusals(journal: &str, key: &str) -> usize {
    events(journal)
        .iter()
        .filter(|e| {
            e["event"] == "capability_call"
                && e["outcome"]["result"] == "failed"
                && e["outcome"]["message"].as_str().unwrap_or("").contains(key)
        })
        .count()
}

#[test]
fn a_log_loop_is_ended_by_the_journal_bytes_budget_and_its_lock_is_released() {
    let env = env("max_journal_bytes = 200000");
    let (result, journal) = probe(&env, "budget:log-loop", "test-0", Duration::from_secs(60));
    let err = result.expect_err("the loop must be ended");
    assert!(err.contains("max_journal_bytes in [plugins.hostile]") && err.contains("200000 bytes"), "{err}");
    assert!(journal.len() < 400_000, "the journal grew to {} bytes past a 200000-byte budget", journal.len());
    assert_eq!(budget_refusals(&journal, "max_journal_bytes"), 1, "the refusal is journaled once");
    assert!(held_locks(&env.fixture.state()).is_empty(), "locks left: {:?}", held_locks(&env.fixture.state()));
}

#[test]
fn a_denied_lock_loop_is_ended_by_the_host_call_budget_and_its_lock_is_released() {
    let env = env("max_host_calls = 500");
    let (result, journal) = probe(&env, "budget:denied-lock-loop", "test-0", Duration::from_secs(60));
    let err = result.expect_err("the loop must be ended");
    assert!(err.contains("max_host_calls in [plugins.hostile]") && err.contains("more than 500 host calls"), "{err}");
    let calls = events(&journal).iter().filter(|e| e["event"] == "capability_call").count();
    assert!(calls <= 510, "{calls} capability calls journaled past a budget of 500");
    assert_eq!(budget_refusals(&journal, "max_host_calls"), 1);
    assert!(held_locks(&env.fixture.state()).is_empty(), "locks left: {:?}", held_locks(&env.fixture.state()));
}

#[test]
fn ssh_wait_for_with_an_endless_timeout_is_clamped_to_the_call_deadline() {
    let env = env("call_timeout_ms = 1500");
    let started = Instant::now();
    let (result, journal) = probe(&env, "budget:wait-for-forever", "test-0", Duration::from_secs(60));
    let err = result.expect_err("the wait must be ended");
    assert!(err.contains("call_timeout_ms in [plugins.hostile]") && err.contains("1500 ms"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    // The wait itself returned (clamped) rather than being abandoned.
    let waits = events(&journal)
        .into_iter()
        .filter(|e| e["event"] == "capability_call" && e["function"] == "wait-for")
        .collect::<Vec<_>>();
    assert!(!waits.is_empty() && waits[0]["outcome"]["result"] == "failed", "{waits:?}");
    assert!(held_locks(&env.fixture.state()).is_empty(), "locks left: {:?}", held_locks(&env.fixture.state()));
}

#[test]
fn a_call_within_its_budget_is_unaffected() {
    let env = env("max_host_calls = 5\nmax_journal_bytes = 100000\ncall_timeout_ms = 60000");
    let (result, _) = probe(&env, "lock", "vm/test-0", Duration::from_secs(60));
    result.expect("a single host call is within every budget");
}

// --- http -------------------------------------------------------------------

/// A one-request-per-connection HTTP server on 127.0.0.1 that records each
/// request's head and answers with `respond(path)`.
struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(respond: impl Fn(&str) -> String + Send + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                log.lock().expect("log").push(head);
                let _ = stream.write_all(respond(&path).as_bytes());
            }
        });
        Server { port, seen }
    }

    fn requests(&self) -> Vec<String> {
        self.seen.lock().expect("log").clone()
    }
}

fn ok(body: &str) -> String {
    format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
}

fn redirect(to: &str) -> String {
    format!("HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
}

/// Origin A (the endpoint, base path `/base`) and origin B (another port).
fn http_env() -> (Harness, Server, Server) {
    let other = Server::start(|_| ok("answer from the other origin"));
    let other_port = other.port;
    let endpoint = Server::start(move |path| match path {
        "/base/away" => redirect(&format!("http://127.0.0.1:{other_port}/steal")),
        "/base/moved" => redirect("/base/here"),
        p => ok(&format!("endpoint saw {p}")),
    });
    let table = format!(
        "[endpoints.api]\nurl = \"http://127.0.0.1:{}/base\"\nauth = \"api-key\"\ntoken = {{ command = [\"printf\", \"sekrit-api-key-42\"] }}\n",
        endpoint.port
    );
    let harness = Harness::new(
        &config("", "[\"api\"]", &table),
        &[("probe.rhai", &format!("{PROBE_RHAI}{SCRIPT}")), ("lib/vm.rhai", VM_SPEC_RHAI)],
    );
    (harness, endpoint, other)
}

#[test]
fn a_redirect_to_another_origin_is_not_followed_and_carries_no_credential_there() {
    let (env, endpoint, other) = http_env();
    let (result, _) = probe(&env, "http:get", "/away", Duration::from_secs(60));
    let got = result.expect("the 3xx is a response");
    assert!(got.contains("status 302"), "{got}");
    assert!(!got.contains("other origin"), "the other origin's response came back: {got}");
    assert!(other.requests().is_empty(), "the other origin was contacted: {:?}", other.requests());
    assert!(
        endpoint.requests()[0].to_lowercase().contains("x-api-key: sekrit-api-key-42"),
        "the endpoint gets its key"
    );
    // Within the endpoint a redirect is still followed.
    let (result, _) = probe(&env, "http:get", "/moved", Duration::from_secs(60));
    assert!(result.expect("followed").contains("endpoint saw /base/here"));
}

#[test]
fn an_encoded_dot_dot_path_cannot_leave_the_endpoint_base() {
    let (env, endpoint, _other) = http_env();
    for path in ["/%2e%2e/%2e%2e/admin", "/%2E%2E/admin", "/./../admin", "/a%2f..%2f..%2fadmin", "/x?y=/../admin"] {
        let (result, journal) = probe(&env, "http:get", path, Duration::from_secs(60));
        let err = result.expect_err(path);
        assert!(err.contains("must stay below the endpoint"), "{path}: {err}");
        assert!(journal.contains("\"capability\":\"http\""), "the refusal is journaled");
    }
    assert!(endpoint.requests().is_empty(), "a request left the base path: {:?}", endpoint.requests());
}

#[test]
fn a_plugin_set_host_or_hop_by_hop_or_credential_header_is_refused() {
    let (env, endpoint, _other) = http_env();
    for header in
        ["Host: evil.example", "Connection: close", "Transfer-Encoding: chunked", "X-API-KEY: mine", "Cookie: a=b"]
    {
        let (result, _) = probe(&env, "http:header", header, Duration::from_secs(60));
        let err = result.expect_err(header);
        let name = header.split(':').next().unwrap_or("");
        assert!(err.contains(&format!("header `{name}` may not be set by a plugin")), "{header}: {err}");
    }
    assert!(endpoint.requests().is_empty(), "{:?}", endpoint.requests());
    let (result, _) = probe(&env, "http:header", "Accept: application/json", Duration::from_secs(60));
    assert!(result.expect("an ordinary header").contains("status 200"));
}

/// The endpoint of [`http_env`] with `limit` under
/// `[plugins.hostile.grants.http.limit.api]`.
fn limited_http_env(limit: &str) -> (Harness, Server) {
    let endpoint = Server::start(|path| ok(&format!("endpoint saw {path}")));
    let table = format!(
        "[plugins.hostile.grants.http.limit.api]\n{limit}\n[endpoints.api]\nurl = \"http://127.0.0.1:{}/base\"\n\
         auth = \"api-key\"\ntoken = {{ command = [\"printf\", \"sekrit-api-key-42\"] }}\n",
        endpoint.port
    );
    let harness = Harness::new(
        &config("", "[\"api\"]", &table),
        &[("probe.rhai", &format!("{PROBE_RHAI}{SCRIPT}")), ("lib/vm.rhai", VM_SPEC_RHAI)],
    );
    (harness, endpoint)
}

#[test]
fn a_plugin_reaches_no_method_path_or_climb_outside_its_http_limit() {
    let (env, endpoint) = limited_http_env("methods = [\"GET\"]\npaths = [\"/ipam/\"]");
    let (result, _) = probe(&env, "http:get", "/ipam/prefixes/", Duration::from_secs(60));
    assert!(result.expect("inside the limit").contains("endpoint saw /base/ipam/prefixes/"));
    // A path under no prefix, and paths that climb out of one or read two ways.
    for path in ["/users/tokens/", "/ipam/../users/tokens/", "/ipam/%2e%2e/users/", "/ipam//x", "/ipam/%2F..%2Fusers"] {
        let (result, journal) = probe(&env, "http:get", path, Duration::from_secs(60));
        let err = result.expect_err(path);
        assert!(err.contains("plugins.hostile.grants.http.limit.api.paths"), "{path}: {err}");
        assert!(journal.contains("\"capability\":\"http\""), "the denial is journaled: {journal}");
    }
    assert_eq!(endpoint.requests().len(), 1, "only the request inside the limit left: {:?}", endpoint.requests());
    // A method the limit does not list.
    let (env, endpoint) = limited_http_env("methods = [\"POST\"]");
    let (result, _) = probe(&env, "http:get", "/ipam/prefixes/", Duration::from_secs(60));
    let err = result.expect_err("GET is not listed");
    assert!(err.contains("GET is not in plugins.hostile.grants.http.limit.api.methods"), "{err}");
    assert!(endpoint.requests().is_empty(), "{:?}", endpoint.requests());
}

// --- terminal escaping ---------------------------------------------------------

fn cradle(fx: &Fixture, args: &[&str]) -> Out {
    let mut cmd = Command::new(cradle_bin());
    cmd.arg("--config").arg(fx.config()).arg("--state-dir").arg(fx.state()).args(args).current_dir(fx.dir.path());
    for var in ["CRADLE_LOG", "CRADLE_CONFIG", "CRADLE_STATE_DIR", "NO_COLOR"] {
        cmd.env_remove(var);
    }
    Out::from(cmd.output().expect("run cradle"))
}

/// No raw control character but the line breaks, and no line that starts
/// with the forged text.
fn assert_escaped(what: &str, text: &str) {
    assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{what} printed a raw control character:\n{text:?}");
    for line in text.lines() {
        assert!(
            !line.starts_with("error: forged") && !line.starts_with("error: second"),
            "{what} forged a line:\n{text}"
        );
    }
    assert!(
        text.contains("boom\\u{1b}[2J\\u{1b}]0;pwned-title\\u{7}\\rerror: forged line\\nerror: second"),
        "{what}:\n{text}"
    );
}

#[test]
fn a_hostile_plugin_error_is_printed_escaped_by_run_and_runs_show() {
    let fx = Fixture::new(
        &config("", "[]", ""),
        &[("probe.rhai", &format!("{PROBE_RHAI}{SCRIPT}")), ("lib/vm.rhai", VM_SPEC_RHAI)],
    );
    let out = cradle(&fx, &["run", "probe", "--fn", "probe", "budget:terminal-error", "x"]);
    assert_eq!(out.code, 1, "{out:#?}");
    assert_escaped("cradle run", &out.stderr);
    let run_id = out
        .stderr
        .split("`cradle runs show ")
        .nth(1)
        .and_then(|s| s.split('`').next())
        .unwrap_or_else(|| panic!("no run id in {}", out.stderr))
        .to_string();
    let show = cradle(&fx, &["runs", "show", &run_id]);
    assert_eq!(show.code, 0, "{show:#?}");
    assert_escaped("cradle runs show", &show.stdout);
    // JSON stays exact: the message round-trips with its control characters.
    let json = cradle(&fx, &["--output", "json", "runs", "show", &run_id]);
    assert!(json.json().to_string().contains("\\u001b[2J"), "{}", json.stdout);
}

#[test]
fn a_hostile_plugin_error_is_printed_escaped_in_the_provision_summary() {
    // The project's own provision workflow hands the VM to the hostile attack.
    let provision = "import \"lib/vm\" as spec;\nfn provision(vm) { cradle::backend().discover(spec::vm(\"budget:terminal-error\")) }\n";
    let fx = Fixture::new(&config("", "[]", ""), &[("provision.rhai", provision), ("lib/vm.rhai", VM_SPEC_RHAI)]);
    let inventory = cradle_tests::fixture::LabInventory::new("127.34", 10).count(1).write(fx.dir.path());
    let inventory = inventory.display().to_string();
    let out = cradle(&fx, &["provision", "-i", &inventory]);
    assert_eq!(out.code, 1, "{out:#?}");
    assert!(out.stdout.contains("failed"), "{out:#?}");
    assert_escaped("cradle provision", &out.stdout);
    assert!(!out.stderr.chars().any(|c| c.is_control() && c != '\n'), "raw control on stderr: {:?}", out.stderr);
}

#[test]
fn a_plugin_load_error_is_printed_escaped_by_plugins_list() {
    // The error names the plugin file; its name carries the terminal attack.
    let evil = "[plugins.evil]\npath = \"gone-boom\\u001b[2J\\u001b]0;pwned-title\\u0007\\rerror: forged line\\nerror: second forged line.wasm\"\n";
    let fx = Fixture::new(
        &format!("{}{evil}", config("", "[]", "")),
        &[("probe.rhai", &format!("{PROBE_RHAI}{SCRIPT}")), ("lib/vm.rhai", VM_SPEC_RHAI)],
    );
    let out = cradle(&fx, &["plugins", "list"]);
    assert_eq!(out.code, 1, "a plugin that does not load fails the listing: {out:#?}");
    assert!(out.stdout.contains("evil") && out.stdout.contains("ERROR"), "{out:#?}");
    assert!(
        !out.stdout.chars().any(|c| c.is_control() && c != '\n'),
        "plugins list printed a raw control character:\n{:?}",
        out.stdout
    );
    assert!(
        !out.stdout.lines().any(|l| l.starts_with("error: forged") || l.starts_with("error: second")),
        "{}",
        out.stdout
    );
}
