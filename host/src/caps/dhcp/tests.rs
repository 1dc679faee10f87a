//! The UniFi provider against the UniFi stand-in (cradle-sim), both
//! controller styles, with the host's session login; and the adapter: the
//! policy check before the provider, and no provider configured.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cradle_sim::services::Listen;
use cradle_sim::services::unifi::{self, Unifi as Stand, UnifiConfig, UnifiStyle};

use super::{DhcpProviderConfig, DhcpProviderKind, Unifi};
use crate::caps::context::{CapCtx, Services};
use crate::caps::http::{EndpointAuth, EndpointConfig, Endpoints};
use crate::caps::policy::RunScope;
use crate::contract::ErrorKind;
use crate::contract::bindings::cradle::host::dhcp::Host;
use crate::contract::bindings::cradle::host::types::Error as WitError;
use crate::secrets::SecretRef;

const T: Duration = Duration::from_secs(10);
/// The stand-in's default network: `Default`, 127.77.0.1/24.
const LAN: &str = "127.77.0.0/24";

async fn stand(style: UnifiStyle) -> Stand {
    let listen = Listen::https("127.0.0.1:0".parse().expect("addr"));
    unifi::start(UnifiConfig { listen, style, rotate_csrf: style == UnifiStyle::UnifiOs, ..UnifiConfig::default() })
        .await
        .expect("unifi stand-in")
}

/// The provider `[dhcp.lan]` over the endpoint `unifi` (`auth =
/// "unifi-login"`: the host logs in and keeps the CSRF token).
fn provider(dir: &std::path::Path, u: &Stand) -> Unifi {
    let secret = dir.join("unifi.password");
    std::fs::write(&secret, u.password().expose()).expect("write");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, u.ca_pem().expect("ca")).expect("ca");
    let endpoint = EndpointConfig {
        url: u.api_url().trim_end_matches("/api").to_string(),
        token: Some(SecretRef::File(secret)),
        auth: EndpointAuth::UnifiLogin,
        ca_file: Some(ca),
        username: Some(u.username().to_string()),
    };
    let http = Endpoints::new(&BTreeMap::from([("unifi".to_string(), endpoint)]));
    let cfg = DhcpProviderConfig { kind: DhcpProviderKind::Unifi, endpoint: "unifi".into(), site: "default".into() };
    Unifi::new("lan", &cfg, http).expect("provider")
}

/// A reservation as comparable fields (the WIT record has no `PartialEq`).
fn fields(r: &Option<super::Reservation>) -> Option<[String; 4]> {
    r.as_ref().map(|r| [r.network.clone(), r.mac.clone(), r.ip.clone(), r.name.clone()])
}

fn creates(u: &Stand) -> usize {
    u.calls().iter().filter(|c| c.starts_with("POST") && c.ends_with("/group/user")).count()
}

#[tokio::test]
async fn unifi_os_reserve_creates_the_fixed_ip_once_and_a_rerun_leaves_it_as_it_is() {
    let dir = tempfile::tempdir().expect("tmp");
    let u = stand(UnifiStyle::UnifiOs).await;
    let p = provider(dir.path(), &u);
    // No network named: the one whose subnet holds the address.
    let r = p.reserve("", "BC:24:11:00:00:01", "127.77.0.50", "web-0", T).await.expect("reserve");
    assert_eq!((r.network.as_str(), r.mac.as_str(), r.ip.as_str()), (LAN, "bc:24:11:00:00:01", "127.77.0.50"));
    let c = u.client("default", "bc:24:11:00:00:01").expect("UniFi knows the MAC");
    assert_eq!((c.use_fixedip, c.fixed_ip.map(|ip| ip.to_string())), (true, Some("127.77.0.50".into())));
    assert_eq!(c.network_id, u.networks().first().map(|n| n.id.clone()));
    let again = p.reserve(LAN, "bc:24:11:00:00:01", "127.77.0.50", "web-0", T).await.expect("again");
    assert_eq!(fields(&Some(again)), fields(&Some(r)));
    assert_eq!(creates(&u), 1, "{:?}", u.calls());
    assert!(u.calls().iter().all(|c| c.contains("/proxy/network/api/s/default/")), "{:?}", u.calls());
}

#[tokio::test]
async fn a_mac_reserved_for_another_ip_is_a_conflict_naming_what_unifi_knows() {
    let dir = tempfile::tempdir().expect("tmp");
    let u = stand(UnifiStyle::Classic).await;
    let p = provider(dir.path(), &u);
    p.reserve(LAN, "bc:24:11:00:00:02", "127.77.0.51", "db-0", T).await.expect("first");
    let e = p.reserve(LAN, "bc:24:11:00:00:02", "127.77.0.52", "db-0", T).await.expect_err("other ip");
    assert_eq!(e.kind, ErrorKind::Conflict, "{e:?}");
    assert!(
        e.message.contains("db-0, reserved 127.77.0.51") && e.message.contains("not reserved 127.77.0.52"),
        "{e:?}"
    );
    assert_eq!(creates(&u), 1);
}

#[tokio::test]
async fn a_mac_the_dhcp_server_has_seen_is_a_conflict_not_a_second_client() {
    let dir = tempfile::tempdir().expect("tmp");
    let u = stand(UnifiStyle::UnifiOs).await;
    u.dhcp("default").request("bc:24:11:00:00:03", None, Some("early"));
    let p = provider(dir.path(), &u);
    let e = p.reserve("", "bc:24:11:00:00:03", "127.77.0.53", "app-0", T).await.expect_err("seen");
    assert_eq!(e.kind, ErrorKind::Conflict, "{e:?}");
    assert!(e.message.contains("no reservation"), "{e:?}");
    assert_eq!(creates(&u), 0);
}

