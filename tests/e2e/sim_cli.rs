//! `cradle sim serve`: the simulator as a server prints what a client needs
//! (API URL, token, certificate fingerprint), and that is enough to talk to it.
//!
//! With `--unifi`, `--technitium` and `--semaphore` it also runs the stand-ins of
//! docs/STAND-INS.md: each answers over real HTTP(S) (`curl`) at the URL it printed,
//! with the credentials it wrote (0600 files in a 0700 directory, never printed or
//! logged); the UniFi stand-in's style and transport follow `--unifi-style` and
//! `--unifi-http`, and it is the cluster's DHCP server: a DHCP guest provisioned by
//! another `cradle` process through the written config comes up on its lease.
//! The DHCP test binds a guest's port 22 on 127.77.0.233 (`DHCP_FREE`), an address
//! no other test uses; everything else is on ephemeral loopback ports.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cradle_tests::fixture::{Backend, Cluster, ProjectConfig, Workflows};
use cradle_tests::{Out, cradle_bin};
use serde_json::Value;

#[test]
fn sim_serve_prints_the_api_url_token_and_fingerprint_and_answers() {
    let state = tempfile::tempdir().expect("tmp");
    let mut child = Command::new(cradle_bin())
        .args(["sim", "serve", "--listen", "127.0.0.1:0", "--time-scale", "0", "--nodes", "pve1,pve2"])
        .arg("--state-dir")
        .arg(state.path().join("sim"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cradle sim serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = std::collections::BTreeMap::new();
    for line in lines.by_ref() {
        let line = line.expect("line");
        for key in ["API URL:", "API token:", "fingerprint:"] {
            if let Some(v) = line.trim().strip_prefix(key) {
                seen.insert(key, v.trim().to_string());
            }
        }
        if line.contains("Press Ctrl-C") {
            break;
        }
    }
    let url = seen.get("API URL:").expect("API URL printed").clone();
    let token = seen.get("API token:").expect("token printed").clone();
    let fingerprint = seen.get("fingerprint:").expect("fingerprint printed").clone();
    assert!(url.starts_with("https://127.0.0.1:") && url.ends_with("/api2/json"), "{url}");
    assert!(token.starts_with("root@pam!") && token.contains('='), "token form");
    assert_eq!(fingerprint.split(':').count(), 32, "{fingerprint}");
    // Talk to it with the printed values: pinned TLS, the token, a real request.
    let client = cradle::caps::proxmox::client::ProxmoxClient::new(cradle::caps::proxmox::client::ClientSettings {
        endpoint: url.trim_end_matches("/api2/json").to_string(),
        token,
        verify: cradle::caps::proxmox::tls::TlsVerify::Fingerprint(fingerprint),
        timeout: std::time::Duration::from_secs(10),
        retry: Default::default(),
        task_time_scale: 1.0,
    })
    .expect("client");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
    let vms = rt.block_on(client.list_vms()).expect("list vms");
    assert!(vms.iter().any(|v| v.template && v.name.as_deref() == Some("debian-12-cloud")), "seeded template");
    let _ = child.kill();
    let _ = child.wait();
}

// ---------------------------------------------------------------------------
// The stand-ins `cradle sim serve` runs next to the cluster (`--unifi`,
// `--technitium`, `--semaphore`; docs/STAND-INS.md): each answers over real
// HTTP(S) at the URL it printed, with the credentials it wrote (owner-only, never
// printed), and the UniFi stand-in is the cluster's DHCP server.

/// A running `cradle sim serve` and what it printed up to "Press Ctrl-C"; the
/// rest of its stdout and all its stderr are collected until it ends.
/// Stopped (SIGINT, then SIGKILL) when dropped.
struct Served {
    child: Child,
    banner: Vec<String>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
            for _ in 0..100 {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Served {
    /// `cradle [global] sim serve --listen 127.0.0.1:0 --time-scale 0
    /// --node-ssh-port 0 --state-dir STATE ARGS`.
    fn start(global: &[&str], state: &Path, args: &[&OsStr]) -> Served {
        let mut child = Command::new(cradle_bin())
            .args(global)
            .args(["sim", "serve", "--listen", "127.0.0.1:0", "--time-scale", "0", "--node-ssh-port", "0"])
            .arg("--state-dir")
            .arg(state)
            .args(args)
            .env_remove("CRADLE_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cradle sim serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let err = child.stderr.take().expect("stderr");
        let mut readers = vec![std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = sink.lock().expect("stderr buffer");
                s.push_str(&line);
                s.push('\n');
            }
        })];
        let stdout = Arc::new(Mutex::new(String::new()));
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut banner = Vec::new();
        for line in lines.by_ref().map_while(Result::ok) {
            stdout.lock().expect("stdout buffer").push_str(&format!("{line}\n"));
            let ready = line.contains("Press Ctrl-C");
            banner.push(line);
            if ready {
                break;
            }
        }
        if !banner.last().is_some_and(|l| l.contains("Press Ctrl-C")) {
            let _ = child.wait();
            for r in readers.drain(..) {
                let _ = r.join();
            }
            panic!(
                "cradle sim serve did not start\nstdout:\n{}\nstderr:\n{}",
                banner.join("\n"),
                stderr.lock().expect("stderr buffer")
            );
        }
        // Keep draining so the process never blocks on a full pipe.
        let sink = stdout.clone();
        readers.push(std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().expect("stdout buffer").push_str(&format!("{line}\n"));
            }
        }));
        Served { child, banner, stdout, stderr, readers }
    }

    /// The URL and credential files `cradle sim serve` announced for stand-in
    /// `name` (`UniFi`, `Technitium`, `Semaphore`), and its whole line.
    fn stand_in(&self, name: &str) -> StandIn {
        let label = format!("{name}:");
        let at = self
            .banner
            .iter()
            .position(|l| l.trim_start().starts_with(&label))
            .unwrap_or_else(|| panic!("no {name} line in:\n{}", self.banner.join("\n")));
        let line = self.banner[at].trim().to_string();
        let url = line[label.len()..].split_whitespace().next().expect("a URL after the name").to_string();
        let console = url.strip_suffix("/proxy/network").unwrap_or(&url).to_string();
        let files = self
            .banner
            .get(at + 1)
            .and_then(|l| l.trim().strip_prefix("credentials "))
            .unwrap_or_else(|| panic!("no credentials line after {line}"))
            .split(", ")
            .map(PathBuf::from)
            .collect();
        StandIn { url, console, line, files }
    }

    /// Ctrl-C, then everything it printed: (stdout, stderr). Fails the test
    /// when it does not end cleanly.
    fn stop(&mut self) -> (String, String) {
        let sent = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status().expect("kill -INT");
        assert!(sent.success(), "kill -INT {}", self.child.id());
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "cradle sim serve did not end after Ctrl-C");
            std::thread::sleep(Duration::from_millis(50));
        };
        for r in self.readers.drain(..) {
            r.join().expect("reader thread");
        }
        let out = self.stdout.lock().expect("stdout buffer").clone();
        let err = self.stderr.lock().expect("stderr buffer").clone();
        assert!(status.success(), "cradle sim serve ended with {status:?}\nstdout:\n{out}\nstderr:\n{err}");
        (out, err)
    }
}

