//! Against the UniFi stand-in (cradle-sim), both API styles.

use std::collections::BTreeMap;
use std::time::Duration;

use cradle_sim::services::Listen;
use cradle_sim::services::unifi::{self, UnifiConfig, UnifiStyle};

use super::super::{EndpointAuth, EndpointConfig, Endpoints};
use crate::contract::bindings::cradle::host::http::{Method, Request};
use crate::secrets::SecretRef;

fn endpoints(dir: &std::path::Path, url: String, username: &str, password: &str, ca: Option<String>) -> Endpoints {
    let secret = dir.join("unifi.password");
    std::fs::write(&secret, password).expect("write");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let ca_file = ca.map(|pem| {
        let p = dir.join("ca.pem");
        std::fs::write(&p, pem).expect("ca");
        p
    });
    let cfg = EndpointConfig {
        url,
        token: Some(SecretRef::File(secret)),
        auth: EndpointAuth::UnifiLogin,
        ca_file,
        username: Some(username.to_string()),
    };
    Endpoints::new(&BTreeMap::from([("unifi".to_string(), cfg)]))
}

fn get(path: &str) -> Request {
    Request {
        endpoint: "unifi".into(),
        method: Method::Get,
        path: path.into(),
        query: vec![],
        headers: vec![],
        body: None,
    }
}

async fn networks(eps: &Endpoints) -> (u16, serde_json::Value, Vec<String>) {
    let r = eps.send(get("/api/s/default/rest/networkconf"), Duration::from_secs(10)).await.expect("send");
    let doc = serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null);
    (r.status, doc, r.headers.iter().map(|h| h.key.to_ascii_lowercase()).collect())
}

#[tokio::test]
async fn unifi_os_login_keeps_the_session_and_its_rotating_csrf_token_out_of_the_answers() {
    let dir = tempfile::tempdir().expect("tmp");
    let u = unifi::start(UnifiConfig {
        listen: Listen::https("127.0.0.1:0".parse().expect("addr")),
        style: UnifiStyle::UnifiOs,
        rotate_csrf: true,
        ..UnifiConfig::default()
    })
    .await
    .expect("unifi");
    let base = u.api_url().trim_end_matches("/api").to_string();
    let eps = endpoints(dir.path(), base, u.username(), u.password().expose(), u.ca_pem());
    // Every answer rotates the CSRF token and retires the old one: three
    // requests in a row work only if each picks up the new one.
    for _ in 0..3 {
        let (status, doc, headers) = networks(&eps).await;
        assert_eq!((status, doc["meta"]["rc"].as_str()), (200, Some("ok")), "{doc}");
        for h in super::SESSION_HEADERS {
            assert!(!headers.iter().any(|k| k == h), "{h} reached the caller: {headers:?}");
        }
    }
}

#[tokio::test]
async fn a_classic_controller_login_works_and_a_wrong_password_names_the_user_not_the_password() {
    let dir = tempfile::tempdir().expect("tmp");
    let u = unifi::start(UnifiConfig {
        listen: Listen::http("127.0.0.1:0".parse().expect("addr")),
        style: UnifiStyle::Classic,
        ..UnifiConfig::default()
    })
    .await
    .expect("unifi");
    let eps = endpoints(dir.path(), u.url(), u.username(), u.password().expose(), None);
    let (status, doc, _) = networks(&eps).await;
    assert_eq!((status, doc["meta"]["rc"].as_str()), (200, Some("ok")), "{doc}");
    let wrong = endpoints(dir.path(), u.url(), u.username(), "CANARY-NOT-THE-PASSWORD", None);
    let err = wrong.send(get("/api/s/default/rest/networkconf"), Duration::from_secs(10)).await.expect_err("refused");
    assert!(err.message.contains("refused the login") && err.message.contains(u.username()), "{}", err.message);
    assert!(!err.message.contains("CANARY"), "{}", err.message);
}

#[tokio::test]
async fn a_rate_limited_login_says_to_wait() {
    let dir = tempfile::tempdir().expect("tmp");
    let u = unifi::start(UnifiConfig {
        listen: Listen::https("127.0.0.1:0".parse().expect("addr")),
        ..UnifiConfig::default()
    })
    .await
    .expect("unifi");
    u.refuse_next_logins(1);
    let base = u.api_url().trim_end_matches("/api").to_string();
    let eps = endpoints(dir.path(), base, u.username(), u.password().expose(), u.ca_pem());
    let err = eps.send(get("/api/s/default/rest/networkconf"), Duration::from_secs(10)).await.expect_err("429");
    assert!(err.message.contains("too many logins"), "{}", err.message);
    // The next request logs in again and works.
    let (status, _, _) = networks(&eps).await;
    assert_eq!(status, 200);
}
