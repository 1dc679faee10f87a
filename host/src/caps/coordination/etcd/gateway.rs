//! A client of etcd's gRPC gateway: the etcd v3 API as JSON over HTTP(S) on
//! etcd's client URLs (`POST <endpoint>/v3/kv/range`, `/v3/kv/txn`,
//! `/v3/lease/grant`, ...), served by default by etcd 3.4 and later. cradle
//! speaks it instead of gRPC so that building cradle needs nothing but Rust:
//! a gRPC client's generated code needs `protoc` at build time.
//!
//! The shapes are those of etcd's `rpc.proto` through the gateway's JSON
//! mapping: keys and values are base64, int64 fields are decimal strings,
//! and fields at their zero value are left out of answers (`succeeded` false,
//! `TTL` 0, no `kvs`), so every field of an answer has a default. An error is
//! a non-2xx answer `{"error": text, "message": text, "code": gRPC code}`; the
//! lease keep-alive (a stream in gRPC) answers `{"result": ...}` or
//! `{"error": {"grpc_code": .., "message": ..}}`.
//!
//! Endpoints: a request goes to the endpoint that answered last. When that one
//! cannot be reached (connection refused, connect timeout, TLS handshake
//! refused) the next is tried, each once. Only a failure to connect moves on:
//! a request that reached etcd is never sent again, so a transaction is never
//! applied twice.
//!
//! Authentication: with a user, the token of `/v3/auth/authenticate` goes in
//! the `Authorization` header (registered with the redactor like every
//! secret). etcd expires an unused token (5 minutes by default): when it says
//! the token is invalid, the client authenticates again and repeats the
//! request once (etcd applied nothing it refused).
//!
//! Deadlines are the caller's ([`super::EtcdConn::block`]); the connect
//! timeout given to [`Client::new`] bounds one endpoint's connection only, so
//! the next endpoint can still be tried within the deadline.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use data_encoding::BASE64;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use crate::secrets::Secret;

/// gRPC's UNAUTHENTICATED: etcd's answer to an expired or unknown token.
const UNAUTHENTICATED: i64 = 16;

/// Why a request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// No endpoint could be reached, or the connection broke before the answer.
    #[error("{0}")]
    Transport(String),
    /// etcd answered with an error.
    #[error("etcd answered: {message} (gRPC code {code})")]
    Etcd {
        /// The gRPC status code.
        code: i64,
        /// etcd's message (`etcdserver: ...`).
        message: String,
    },
    /// Not an answer etcd's gateway gives.
    #[error("{0}")]
    Malformed(String),
}

/// TLS material for `https://` endpoints (PEM).
#[derive(Debug, Clone)]
pub struct Tls {
    /// The CA that signed etcd's certificate; the only CA trusted.
    pub ca: Vec<u8>,
    /// This node's client certificate and its key, for etcd's
    /// `--client-cert-auth`.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// A comparison of a transaction's guard (always `EQUAL`).
#[derive(Debug, Clone)]
pub enum Compare {
    /// The key's create revision is this (0: the key does not exist).
    CreateRevision(String, i64),
    /// The key's last modification revision is this.
    ModRevision(String, i64),
}

/// A request inside a transaction.
#[derive(Debug, Clone)]
pub enum Op {
    /// Put a value, bound to a lease unless the lease is 0.
    Put {
        /// The key.
        key: String,
        /// The value.
        value: Vec<u8>,
        /// The lease (0: none).
        lease: i64,
    },
    /// Delete the key.
    Delete(String),
    /// Read the key.
    Get(String),
}

/// One key as etcd stores it.
#[derive(Debug, Clone, Deserialize)]
pub struct KeyValue {
    /// The key.
    #[serde(deserialize_with = "base64")]
    pub key: Vec<u8>,
    /// The value (empty when left out).
    #[serde(default, deserialize_with = "base64")]
    pub value: Vec<u8>,
    /// The revision that created the key.
    #[serde(default, deserialize_with = "int64")]
    pub create_revision: i64,
    /// The revision of its last change.
    #[serde(default, deserialize_with = "int64")]
    pub mod_revision: i64,
    /// Its lease (0: none).
    #[serde(default, deserialize_with = "int64")]
    pub lease: i64,
}

#[derive(Debug, Default, Deserialize)]
struct Header {
    #[serde(default, deserialize_with = "int64")]
    revision: i64,
}

#[derive(Debug, Default, Deserialize)]
struct RangeAnswer {
    #[serde(default)]
    kvs: Vec<KeyValue>,
}

#[derive(Debug, Deserialize)]
struct OpAnswer {
    #[serde(default)]
    response_range: Option<RangeAnswer>,
}

/// The answer to a transaction.
#[derive(Debug, Deserialize)]
pub struct TxnAnswer {
    #[serde(default)]
    header: Header,
    /// Whether every comparison held (the success branch ran).
    #[serde(default)]
    pub succeeded: bool,
    #[serde(default)]
    responses: Vec<OpAnswer>,
}

impl TxnAnswer {
    /// The store's revision after the transaction: the create revision of a
    /// key the transaction created.
    pub fn revision(&self) -> i64 {
        self.header.revision
    }