/// One stand-in as `cradle sim serve` announced it.
struct StandIn {
    /// The URL it printed: what an `[endpoints.NAME]` takes (a UniFi OS
    /// controller's ends in `/proxy/network`).
    url: String,
    /// That URL without `/proxy/network`: the console's root.
    console: String,
    /// Its announcement line (`UniFi:        https://... (UniFi OS; ...)`).
    line: String,
    /// The credential files it wrote.
    files: Vec<PathBuf>,
}

impl StandIn {
    /// The credential file named `name`, which must be among those announced.
    fn file(&self, name: &str) -> PathBuf {
        self.files
            .iter()
            .find(|f| f.file_name().is_some_and(|n| n == name))
            .unwrap_or_else(|| panic!("{name} is not among {:?}", self.files))
            .clone()
    }

    /// The content of the credential file `name`.
    fn secret(&self, name: &str) -> String {
        let text = std::fs::read_to_string(self.file(name)).expect("read a credential file");
        assert!(!text.trim().is_empty(), "{name} is empty");
        text.trim().to_string()
    }

    fn file_names(&self) -> BTreeSet<String> {
        self.files.iter().map(|f| f.file_name().expect("file name").to_string_lossy().into_owned()).collect()
    }
}

/// What one `curl` request got.
#[derive(Debug)]
struct Answer {
    /// curl's exit code (0: a response came; 60: the certificate was not trusted).
    exit: i32,
    status: u16,
    body: String,
    /// `%{redirect_url}`: where a 3xx points.
    redirect: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }
}

const WRITE_OUT: &str = "\n@@curl@@ %{http_code} %{redirect_url}";

