//! Tests of the RFC 2136 provider: configuration and validation without a
//! network, then against a real BIND 9 started on loopback (`bind_fixture`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::bind_fixture::{Bind, KEY, KEY512, random_secret};
use super::{DnsRecord, RecordKind, Rfc2136, TsigAlgorithmName};
use crate::config::Config;
use crate::contract::ErrorKind;

const LAB: &str = "lab.example.";
const REV: &str = "10.0.10.in-addr.arpa.";

fn rec(zone: &str, name: &str, kind: RecordKind, value: &str, ttl: u32) -> DnsRecord {
    DnsRecord { zone: zone.into(), name: name.into(), kind, value: value.into(), ttl }
}

fn a(name: &str, value: &str) -> DnsRecord {
    rec(LAB, name, RecordKind::A, value, 0)
}

const CONFIG: &str = r#"
[clusters.lab]
kind = "sim"
[environments.test]
cluster = "lab"
backend = "sample"
dns = "lab"
[plugins.sample]
path = "sample.wasm"
[dns.lab]
kind = "rfc2136"
server = "127.0.0.1:53"
key_name = "cradle-key"
secret = { file = "/etc/cradle/tsig.key" }
zones = ["lab.example.", "10.0.10.in-addr.arpa."]
"#;

fn parse(text: &str) -> Result<Config, String> {
    Config::parse(text, Path::new("cradle.toml"), Path::new("/proj")).map_err(|e| e.to_string())
}

#[test]
fn a_dns_section_loads_with_its_defaults_and_the_environment_names_it() {
    let c = parse(CONFIG).expect("valid");
    let d = &c.dns["lab"];
    assert_eq!((d.algorithm, d.ttl, d.server.map(|s| s.port())), (TsigAlgorithmName::HmacSha256, 300, Some(53)));
    assert_eq!(c.environments["test"].dns, ["lab"]);
    let c = parse(&CONFIG.replace("zones =", "algorithm = \"hmac-sha512\"\nttl = 60\nzones =")).expect("valid");
    assert_eq!((c.dns["lab"].algorithm, c.dns["lab"].ttl), (TsigAlgorithmName::HmacSha512, 60));
}

#[test]
fn bad_dns_settings_are_refused_naming_the_key() {
    let cases = [
        (CONFIG.replace("dns = \"lab\"", "dns = \"corp\""), "environments.test.dns = \"corp\" is not defined in [dns]"),
        (CONFIG.replace("server = \"127.0.0.1:53\"", "server = \"ns1.lab:53\""), "server"),
        (
            CONFIG.replace("zones = [\"lab.example.\", \"10.0.10.in-addr.arpa.\"]", "zones = []"),
            "dns.lab: zones is empty",
        ),
        (CONFIG.replace("\"10.0.10.in-addr.arpa.\"", "\"lab.example\""), "zones lists `lab.example` twice"),
        (CONFIG.replace("zones =", "ttl = 0\nzones ="), "ttl = 0 must be between"),
        (CONFIG.replace("zones =", "algorithm = \"hmac-md5\"\nzones ="), "hmac-md5"),
        (CONFIG.replace("zones =", "zone = \"x\"\nzones ="), "unknown field `zone`"),
        (CONFIG.replace("kind = \"rfc2136\"", "kind = \"technitium\""), "technitium"),
        (CONFIG.replace("server = \"127.0.0.1:53\"", "server = \"127.0.0.1:0\""), "needs a port"),
    ];
    for (text, expected) in cases {
        let err = parse(&text).expect_err(expected);
        assert!(err.contains(expected), "expected `{expected}` in: {err}");
    }
}

#[test]
fn an_inline_tsig_secret_is_refused_without_echoing_it() {
    let err = parse(&CONFIG.replace("{ file = \"/etc/cradle/tsig.key\" }", "\"CANARY-TSIG-SECRET\""))
        .expect_err("inline secret");
    assert!(!err.contains("CANARY-TSIG-SECRET"), "{err}");
}