    /// The keys read by the first [`Op::Get`] of the branch that ran.
    pub fn read(&self) -> &[KeyValue] {
        self.responses.iter().find_map(|r| r.response_range.as_ref()).map(|r| r.kvs.as_slice()).unwrap_or_default()
    }
}

#[derive(Debug, Deserialize)]
struct LeaseAnswer {
    #[serde(default, rename = "ID", deserialize_with = "int64")]
    id: i64,
    #[serde(default, rename = "TTL", deserialize_with = "int64")]
    ttl: i64,
    #[serde(default)]
    error: String,
}

#[derive(Debug, Deserialize)]
struct AuthAnswer {
    #[serde(default)]
    token: String,
}

/// An int64 of the JSON mapping: a decimal string (a number is accepted too).
fn int64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int64 {
        Text(String),
        Number(i64),
    }
    match Int64::deserialize(d)? {
        Int64::Text(s) => s.parse().map_err(serde::de::Error::custom),
        Int64::Number(n) => Ok(n),
    }
}

/// Bytes of the JSON mapping: base64 text.
fn base64<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = String::deserialize(d)?;
    BASE64.decode(text.as_bytes()).map_err(serde::de::Error::custom)
}

fn b64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// The end of the range of every key starting with `prefix`: the prefix with
/// its last byte below 0xff incremented (etcd's `WithPrefix`).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every key.
    vec![0]
}

impl Compare {
    fn to_json(&self) -> Value {
        match self {
            Compare::CreateRevision(key, rev) => json!({
                "result": "EQUAL", "target": "CREATE", "key": b64(key.as_bytes()), "create_revision": rev.to_string(),
            }),
            Compare::ModRevision(key, rev) => json!({
                "result": "EQUAL", "target": "MOD", "key": b64(key.as_bytes()), "mod_revision": rev.to_string(),
            }),
        }
    }
}

impl Op {
    fn to_json(&self) -> Value {
        match self {
            Op::Put { key, value, lease } => {
                let mut put = json!({ "key": b64(key.as_bytes()), "value": b64(value) });
                if *lease != 0 {
                    put["lease"] = json!(lease.to_string());
                }
                json!({ "request_put": put })
            }
            Op::Delete(key) => json!({ "request_delete_range": { "key": b64(key.as_bytes()) } }),
            Op::Get(key) => json!({ "request_range": { "key": b64(key.as_bytes()) } }),
        }
    }
}

/// The text of `e` and of its sources (reqwest's own says little: "error
/// sending request").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = s.source();
    }
    text
}

/// The error of a gateway answer: `{"code", "message"|"error"}`, or a
/// stream's `{"error": {"grpc_code", "message"}}`.
fn etcd_error(v: &Value) -> Option<Error> {
    let (code, message) = match v.get("error") {
        Some(Value::Object(e)) => (e.get("grpc_code")?.as_i64()?, e.get("message")?.as_str()?),
        _ => (v.get("code")?.as_i64()?, v.get("message").or_else(|| v.get("error"))?.as_str()?),
    };
    Some(Error::Etcd { code, message: message.to_string() })
}