/// `curl -sS ARGS URL` (no redirect following), its status and body.
fn curl(args: &[&str], url: &str) -> Answer {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "60", "-w", WRITE_OUT])
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .expect("run curl (it must be installed)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = text.rsplit_once("\n@@curl@@ ").unwrap_or((text.as_str(), "000 "));
    let (status, redirect) = tail.split_once(' ').unwrap_or((tail, ""));
    Answer {
        exit: out.status.code().unwrap_or(-1),
        status: status.trim().parse().unwrap_or(0),
        body: body.to_string(),
        redirect: redirect.trim().to_string(),
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

/// The three stand-ins on ephemeral ports, Technitium with two zones of its own.
fn all_stand_ins() -> Vec<&'static OsStr> {
    [
        "--unifi",
        "127.0.0.1:0",
        "--technitium",
        "127.0.0.1:0",
        "--technitium-zone",
        "e2e.example.org",
        "--technitium-zone",
        "second.example.net",
        "--semaphore",
        "127.0.0.1:0",
    ]
    .into_iter()
    .map(OsStr::new)
    .collect()
}

#[test]
fn sim_serve_stand_ins_answer_at_their_printed_urls_with_the_credentials_they_wrote() {
    let tmp = tempfile::tempdir().expect("tmp");
    let state = tmp.path().join("sim");
    let served = Served::start(&[], &state, &all_stand_ins());
    let default_dir = state.join("stand-ins");

    // UniFi, UniFi OS style over HTTPS: a self-signed certificate whose CA it wrote.
    let unifi = served.stand_in("UniFi");
    assert!(unifi.url.starts_with("https://127.0.0.1:"), "{}", unifi.line);
    assert!(unifi.line.contains("(UniFi OS;"), "{}", unifi.line);
    assert!(unifi.files.iter().all(|f| f.parent() == Some(default_dir.as_path())), "{:?}", unifi.files);
    let ca = unifi.file("unifi-ca.pem");
    let ca = ca.to_str().expect("UTF-8 path");
    assert!(unifi.url.ends_with("/proxy/network"), "the endpoint URL of a UniFi OS controller: {}", unifi.line);
    let untrusted = curl(&[], &format!("{}/", unifi.console));
    assert_eq!(untrusted.exit, 60, "without its CA the certificate is not trusted: {untrusted:?}");
    let root = curl(&["--cacert", ca], &format!("{}/", unifi.console));
    assert_eq!((root.exit, root.status), (0, 200), "GET / is 200 on UniFi OS: {root:?}");
    let key = format!("X-API-KEY: {}", unifi.secret("unifi.api-key"));
    let networks = format!("{}/api/s/default/rest/networkconf", unifi.url);
    let nets = curl(&["--cacert", ca, "-H", &key], &networks);
    assert_eq!(nets.status, 200, "{nets:?}");
    let doc = nets.json();
    assert_eq!(doc["meta"]["rc"], "ok", "{doc}");
    assert_eq!(doc["data"][0]["ip_subnet"], "127.77.0.1/24", "the default network: {doc}");
    let denied = curl(&["--cacert", ca, "-H", "X-API-KEY: not-the-key"], &networks);
    assert_eq!(denied.status, 401, "{denied:?}");
    assert_eq!(denied.json()["meta"]["msg"], "api.err.LoginRequired", "{denied:?}");

    // Technitium: the token it wrote opens the zones given on the command line.
    let dns = served.stand_in("Technitium");
    assert!(dns.url.starts_with("http://127.0.0.1:"), "{}", dns.line);
    assert!(dns.files.iter().all(|f| f.parent() == Some(default_dir.as_path())), "{:?}", dns.files);
    let bearer = format!("Authorization: Bearer {}", dns.secret("technitium.token"));
    for zone in ["e2e.example.org", "second.example.net"] {
        let get = curl(&["-H", &bearer], &format!("{}/api/zones/records/get?domain={zone}&zone={zone}", dns.url));
        assert_eq!(get.status, 200, "{get:?}");
        let doc = get.json();
        assert_eq!(doc["status"], "ok", "{doc}");
        assert_eq!(doc["response"]["zone"]["name"], zone, "{doc}");
        assert_eq!(doc["response"]["zone"]["type"], "Primary", "{doc}");
    }
    let list = curl(&["-H", &bearer], &format!("{}/api/zones/list", dns.url)).json();
    let zones: BTreeSet<&str> =
        list["response"]["zones"].as_array().expect("zones").iter().filter_map(|z| z["name"].as_str()).collect();
    assert_eq!(zones, BTreeSet::from(["e2e.example.org", "second.example.net"]), "given zones replace the default");
    let wrong = curl(
        &["-H", "Authorization: Bearer 0123456789abcdef"],
        &format!("{}/api/zones/records/get?domain=e2e.example.org", dns.url),
    );
    assert_eq!(wrong.status, 200, "Technitium answers every error with HTTP 200: {wrong:?}");
    assert_eq!(wrong.json()["status"], "invalid-token", "{wrong:?}");

    // Semaphore: ping without auth; the task list with the token only.
    let sem = served.stand_in("Semaphore");
    assert!(sem.url.starts_with("http://127.0.0.1:"), "{}", sem.line);
    assert!(sem.files.iter().all(|f| f.parent() == Some(default_dir.as_path())), "{:?}", sem.files);
    let ping = curl(&[], &format!("{}/api/ping", sem.url));
    assert_eq!((ping.status, ping.body.as_str()), (200, "pong"), "{ping:?}");
    let last = format!("{}/api/project/1/tasks/last", sem.url);
    let bearer = format!("Authorization: Bearer {}", sem.secret("semaphore.token"));
    let tasks = curl(&["-H", &bearer], &last);
    assert_eq!(tasks.status, 200, "{tasks:?}");
    assert!(tasks.json().is_array(), "{tasks:?}");
    let anonymous = curl(&[], &last);
    assert_eq!((anonymous.status, anonymous.body.as_str()), (401, ""), "{anonymous:?}");
    let wrong = curl(&["-H", "Authorization: Bearer notthetoken"], &last);
    assert_eq!(wrong.status, 401, "{wrong:?}");
}

/// The `key = value` lines of `[name]` in `text` (values as written).
fn toml_section(text: &str, name: &str) -> Vec<(String, String)> {
    let header = format!("[{name}]");
    text.lines()
        .skip_while(|l| l.trim() != header)
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .filter_map(|l| l.split_once(" = ").map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
        .collect()
}

fn toml_value<'a>(section: &'a [(String, String)], key: &str) -> &'a str {
    section.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("no {key} in {section:?}"))
}

