//! UniFi OS CSRF tokens: announced in either header the Go clients read, carried in
//! the `TOKEN` JWT, and retired by the controller (403 `Invalid CSRF Token` until a
//! new login).
//!
//! Sources: `ubiquiti-community/go-unifi` b2bf4ce665620ef1dd216012fe7be7ce07c210f2
//! `unifi/unifi.go:692-696` (a token from `X-Updated-Csrf-Token`, else from
//! `X-Csrf-Token`, of any answer); `paultyng/go-unifi`
//! 3ade17260bd421739cdc6d58f8cdaa7b230a3d9f `unifi/unifi.go:252-254` (only
//! `X-Csrf-Token`, of any answer).

use base64::Engine as _;
use cradle_sim::services::unifi::{self, CsrfAnnounce, UnifiConfig};
use cradle_sim::services::{Listen, Secret};
use serde_json::{Value, json};

use crate::{client, set_cookie};

fn os(cfg: UnifiConfig) -> UnifiConfig {
    UnifiConfig { listen: Listen::loopback(), password: Some(Secret::new("pw")), ..cfg }
}

/// Log in; returns the login answer's `TOKEN` cookie and `X-CSRF-Token` header.
async fn login(http: &reqwest::Client, u: &unifi::Unifi) -> (String, Option<String>) {
    let resp = http
        .post(format!("{}/api/auth/login", u.url()))
        .json(&json!({"username": "admin", "password": "pw"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let csrf = resp.headers().get("x-csrf-token").map(|v| v.to_str().unwrap().to_string());
    (set_cookie(&resp, "TOKEN").unwrap(), csrf)
}

/// `GET {api}/self/sites`; returns the status, the body text and the headers.
async fn sites(
    http: &reqwest::Client,
    u: &unifi::Unifi,
    token: &str,
    csrf: &str,
) -> (u16, String, reqwest::header::HeaderMap) {
    let resp = http
        .get(format!("{}/self/sites", u.api_url()))
        .header("cookie", format!("TOKEN={token}"))
        .header("x-csrf-token", csrf)
        .send()
        .await
        .unwrap();
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    (status, resp.text().await.unwrap(), headers)
}

#[tokio::test]
async fn a_rotated_csrf_token_can_come_in_x_csrf_token_as_paultyngs_client_reads_it() {
    // paultyng/go-unifi 3ade172 unifi/unifi.go:252: `c.csrf = resp.Header.Get("X-Csrf-Token")`.
    let u = unifi::start(os(UnifiConfig {
        rotate_csrf: true,
        csrf_announce: CsrfAnnounce::Current,
        ..UnifiConfig::default()
    }))
    .await
    .unwrap();
    let http = client(None);
    let (token, csrf) = login(&http, &u).await;
    let csrf = csrf.unwrap();
    let (s, _, h) = sites(&http, &u, &token, &csrf).await;
    assert_eq!(s, 200);
    assert!(h.get("x-updated-csrf-token").is_none(), "announced in X-Csrf-Token only");
    let next = h["x-csrf-token"].to_str().unwrap().to_string();
    assert_ne!(next, csrf);
    assert_eq!(sites(&http, &u, &token, &csrf).await.0, 403, "the old token is retired");
    assert_eq!(sites(&http, &u, &token, &next).await.0, 200);
}

#[tokio::test]
async fn a_retired_csrf_token_gets_403_invalid_csrf_token_until_a_new_login() {
    let u = unifi::start(os(UnifiConfig::default())).await.unwrap();
    let http = client(None);
    let (token, csrf) = login(&http, &u).await;
    let csrf = csrf.unwrap();
    assert_eq!(sites(&http, &u, &token, &csrf).await.0, 200);
    u.expire_csrf_tokens();
    for _ in 0..2 {
        let (s, body, _) = sites(&http, &u, &token, &csrf).await;
        assert_eq!((s, body.as_str()), (403, "Invalid CSRF Token"), "every call, with the session still alive");
    }
    let (token2, csrf2) = login(&http, &u).await;
    assert_eq!(sites(&http, &u, &token2, &csrf2.unwrap()).await.0, 200, "a new login has a new token");
}

#[tokio::test]
async fn a_login_without_the_csrf_header_carries_the_token_in_the_token_jwt() {
    let u = unifi::start(os(UnifiConfig { login_csrf_header: false, ..UnifiConfig::default() })).await.unwrap();
    let http = client(None);
    let (token, csrf) = login(&http, &u).await;
    assert_eq!(csrf, None, "no X-CSRF-Token header");
    let payload = token.split('.').nth(1).unwrap();
    let claims: Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    let claimed = claims["csrfToken"].as_str().unwrap();
    assert_eq!(sites(&http, &u, &token, claimed).await.0, 200, "the claim is the session's token");
}
