//! UniFi reservations the way the Go clients make them (`POST group/user`, look-up
//! by `stat/user/{mac}`), and what a controller refuses: a fixed IP outside the
//! client's network, a MAC it has seen but does not list.
//!
//! Sources: `paultyng/go-unifi` 3ade17260bd421739cdc6d58f8cdaa7b230a3d9f
//! `unifi/user.go:12-29` (`GetUserByMAC`: `stat/user/{mac}`) and `:31-72`
//! (`CreateUser`: `group/user`, nested `meta`); `jamesbraid/go-unifi`
//! 6b108c1029f0be46213555fd30bba47c31a44be2
//! `unifi/behavior_probe_batch1_integration_test.go:17-22` (a fixed IP outside the
//! client's LAN is refused `api.err.InvalidFixedIP`, measured on a controller).

use cradle_sim::services::unifi::{self, UnifiConfig};
use cradle_sim::services::{Listen, Secret};
use serde_json::{Value, json};

use crate::client;

/// `method {api}/s/default/{path}` with the API key; returns (status, body).
async fn call(u: &unifi::Unifi, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let http = client(None);
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req =
        http.request(m, format!("{}/s/default/{path}", u.api_url())).header("x-api-key", u.api_key().unwrap().expose());
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn config() -> UnifiConfig {
    UnifiConfig { listen: Listen::loopback(), password: Some(Secret::new("pw")), ..UnifiConfig::default() }
}

#[tokio::test]
async fn a_fixed_ip_outside_the_clients_network_is_refused_invalid_fixed_ip() {
    // jamesbraid/go-unifi 6b108c1 unifi/behavior_probe_batch1_integration_test.go:17-22:
    // "A fixed_ip outside the client's LAN is refused as api.err.InvalidFixedIP".
    let u = unifi::start(config()).await.unwrap();
    let nid = u.networks()[0].id.clone();
    let outside = json!({"mac": "bc:24:11:00:00:01", "use_fixedip": true, "fixed_ip": "192.0.2.50", "network_id": nid});
    let (s, b) = call(&u, "POST", "rest/user", Some(outside.clone())).await;
    assert_eq!((s, b["meta"]["msg"].as_str()), (400, Some("api.err.InvalidFixedIP")));
    // Through group/user (paultyng/go-unifi unifi/user.go:52) the refusal is nested.
    let (s, b) = call(&u, "POST", "group/user", Some(json!({"objects": [{"data": outside}]}))).await;
    assert_eq!((s, b["meta"]["msg"].as_str()), (400, Some("api.err.InvalidFixedIP")));
    assert_eq!(b["data"][0]["meta"], json!({"rc": "error", "msg": "api.err.InvalidFixedIP"}));
    assert!(u.clients().is_empty(), "nothing was stored");
    let inside = json!({"mac": "bc:24:11:00:00:01", "use_fixedip": true, "fixed_ip": "127.77.0.50", "network_id": nid});
    let (_, b) = call(&u, "POST", "group/user", Some(json!({"objects": [{"data": inside}]}))).await;
    assert_eq!(b["data"][0]["data"][0]["fixed_ip"], "127.77.0.50");
}

#[tokio::test]
async fn a_client_only_seen_can_be_left_out_of_rest_user_but_stat_user_finds_it_and_a_create_is_mac_used() {
    // paultyng/go-unifi 3ade172 unifi/user.go:12-29: GetUserByMAC reads stat/user/{mac}.
    let u = unifi::start(UnifiConfig { list_seen_clients: false, ..config() }).await.unwrap();
    let offer = u.dhcp("default").request("BC:24:11:00:00:02", None, Some("early-boot"));
    assert!(offer.ip().is_some());
    let (_, listed) = call(&u, "GET", "rest/user", None).await;
    assert_eq!(listed["data"], json!([]), "not listed");
    let (s, seen) = call(&u, "GET", "stat/user/bc:24:11:00:00:02", None).await;
    assert_eq!((s, seen["data"][0]["mac"].as_str()), (200, Some("bc:24:11:00:00:02")));
    assert_eq!(seen["data"][0]["ip"].as_str(), offer.ip().map(|i| i.to_string()).as_deref());
    let nid = u.networks()[0].id.clone();
    let create = json!({"mac": "bc:24:11:00:00:02", "use_fixedip": true, "fixed_ip": "127.77.0.60", "network_id": nid});
    let (_, b) = call(&u, "POST", "group/user", Some(json!({"objects": [{"data": create}]}))).await;
    assert_eq!(b["data"][0]["meta"], json!({"rc": "error", "msg": "api.err.MacUsed"}));
    // Written over the API, it is listed.
    let id = seen["data"][0]["_id"].as_str().unwrap().to_string();
    let (s, _) =
        call(&u, "PUT", &format!("rest/user/{id}"), Some(json!({"mac": "bc:24:11:00:00:02", "name": "named"}))).await;
    assert_eq!(s, 200);
    assert_eq!(call(&u, "GET", "rest/user", None).await.1["data"].as_array().map(Vec::len), Some(1));
}