/// The file a `{ file = "…" }` reference names.
fn referenced_file(value: &str) -> PathBuf {
    let inner = value.strip_prefix("{ file = \"").and_then(|v| v.strip_suffix("\" }")).expect("a file reference");
    PathBuf::from(inner)
}

#[test]
fn sim_serve_write_config_holds_each_stand_ins_endpoint_provider_and_grant_and_a_workflow_reaches_them_through_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let state = tmp.path().join("sim");
    let written = tmp.path().join("cluster.toml");
    let mut args = all_stand_ins();
    args.extend([OsStr::new("--write-config"), written.as_os_str()]);
    let served = Served::start(&[], &state, &args);
    let (unifi, dns, sem) = (served.stand_in("UniFi"), served.stand_in("Technitium"), served.stand_in("Semaphore"));
    let text = std::fs::read_to_string(&written).expect("the written config");
    assert_eq!(mode(&written), 0o600);

    // UniFi OS: the URL with /proxy/network, the API key and the CA, by file.
    let u = toml_section(&text, "endpoints.unifi");
    assert_eq!(toml_value(&u, "url"), format!("\"{}\"", unifi.url), "{text}");
    assert!(unifi.url.ends_with("/proxy/network"), "{}", unifi.line);
    assert_eq!(toml_value(&u, "auth"), "\"api-key\"", "{text}");
    assert_eq!(referenced_file(toml_value(&u, "token")), unifi.file("unifi.api-key"), "{text}");
    let ca = toml_value(&u, "ca_file").trim_matches('"').to_string();
    assert_eq!(PathBuf::from(&ca), unifi.file("unifi-ca.pem"));
    // What the host does with it: the controller's path appended to the URL.
    let key = format!("X-API-KEY: {}", std::fs::read_to_string(unifi.file("unifi.api-key")).expect("key").trim());
    let nets = curl(&["--cacert", &ca, "-H", &key], &format!("{}/api/s/default/rest/networkconf", unifi.url));
    assert_eq!((nets.status, nets.json()["meta"]["rc"].as_str()), (200, Some("ok")), "{nets:?}");

    // Technitium and Semaphore: their URL and token file, bearer.
    for (name, stand_in, token, path) in [
        ("technitium", &dns, "technitium.token", "/api/zones/list"),
        ("semaphore", &sem, "semaphore.token", "/api/project/1/tasks/last"),
    ] {
        let e = toml_section(&text, &format!("endpoints.{name}"));
        assert_eq!(toml_value(&e, "url"), format!("\"{}\"", stand_in.url), "{text}");
        assert_eq!(toml_value(&e, "auth"), "\"bearer\"", "{text}");
        let file = referenced_file(toml_value(&e, "token"));
        assert_eq!(file, stand_in.file(token), "{text}");
        let bearer = format!("Authorization: Bearer {}", std::fs::read_to_string(&file).expect("token").trim());
        let got = curl(&["-H", &bearer], &format!("{}{path}", stand_in.url));
        assert_eq!(got.status, 200, "{name}: {got:?}");
    }

    // The providers over UniFi and Technitium, the environment naming them, and
    // the NetBox workflow's grants as docs/NETBOX.md sets them up: Semaphore
    // through the typed `post` provider, no http grant.
    let d = toml_section(&text, "dhcp.unifi");
    assert_eq!((toml_value(&d, "kind"), toml_value(&d, "endpoint")), ("\"unifi\"", "\"unifi\""), "{text}");
    assert_eq!(toml_value(&d, "site"), "\"default\"", "{text}");
    let t = toml_section(&text, "dns.technitium");
    assert_eq!((toml_value(&t, "kind"), toml_value(&t, "endpoint")), ("\"technitium\"", "\"technitium\""), "{text}");
    assert_eq!(toml_value(&t, "zones"), "[\"e2e.example.org\", \"second.example.net\"]", "{text}");
    assert_eq!((toml_value(&t, "ttl"), toml_value(&t, "ptr")), ("300", "true"), "{text}");
    let env = toml_section(&text, "environments.sim");
    assert_eq!((toml_value(&env, "cluster"), toml_value(&env, "backend")), ("\"sim\"", "\"direct\""), "{text}");
    assert_eq!((toml_value(&env, "dhcp"), toml_value(&env, "dns")), ("\"unifi\"", "\"technitium\""), "{text}");
    let grant = toml_section(&text, "workflow.grants.dhcp");
    assert_eq!(toml_value(&grant, "networks"), "[\"127.77.0.0/24\"]", "the UniFi site's subnet: {text}");
    let grant = toml_section(&text, "workflow.grants.dns");
    assert_eq!(toml_value(&grant, "zones"), "[\"e2e.example.org\", \"second.example.net\"]", "{text}");
    let grant = toml_section(&text, "workflow.grants.netbox");
    assert_eq!(toml_value(&grant, "endpoint"), "\"netbox\"", "{text}");
    assert_eq!(toml_value(&grant, "statuses"), "[\"active\", \"failed\"]", "{text}");
    // The NetBox pipeline's integration plugin (the built-in `netbox`) gets
    // its own grants of the same services, and its HA calls' proxmox scope.
    let grant = toml_section(&text, "plugins.netbox.grants.netbox");
    assert_eq!(toml_value(&grant, "statuses"), "[\"active\", \"failed\"]", "{text}");
    let grant = toml_section(&text, "plugins.netbox.grants.dhcp");
    assert_eq!(toml_value(&grant, "networks"), "[\"127.77.0.0/24\"]", "{text}");
    let grant = toml_section(&text, "plugins.netbox.grants.dns");
    assert_eq!(toml_value(&grant, "zones"), "[\"e2e.example.org\", \"second.example.net\"]", "{text}");
    let grant = toml_section(&text, "plugins.netbox.grants.proxmox");
    assert_eq!(toml_value(&grant, "vmids"), "\"100-999999\"", "{text}");
    let p = toml_section(&text, "post.semaphore");
    assert_eq!((toml_value(&p, "kind"), toml_value(&p, "endpoint")), ("\"semaphore\"", "\"semaphore\""), "{text}");
    assert_eq!(toml_value(&env, "post"), "\"semaphore\"", "{text}");
    let grant = toml_section(&text, "workflow.grants.post");
    assert_eq!((toml_value(&grant, "projects"), toml_value(&grant, "templates")), ("[1]", "[1, 2]"), "{text}");
    assert!(!text.contains("[workflow.grants.http"), "Semaphore needs no http grant: {text}");
    // No secret is in the file itself: only references.
    for secret in [unifi.secret("unifi.api-key"), dns.secret("technitium.token"), sem.secret("semaphore.token")] {
        assert!(!text.contains(&secret), "a credential was written into the config");
    }

    // The file is a cradle.toml as it is (only a workflow directory added): cradle
    // loads it, and a workflow's dhcp reserve, dns upsert and Semaphore task go
    // through the written providers to the stand-ins.
    let project = tmp.path().join("project");
    std::fs::create_dir_all(project.join("workflows")).expect("mkdir workflows");
    std::fs::write(
        project.join("workflows/probe.rhai"),
        "fn main(mac, ip, fqdn) {\n    dhcp::reserve(\"\", mac, ip, \"probe-0\");\n    \
         dns::upsert(#{ zone: \"e2e.example.org\", name: fqdn, kind: \"a\", value: ip });\n    \
         post_task::run(1, 1, #{ vm_name: \"probe-0\" }, 60000);\n    \"done\"\n}\n",
    )
    .expect("probe.rhai");
    let config = project.join("cradle.toml");
    std::fs::write(&config, format!("[workflow]\ndir = \"workflows\"\n{text}")).expect("cradle.toml");
    let (mac, ip, fqdn) = ("02:00:00:00:33:01", "127.77.0.50", "probe-0.e2e.example.org");
    let run = Out::from(
        Command::new(cradle_bin())
            .arg("--config")
            .arg(&config)
            .args(["run", "probe", "--env", "sim", mac, ip, fqdn])
            .env_remove("CRADLE_CONFIG")
            .env_remove("CRADLE_STATE_DIR")
            .stdin(Stdio::null())
            .output()
            .expect("run cradle run"),
    );
    assert_eq!(run.code, 0, "{run:#?}\n{text}");
    let seen = curl(&["--cacert", &ca, "-H", &key], &format!("{}/api/s/default/stat/user/{mac}", unifi.url));
    let client = &seen.json()["data"][0];
    assert_eq!((client["use_fixedip"].as_bool(), client["fixed_ip"].as_str()), (Some(true), Some(ip)), "{seen:?}");
    let bearer = format!("Authorization: Bearer {}", dns.secret("technitium.token"));
    let got = curl(&["-H", &bearer], &format!("{}/api/zones/records/get?domain={fqdn}&zone=e2e.example.org", dns.url));
    let records = got.json()["response"]["records"].clone();
    let a: Vec<&Value> = records.as_array().expect("records").iter().filter(|r| r["type"] == "A").collect();
    assert_eq!(a.len(), 1, "{got:?}");
    assert_eq!(a[0]["rData"]["ipAddress"], ip, "{got:?}");
    let bearer = format!("Authorization: Bearer {}", sem.secret("semaphore.token"));
    let task = curl(&["-H", &bearer], &format!("{}/api/project/1/tasks/1", sem.url));
    assert_eq!(
        (task.json()["template_id"].as_i64(), task.json()["status"].as_str()),
        (Some(1), Some("success")),
        "{task:?}"
    );
}