#[tokio::test]
async fn an_ip_outside_the_networks_subnet_or_any_network_is_invalid_before_any_create() {
    let dir = tempfile::tempdir().expect("tmp");
    let u = stand(UnifiStyle::Classic).await;
    let p = provider(dir.path(), &u);
    let outside = p.reserve(LAN, "bc:24:11:00:00:04", "127.78.0.5", "x", T).await.expect_err("outside");
    assert_eq!(outside.kind, ErrorKind::Invalid);
    assert!(outside.message.contains("127.78.0.5 is outside network Default (127.77.0.0/24)"), "{outside:?}");
    let nowhere = p.reserve("", "bc:24:11:00:00:04", "192.0.2.5", "x", T).await.expect_err("nowhere");
    assert!(nowhere.message.contains("no network of site default holds 192.0.2.5"), "{nowhere:?}");
    let unknown = p.reserve("10.9.0.0/16", "bc:24:11:00:00:04", "10.9.0.5", "x", T).await.expect_err("unknown");
    assert!(unknown.message.contains("no network of site default has the subnet 10.9.0.0/16"), "{unknown:?}");
    assert_eq!(creates(&u), 0);
}

#[tokio::test]
async fn lookup_and_release_see_only_the_reservation_in_that_network() {
    let dir = tempfile::tempdir().expect("tmp");
    let u = stand(UnifiStyle::UnifiOs).await;
    let p = provider(dir.path(), &u);
    assert!(p.lookup(LAN, "bc:24:11:00:00:05", T).await.expect("none").is_none());
    assert!(!p.release(LAN, "bc:24:11:00:00:05", T).await.expect("nothing to release"));
    let r = p.reserve(LAN, "bc:24:11:00:00:05", "127.77.0.55", "ns-0", T).await.expect("reserve");
    assert_eq!(fields(&p.lookup(LAN, "bc:24:11:00:00:05", T).await.expect("found")), fields(&Some(r)));
    assert!(p.release(LAN, "bc:24:11:00:00:05", T).await.expect("released"));
    assert!(u.client("default", "bc:24:11:00:00:05").is_none());
    assert!(p.lookup(LAN, "bc:24:11:00:00:05", T).await.expect("gone").is_none());
}

fn ctx(dir: &std::path::Path, rt: &tokio::runtime::Runtime, dhcp: Option<Unifi>) -> CapCtx {
    let grants = toml::from_str("[dhcp]\nnetworks = [\"127.77.0.0/24\"]").expect("grants");
    let services = Services { dhcp: dhcp.map(Arc::new), ..Services::for_tests(dir, rt) };
    CapCtx::for_tests(grants, RunScope::default(), services, "dhcp-test")
}

#[test]
fn the_adapter_denies_an_ip_outside_the_grant_before_the_controller_is_asked() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let dir = tempfile::tempdir().expect("tmp");
    let u = rt.block_on(stand(UnifiStyle::UnifiOs));
    let mut c = ctx(dir.path(), &rt, Some(provider(dir.path(), &u)));
    match Host::reserve(&mut c, String::new(), "bc:24:11:00:00:06".into(), "127.78.0.6".into(), "x".into()) {
        Err(WitError::Denied(m)) => assert!(m.contains("ip `127.78.0.6` is not inside"), "{m}"),
        other => panic!("expected denied, got {other:?}"),
    }
    assert!(u.calls().is_empty(), "the controller was asked: {:?}", u.calls());
    let made = Host::reserve(&mut c, String::new(), "bc:24:11:00:00:06".into(), "127.77.0.56".into(), "y".into());
    assert_eq!(made.expect("inside the grant").ip, "127.77.0.56");
}

#[test]
fn without_a_provider_an_allowed_call_fails_saying_what_to_configure() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let dir = tempfile::tempdir().expect("tmp");
    let mut c = ctx(dir.path(), &rt, None);
    match Host::lookup(&mut c, LAN.into(), "bc:24:11:00:00:07".into()) {
        Err(WitError::Failed(m)) => assert!(m.contains("dhcp = \"NAME\"") && m.contains("[dhcp.NAME]"), "{m}"),
        other => panic!("expected failed, got {other:?}"),
    }
}

#[test]
fn a_dhcp_provider_or_environment_naming_what_is_not_defined_is_refused_at_load() {
    let text = r#"
[clusters.lab]
kind = "sim"
[environments.test]
cluster = "lab"
backend = "sample"
dhcp = "lan"
[plugins.sample]
path = "sample.wasm"
[endpoints.unifi]
url = "https://127.0.0.1:8443"
auth = "api-key"
token = { file = "/etc/cradle/unifi.key" }
[dhcp.lan]
kind = "unifi"
endpoint = "unifi"
"#;
    let load = |t: &str| crate::config::fixture::parse(t).map_err(|e| e.to_string());
    let c = load(text).expect("valid");
    assert_eq!((c.dhcp["lan"].site.as_str(), c.environments["test"].dhcp.as_deref()), ("default", Some("lan")));
    let e = load(&text.replace("endpoint = \"unifi\"", "endpoint = \"controller\"")).expect_err("endpoint");
    assert!(e.contains("dhcp.lan: endpoint = \"controller\" is not defined in [endpoints]"), "{e}");
    let e = load(&text.replace("dhcp = \"lan\"", "dhcp = \"wan\"")).expect_err("environment");
    assert!(e.contains("environments.test.dhcp = \"wan\" is not defined in [dhcp]"), "{e}");
    let e = load(&text.replace("kind = \"unifi\"", "kind = \"kea\"")).expect_err("kind");
    assert!(e.contains("kea"), "{e}");
}
