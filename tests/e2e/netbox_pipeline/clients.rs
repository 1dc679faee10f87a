//! The pipeline's service clients (workflows/lib/unifi.rhai, technitium.rhai,
//! and the OS configuration's `post_task::run`) run as the built-in workflow
//! runs them — the same files, through the `dhcp`, `dns` and `post`
//! capabilities — against the stand-ins alone (no NetBox), on
//! what a plain run never meets: a Semaphore template without an Environment, a
//! token without `CanRunProjectTasks`, a task waiting for confirmation, a MAC
//! UniFi knows without listing it, a subnet UniFi refuses, an address whose old
//! PTR Technitium keeps.

use std::path::Path;

use cradle::project::{RunReport, RunRequest};
use cradle_sim::services::Listen;
use cradle_sim::services::semaphore::{self, ProjectRole, Semaphore, SemaphoreConfig, TaskOutcome};
use cradle_sim::services::technitium::{self, TechnitiumConfig};
use cradle_sim::services::unifi::{self, Unifi, UnifiConfig};
use cradle_tests::Harness;

/// The libraries, byte for byte as the built-in workflows import them.
const LIBS: [(&str, &str); 2] = [
    ("lib/unifi.rhai", include_str!("../../../workflows/lib/unifi.rhai")),
    ("lib/technitium.rhai", include_str!("../../../workflows/lib/technitium.rhai")),
];

const SCRIPT: &str = r#"
import "lib/unifi" as unifi;
import "lib/technitium" as technitium;
fn os_config(template, limit_ms) {
    step("vm01", "os-config", || post_task::run(1, template, #{ vm_name: "vm01", vm_address: "192.0.2.10" }, limit_ms))
}
fn reserve(mac, ip) { step("vm01", "dhcp", || unifi::reserve("default", mac, ip, "vm01")) }
fn set_a(fqdn, ip) { step("vm01", "dns", || technitium::set_a("lab.example", fqdn, ip, 300, true)) }
"#;

/// One endpoint of cradle.toml: `name`, its URL, its secret (written to
/// `dir`), its auth and CA.
pub(super) struct Endpoint<'a> {
    pub name: &'a str,
    pub url: String,
    pub secret: String,
    pub auth: &'a str,
    pub ca: Option<String>,
}

/// A project whose workflow is [`SCRIPT`] with the libraries, and `endpoints`.
/// An endpoint named `unifi` is the environment's DHCP provider (`[dhcp.unifi]`,
/// the stand-in's 127.77.0.0/16 granted), one named `technitium` its DNS
/// provider (`[dns.technitium]`, zone `lab.example` granted), reached through
/// the `dhcp` and `dns` capabilities rather than granted to the workflow's
/// `http`.
pub(super) fn harness(dir: &Path, endpoints: &[Endpoint]) -> Harness {
    let unifi = endpoints.iter().any(|e| e.name == "unifi");
    let technitium = endpoints.iter().any(|e| e.name == "technitium");
    let mut toml = String::from(
        "default_environment = \"demo\"\nstate_dir = \"state\"\n[clusters.sim]\nkind = \"sim\"\n\
         [environments.demo]\ncluster = \"sim\"\nbackend = \"sample\"\n",
    );
    let semaphore = endpoints.iter().any(|e| e.name == "semaphore");
    if unifi {
        toml += "dhcp = \"unifi\"\n";
    }
    if semaphore {
        toml += "post = \"semaphore\"\n[post.semaphore]\nkind = \"semaphore\"\nendpoint = \"semaphore\"\npoll_ms = 10\n\
                 [workflow.grants.post]\nprojects = [1]\ntemplates = [1, 2]\n";
    }
    if technitium {
        toml += "dns = \"technitium\"\n[dns.technitium]\nkind = \"technitium\"\nendpoint = \"technitium\"\n\
                 zones = [\"lab.example\"]\n[workflow.grants.dns]\nzones = [\"lab.example\"]\n";
    }
    if unifi {
        toml += "[dhcp.unifi]\nkind = \"unifi\"\nendpoint = \"unifi\"\n\
                 [workflow.grants.dhcp]\nnetworks = [\"127.77.0.0/16\"]\n";
    }
    toml += "[plugins.sample]\npath = \"@SAMPLE@\"\n[workflow.grants.http]\nendpoints = [";
    toml += &endpoints
        .iter()
        .filter(|e| !["unifi", "technitium", "semaphore"].contains(&e.name))
        .map(|e| format!("\"{}\"", e.name))
        .collect::<Vec<_>>()
        .join(", ");
    toml += "]\n";
    for e in endpoints {
        let secret = dir.join(format!("{}.secret", e.name));
        std::fs::write(&secret, &e.secret).expect("secret");
        std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
        toml += &format!(
            "[endpoints.{}]\nurl = \"{}\"\ntoken = {{ file = \"{}\" }}\nauth = \"{}\"\n",
            e.name,
            e.url,
            secret.display(),
            e.auth
        );
        if let Some(ca) = &e.ca {
            let path = dir.join(format!("{}-ca.pem", e.name));
            std::fs::write(&path, ca).expect("ca");
            toml += &format!("ca_file = \"{}\"\n", path.display());
        }
    }
    let mut scripts = vec![("wf.rhai", SCRIPT)];
    scripts.extend(LIBS);
    Harness::new(&toml, &scripts)
}

/// Run `func(args)` of the workflow.
pub(super) fn call(h: &Harness, func: &str, args: Vec<rhai::Dynamic>) -> RunReport {
    h.run(RunRequest { script: "wf".into(), func: func.into(), args, ..Default::default() })
}

/// The run's error as text (a test failure if it succeeded).
pub(super) fn error(report: &RunReport) -> String {
    report.result.as_ref().map(|v| format!("{v:?}")).expect_err("the call fails").to_string()
}

fn semaphore_lab(outcome: TaskOutcome) -> (tokio::runtime::Runtime, Semaphore) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let mut cfg = SemaphoreConfig { time_scale: 0.0, ..SemaphoreConfig::default() };
    cfg.projects[0].templates[0].outcome = outcome;
    let s = rt.block_on(semaphore::start(cfg)).expect("semaphore");
    (rt, s)
}