#[test]
fn sim_serve_classic_unifi_over_plain_http_redirects_its_root_and_logs_in_with_the_written_password() {
    let tmp = tempfile::tempdir().expect("tmp");
    let creds = tmp.path().join("creds");
    let args: Vec<&OsStr> =
        ["--unifi", "127.0.0.1:0", "--unifi-style", "classic", "--unifi-http", "--stand-in-credentials"]
            .into_iter()
            .map(OsStr::new)
            .chain([creds.as_os_str()])
            .collect();
    let served = Served::start(&[], &tmp.path().join("sim"), &args);
    let unifi = served.stand_in("UniFi");
    assert!(unifi.url.starts_with("http://127.0.0.1:"), "--unifi-http: {}", unifi.line);
    assert!(unifi.line.contains("(classic;"), "{}", unifi.line);
    // A classic controller has no API key; over HTTP there is no CA to write.
    assert_eq!(unifi.file_names(), BTreeSet::from(["unifi.password".into(), "unifi.username".into()]));
    assert!(unifi.files.iter().all(|f| f.parent() == Some(creds.as_path())), "{:?}", unifi.files);

    let root = curl(&[], &format!("{}/", unifi.url));
    assert_eq!(root.status, 302, "GET / is 302 on a classic controller: {root:?}");
    assert!(root.redirect.ends_with("/manage"), "{root:?}");

    let networks = format!("{}/api/s/default/rest/networkconf", unifi.url);
    let before = curl(&[], &networks);
    assert_eq!(before.status, 401, "no session yet: {before:?}");
    let jar = tmp.path().join("cookies");
    let jar = jar.to_str().expect("UTF-8 path");
    let body =
        serde_json::json!({"username": unifi.secret("unifi.username"), "password": unifi.secret("unifi.password")})
            .to_string();
    let login = curl(
        &["-c", jar, "-H", "Content-Type: application/json", "--data", &body],
        &format!("{}/api/login", unifi.url),
    );
    assert_eq!(login.status, 200, "{login:?}");
    assert_eq!(login.json()["meta"]["rc"], "ok", "{login:?}");
    let nets = curl(&["-b", jar], &networks);
    assert_eq!(nets.status, 200, "{nets:?}");
    assert_eq!(nets.json()["meta"]["rc"], "ok", "{nets:?}");
    assert_eq!(nets.json()["data"][0]["ip_subnet"], "127.77.0.1/24", "{nets:?}");
    // The UniFi OS paths are not served by a classic controller.
    let os = curl(&["-b", jar], &format!("{}/proxy/network/api/s/default/rest/networkconf", unifi.url));
    assert_eq!(os.status, 404, "{os:?}");
}

