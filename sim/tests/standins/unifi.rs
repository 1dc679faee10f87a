//! UniFi Network stand-in: both API styles, API keys, envelopes and error codes.

use cradle_sim::services::unifi::{self, LoginLimit, UnifiConfig, UnifiStyle};
use cradle_sim::services::{Listen, Secret};
use serde_json::{Value, json};

use crate::{client, set_cookie};

fn classic() -> UnifiConfig {
    UnifiConfig { style: UnifiStyle::Classic, password: Some(Secret::new("pw")), ..UnifiConfig::default() }
}

/// Send a request; returns (status, body JSON or Null).
async fn call(req: reqwest::RequestBuilder) -> (u16, Value, reqwest::header::HeaderMap) {
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.json::<Value>().await.unwrap_or(Value::Null);
    (status, body, headers)
}

#[tokio::test]
async fn a_classic_controller_redirects_logs_in_with_unifises_and_answers_in_its_envelope() {
    let u = unifi::start(classic()).await.unwrap();
    let http = client(u.ca_pem());
    assert!(u.url().starts_with("https://"), "controllers speak HTTPS by default");
    let root = http.get(format!("{}/", u.url())).send().await.unwrap();
    assert_eq!(root.status().as_u16(), 302, "GET / is 302 on a classic controller");
    assert_eq!(root.headers()["location"], "/manage");
    let (s, b, _) = call(http.get(format!("{}/status", u.url()))).await;
    assert_eq!((s, b["meta"]["rc"].as_str(), b["meta"]["server_version"].as_str()), (200, Some("ok"), Some("9.0.114")));

    let api = u.api_url();
    assert_eq!(api, format!("{}/api", u.url()));
    let (s, b, _) = call(http.get(format!("{api}/s/default/rest/user"))).await;
    assert_eq!((s, b), (401, json!({"meta": {"rc": "error", "msg": "api.err.LoginRequired"}, "data": []})));
    let (s, b, _) =
        call(http.post(format!("{}/api/login", u.url())).json(&json!({"username": "admin", "password": "no"}))).await;
    assert_eq!((s, b["meta"]["msg"].as_str()), (400, Some("api.err.Invalid")));
    let resp = http
        .post(format!("{}/api/login", u.url()))
        .json(&json!({"username": "admin", "password": "pw"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let session = set_cookie(&resp, "unifises").expect("unifises cookie");
    assert!(set_cookie(&resp, "csrf_token").is_some(), "a csrf cookie too");
    let cookie = format!("unifises={session}");

    let (s, nets, _) = call(http.get(format!("{api}/s/default/rest/networkconf")).header("cookie", &cookie)).await;
    assert_eq!((s, nets["meta"]["rc"].as_str()), (200, Some("ok")));
    let net = &nets["data"][0];
    assert_eq!(net["ip_subnet"], "127.77.0.1/24");
    let nid = net["_id"].as_str().unwrap().to_string();
    assert_eq!(nid.len(), 24);

    let body = json!({"mac": "BC:24:11:AA:BB:CC", "name": "vm01", "use_fixedip": true, "fixed_ip": "127.77.0.10",
        "network_id": nid, "note": "cradle"});
    let (s, b, _) = call(http.post(format!("{api}/s/default/rest/user")).header("cookie", &cookie).json(&body)).await;
    assert_eq!((s, b["meta"]["rc"].as_str()), (200, Some("ok")), "{b}");
    let created = &b["data"][0];
    assert_eq!(
        (created["mac"].as_str(), created["fixed_ip"].as_str()),
        (Some("bc:24:11:aa:bb:cc"), Some("127.77.0.10"))
    );
    let id = created["_id"].as_str().unwrap().to_string();
    let (s, b, _) = call(http.post(format!("{api}/s/default/rest/user")).header("cookie", &cookie).json(&body)).await;
    assert_eq!(
        (s, b["meta"]["msg"].as_str(), b["data"].as_array().map(Vec::len)),
        (400, Some("api.err.MacUsed"), Some(0))
    );
    let same_ip =
        json!({"mac": "bc:24:11:aa:bb:cd", "use_fixedip": true, "fixed_ip": "127.77.0.10", "network_id": nid});
    let (s, b, _) =
        call(http.post(format!("{api}/s/default/rest/user")).header("cookie", &cookie).json(&same_ip)).await;
    assert_eq!((s, b["meta"]["msg"].as_str()), (400, Some("api.err.FixedIpAlreadyUsedByClient")));
    let (s, b, _) =
        call(http.post(format!("{api}/s/default/rest/user")).header("cookie", &cookie).body("{not json")).await;
    assert_eq!((s, b["meta"]["msg"].as_str()), (400, Some("api.err.InvalidPayload")));

    // The state the tests of the pipeline read: a reservation with its time.
    let r = u.reservations();
    assert_eq!((r.len(), r[0].mac.as_str(), r[0].network_id.as_deref()), (1, "bc:24:11:aa:bb:cc", Some(nid.as_str())));
    assert_eq!(r[0].reserved_at, Some(r[0].created));

    let (s, b, _) = call(http.get(format!("{api}/s/default/rest/user/{id}")).header("cookie", &cookie)).await;
    assert_eq!((s, b["data"][0]["name"].as_str()), (200, Some("vm01")));
    let mut full = b["data"][0].clone();
    full["fixed_ip"] = json!("127.77.0.11");
    let (s, b, _) =
        call(http.put(format!("{api}/s/default/rest/user/{id}")).header("cookie", &cookie).json(&full)).await;
    assert_eq!((s, b["data"][0]["fixed_ip"].as_str()), (200, Some("127.77.0.11")));
    assert!(u.reservations()[0].reserved_at.unwrap() > r[0].created, "moving the fixed IP re-stamps it");
    let (s, b, _) =
        call(http.get(format!("{api}/s/default/stat/user/bc:24:11:aa:bb:cc")).header("cookie", &cookie)).await;
    assert_eq!((s, b["data"][0]["_id"].as_str()), (200, Some(id.as_str())));
    let (s, b, _) =
        call(http.get(format!("{api}/s/default/stat/user/00:00:00:00:00:01")).header("cookie", &cookie)).await;
    assert_eq!((s, b["meta"]["msg"].as_str()), (400, Some("api.err.UnknownUser")));

    // An unknown site: NoSiteContext (HTTP 400 here; see the 200 variant below).
    let (s, b, _) = call(http.get(format!("{api}/s/nosuch/rest/user")).header("cookie", &cookie)).await;
    assert_eq!((s, b["meta"]["msg"].as_str()), (400, Some("api.err.NoSiteContext")));

    let (s, b, _) = call(http.delete(format!("{api}/s/default/rest/user/{id}")).header("cookie", &cookie)).await;
    assert_eq!((s, b), (200, json!({"meta": {"rc": "ok"}, "data": []})));
    assert!(u.clients().is_empty());
    let (s, _, _) = call(http.post(format!("{}/api/logout", u.url())).header("cookie", &cookie)).await;
    assert_eq!(s, 200);
    let (s, _, _) = call(http.get(format!("{api}/s/default/rest/user")).header("cookie", &cookie)).await;
    assert_eq!(s, 401, "the session ended");
}

#[tokio::test]
async fn group_user_nests_its_result_and_forget_sta_removes_clients_by_mac() {
    let cfg = UnifiConfig { no_site_context_status: 200, ..classic() };
    let u = unifi::start(cfg).await.unwrap();
    let http = client(u.ca_pem());
    let resp = http
        .post(format!("{}/api/login", u.url()))
        .json(&json!({"username": "admin", "password": "pw"}))
        .send()
        .await
        .unwrap();
    let cookie = format!("unifises={}", set_cookie(&resp, "unifises").unwrap());
    let api = u.api_url();
    let nid = u.networks()[0].id.clone();
    let one = json!({"mac": "bc:24:11:00:00:01", "use_fixedip": true, "fixed_ip": "127.77.0.20", "network_id": nid});
    let group = json!({"objects": [{"data": one}, {"data": one}]});
    let (s, b, _) = call(http.post(format!("{api}/s/default/group/user")).header("cookie", &cookie).json(&group)).await;
    assert_eq!((s, b["meta"]["msg"].as_str()), (400, Some("api.err.MacUsed")), "a refused object: 400 ...");
    assert_eq!(b["data"][0]["meta"]["rc"], "ok");
    assert_eq!(b["data"][0]["data"][0]["fixed_ip"], "127.77.0.20");
    assert_eq!(b["data"][1]["meta"], json!({"rc": "error", "msg": "api.err.MacUsed"}), "... each object its own meta");

    // Some controllers answer NoSiteContext with HTTP 200: only meta.rc tells.
    let (s, b, _) = call(http.get(format!("{api}/s/nosuch/rest/user")).header("cookie", &cookie)).await;
    assert_eq!(
        (s, b["meta"]["rc"].as_str(), b["meta"]["msg"].as_str()),
        (200, Some("error"), Some("api.err.NoSiteContext"))
    );

    let forget = json!({"cmd": "forget-sta", "macs": ["BC:24:11:00:00:01"]});
    let (s, b, _) =
        call(http.post(format!("{api}/s/default/cmd/stamgr")).header("cookie", &cookie).json(&forget)).await;
    assert_eq!((s, b["data"][0]["mac"].as_str()), (200, Some("bc:24:11:00:00:01")));
    assert!(u.clients().is_empty());
    let (s, b, _) =
        call(http.post(format!("{api}/s/default/cmd/stamgr")).header("cookie", &cookie).json(&json!({"cmd": "x"})))
            .await;
    assert_eq!((s, b["meta"]["msg"].as_str()), (400, Some("api.err.InvalidPayload")));
}

#[tokio::test]
async fn unifi_os_wants_its_token_cookie_and_csrf_header_or_an_api_key() {
    let cfg = UnifiConfig {
        password: Some(Secret::new("pw")),
        api_key: Some(Secret::new("the-key")),
        put_returns_empty: true,
        ..UnifiConfig::default()
    };
    let u = unifi::start(cfg).await.unwrap();
    let http = client(u.ca_pem());
    let root = http.get(format!("{}/", u.url())).send().await.unwrap();
    assert_eq!(root.status().as_u16(), 200, "GET / is 200 on UniFi OS");
    let api = u.api_url();
    assert_eq!(api, format!("{}/proxy/network/api", u.url()));
    let (s, _, _) = call(http.get(format!("{}/api/s/default/rest/user", u.url()))).await;
    assert_eq!(s, 404, "no classic paths on UniFi OS");
    let (s, b, _) = call(http.get(format!("{}/proxy/network/status", u.url()))).await;
    assert_eq!((s, b["meta"]["rc"].as_str()), (200, Some("ok")));

    let resp = http
        .post(format!("{}/api/auth/login", u.url()))
        .json(&json!({"username": "admin", "password": "pw"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let csrf = resp.headers()["x-csrf-token"].to_str().unwrap().to_string();
    let token = set_cookie(&resp, "TOKEN").expect("TOKEN cookie");
    assert_eq!(token.split('.').count(), 3, "the TOKEN is JWT-shaped");
    let cookie = format!("TOKEN={token}");
    let users = format!("{api}/s/default/rest/user");
    let (s, _, _) = call(http.get(&users).header("cookie", &cookie)).await;
    assert_eq!(s, 403, "without X-Csrf-Token");
    let (s, _, _) = call(http.get(&users).header("cookie", &cookie).header("X-Csrf-Token", "wrong")).await;
    assert_eq!(s, 403);
    let (s, b, _) = call(http.get(&users).header("cookie", &cookie).header("X-Csrf-Token", &csrf)).await;
    assert_eq!((s, b), (200, json!({"meta": {"rc": "ok"}, "data": []})));
    let (s, b, _) = call(http.get(&users)).await;
    assert_eq!((s, b["meta"]["msg"].as_str()), (401, Some("api.err.LoginRequired")));

    // An API key needs neither login nor CSRF; a wrong one is 401.
    let nid = u.networks()[0].id.clone();
    let body = json!({"mac": "bc:24:11:00:00:09", "use_fixedip": true, "fixed_ip": "127.77.0.9", "network_id": nid});
    let (s, b, _) = call(http.post(&users).header("X-API-KEY", "the-key").json(&body)).await;
    assert_eq!((s, b["meta"]["rc"].as_str()), (200, Some("ok")), "{b}");
    let id = b["data"][0]["_id"].as_str().unwrap().to_string();
    let (s, _, _) = call(http.get(&users).header("x-api-key", "nope")).await;
    assert_eq!(s, 401);
    // Some UDM SE firmware answers a PUT with empty data (configured here): GET again.
    let (s, b, _) = call(http.put(format!("{users}/{id}")).header("X-API-KEY", "the-key").json(&body)).await;
    assert_eq!((s, b["data"].as_array().map(Vec::len)), (200, Some(0)));
}

#[tokio::test]
async fn unifi_os_rate_limits_logins_with_429_and_can_rotate_the_csrf_token() {
    let cfg = UnifiConfig {
        listen: Listen::loopback(),
        password: Some(Secret::new("pw")),
        login_limit: Some(LoginLimit { max: 2, window: std::time::Duration::from_secs(3600) }),
        rotate_csrf: true,
        ..UnifiConfig::default()
    };
    let u = unifi::start(cfg).await.unwrap();
    assert!(u.url().starts_with("http://"));
    let http = client(None);
    let login =
        || http.post(format!("{}/api/auth/login", u.url())).json(&json!({"username": "admin", "password": "pw"}));
    let first = login().send().await.unwrap();
    assert_eq!(first.status().as_u16(), 200);
    let (s, b, _) =
        call(http.post(format!("{}/api/auth/login", u.url())).json(&json!({"username": "admin", "password": "x"})))
            .await;
    assert_eq!((s, b["meta"]["msg"].as_str()), (400, Some("api.err.Invalid")));
    let limited = login().send().await.unwrap();
    assert_eq!(limited.status().as_u16(), 429);
    assert!(limited.headers().get("retry-after").is_none(), "UniFi OS sends no Retry-After");

    let cookie = format!("TOKEN={}", set_cookie(&first, "TOKEN").unwrap());
    let csrf = first.headers()["x-csrf-token"].to_str().unwrap().to_string();
    let sites = format!("{}/self/sites", u.api_url());
    let (s, b, h) = call(http.get(&sites).header("cookie", &cookie).header("x-csrf-token", &csrf)).await;
    assert_eq!((s, b["data"][0]["name"].as_str()), (200, Some("default")));
    let next = h["x-updated-csrf-token"].to_str().unwrap().to_string();
    assert_ne!(next, csrf);
    let (s, _, _) = call(http.get(&sites).header("cookie", &cookie).header("x-csrf-token", &csrf)).await;
    assert_eq!(s, 403, "the replaced token no longer works");
    let (s, _, _) = call(http.get(&sites).header("cookie", &cookie).header("x-csrf-token", &next)).await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn credentials_are_generated_written_owner_only_and_never_in_debug_output() {
    let u = unifi::start(UnifiConfig::default()).await.unwrap();
    let debug = format!("{u:?}");
    assert!(!debug.contains(u.password().expose()) && !debug.contains(u.api_key().unwrap().expose()), "{debug}");
    let dir = tempfile::tempdir().unwrap();
    let files = u.write_credentials(dir.path()).unwrap();
    assert_eq!(files.len(), 4, "username, password, API key, CA");
    use std::os::unix::fs::PermissionsExt;
    for f in &files {
        assert_eq!(std::fs::metadata(f).unwrap().permissions().mode() & 0o777, 0o600, "{}", f.display());
    }
    assert_eq!(std::fs::read_to_string(&files[1]).unwrap(), u.password().expose());
    let classic_with_key = UnifiConfig { api_key: Some(Secret::new("k")), ..classic() };
    assert!(unifi::start(classic_with_key).await.unwrap_err().to_string().contains("UniFi OS only"));
}

/// Log in as `admin`/`pw`; returns the `Cookie` header and the CSRF token (UniFi OS).
async fn login(http: &reqwest::Client, u: &unifi::Unifi) -> (String, Option<String>) {
    let (path, name) = match u.style() {
        UnifiStyle::Classic => ("/api/login", "unifises"),
        UnifiStyle::UnifiOs => ("/api/auth/login", "TOKEN"),
    };
    let resp = http
        .post(format!("{}{path}", u.url()))
        .json(&json!({"username": "admin", "password": "pw"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let csrf = resp.headers().get("x-csrf-token").map(|v| v.to_str().unwrap().to_string());
    (format!("{name}={}", set_cookie(&resp, name).unwrap()), csrf)
}

/// `GET {api}/self/sites` with a session.
async fn sites(http: &reqwest::Client, u: &unifi::Unifi, session: &(String, Option<String>)) -> (u16, Value) {
    let mut req = http.get(format!("{}/self/sites", u.api_url())).header("cookie", &session.0);
    if let Some(csrf) = &session.1 {
        req = req.header("x-csrf-token", csrf);
    }
    let (s, b, _) = call(req).await;
    (s, b)
}

#[tokio::test]
async fn an_expired_session_gets_401_login_required_until_the_client_logs_in_again() {
    // STAND-INS.md: api.err.LoginRequired comes with 401 (log in again).
    let login_required = json!({"meta": {"rc": "error", "msg": "api.err.LoginRequired"}, "data": []});
    for cfg in [classic(), UnifiConfig { password: Some(Secret::new("pw")), ..UnifiConfig::default() }] {
        let u = unifi::start(cfg).await.unwrap();
        let http = client(u.ca_pem());
        assert_eq!(u.logins(), 0);
        let old = login(&http, &u).await;
        assert_eq!(u.logins(), 1);
        assert_eq!(sites(&http, &u, &old).await.0, 200, "{:?}", u.style());
        u.expire_sessions();
        for _ in 0..2 {
            assert_eq!(sites(&http, &u, &old).await, (401, login_required.clone()), "{:?}", u.style());
        }
        assert_eq!(u.logins(), 1, "a refused request is no login");
        let new = login(&http, &u).await;
        assert_eq!(u.logins(), 2);
        assert_ne!(new.0, old.0, "a new session");
        assert_eq!(sites(&http, &u, &new).await.0, 200, "{:?}", u.style());
        assert_eq!(sites(&http, &u, &old).await.0, 401, "the expired one stays expired");
    }
}

#[tokio::test]
async fn sessions_live_session_ttl_from_the_login_and_the_token_says_so() {
    let ttl = std::time::Duration::from_secs(2);
    let cfg = UnifiConfig {
        listen: Listen::loopback(),
        password: Some(Secret::new("pw")),
        session_ttl: Some(ttl),
        ..UnifiConfig::default()
    };
    let u = unifi::start(cfg).await.unwrap();
    let http = client(None);
    let session = login(&http, &u).await;
    // The TOKEN is JWT-shaped; real consoles put exp = iat + 2 h, the stand-in iat + ttl.
    use base64::Engine as _;
    let payload = session.0.trim_start_matches("TOKEN=").split('.').nth(1).unwrap();
    let claims: Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    assert_eq!(claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(), 2);
    assert_eq!(sites(&http, &u, &session).await.0, 200);
    tokio::time::sleep(ttl + std::time::Duration::from_millis(200)).await;
    let (s, b) = sites(&http, &u, &session).await;
    assert_eq!((s, b["meta"]["msg"].as_str()), (401, Some("api.err.LoginRequired")));
    let again = login(&http, &u).await;
    assert_eq!((sites(&http, &u, &again).await.0, u.logins()), (200, 2));

    // A zero lifetime: a controller that refuses every session right after its login.
    let cfg = UnifiConfig { session_ttl: Some(std::time::Duration::ZERO), ..classic() };
    let u = unifi::start(cfg).await.unwrap();
    let http = client(u.ca_pem());
    let session = login(&http, &u).await;
    assert_eq!(sites(&http, &u, &session).await.0, 401);
}
