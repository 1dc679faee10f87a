//! Technitium DNS stand-in: token auth, the `status` envelopes with HTTP 200, records
//! with overwrite, PTR and the exact error texts.

use cradle_sim::services::Secret;
use cradle_sim::services::technitium::{self, TechnitiumConfig};
use serde_json::Value;

use crate::client;

struct Dns {
    http: reqwest::Client,
    url: String,
}

impl Dns {
    /// A GET with query parameters and an optional bearer token; asserts HTTP 200.
    async fn get(&self, path: &str, bearer: Option<&str>, q: &[(&str, &str)]) -> Value {
        let mut req = self.http.get(format!("{}{path}", self.url)).query(q);
        if let Some(t) = bearer {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "every API answer is HTTP 200");
        resp.json().await.unwrap()
    }

    /// A POST with form data.
    async fn post(&self, path: &str, bearer: &str, form: &[(&str, &str)]) -> Value {
        let resp = self.http.post(format!("{}{path}", self.url)).bearer_auth(bearer).form(form).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        resp.json().await.unwrap()
    }
}

async fn start() -> (technitium::Technitium, Dns) {
    let cfg = TechnitiumConfig { password: Some(Secret::new("pw")), ..TechnitiumConfig::default() };
    let t = technitium::start(cfg).await.unwrap();
    let dns = Dns { http: client(t.ca_pem()), url: t.url() };
    (t, dns)
}

#[tokio::test]
async fn login_gives_a_session_token_and_errors_come_with_http_200() {
    let (t, dns) = start().await;
    let debug = format!("{t:?}");
    assert!(!debug.contains(t.api_token().expose()) && !debug.contains(t.password().expose()), "{debug}");
    let bad = dns.get("/api/user/login", None, &[("user", "admin"), ("pass", "no")]).await;
    assert_eq!(bad["status"], "error");
    assert_eq!(bad["errorMessage"], "Invalid username or password for user: admin");
    let missing = dns.get("/api/user/login", None, &[("user", "admin")]).await;
    assert_eq!(missing["errorMessage"], "Parameter 'pass' missing.");
    let ok = dns.get("/api/user/login", None, &[("user", "admin"), ("pass", "pw"), ("includeInfo", "true")]).await;
    assert_eq!((ok["status"].as_str(), ok["username"].as_str()), (Some("ok"), Some("admin")));
    assert!(ok.get("response").is_none(), "login answers without a `response` object");
    assert_eq!(ok["info"]["dnsServerDomain"], "dns.sim");
    let session = ok["token"].as_str().unwrap().to_string();

    // Bearer header or `token=`; anything else is invalid-token, still HTTP 200.
    let zones = dns.get("/api/zones/list", Some(&session), &[]).await;
    assert_eq!(
        (zones["status"].as_str(), zones["response"]["zones"][0]["name"].as_str()),
        (Some("ok"), Some("lab.example.com"))
    );
    let by_param = dns.get("/api/zones/list", None, &[("token", &session)]).await;
    assert_eq!(by_param["status"], "ok");
    for bearer in [None, Some("0000")] {
        let v = dns.get("/api/zones/list", bearer, &[]).await;
        assert_eq!(
            (v["status"].as_str(), v["errorMessage"].as_str()),
            (Some("invalid-token"), Some("Invalid token or session expired."))
        );
    }

    // createToken: with user/pass, or a session's Bearer; never from an API token.
    let created =
        dns.get("/api/user/createToken", None, &[("user", "admin"), ("pass", "pw"), ("tokenName", "ci")]).await;
    assert_eq!((created["tokenName"].as_str(), created["username"].as_str()), (Some("ci"), Some("admin")));
    let api_token = created["token"].as_str().unwrap().to_string();
    let from_session = dns.get("/api/user/createToken", Some(&session), &[("tokenName", "ci2")]).await;
    assert_eq!(from_session["status"], "ok");
    let denied = dns.get("/api/user/createToken", Some(&api_token), &[("tokenName", "x")]).await;
    assert_eq!(denied["errorMessage"], "Access was denied.");

    // Sessions expire; API tokens do not.
    t.expire_sessions();
    assert_eq!(dns.get("/api/zones/list", Some(&session), &[]).await["status"], "invalid-token");
    assert_eq!(dns.get("/api/zones/list", Some(&api_token), &[]).await["status"], "ok");
    assert_eq!(dns.get("/api/zones/list", Some(t.api_token().expose()), &[]).await["status"], "ok");
    // An unknown API path, authenticated: an empty 404.
    let resp = dns.http.get(format!("{}/api/nope", dns.url)).bearer_auth(&api_token).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let logout = dns.get("/api/user/logout", Some(&api_token), &[]).await;
    assert_eq!(logout["status"], "ok");
    assert_eq!(dns.get("/api/zones/list", Some(&api_token), &[]).await["status"], "invalid-token");
}