#[test]
fn sim_serve_writes_stand_in_credentials_owner_only_and_never_prints_a_secret() {
    let tmp = tempfile::tempdir().expect("tmp");
    let state = tmp.path().join("sim");
    // Not there yet: cradle creates it (and its parent).
    let creds = tmp.path().join("secrets/stand-ins");
    let mut args = all_stand_ins();
    args.extend([OsStr::new("--stand-in-credentials"), creds.as_os_str()]);
    // Trace logging: every request below is made while cradle logs all it would.
    let mut served = Served::start(&["-vv"], &state, &args);
    let (unifi, dns, sem) = (served.stand_in("UniFi"), served.stand_in("Technitium"), served.stand_in("Semaphore"));

    // Where the files are, and their modes.
    assert_eq!(mode(&creds), 0o700, "the credentials directory is owner-only");
    assert_eq!(mode(&tmp.path().join("secrets")), 0o700, "so is the parent cradle created");
    assert!(!state.join("stand-ins").exists(), "nothing in the default place when a directory is given");
    let announced: BTreeSet<PathBuf> = [&unifi, &dns, &sem].iter().flat_map(|s| s.files.iter().cloned()).collect();
    let present: BTreeSet<PathBuf> =
        std::fs::read_dir(&creds).expect("read the credentials dir").map(|e| e.expect("entry").path()).collect();
    assert_eq!(announced, present, "every file it wrote is announced, and only those");
    let names: BTreeSet<String> = [&unifi, &dns, &sem].iter().flat_map(|s| s.file_names()).collect();
    let expected = [
        "semaphore.login",
        "semaphore.password",
        "semaphore.token",
        "technitium.password",
        "technitium.token",
        "technitium.username",
        "unifi-ca.pem",
        "unifi.api-key",
        "unifi.password",
        "unifi.username",
    ];
    assert_eq!(names, expected.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>());
    for file in &announced {
        let meta = std::fs::symlink_metadata(file).expect("stat");
        assert!(meta.file_type().is_file(), "{} is a regular file", file.display());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{} is 0600", file.display());
    }

    // Use every secret over the wire (so a request log would show it).
    let ca = unifi.file("unifi-ca.pem");
    let ca = ca.to_str().expect("UTF-8 path");
    let login =
        serde_json::json!({"username": unifi.secret("unifi.username"), "password": unifi.secret("unifi.password")})
            .to_string();
    let session = curl(
        &["--cacert", ca, "-H", "Content-Type: application/json", "--data", &login],
        &format!("{}/api/auth/login", unifi.console),
    );
    assert_eq!(session.status, 200, "UniFi OS login with the written password: {session:?}");
    let key = format!("X-API-KEY: {}", unifi.secret("unifi.api-key"));
    let nets = curl(&["--cacert", ca, "-H", &key], &format!("{}/api/s/default/rest/networkconf", unifi.url));
    assert_eq!(nets.status, 200, "{nets:?}");

    let user = dns.secret("technitium.username");
    let pass = dns.secret("technitium.password");
    let dns_login = curl(
        &["-G", "--data-urlencode", &format!("user={user}"), "--data-urlencode", &format!("pass={pass}")],
        &format!("{}/api/user/login", dns.url),
    );
    assert_eq!(dns_login.json()["status"], "ok", "Technitium login with the written password: {dns_login:?}");
    let token = dns.secret("technitium.token");
    let zones = curl(&["-G", "--data-urlencode", &format!("token={token}")], &format!("{}/api/zones/list", dns.url));
    assert_eq!(zones.json()["status"], "ok", "{zones:?}");

    let sem_login =
        serde_json::json!({"auth": sem.secret("semaphore.login"), "password": sem.secret("semaphore.password")})
            .to_string();
    let sem_session =
        curl(&["-H", "Content-Type: application/json", "--data", &sem_login], &format!("{}/api/auth/login", sem.url));
    assert_eq!(sem_session.status, 204, "Semaphore login with the written password: {sem_session:?}");
    let bearer = format!("Authorization: Bearer {}", sem.secret("semaphore.token"));
    let user = curl(&["-H", &bearer], &format!("{}/api/user", sem.url));
    assert_eq!(user.status, 200, "{user:?}");

    // Then nothing it printed, on either stream, holds any of them.
    let secrets = [
        ("unifi.password", unifi.secret("unifi.password")),
        ("unifi.api-key", unifi.secret("unifi.api-key")),
        ("technitium.password", pass),
        ("technitium.token", token),
        ("semaphore.password", sem.secret("semaphore.password")),
        ("semaphore.token", sem.secret("semaphore.token")),
    ];
    let (stdout, stderr) = served.stop();
    assert!(!stderr.is_empty(), "-vv logged something to check");
    for url in [&unifi.url, &dns.url, &sem.url] {
        assert!(stdout.contains(url.as_str()), "the captured stdout is what it announced: {stdout}");
    }
    for (name, secret) in &secrets {
        assert!(secret.len() >= 16, "{name} is a generated secret, not a short word");
        assert!(!stdout.contains(secret.as_str()), "the {name} secret appears on stdout");
        assert!(!stderr.contains(secret.as_str()), "the {name} secret appears on stderr");
    }
}