fn semaphore_endpoint(s: &Semaphore, token: &str) -> Endpoint<'static> {
    Endpoint { name: "semaphore", url: s.url(), secret: token.to_string(), auth: "bearer", ca: None }
}

#[test]
fn a_semaphore_template_without_an_environment_is_named_with_the_field_and_no_failed_task_is_made() {
    // semaphoreui/semaphore d4a2713 services/tasks/TaskRunner.go:295-308 and
    // TaskPool.go:365-369: such a task is created, set `error`, and the POST is 500.
    let (_rt, s) = semaphore_lab(TaskOutcome::Success);
    let dir = tempfile::tempdir().expect("tmp");
    let h = harness(dir.path(), &[semaphore_endpoint(&s, s.api_token().expose())]);
    for _ in 0..2 {
        let e = error(&call(&h, "os_config", vec![2_i64.into(), 60_000_i64.into()]));
        assert!(
            e.contains("invalid: Semaphore template 2 (configure-vm-no-env) of project 1 has no Environment"),
            "{e}"
        );
        assert!(e.contains("'environment'") && e.contains("give the template an Environment"), "{e}");
        assert!(!e.contains("transient"), "{e}");
    }
    assert!(s.tasks().is_empty(), "no failed task is left behind, however often it is run: {:?}", s.tasks());
    // The template with an Environment runs.
    let r = call(&h, "os_config", vec![1_i64.into(), 60_000_i64.into()]);
    assert!(r.result.is_ok(), "{:?}", r.result);
    assert_eq!(s.tasks().len(), 1);
}