#[tokio::test]
async fn an_a_record_with_its_ptr_is_added_overwritten_moved_and_deleted() {
    let (t, dns) = start().await;
    let tok = t.api_token().expose().to_string();
    let name = "vm01.lab.example.com";
    let add = |ip: &'static str, extra: &'static [(&'static str, &'static str)]| {
        let mut form =
            vec![("domain", name), ("zone", "lab.example.com"), ("type", "A"), ("ipAddress", ip), ("ttl", "300")];
        form.extend_from_slice(extra);
        form
    };
    let v =
        dns.post("/api/zones/records/add", &tok, &add("192.0.2.10", &[("overwrite", "true"), ("ptr", "true")])).await;
    assert_eq!(
        (v["status"].as_str(), v["errorMessage"].as_str()),
        (Some("error"), Some("No reverse zone available to add PTR record."))
    );
    let v = dns
        .post(
            "/api/zones/records/add",
            &tok,
            &add("192.0.2.10", &[("overwrite", "true"), ("ptr", "true"), ("createPtrZone", "true")]),
        )
        .await;
    assert_eq!(v["status"], "ok", "{v}");
    let added = &v["response"]["addedRecord"];
    assert_eq!(
        (added["type"].as_str(), added["ttl"].as_u64(), added["rData"]["ipAddress"].as_str()),
        (Some("A"), Some(300), Some("192.0.2.10"))
    );
    assert_eq!(v["response"]["zone"]["name"], "lab.example.com");
    assert!(t.zones().contains(&"2.0.192.in-addr.arpa".to_string()), "createPtrZone made the /24 reverse zone");
    let ptr = t.records_at("10.2.0.192.in-addr.arpa");
    assert_eq!((ptr.len(), ptr[0].value.as_str()), (1, name));

    // Without overwrite a second address is appended; with it the RRset is replaced.
    assert_eq!(dns.post("/api/zones/records/add", &tok, &add("192.0.2.11", &[])).await["status"], "ok");
    let dup = dns.post("/api/zones/records/add", &tok, &add("192.0.2.11", &[])).await;
    assert_eq!(dup["errorMessage"], "Cannot add record: record already exists.");
    let got = dns.get("/api/zones/records/get", Some(&tok), &[("domain", name), ("zone", "lab.example.com")]).await;
    assert_eq!(got["response"]["records"].as_array().map(Vec::len), Some(2));
    assert_eq!(got["response"]["records"][0]["rData"]["ipAddress"], "192.0.2.10");
    let v =
        dns.post("/api/zones/records/add", &tok, &add("192.0.2.12", &[("overwrite", "true"), ("ptr", "true")])).await;
    assert_eq!(v["status"], "ok");
    let a: Vec<String> = t.records_at(name).into_iter().map(|r| r.value).collect();
    assert_eq!(a, vec!["192.0.2.12".to_string()]);
    assert_eq!(t.records_at("10.2.0.192.in-addr.arpa").len(), 1, "overwrite replaces the A RRset, not old PTRs");

    // Update moves the address and, with ptr, the PTR.
    let form = [("domain", name), ("type", "A"), ("value", "192.0.2.12"), ("newValue", "192.0.2.20"), ("ptr", "true")];
    let v = dns.post("/api/zones/records/update", &tok, &form).await;
    assert_eq!(v["response"]["updatedRecord"]["rData"]["ipAddress"], "192.0.2.20", "{v}");
    assert_eq!(t.records_at("20.2.0.192.in-addr.arpa")[0].value, name);
    assert!(t.records_at("12.2.0.192.in-addr.arpa").is_empty(), "the old PTR is gone");
    let v = dns.post("/api/zones/records/update", &tok, &form).await;
    assert_eq!(v["errorMessage"], "Cannot update record: the old record does not exists.");

    // Delete (GET with `value=`) also removes the PTR pointing back at the name.
    let del = [("domain", name), ("zone", "lab.example.com"), ("type", "A"), ("value", "192.0.2.20")];
    let v = dns.get("/api/zones/records/delete", Some(&tok), &del).await;
    assert_eq!((v["status"].as_str(), v["response"].as_object().map(|o| o.len())), (Some("ok"), Some(0)));
    assert!(t.records_at(name).is_empty() && t.records_at("20.2.0.192.in-addr.arpa").is_empty());
    let v = dns.get("/api/zones/records/delete", Some(&tok), &del).await;
    assert_eq!(v["errorMessage"], "Cannot delete record: no such record exists.");
    let v = dns.get("/api/zones/records/get", Some(&tok), &[("domain", "x.example.org")]).await;
    assert_eq!(v["errorMessage"], "No such zone was found: x.example.org");
    let v = dns.get("/api/zones/records/add", Some(&tok), &[("zone", "lab.example.com")]).await;
    assert_eq!(v["errorMessage"], "Parameter 'domain' missing.");
    let v = dns.get("/api/zones/records/add", Some(&tok), &[("domain", name), ("type", "A"), ("ipAddress", "x")]).await;
    assert_eq!(v["errorMessage"], "An invalid IP address was specified.");
}