/// The one address of the UniFi stand-in's default pool (`.6`–`.254`) the DHCP
/// test leaves free; no other test uses it.
const DHCP_FREE: &str = "127.77.0.233";

/// `group_vars/all.yml` of the DHCP test: one NIC, untagged, `ip: dhcp`; waits
/// generous enough for a loaded machine.
const DHCP_GROUP_VARS: &str = r#"---
global_os:
  debian12:
    template: debian-12-cloud
    interface: ens18
    storage: local-lvm
    cores: 1
    memory: 1024
vms_os: debian12
vms_config:
  network:
    nic0: { bridge: vmbr0, ip: dhcp }
vms_wait:
  task_ms: 60000
  ssh_ms: 60000
  command_ms: 30000
  cloudinit_attempts: 600
  cloudinit_interval_ms: 100
  reboot_attempts: 120
  reboot_interval_s: 0.5
"#;

#[test]
fn a_dhcp_guest_provisioned_against_sim_serve_takes_its_address_from_the_unifi_stand_in() {
    let dir = tempfile::tempdir().expect("tmp");
    let written = dir.path().join("cluster.toml");
    let args: Vec<&OsStr> = ["--unifi", "127.0.0.1:0", "--nodes", "pve1,pve2,pve3", "--write-config"]
        .into_iter()
        .map(OsStr::new)
        .chain([written.as_os_str()])
        .collect();
    let state = dir.path().join("pve");
    let served = Served::start(&[], &state, &args);
    let unifi = served.stand_in("UniFi");
    let ca = unifi.file("unifi-ca.pem");
    let ca = ca.to_str().expect("UTF-8 path");
    let key = format!("X-API-KEY: {}", unifi.secret("unifi.api-key"));
    let api = format!("{}/api/s/default", unifi.url);

    // The pool picks a random free address: reserve every other one of the
    // default network for made-up MACs, so the guest can only get DHCP_FREE,
    // and only from this DHCP server.
    let nets = curl(&["--cacert", ca, "-H", &key], &format!("{api}/rest/networkconf")).json();
    let net = &nets["data"][0];
    assert_eq!(net["dhcpd_enabled"], true, "{net}");
    let network_id = net["_id"].as_str().expect("network _id");
    let start: Ipv4Addr = net["dhcpd_start"].as_str().and_then(|s| s.parse().ok()).expect("dhcpd_start");
    let stop: Ipv4Addr = net["dhcpd_stop"].as_str().and_then(|s| s.parse().ok()).expect("dhcpd_stop");
    let free: Ipv4Addr = DHCP_FREE.parse().expect("ip");
    assert!(start <= free && free <= stop, "{DHCP_FREE} is in the pool {start}-{stop}");
    let objects: Vec<Value> = (u32::from(start)..=u32::from(stop))
        .map(Ipv4Addr::from)
        .filter(|ip| *ip != free)
        .enumerate()
        .map(|(i, ip)| {
            let mac = format!("02:00:00:00:{:02x}:{:02x}", i >> 8, i & 0xff);
            serde_json::json!({"data": {"mac": mac, "name": format!("filler-{i}"), "use_fixedip": true,
                "fixed_ip": ip.to_string(), "network_id": network_id}})
        })
        .collect();
    let count = objects.len();
    let body = serde_json::json!({ "objects": objects }).to_string();
    let filled = curl(
        &["--cacert", ca, "-H", &key, "-H", "Content-Type: application/json", "--data", &body],
        &format!("{api}/group/user"),
    );
    let doc = filled.json();
    assert_eq!(doc["meta"]["rc"], "ok", "{filled:?}");
    let results = doc["data"].as_array().expect("group results");
    assert_eq!(results.len(), count);
    assert!(results.iter().all(|r| r["meta"]["rc"] == "ok"), "every filler reserved: {doc}");

    // A project on the written config, one VM whose only NIC is DHCP (untagged:
    // the default network), reached at the address DHCP can give it.
    let cluster_toml = std::fs::read_to_string(&written).expect("the written cluster config");
    ProjectConfig::new(Cluster::Written(cluster_toml))
        .workflows(Workflows::BuiltIn)
        .backend(Backend::BuiltIn)
        .write(dir.path());
    let inv = dir.path().join("inventory");
    std::fs::create_dir_all(inv.join("group_vars")).expect("mkdir inventory");
    std::fs::write(
        inv.join("hosts.ini"),
        format!("[lab]\ndhcp-0 ansible_host={DHCP_FREE}\n\n[lab:vars]\nvms_vmid_base=300\ntarget_node=pve2\nansible_user=cradle\n"),
    )
    .expect("hosts.ini");
    std::fs::write(inv.join("group_vars/all.yml"), DHCP_GROUP_VARS).expect("group_vars");

    let run = Out::from(
        Command::new(cradle_bin())
            .arg("--config")
            .arg(dir.path().join("cradle.toml"))
            .args(["--output", "json", "provision", "-i"])
            .arg(&inv)
            .args(["--limit", "dhcp-0"])
            .env_remove("CRADLE_CONFIG")
            .env_remove("CRADLE_STATE_DIR")
            .stdin(Stdio::null())
            .output()
            .expect("run cradle provision"),
    );
    // Provisioning SSHes to DHCP_FREE, checks the guest answers as dhcp-0 and
    // reboots it: only the stand-in's lease put the guest there.
    assert_eq!(run.code, 0, "{run:#?}");
    let doc = run.json();
    assert_eq!(doc["hosts"][0]["result"], "created", "{doc}");

    // The VM's NIC, as the cluster has it: untagged, with its MAC.
    let text = std::fs::read_to_string(state.join("state.json")).expect("state.json");
    let sim: Value = serde_json::from_str(&text).expect("state.json parses");
    let vm = sim["vms"]
        .as_object()
        .and_then(|m| m.values().find(|v| v["config"]["name"] == "dhcp-0"))
        .unwrap_or_else(|| panic!("no dhcp-0 in {text}"));
    let net0 = vm["config"]["net0"].as_str().expect("net0");
    assert!(!net0.contains("tag="), "untagged: {net0}");
    let mac = net0.split(',').next().and_then(|m| m.split('=').nth(1)).expect("MAC in net0").to_ascii_lowercase();

    // The controller saw that MAC take the pool address, not a reservation.
    let seen = curl(&["--cacert", ca, "-H", &key], &format!("{api}/stat/user/{mac}"));
    assert_eq!(seen.status, 200, "{seen:?}");
    let client = &seen.json()["data"][0];
    assert_eq!(client["ip"], DHCP_FREE, "{client}");
    assert_eq!(client["mac"], mac.as_str(), "{client}");
    assert_eq!(client["hostname"], "dhcp-0", "the host name the guest sent: {client}");
    assert!(client["last_seen"].as_u64().is_some(), "{client}");
    assert_ne!(client["use_fixedip"], true, "a pool lease, not a reservation: {client}");
}
