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

/// The whole answer as text (headers and body), to look for session values in.
fn answer_text(r: &crate::contract::bindings::cradle::host::http::Response) -> String {
    let headers: Vec<String> = r.headers.iter().map(|h| format!("{}: {}", h.key, h.value)).collect();
    format!("{}\n\n{}", headers.join("\n"), String::from_utf8_lossy(&r.body))
}

/// The stand-in of `style` (HTTPS, rotating CSRF on UniFi OS, `session_ttl`) and an
/// endpoint logging in to it.
async fn controller(
    dir: &std::path::Path,
    style: UnifiStyle,
    session_ttl: Option<Duration>,
) -> (unifi::Unifi, Endpoints) {
    let u = unifi::start(UnifiConfig {
        listen: Listen::https("127.0.0.1:0".parse().expect("addr")),
        style,
        rotate_csrf: style == UnifiStyle::UnifiOs,
        session_ttl,
        ..UnifiConfig::default()
    })
    .await
    .expect("unifi");
    let base = match style {
        UnifiStyle::UnifiOs => u.api_url().trim_end_matches("/api").to_string(),
        UnifiStyle::Classic => u.url(),
    };
    let eps = endpoints(dir, base, u.username(), u.password().expose(), u.ca_pem());
    (u, eps)
}

/// After the controller ends the session, the next request logs in once more and
/// succeeds; the caller sees that answer only, without the new session in it.
async fn an_expired_session_is_logged_in_again_once(style: UnifiStyle) {
    let dir = tempfile::tempdir().expect("tmp");
    let (u, eps) = controller(dir.path(), style, None).await;
    let (status, _, _) = networks(&eps).await;
    assert_eq!((status, u.logins()), (200, 1), "{style:?}");
    u.expire_sessions();
    let r = eps.send(get("/api/s/default/rest/networkconf"), Duration::from_secs(10)).await.expect("send");
    let doc: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
    assert_eq!((r.status, doc["meta"]["rc"].as_str(), u.logins()), (200, Some("ok"), 2), "{style:?}: {doc}");
    assert_eq!(doc["data"][0]["ip_subnet"], "127.77.0.1/24", "{style:?}: the answer to the request, not the login");
    let text = answer_text(&r);
    for h in super::SESSION_HEADERS {
        assert!(!r.headers.iter().any(|k| k.key.eq_ignore_ascii_case(h)), "{style:?}: {h} reached the caller");
    }
    // The new cookie and CSRF token are registered with the redactor: redacting
    // the answer changes nothing when none of them is in it.
    assert_eq!(crate::secrets::redact(&text), text, "{style:?}: a session value reached the caller");
    assert!(!text.contains("TOKEN=") && !text.contains("unifises="), "{style:?}: {text}");
    // The new session (and, on UniFi OS, its rotated CSRF token) is kept: no
    // further logins.
    for _ in 0..2 {
        let (status, _, _) = networks(&eps).await;
        assert_eq!((status, u.logins()), (200, 2), "{style:?}");
    }
}

#[tokio::test]
async fn an_expired_unifi_os_session_is_logged_in_again_once_and_the_caller_sees_only_the_answer() {
    an_expired_session_is_logged_in_again_once(UnifiStyle::UnifiOs).await;
}

#[tokio::test]
async fn an_expired_classic_session_is_logged_in_again_once_and_the_caller_sees_only_the_answer() {
    an_expired_session_is_logged_in_again_once(UnifiStyle::Classic).await;
}

#[tokio::test]
async fn a_session_past_its_lifetime_is_logged_in_again_on_the_next_request() {
    let dir = tempfile::tempdir().expect("tmp");
    let ttl = Duration::from_secs(2);
    let (u, eps) = controller(dir.path(), UnifiStyle::UnifiOs, Some(ttl)).await;
    assert_eq!((networks(&eps).await.0, u.logins()), (200, 1));
    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    assert_eq!((networks(&eps).await.0, u.logins()), (200, 2));
}