#[test]
fn a_semaphore_token_without_can_run_project_tasks_is_told_the_role_it_needs() {
    // semaphoreui/semaphore d4a2713 api/projects/project.go:48-62: 403, empty body.
    let (_rt, s) = semaphore_lab(TaskOutcome::Success);
    let guest = s.add_user("viewer", &[(1, ProjectRole::Guest)]);
    let dir = tempfile::tempdir().expect("tmp");
    let h = harness(dir.path(), &[semaphore_endpoint(&s, guest.expose())]);
    let e = error(&call(&h, "os_config", vec![1_i64.into(), 60_000_i64.into()]));
    assert!(e.contains("HTTP 403") && e.contains("may not run tasks in project 1"), "{e}");
    assert!(e.contains("CanRunProjectTasks") && e.contains("task_runner"), "{e}");
    assert!(s.tasks().is_empty());
}

#[test]
fn a_semaphore_task_waiting_for_confirmation_fails_at_once_naming_the_task_and_what_to_do() {
    // semaphoreui/semaphore d4a2713 db_lib/TerraformApp.go:162: the task waits for
    // an operator's confirm, however long it is polled.
    let (_rt, s) = semaphore_lab(TaskOutcome::AwaitConfirmation);
    let dir = tempfile::tempdir().expect("tmp");
    let h = harness(dir.path(), &[semaphore_endpoint(&s, s.api_token().expose())]);
    let e = error(&call(&h, "os_config", vec![1_i64.into(), 2_000_i64.into()]));
    assert!(
        e.contains("failed: Semaphore task 1 (template 1 (configure-vm), project 1) is waiting_confirmation"),
        "{e}"
    );
    assert!(e.contains("/api/project/1/tasks/1/confirm") && e.contains("waits for an operator"), "{e}");
    assert_eq!(s.tasks().len(), 1, "one task, not retried as a new one");
}

fn unifi_lab(cfg: UnifiConfig) -> (tokio::runtime::Runtime, Unifi) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let u =
        rt.block_on(unifi::start(UnifiConfig { listen: Listen::https("127.0.0.1:0".parse().expect("addr")), ..cfg }));
    (rt, u.expect("unifi"))
}

fn unifi_harness(dir: &Path, u: &Unifi) -> Harness {
    let url = u.api_url().trim_end_matches("/api").to_string();
    let key = u.api_key().expect("key").expose().to_string();
    harness(dir, &[Endpoint { name: "unifi", url, secret: key, auth: "api-key", ca: u.ca_pem() }])
}

const MAC: &str = "BC:24:11:00:00:42";

#[test]
fn a_reservation_is_made_with_group_user_and_a_rerun_finds_it_by_its_mac() {
    // paultyng/go-unifi 3ade172 unifi/user.go:31-72 (CreateUser: group/user) and
    // :12-29 (GetUserByMAC: stat/user/{mac}).
    let (_rt, u) = unifi_lab(UnifiConfig::default());
    let dir = tempfile::tempdir().expect("tmp");
    let h = unifi_harness(dir.path(), &u);
    for _ in 0..2 {
        let r = call(&h, "reserve", vec![MAC.into(), "127.77.0.42".into()]);
        assert!(r.result.is_ok(), "{:?}", r.result);
    }
    let made = u.reservations();
    assert_eq!(made.len(), 1, "{made:?}");
    let calls: Vec<String> = u.calls().into_iter().filter(|c| !c.contains("/rest/networkconf")).collect();
    assert_eq!(
        calls,
        [
            "GET /proxy/network/api/s/default/stat/user/bc:24:11:00:00:42",
            "POST /proxy/network/api/s/default/group/user",
            "GET /proxy/network/api/s/default/stat/user/bc:24:11:00:00:42",
        ],
        "the Go clients' calls, no listing of every client"
    );
    assert_eq!(
        (made[0].mac.as_str(), made[0].fixed_ip.map(|i| i.to_string())),
        ("bc:24:11:00:00:42", Some("127.77.0.42".into()))
    );
    assert_eq!(made[0].network_id.as_deref(), Some(u.networks()[0].id.as_str()));
}