/// A provider that nothing listens for: every check below fails before any I/O.
fn offline() -> Rfc2136 {
    let mut cfg = parse(CONFIG).expect("valid").dns["lab"].clone();
    cfg.server = Some("127.0.0.1:9".parse().expect("addr"));
    Rfc2136::new("lab", &cfg).expect("provider")
}

#[tokio::test]
async fn zones_names_and_values_are_validated_before_anything_is_sent() {
    let p = offline();
    let cases = [
        (
            rec("corp.example.", "a.corp.example.", RecordKind::A, "10.0.0.1", 0),
            "zone `corp.example.` is not one of dns.lab.zones",
        ),
        (rec(LAB, "evil.other.", RecordKind::A, "10.0.0.1", 0), "name `evil.other.` is not inside zone"),
        (rec(LAB, "x.lab.example.", RecordKind::A, "10.0.0.300", 0), "is not an IPv4 address"),
        (rec(LAB, "x.lab.example.", RecordKind::Aaaa, "10.0.0.3", 0), "is not an IPv6 address"),
        (rec(REV, "5.10.0.10.in-addr.arpa.", RecordKind::Ptr, "bad..name", 0), "is not a domain name"),
        (rec(LAB, "x.lab.example.", RecordKind::A, "10.0.0.3", u32::MAX), "ttl"),
    ];
    for (r, expected) in cases {
        let e = p.upsert(&r).await.expect_err(expected);
        assert_eq!(e.kind, ErrorKind::Invalid, "{e}");
        assert!(e.message.contains(expected), "expected `{expected}` in: {e}");
    }
    let e = p.delete("corp.example.", "a.corp.example.", RecordKind::A).await.expect_err("zone");
    assert_eq!(e.kind, ErrorKind::Invalid, "{e}");
}

#[tokio::test]
async fn an_unreachable_or_silent_server_is_transient() {
    let e = offline().upsert(&a("x.lab.example.", "10.0.10.9")).await.expect_err("refused");
    assert_eq!(e.kind, ErrorKind::Failed, "no secret file yet: {e}");
    assert!(e.message.contains("dns.lab.secret") && e.message.contains("/etc/cradle/tsig.key"), "{e}");

    let dir = tempfile::tempdir().expect("tempdir");
    let secret = dir.path().join("s");
    std::fs::write(&secret, random_secret(32)).expect("secret");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let mut cfg = parse(CONFIG).expect("valid").dns["lab"].clone();
    cfg.secret = Some(crate::secrets::SecretRef::File(secret));
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    cfg.server = Some(closed.local_addr().expect("addr"));
    drop(closed);
    let e = Rfc2136::new("lab", &cfg).expect("p").upsert(&a("x.lab.example.", "10.0.10.9")).await.expect_err("down");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(e.message.contains(&cfg.server.expect("server").to_string()), "{e}");

    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    cfg.server = Some(silent.local_addr().expect("addr"));
    let hold = tokio::spawn(async move {
        let conn = silent.accept().await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(conn);
    });
    let p = Rfc2136::new("lab", &cfg).expect("p").with_timeout(Duration::from_millis(300));
    let e = p.delete(LAB, "x.lab.example.", RecordKind::A).await.expect_err("timeout");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(e.message.contains("no answer in time"), "{e}");
    hold.abort();
}