#[tokio::test]
async fn a_controller_that_refuses_every_fresh_session_gets_one_new_login_per_request_not_a_loop() {
    let dir = tempfile::tempdir().expect("tmp");
    for style in [UnifiStyle::UnifiOs, UnifiStyle::Classic] {
        // A zero lifetime: every session is refused right after its login.
        let (u, eps) = controller(dir.path(), style, Some(Duration::ZERO)).await;
        for (request, logins) in [(1, 2), (2, 3), (3, 4)] {
            let sent = eps.send(get("/api/s/default/rest/networkconf"), Duration::from_secs(10)).await;
            // The first request logs in, is refused, and logs in once more; every
            // later one starts with the refused session and logs in once.
            assert_eq!(u.logins(), logins, "{style:?}: request {request}");
            let e = sent.expect_err("a clear error, not the controller's 401");
            assert!(e.message.contains("UniFi answered 401 right after a new login"), "{style:?}: {}", e.message);
            assert_eq!(crate::secrets::redact(&e.message), e.message, "{style:?}: a secret in the error");
        }
    }
}

/// A UniFi OS stand-in configured by `cfg` (HTTPS) and an endpoint logging in to it.
async fn unifi_os(dir: &std::path::Path, cfg: UnifiConfig) -> (unifi::Unifi, Endpoints) {
    let u = unifi::start(UnifiConfig { listen: Listen::https("127.0.0.1:0".parse().expect("addr")), ..cfg })
        .await
        .expect("unifi");
    let base = u.api_url().trim_end_matches("/api").to_string();
    let eps = endpoints(dir, base, u.username(), u.password().expose(), u.ca_pem());
    (u, eps)
}

#[tokio::test]
async fn a_csrf_token_rotated_in_x_csrf_token_is_taken_from_the_answer_as_the_go_clients_take_it() {
    // ubiquiti-community/go-unifi b2bf4ce unifi/unifi.go:692-696 and paultyng/go-unifi
    // 3ade172 unifi/unifi.go:252-254 take X-Csrf-Token from any answer.
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = UnifiConfig { rotate_csrf: true, csrf_announce: unifi::CsrfAnnounce::Current, ..UnifiConfig::default() };
    let (u, eps) = unifi_os(dir.path(), cfg).await;
    for request in 1..=3 {
        let (status, doc, headers) = networks(&eps).await;
        assert_eq!((status, u.logins()), (200, 1), "request {request}: {doc}");
        assert!(!headers.iter().any(|k| k == "x-csrf-token"), "the token reached the caller: {headers:?}");
    }
}

#[tokio::test]
async fn a_csrf_token_the_controller_retired_logs_in_again_instead_of_403_for_the_life_of_the_process() {
    let dir = tempfile::tempdir().expect("tmp");
    let (u, eps) = unifi_os(dir.path(), UnifiConfig::default()).await;
    assert_eq!((networks(&eps).await.0, u.logins()), (200, 1));
    u.expire_csrf_tokens();
    let (status, doc, _) = networks(&eps).await;
    assert_eq!((status, doc["meta"]["rc"].as_str(), u.logins()), (200, Some("ok"), 2), "{doc}");
    assert_eq!((networks(&eps).await.0, u.logins()), (200, 2), "the new session's token is kept");
}

#[tokio::test]
async fn a_login_answer_without_x_csrf_token_takes_the_csrf_token_claim_of_the_token_cookie() {
    let dir = tempfile::tempdir().expect("tmp");
    let (u, eps) = unifi_os(dir.path(), UnifiConfig { login_csrf_header: false, ..UnifiConfig::default() }).await;
    for _ in 0..2 {
        let (status, doc, _) = networks(&eps).await;
        assert_eq!((status, u.logins()), (200, 1), "{doc}");
    }
}

#[test]
fn the_csrf_claim_is_read_from_a_jwt_payload_in_base64url() {
    // {"csrfToken":"a-b","iat":1} in base64url without padding.
    let payload = "eyJjc3JmVG9rZW4iOiJhLWIiLCJpYXQiOjF9";
    assert_eq!(super::jwt_csrf(&format!("h.{payload}.s")).as_deref(), Some("a-b"));
    assert_eq!(super::jwt_csrf("not-a-jwt"), None);
    assert_eq!(super::jwt_csrf("h.!!!.s"), None);
}