/// A client of the gateway; clones share the connections.
#[derive(Clone)]
pub struct Client(Arc<Inner>);

struct Inner {
    http: reqwest::Client,
    /// Without a trailing `/`.
    endpoints: Vec<String>,
    /// The endpoint that answered last.
    current: AtomicUsize,
    login: Option<(String, Secret)>,
    token: Mutex<Option<Secret>>,
    /// `https://` endpoints.
    https: bool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("endpoints", &self.0.endpoints).finish_non_exhaustive()
    }
}

impl Client {
    /// A client of `endpoints` (URLs, all `http://` or all `https://` with
    /// `tls`), logging in as `login` when given ([`Client::authenticate`]
    /// fetches the first token). Nothing is sent yet.
    pub fn new(
        endpoints: &[String],
        tls: Option<Tls>,
        login: Option<(String, Secret)>,
        connect_timeout: Duration,
    ) -> Result<Client, String> {
        if endpoints.is_empty() {
            return Err("no endpoints".into());
        }
        // No proxy: etcd is reached directly, as a gRPC client would.
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .no_proxy()
            .connect_timeout(connect_timeout)
            .tcp_keepalive(Duration::from_secs(5))
            .user_agent(concat!("cradle/", env!("CARGO_PKG_VERSION")));
        if let Some(tls) = tls {
            let ca =
                reqwest::Certificate::from_pem(&tls.ca).map_err(|e| format!("the CA certificate: {}", chain(&e)))?;
            builder = builder.tls_built_in_root_certs(false).add_root_certificate(ca);
            if let Some((cert, key)) = tls.identity {
                let pem = [cert.as_slice(), b"\n", key.as_slice()].concat();
                let identity = reqwest::Identity::from_pem(&pem)
                    .map_err(|e| format!("the client certificate and key: {}", chain(&e)))?;
                builder = builder.identity(identity);
            }
        }
        let http = builder.build().map_err(|e| chain(&e))?;
        Ok(Client(Arc::new(Inner {
            http,
            endpoints: endpoints.iter().map(|e| e.trim_end_matches('/').to_string()).collect(),
            current: AtomicUsize::new(0),
            login,
            token: Mutex::new(None),
            https: endpoints.iter().any(|e| e.starts_with("https://")),
        })))
    }

    /// Log in with the client's user and password and keep the token; a
    /// no-op without a user. A wrong password is etcd's error (the password
    /// itself is never in it).
    pub async fn authenticate(&self) -> Result<(), Error> {
        let Some((user, password)) = &self.0.login else { return Ok(()) };
        let body = json!({ "name": user, "password": password.expose() });
        let answer: AuthAnswer = decode(self.exchange("/v3/auth/authenticate", &body, None).await?)?;
        if answer.token.is_empty() {
            return Err(Error::Malformed("etcd accepted the user but sent no token".into()));
        }
        *self.0.token.lock().unwrap_or_else(|e| e.into_inner()) = Some(Secret::new(answer.token));
        Ok(())
    }

    /// Test hook: replace the token, as etcd expiring it would.
    #[cfg(test)]
    pub(crate) fn set_token(&self, token: &str) {
        *self.0.token.lock().unwrap_or_else(|e| e.into_inner()) = Some(Secret::new(token.to_string()));
    }

    /// The value of `key`, if any.
    pub async fn get(&self, key: &str) -> Result<Option<KeyValue>, Error> {
        let answer: RangeAnswer = self.post("/v3/kv/range", &json!({ "key": b64(key.as_bytes()) })).await?;
        Ok(answer.kvs.into_iter().next())
    }

    /// Every key starting with `prefix`, in key order.
    pub async fn get_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>, Error> {
        let body = json!({ "key": b64(prefix.as_bytes()), "range_end": b64(&prefix_end(prefix.as_bytes())) });
        let answer: RangeAnswer = self.post("/v3/kv/range", &body).await?;
        Ok(answer.kvs)
    }