#[tokio::test]
async fn a_records_are_created_left_alone_when_equal_and_replaced_as_one() {
    let Some(bind) = Bind::start("a_records") else { return };
    let p = Rfc2136::new("lab", &bind.config(KEY, &bind.secret, &[LAB, REV])).expect("provider");
    let name = "test-0.lab.example.";
    assert!(p.upsert(&a(name, "10.0.10.5")).await.expect("create"), "first upsert changes");
    assert_eq!(bind.dig(name, "A"), vec![(300, "10.0.10.5".to_string())]);
    let serial = bind.dig(LAB, "SOA");
    assert!(!p.upsert(&a(name, "10.0.10.5")).await.expect("again"), "equal record: no change");
    assert_eq!(bind.dig(LAB, "SOA"), serial, "no UPDATE was sent (the zone serial did not move)");

    assert!(p.upsert(&a(name, "10.0.10.6")).await.expect("replace"));
    assert_eq!(bind.dig(name, "A"), vec![(300, "10.0.10.6".to_string())], "the old address is gone");
    assert!(p.upsert(&rec(LAB, name, RecordKind::A, "10.0.10.6", 60)).await.expect("ttl"), "a new TTL is a change");
    assert_eq!(bind.dig(name, "A"), vec![(60, "10.0.10.6".to_string())]);

    let aaaa = rec(LAB, name, RecordKind::Aaaa, "fd00::5", 0);
    assert!(p.upsert(&aaaa).await.expect("aaaa"));
    assert!(!p.upsert(&aaaa).await.expect("aaaa again"));
    assert_eq!(bind.dig(name, "AAAA"), vec![(300, "fd00::5".to_string())]);
    assert_eq!(bind.dig(name, "A").len(), 1, "the A record is untouched by the AAAA upsert");

    assert!(p.delete(LAB, name, RecordKind::A).await.expect("delete"));
    assert!(bind.dig(name, "A").is_empty());
    assert!(!p.delete(LAB, name, RecordKind::A).await.expect("delete again"), "nothing left to delete");
    assert!(!p.delete(LAB, "never.lab.example.", RecordKind::A).await.expect("missing"), "missing name");
}

#[tokio::test]
async fn ptr_records_are_upserted_and_deleted_in_the_reverse_zone() {
    let Some(bind) = Bind::start("ptr_records") else { return };
    let p = Rfc2136::new("lab", &bind.config(KEY, &bind.secret, &[LAB, REV])).expect("provider");
    let ptr = rec(REV, "5.10.0.10.in-addr.arpa.", RecordKind::Ptr, "test-0.lab.example", 0);
    assert!(p.upsert(&ptr).await.expect("ptr"));
    assert_eq!(bind.dig("5.10.0.10.in-addr.arpa.", "PTR"), vec![(300, "test-0.lab.example.".to_string())]);
    assert!(!p.upsert(&ptr).await.expect("ptr again"), "a relative-looking value is the same FQDN");
    assert!(
        p.upsert(&rec(REV, "5.10.0.10.in-addr.arpa.", RecordKind::Ptr, "test-1.lab.example.", 0)).await.expect("swap")
    );
    assert_eq!(bind.dig("5.10.0.10.in-addr.arpa.", "PTR"), vec![(300, "test-1.lab.example.".to_string())]);
    assert!(p.delete(REV, "5.10.0.10.in-addr.arpa", RecordKind::Ptr).await.expect("delete"));
    assert!(bind.dig("5.10.0.10.in-addr.arpa.", "PTR").is_empty());
    assert!(!p.delete(REV, "5.10.0.10.in-addr.arpa.", RecordKind::Ptr).await.expect("again"));
}

#[tokio::test]
async fn a_wrong_secret_or_key_fails_naming_the_key_and_never_the_secret() {
    let Some(bind) = Bind::start("wrong_secret") else { return };
    let wrong = random_secret(32);
    let p = Rfc2136::new("lab", &bind.config(KEY, &wrong, &[LAB])).expect("provider");
    let e = p.upsert(&a("w.lab.example.", "10.0.10.7")).await.expect_err("bad secret");
    assert_eq!(e.kind, ErrorKind::Failed, "{e}");
    assert!(e.message.contains(KEY) && e.message.contains("BADSIG") && e.message.contains("dns.lab.secret"), "{e}");
    for shown in [e.message.clone(), format!("{e:?}"), format!("{p:?}")] {
        assert!(!shown.contains(&wrong) && !shown.contains(&bind.secret), "secret leaked: {shown}");
    }
    assert!(bind.dig("w.lab.example.", "A").is_empty(), "nothing was written");

    let p = Rfc2136::new("lab", &bind.config("nobody-key", &bind.secret, &[LAB])).expect("provider");
    let e = p.delete(LAB, "w.lab.example.", RecordKind::A).await.expect_err("unknown key");
    assert!(e.message.contains("nobody-key") && e.message.contains("BADKEY"), "{e}");
    assert!(!e.message.contains(&bind.secret), "{e}");
}