#[tokio::test]
async fn zones_are_created_by_name_or_as_reverse_zones_from_a_cidr() {
    let (t, dns) = start().await;
    let tok = t.api_token().expose().to_string();
    let v = dns.get("/api/zones/create", Some(&tok), &[("zone", "other.example.com"), ("type", "Primary")]).await;
    assert_eq!(v["response"]["domain"], "other.example.com");
    let v = dns.get("/api/zones/create", Some(&tok), &[("zone", "other.example.com")]).await;
    assert_eq!(v["errorMessage"], "Zone already exists: other.example.com");
    let v = dns.get("/api/zones/create", Some(&tok), &[("zone", "198.51.100.0/24")]).await;
    assert_eq!(v["response"]["domain"], "100.51.198.in-addr.arpa");
    // The new zone has its SOA and NS; a record in it lands in the closest zone.
    let v =
        dns.get("/api/zones/records/get", Some(&tok), &[("domain", "other.example.com"), ("listZone", "true")]).await;
    let types: Vec<&str> =
        v["response"]["records"].as_array().unwrap().iter().filter_map(|r| r["type"].as_str()).collect();
    assert_eq!(types, vec!["NS", "SOA"]);
    let v = dns
        .get(
            "/api/zones/records/add",
            Some(&tok),
            &[("domain", "a.b.other.example.com"), ("type", "A"), ("value", "198.51.100.7"), ("ptr", "true")],
        )
        .await;
    assert_eq!(v["response"]["zone"]["name"], "other.example.com", "{v}");
    assert_eq!(t.records_at("7.100.51.198.in-addr.arpa")[0].value, "a.b.other.example.com");
}

#[tokio::test]
async fn overwriting_an_a_record_with_ptr_keeps_the_old_addresses_ptr_which_a_ptr_delete_removes() {
    // TechnitiumSoftware/DnsServer aa9044d DnsServerCore/WebServiceZonesApi.cs:3817-3853
    // (AddRecord, A with ptr: SetRecord on the new address's reverse name only) and
    // :4337-4343 (DeleteRecord, PTR: `ptrName` or `value`, that record only).
    let (t, dns) = start().await;
    let tok = t.api_token().expose().to_string();
    let name = "vm01.lab.example.com";
    for ip in ["192.0.2.10", "192.0.2.11"] {
        let form = [
            ("domain", name),
            ("type", "A"),
            ("ipAddress", ip),
            ("overwrite", "true"),
            ("ptr", "true"),
            ("createPtrZone", "true"),
        ];
        assert_eq!(dns.post("/api/zones/records/add", &tok, &form).await["status"], "ok");
    }
    assert_eq!(t.records_at(name).len(), 1, "one A record");
    assert_eq!(t.records_at("10.2.0.192.in-addr.arpa")[0].value, name, "the old PTR stays");
    assert_eq!(t.records_at("11.2.0.192.in-addr.arpa")[0].value, name);
    let other = [("domain", "10.2.0.192.in-addr.arpa"), ("type", "PTR"), ("ptrName", "someone.else")];
    let v = dns.post("/api/zones/records/delete", &tok, &other).await;
    assert_eq!(v["errorMessage"], "Cannot delete record: no such record exists.", "only the PTR named");
    let mine = [("domain", "10.2.0.192.in-addr.arpa"), ("type", "PTR"), ("ptrName", name)];
    assert_eq!(dns.post("/api/zones/records/delete", &tok, &mine).await["status"], "ok");
    assert!(t.records_at("10.2.0.192.in-addr.arpa").is_empty());
    let v = dns
        .post(
            "/api/zones/records/delete",
            &tok,
            &[("domain", "9.9.9.10.in-addr.arpa"), ("type", "PTR"), ("ptrName", name)],
        )
        .await;
    assert_eq!(v["errorMessage"], "No such zone was found: 9.9.9.10.in-addr.arpa");
}