    /// A transaction: `success` if every comparison holds, else `failure`.
    pub async fn txn(&self, compare: &[Compare], success: &[Op], failure: &[Op]) -> Result<TxnAnswer, Error> {
        let body = json!({
            "compare": compare.iter().map(Compare::to_json).collect::<Vec<_>>(),
            "success": success.iter().map(Op::to_json).collect::<Vec<_>>(),
            "failure": failure.iter().map(Op::to_json).collect::<Vec<_>>(),
        });
        self.post("/v3/kv/txn", &body).await
    }

    /// A new lease of `ttl_s` seconds: its id.
    pub async fn lease_grant(&self, ttl_s: i64) -> Result<i64, Error> {
        let answer: LeaseAnswer = self.post("/v3/lease/grant", &json!({ "TTL": ttl_s.to_string() })).await?;
        match answer.id {
            0 if answer.error.is_empty() => Err(Error::Malformed("etcd granted a lease without an id".into())),
            0 => Err(Error::Etcd { code: 0, message: answer.error }),
            id => Ok(id),
        }
    }

    /// End a lease now; its keys are deleted.
    pub async fn lease_revoke(&self, id: i64) -> Result<(), Error> {
        self.post::<Value>("/v3/lease/revoke", &json!({ "ID": id.to_string() })).await.map(|_| ())
    }

    /// Renew a lease once: the TTL it has again, 0 when it no longer exists.
    pub async fn lease_keep_alive(&self, id: i64) -> Result<i64, Error> {
        let answer: Value = self.post("/v3/lease/keepalive", &json!({ "ID": id.to_string() })).await?;
        match answer.get("result") {
            Some(result) => Ok(decode::<LeaseAnswer>(result.clone())?.ttl),
            None => Err(etcd_error(&answer)
                .unwrap_or_else(|| Error::Malformed(format!("a keep-alive answer without a result: {answer}")))),
        }
    }

    /// The seconds a lease has left; -1 when it no longer exists.
    pub async fn lease_time_to_live(&self, id: i64) -> Result<i64, Error> {
        let answer: LeaseAnswer = self.post("/v3/lease/timetolive", &json!({ "ID": id.to_string() })).await?;
        Ok(answer.ttl)
    }

    /// POST `body` to `path` and decode the answer; authenticates again
    /// once when etcd says the token is invalid.
    pub(crate) async fn post<T: DeserializeOwned>(&self, path: &str, body: &Value) -> Result<T, Error> {
        let mut renewed = false;
        loop {
            let token = self.0.token.lock().unwrap_or_else(|e| e.into_inner()).clone();
            match self.exchange(path, body, token.as_ref()).await {
                Err(Error::Etcd { code: UNAUTHENTICATED, .. }) if self.0.login.is_some() && !renewed => {
                    renewed = true;
                    self.authenticate().await?;
                }
                answer => return decode(answer?),
            }
        }
    }

    /// One request, to the first endpoint that can be reached.
    async fn exchange(&self, path: &str, body: &Value, token: Option<&Secret>) -> Result<Value, Error> {
        let endpoints = &self.0.endpoints;
        let first = self.0.current.load(Ordering::Relaxed);
        let mut unreachable = Vec::new();
        for i in 0..endpoints.len() {
            let at = (first + i) % endpoints.len();
            let mut request = self.0.http.post(format!("{}{path}", endpoints[at])).json(body);
            if let Some(token) = token {
                let mut value = reqwest::header::HeaderValue::from_str(token.expose())
                    .map_err(|_| Error::Malformed("etcd sent an auth token that is not a header value".into()))?;
                value.set_sensitive(true);
                request = request.header(reqwest::header::AUTHORIZATION, value);
            }
            let response = match request.send().await {
                Ok(r) => r,
                Err(e) if e.is_connect() => {
                    unreachable.push(chain(&e));
                    continue;
                }
                Err(e) => return Err(Error::Transport(chain(&e))),
            };
            self.0.current.store(at, Ordering::Relaxed);
            let status = response.status();
            let bytes = response.bytes().await.map_err(|e| Error::Transport(chain(&e)))?;
            return answer(&endpoints[at], path, status, &bytes).map_err(|e| self.explain(e));
        }
        Err(Error::Transport(format!("no endpoint could be reached: {}", unreachable.join("; "))))
    }
}