#[test]
fn a_mac_unifi_has_seen_but_does_not_list_is_a_conflict_naming_the_mac() {
    let (_rt, u) = unifi_lab(UnifiConfig { list_seen_clients: false, ..UnifiConfig::default() });
    // The guest booted before its reservation: the controller saw it.
    assert!(u.dhcp("default").request(MAC, None, Some("vm01")).ip().is_some());
    let dir = tempfile::tempdir().expect("tmp");
    let h = unifi_harness(dir.path(), &u);
    let e = error(&call(&h, "reserve", vec![MAC.into(), "127.77.0.42".into()]));
    assert!(e.contains("conflict: UniFi already knows BC:24:11:00:00:42 (vm01, no reservation)"), "{e}");
    assert!(u.reservations().is_empty());
}

#[test]
fn a_reservation_of_the_address_on_no_network_or_another_is_a_conflict_not_taken_as_done() {
    let (_rt, u) = unifi_lab(UnifiConfig::default());
    let dir = tempfile::tempdir().expect("tmp");
    let h = unifi_harness(dir.path(), &u);
    // The same MAC and address, reserved without a network_id.
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, u.ca_pem().expect("ca")).expect("ca");
    let body = serde_json::json!({"mac": MAC.to_lowercase(), "name": "elsewhere", "use_fixedip": true, "fixed_ip": "127.77.0.42"});
    let out = std::process::Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
        .arg(&ca)
        .arg("-H")
        .arg(format!("X-API-KEY: {}", u.api_key().expect("key").expose()))
        .args(["-H", "Content-Type: application/json", "-d"])
        .arg(body.to_string())
        .arg(format!("{}/s/default/rest/user", u.api_url()))
        .output()
        .expect("curl");
    let status = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(status, "200", "{}", String::from_utf8_lossy(&out.stderr));
    let e = error(&call(&h, "reserve", vec![MAC.into(), "127.77.0.42".into()]));
    assert!(
        e.contains("conflict: UniFi already knows BC:24:11:00:00:42 (elsewhere, reserved 127.77.0.42 on network none)"),
        "{e}"
    );
}

#[test]
fn a_create_unifi_answers_without_the_client_is_an_error_naming_unifi_not_a_script_index_error() {
    let (_rt, u) = unifi_lab(UnifiConfig { create_returns_empty: true, ..UnifiConfig::default() });
    let dir = tempfile::tempdir().expect("tmp");
    let h = unifi_harness(dir.path(), &u);
    let e = error(&call(&h, "reserve", vec![MAC.into(), "127.77.0.42".into()]));
    assert!(e.contains("failed: UniFi: reservation of 127.77.0.42 for BC:24:11:00:00:42: the controller answered ok without the client (empty data)"), "{e}");
}

#[test]
fn a_changed_address_leaves_one_a_record_and_only_the_new_ptr() {
    // TechnitiumSoftware/DnsServer aa9044d DnsServerCore/WebServiceZonesApi.cs:3817-3853:
    // overwrite=true&ptr=true writes the new PTR and leaves the old address's.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let t = rt
        .block_on(technitium::start(TechnitiumConfig {
            zones: vec!["lab.example".into()],
            ..TechnitiumConfig::default()
        }))
        .expect("technitium");
    let dir = tempfile::tempdir().expect("tmp");
    let token = t.api_token().expose().to_string();
    let h =
        harness(dir.path(), &[Endpoint { name: "technitium", url: t.url(), secret: token, auth: "bearer", ca: None }]);
    let fqdn = "vm01.lab.example";
    for ip in ["192.0.2.10", "192.0.2.11", "192.0.2.11"] {
        let r = call(&h, "set_a", vec![fqdn.into(), ip.into()]);
        assert!(r.result.is_ok(), "{ip}: {:?}", r.result);
    }
    let a: Vec<String> = t.records_at(fqdn).into_iter().map(|r| r.value).collect();
    assert_eq!(a, ["192.0.2.11"]);
    assert!(t.records_at("10.2.0.192.in-addr.arpa").is_empty(), "the old address's PTR is gone");
    assert_eq!(t.records_at("11.2.0.192.in-addr.arpa").into_iter().map(|r| r.value).collect::<Vec<_>>(), [fqdn]);
}