#[tokio::test]
async fn a_zone_the_server_does_not_serve_or_does_not_let_us_update_is_a_clear_error() {
    let Some(bind) = Bind::start("zone_errors") else { return };
    let p = Rfc2136::new("lab", &bind.config(KEY, &bind.secret, &[LAB, "other.example.", "locked.example."]))
        .expect("provider");
    let e =
        p.upsert(&rec("other.example.", "x.other.example.", RecordKind::A, "10.0.0.1", 0)).await.expect_err("no zone");
    assert_eq!(e.kind, ErrorKind::Failed, "{e}");
    assert!(e.message.contains("does not serve zone `other.example.`") && e.message.contains("dns.lab.server"), "{e}");

    let e =
        p.upsert(&rec("locked.example.", "x.locked.example.", RecordKind::A, "10.0.0.1", 0)).await.expect_err("acl");
    assert_eq!(e.kind, ErrorKind::Failed, "{e}");
    assert!(e.message.contains("REFUSED") && e.message.contains("allow-update") && e.message.contains(KEY), "{e}");
}

#[tokio::test]
async fn an_hmac_sha512_key_works() {
    let Some(bind) = Bind::start("sha512") else { return };
    let p = Rfc2136::new("lab", &bind.config(KEY512, &bind.secret512, &[LAB])).expect("provider");
    assert!(p.upsert(&a("s.lab.example.", "10.0.10.8")).await.expect("sha512"));
    assert_eq!(bind.dig("s.lab.example.", "A"), vec![(300, "10.0.10.8".to_string())]);
}

#[tokio::test]
async fn concurrent_upserts_of_one_name_leave_exactly_one_record() {
    let Some(bind) = Bind::start("concurrent") else { return };
    let p = Arc::new(Rfc2136::new("lab", &bind.config(KEY, &bind.secret, &[LAB])).expect("provider"));
    let tasks: Vec<_> = (1..=6)
        .map(|i| {
            let p = p.clone();
            tokio::spawn(async move { p.upsert(&a("race.lab.example.", &format!("10.0.10.{i}"))).await })
        })
        .collect();
    for t in tasks {
        match t.await.expect("join") {
            Ok(_) => {}
            Err(e) => assert_eq!(e.kind, ErrorKind::Conflict, "{e}"),
        }
    }
    assert_eq!(bind.dig("race.lab.example.", "A").len(), 1, "{}", bind.log());
}

mod adapter {
    //! The WIT adapter: the `dns` grant first, then the environment's provider.

    use super::*;
    use crate::caps::Grants;
    use crate::caps::context::{CapCtx, RunHandle, Services};
    use crate::caps::policy::RunScope;
    use crate::contract::bindings::cradle::host::dns::Host;
    use crate::contract::bindings::cradle::host::types::Error as WitError;

    fn grants() -> Grants {
        toml::from_str("[dns]\nzones = [\"lab.example.\"]").expect("grants")
    }

    fn services(state: &Path, rt: &tokio::runtime::Runtime, dns: Option<Rfc2136>) -> Services {
        Services { dns: dns.map(|p| Arc::new(p.into())), ..Services::for_tests(state, rt) }
    }

    fn ctx(state: &Path, rt: &tokio::runtime::Runtime, dns: Option<Rfc2136>) -> CapCtx {
        CapCtx::for_tests(grants(), RunScope::default(), services(state, rt, dns), "dns-test")
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime")
    }