impl Client {
    /// `e`, with the likely cause when etcd's gateway could not reach etcd's
    /// own gRPC server over TLS (UNAVAILABLE without an `etcdserver:`
    /// message): the gateway presents etcd's server certificate as its
    /// client certificate, refused under `--client-cert-auth` unless the
    /// certificate also allows client authentication.
    fn explain(&self, e: Error) -> Error {
        match e {
            Error::Etcd { code: 14, message } if self.0.https && !message.starts_with("etcdserver:") => Error::Etcd {
                code: 14,
                message: format!(
                    "{message}; etcd's gRPC gateway could not reach etcd itself: with --client-cert-auth, \
                     etcd's server certificate needs the clientAuth extended key usage as well as serverAuth \
                     (etcd logs `bad certificate`)"
                ),
            },
            e => e,
        }
    }
}

/// The JSON of an answer, or its error.
fn answer(endpoint: &str, path: &str, status: reqwest::StatusCode, bytes: &[u8]) -> Result<Value, Error> {
    let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
        return Err(Error::Malformed(format!(
            "{endpoint}{path} answered HTTP {status} with {text:?}, not JSON: is it an etcd (3.4 or later) client URL?"
        )));
    };
    if status.is_success() {
        return Ok(v);
    }
    Err(etcd_error(&v).unwrap_or_else(|| Error::Malformed(format!("{endpoint}{path} answered HTTP {status}: {v}"))))
}

fn decode<T: DeserializeOwned>(v: Value) -> Result<T, Error> {
    serde_json::from_value(v).map_err(|e| Error::Malformed(format!("an answer etcd's gateway does not give: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_range_ends_after_the_last_key_with_the_prefix() {
        assert_eq!(prefix_end(b"cradle/"), b"cradle0");
        assert_eq!(prefix_end(b"a\xff\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }

    #[test]
    fn answers_decode_with_int64_as_text_base64_bytes_and_zero_values_left_out() {
        let v = json!({
            "header": { "revision": "7" },
            "responses": [{ "response_range": { "kvs": [{ "key": "azE=", "create_revision": "2", "lease": "99" }] } }],
        });
        let txn: TxnAnswer = decode(v).expect("txn");
        assert!(!txn.succeeded, "left out: false");
        assert_eq!(txn.revision(), 7);
        let kv = &txn.read()[0];
        assert_eq!(
            (kv.key.as_slice(), kv.value.as_slice(), kv.create_revision, kv.lease),
            (&b"k1"[..], &b""[..], 2, 99)
        );
        let lease: LeaseAnswer = decode(json!({ "ID": "5" })).expect("lease");
        assert_eq!((lease.id, lease.ttl), (5, 0));
    }

    #[test]
    fn gateway_errors_name_etcds_message_and_code_in_both_forms() {
        let unary = json!({ "error": "etcdserver: invalid auth token", "message": "etcdserver: invalid auth token", "code": 16 });
        assert!(matches!(etcd_error(&unary), Some(Error::Etcd { code: 16, .. })));
        let stream = json!({ "error": { "grpc_code": 5, "http_code": 404, "message": "etcdserver: requested lease not found" } });
        let err = etcd_error(&stream).expect("stream error").to_string();
        assert!(err.contains("requested lease not found") && err.contains("code 5"), "{err}");
        let not_json = answer("http://e:2379", "/v3/kv/range", reqwest::StatusCode::NOT_FOUND, b"404 page not found");
        let err = not_json.expect_err("not etcd").to_string();
        assert!(err.contains("http://e:2379/v3/kv/range") && err.contains("etcd"), "{err}");
    }
}
