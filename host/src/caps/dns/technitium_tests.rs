//! The Technitium provider against the Technitium stand-in (cradle-sim), with
//! the API token the host attaches from the named endpoint; and the
//! environment's providers routing a call by its zone.

use std::collections::BTreeMap;
use std::time::Duration;

use cradle_sim::services::Listen;
use cradle_sim::services::technitium::{self, Technitium as Stand, TechnitiumConfig};

use super::super::providers::{DnsProviders, Provider};
use super::super::{DnsProviderConfig, DnsProviderKind, DnsRecord, RecordKind, TsigAlgorithmName};
use super::Technitium;
use crate::caps::http::{EndpointAuth, EndpointConfig, Endpoints};
use crate::contract::ErrorKind;
use crate::secrets::SecretRef;

const T: Duration = Duration::from_secs(10);
const ZONE: &str = "lab.example";

async fn stand() -> Stand {
    let listen = Listen::http("127.0.0.1:0".parse().expect("addr"));
    technitium::start(TechnitiumConfig { listen, zones: vec![ZONE.into()], ..TechnitiumConfig::default() })
        .await
        .expect("technitium stand-in")
}

fn config(zones: &[&str], ptr: bool) -> DnsProviderConfig {
    DnsProviderConfig {
        kind: DnsProviderKind::Technitium,
        server: None,
        key_name: None,
        algorithm: TsigAlgorithmName::HmacSha256,
        secret: None,
        endpoint: Some("technitium".into()),
        ptr,
        zones: zones.iter().map(|z| z.to_string()).collect(),
        ttl: 300,
    }
}

fn provider(dir: &std::path::Path, t: &Stand, ptr: bool) -> Technitium {
    provider_with(dir, t, t.api_token().expose(), ptr)
}

/// The provider with `token` as its endpoint's API token.
fn provider_with(dir: &std::path::Path, t: &Stand, token: &str, ptr: bool) -> Technitium {
    let secret = dir.join(format!("technitium-{}.token", token.len()));
    std::fs::write(&secret, token).expect("write");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let endpoint = EndpointConfig {
        url: t.url(),
        token: Some(SecretRef::File(secret)),
        auth: EndpointAuth::Bearer,
        ca_file: None,
        username: None,
    };
    let http = Endpoints::new(&BTreeMap::from([("technitium".to_string(), endpoint)]));
    Technitium::new("tech", &config(&[ZONE], ptr), http).expect("provider")
}

fn a(name: &str, ip: &str) -> DnsRecord {
    DnsRecord { zone: ZONE.into(), name: name.into(), kind: RecordKind::A, value: ip.into(), ttl: 0 }
}

/// `TYPE value` of every record at `name`.
fn at(t: &Stand, name: &str) -> Vec<String> {
    let mut v: Vec<String> = t.records_at(name).iter().map(|r| format!("{} {}", r.record_type, r.value)).collect();
    v.sort();
    v
}

#[tokio::test]
async fn an_a_record_is_set_with_its_ptr_and_a_rerun_sends_no_change() {
    let dir = tempfile::tempdir().expect("tmp");
    let t = stand().await;
    let p = provider(dir.path(), &t, true);
    assert!(p.upsert(&a("web-0.lab.example.", "127.78.5.10"), T).await.expect("set"));
    assert_eq!(at(&t, "web-0.lab.example"), ["A 127.78.5.10"]);
    assert_eq!(at(&t, "10.5.78.127.in-addr.arpa"), ["PTR web-0.lab.example"]);
    assert_eq!(t.records_at("web-0.lab.example")[0].ttl, 300, "ttl 0 is the provider's ttl");
    assert!(!p.upsert(&a("web-0.lab.example", "127.78.5.10"), T).await.expect("again"), "nothing changed");
}

#[tokio::test]
async fn a_changed_address_leaves_one_a_record_and_only_the_new_ptr() {
    // TechnitiumSoftware/DnsServer aa9044d DnsServerCore/WebServiceZonesApi.cs:3817-3853:
    // overwrite=true&ptr=true writes the new PTR and leaves the old address's.
    let dir = tempfile::tempdir().expect("tmp");
    let t = stand().await;
    let p = provider(dir.path(), &t, true);
    p.upsert(&a("db-0.lab.example", "127.78.5.11"), T).await.expect("first");
    assert!(p.upsert(&a("db-0.lab.example", "127.78.5.12"), T).await.expect("moved"));
    assert_eq!(at(&t, "db-0.lab.example"), ["A 127.78.5.12"]);
    assert_eq!(at(&t, "12.5.78.127.in-addr.arpa"), ["PTR db-0.lab.example"]);
    assert!(at(&t, "11.5.78.127.in-addr.arpa").is_empty(), "the old PTR is gone");
}