    #[test]
    fn without_a_provider_an_allowed_call_fails_saying_what_to_configure() {
        let (state, rt) = (tempfile::tempdir().expect("tempdir"), runtime());
        let mut c = ctx(state.path(), &rt, None);
        match Host::upsert(&mut c, a("x.lab.example.", "10.0.10.1")) {
            Err(WitError::Failed(m)) => assert!(m.contains("dns = \"NAME\"") && m.contains("[dns.NAME]"), "{m}"),
            other => panic!("expected failed, got {other:?}"),
        }
        match Host::delete(&mut c, "corp.example.".into(), "x.corp.example.".into(), RecordKind::A) {
            Err(WitError::Denied(m)) => {
                assert!(m.contains("zone `corp.example.` is not in workflow.grants.dns.zones"), "{m}")
            }
            other => panic!("expected denied, got {other:?}"),
        }
    }

    #[test]
    fn a_granted_call_reaches_the_server_and_an_ungranted_zone_never_does() {
        let Some(bind) = Bind::start("wit_adapter") else { return };
        let (state, rt) = (tempfile::tempdir().expect("tempdir"), runtime());
        let provider = Rfc2136::new("lab", &bind.config(KEY, &bind.secret, &[LAB, "locked.example."])).expect("p");
        let mut c = ctx(state.path(), &rt, Some(provider));
        match Host::upsert(&mut c, rec("locked.example.", "x.locked.example.", RecordKind::A, "10.0.0.1", 0)) {
            Err(WitError::Denied(m)) => assert!(m.contains("zone `locked.example.`"), "{m}"),
            other => panic!("expected denied, got {other:?}"),
        }
        assert!(Host::upsert(&mut c, a("wit.lab.example.", "10.0.10.20")).expect("upsert"));
        assert!(!Host::upsert(&mut c, a("wit.lab.example.", "10.0.10.20")).expect("again"));
        assert_eq!(bind.dig("wit.lab.example.", "A"), vec![(300, "10.0.10.20".to_string())]);
        assert!(Host::delete(&mut c, LAB.into(), "wit.lab.example.".into(), RecordKind::A).expect("delete"));
        assert!(bind.dig("wit.lab.example.", "A").is_empty());
    }

    const SCRIPT: &str = r#"
fn main(ip) {
    let rec = #{zone: "lab.example.", name: "wf.lab.example.", kind: "a", value: ip};
    let created = dns::upsert(rec);
    let again = dns::upsert(rec);
    let denied = "allowed";
    try { dns::delete("corp.example.", "x.corp.example.", "a"); } catch (e) { denied = e.kind; }
    let deleted = dns::delete("lab.example.", "wf.lab.example.", "A");
    [created, again, denied, deleted]
}
"#;

    #[test]
    fn workflows_call_the_provider_through_the_dns_module() {
        let Some(bind) = Bind::start("workflow_module") else { return };
        let (state, rt) = (tempfile::tempdir().expect("tempdir"), runtime());
        let dir = state.path().join("workflows");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("dns.rhai"), SCRIPT).expect("script");
        let opts =
            crate::workflow::EngineOptions { host_modules: crate::caps::script::modules(), ..Default::default() };
        let set = crate::workflow::WorkflowSet::load(&dir, &opts).expect("load");
        let provider = Rfc2136::new("lab", &bind.config(KEY, &bind.secret, &[LAB])).expect("p");
        let data = crate::caps::run::RunData {
            run: Arc::new(RunHandle::new("dns-wf".into(), None)),
            services: Arc::new(services(state.path(), &rt, Some(provider))),
            workflow_grants: Arc::new(grants()),
            scope: Arc::new(RunScope::default()),
            backend: None,
            backend_grants: None,
            plugins: Default::default(),
            environment: "test".into(),
        };
        let run = crate::workflow::RunContext::new(Arc::new(crate::workflow::NoopObserver), Arc::new(data));
        let out = set.call("dns", "main", vec!["10.0.10.30".into()], run).expect("run");
        let out: Vec<String> = out.into_array().expect("array").iter().map(ToString::to_string).collect();
        assert_eq!(out, ["true", "false", "denied", "true"]);
        assert!(bind.dig("wf.lab.example.", "A").is_empty(), "deleted at the end");
    }
}