#[tokio::test]
async fn without_ptr_only_the_a_record_is_written_and_delete_removes_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let t = stand().await;
    let p = provider(dir.path(), &t, false);
    p.upsert(&a("app-0.lab.example", "127.78.5.13"), T).await.expect("set");
    assert!(at(&t, "13.5.78.127.in-addr.arpa").is_empty());
    assert!(p.delete(ZONE, "app-0.lab.example", RecordKind::A, T).await.expect("deleted"));
    assert!(at(&t, "app-0.lab.example").is_empty());
    assert!(!p.delete(ZONE, "app-0.lab.example", RecordKind::A, T).await.expect("nothing left"));
}

#[tokio::test]
async fn a_zone_the_provider_does_not_hold_and_a_wrong_token_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("tmp");
    let t = stand().await;
    let p = provider(dir.path(), &t, true);
    let other = DnsRecord { zone: "corp.example".into(), ..a("x.corp.example", "127.78.5.14") };
    let e = p.upsert(&other, T).await.expect_err("zone");
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert!(e.message.contains("zone `corp.example` is not one of dns.tech.zones"), "{e:?}");
    let outside = p.upsert(&a("x.elsewhere.", "127.78.5.14"), T).await.expect_err("name");
    assert!(outside.message.contains("is not inside zone"), "{outside:?}");
    let wrong = provider_with(dir.path(), &t, "not-the-token", true)
        .upsert(&a("y.lab.example", "127.78.5.15"), T)
        .await
        .expect_err("token");
    assert_eq!(wrong.kind, ErrorKind::Denied, "{wrong:?}");
    assert!(wrong.message.starts_with("Technitium: records of y.lab.example"), "{wrong:?}");
}

#[tokio::test]
async fn several_providers_route_each_call_by_its_zone() {
    let dir = tempfile::tempdir().expect("tmp");
    let t = stand().await;
    let tech = provider(dir.path(), &t, false);
    // A second provider for another zone, never reached here.
    let other = Technitium::new("other", &config(&["corp.example"], false), Endpoints::default()).expect("other");
    let providers = DnsProviders::new(vec![
        ("other".into(), Provider::Technitium(other)),
        ("tech".into(), Provider::Technitium(tech)),
    ]);
    assert!(providers.upsert(&a("r.lab.example", "127.78.5.16"), T).await.expect("routed to tech"));
    assert_eq!(at(&t, "r.lab.example"), ["A 127.78.5.16"]);
    let none = DnsRecord { zone: "nowhere.example".into(), ..a("n.nowhere.example", "127.78.5.17") };
    let e = providers.upsert(&none, T).await.expect_err("no provider");
    assert!(e.message.contains("zone `nowhere.example` is in the zones of none"), "{e:?}");
}

#[test]
fn a_technitium_section_needs_its_endpoint_and_refuses_tsig_keys() {
    let mut cfg = config(&[ZONE], true);
    cfg.endpoint = None;
    assert!(cfg.validate().expect_err("no endpoint").to_string().contains("needs endpoint"));
    let mut cfg = config(&[ZONE], true);
    cfg.key_name = Some("cradle-key".into());
    assert!(cfg.validate().expect_err("tsig").to_string().contains("key_name is not a key of kind = \"technitium\""));
}

/// `cradle.toml` with a BIND and a Technitium provider on one environment.
fn two_providers(tech_zones: &str) -> String {
    format!(
        r#"
[clusters.lab]
kind = "sim"
[environments.test]
cluster = "lab"
backend = "sample"
dns = ["bind", "tech"]
[plugins.sample]
path = "sample.wasm"
[endpoints.technitium]
url = "http://127.0.0.1:5380"
token = {{ file = "/etc/cradle/technitium.token" }}
[dns.bind]
kind = "rfc2136"
server = "127.0.0.1:53"
key_name = "cradle-key"
secret = {{ file = "/etc/cradle/tsig.key" }}
zones = ["10.0.10.in-addr.arpa."]
[dns.tech]
kind = "technitium"
endpoint = "technitium"
zones = {tech_zones}
"#
    )
}

fn load(text: &str) -> Result<crate::config::Config, String> {
    let (path, base) = (std::path::Path::new("cradle.toml"), std::path::Path::new("/proj"));
    crate::config::Config::parse(text, path, base).map_err(|e| e.to_string())
}

#[test]
fn an_environment_takes_several_dns_providers_but_not_two_for_one_zone() {
    let c = load(&two_providers(r#"["lab.example"]"#)).expect("valid");
    assert_eq!(c.environments["test"].dns, ["bind", "tech"]);
    let twice = load(&two_providers(r#"["lab.example", "10.0.10.in-addr.arpa"]"#)).expect_err("zone twice");
    assert!(
        twice.contains("zone `10.0.10.in-addr.arpa.` is in the zones of both [dns.bind] and [dns.tech]"),
        "{twice}"
    );
    let unknown = load(&two_providers(r#"["lab.example"]"#).replace("endpoint = \"technitium\"", "endpoint = \"dns\""))
        .expect_err("endpoint");
    assert!(unknown.contains("dns.tech.endpoint = \"dns\" is not defined in [endpoints]"), "{unknown}");
}
