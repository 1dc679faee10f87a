//! The `http` capability: requests to named endpoints only.
//!
//! The operator maps an alias to a base URL and a credential in `[endpoints]`;
//! the host resolves the credential when first needed and attaches it, so the
//! plugin never sees it. Any HTTP status is a response. Failure modes: an
//! endpoint not in `[endpoints]`, or a path, header or URL the rules below
//! refuse, is `invalid`; a body over 16 MiB is `failed`; a timeout or a
//! refused connection is `transient`, any other transport error `failed`.
//! Confinement:
//! - The path is percent-decoded segment by segment before it is checked: no
//!   `.`/`..` segment (`/%2e%2e/` included), no encoded `/` or `\`, no control
//!   characters, no `?`/`#` (query parameters go in `query`). The final URL's
//!   path must still lie below the endpoint's base path.
//! - Headers that carry credentials or steer the connection are refused:
//!   `authorization`, `proxy-authorization`, `x-api-key`, `cookie`, `host`,
//!   the hop-by-hop headers, `expect` and `content-length`/`transfer-encoding`
//!   ([`FORBIDDEN_HEADERS`]).
//! - Redirects are followed only within the endpoint (same scheme, host and
//!   port, below the base path; at most 5). Any other redirect is handed to
//!   the plugin as the 3xx response it is, so the credential never reaches
//!   another origin and no other origin's response comes back.
//! - Each request is bounded by a timeout of at most 60 s, clamped to the time
//!   left on the plugin call ([`crate::caps::context::CapCtx::clamp_timeout`]).
//!
//! A health probe ([`probe`], `http::probe` in workflows) is the one request
//! to no named endpoint: a `GET` of an `http`/`https` URL at one of the run's
//! guests (the policy checks its host and port against the VMs of the call
//! and `http.guest_ports`), without credentials, proxies or redirects
//! followed (a 3xx is an answer), whose status alone is returned (the body is
//! never read). A refused connection or a timeout is `transient`.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::contract::bindings::cradle::host::http::{Method, Request, Response};
use crate::contract::bindings::cradle::host::types::Entry;
use crate::contract::{CapError, ErrorKind};
use crate::secrets::{Secret, SecretError};

mod config;
mod host;
pub(crate) mod rhai;
pub mod scope;
mod unifi;

pub use config::{EndpointAuth, EndpointConfig};

/// Largest response body handed to a plugin.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// Redirects followed within an endpoint, at most.
const MAX_REDIRECTS: usize = 5;

/// Request headers a plugin may not set: credentials (the host attaches them),
/// the target host, hop-by-hop headers (RFC 9110 §7.6.1) and framing.
pub const FORBIDDEN_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "cookie",
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "expect",
];

/// The configured endpoints and one shared HTTP client.
#[derive(Debug, Clone, Default)]
pub struct Endpoints {
    map: Arc<BTreeMap<String, Endpoint>>,
}

#[derive(Debug)]
struct Endpoint {
    config: EndpointConfig,
    /// The credential, resolved once (a failure is kept too).
    token: OnceLock<Result<Secret, SecretError>>,
    client: OnceLock<reqwest::Client>,
    /// The UniFi session of `auth = "unifi-login"`; held while a request is
    /// sent, since a rotated CSRF token retires the one before it.
    session: tokio::sync::Mutex<Option<unifi::Session>>,
}

/// A request to named endpoint `endpoint` as the typed providers send them:
/// the body, if any, as JSON with its `content-type`; `accept:
/// application/json` when `accept_json` (NetBox answers HTML without it on
/// some paths).
pub(crate) fn json_request(
    endpoint: &str,
    method: Method,
    path: String,
    query: Vec<Entry>,
    body: Option<&serde_json::Value>,
    accept_json: bool,
) -> Request {
    let mut headers = Vec::new();
    if accept_json {
        headers.push(Entry { key: "accept".into(), value: "application/json".into() });
    }
    if body.is_some() {
        headers.push(Entry { key: "content-type".into(), value: "application/json".into() });
    }
    Request {
        endpoint: endpoint.to_string(),
        method,
        path,
        query,
        headers,
        body: body.map(|b| b.to_string().into_bytes()),
    }
}

impl Endpoints {
    /// Endpoints from `[endpoints]`.
    pub fn new(config: &BTreeMap<String, EndpointConfig>) -> Endpoints {
        let map = config
            .iter()
            .map(|(k, v)| {
                let ep = Endpoint {
                    config: v.clone(),
                    token: OnceLock::new(),
                    client: OnceLock::new(),
                    session: tokio::sync::Mutex::new(None),
                };
                (k.clone(), ep)
            })
            .collect();
        Endpoints { map: Arc::new(map) }
    }

    /// [`send`](Self::send) for a typed provider (`[dhcp.NAME]`, `[post.NAME]`,
    /// `[dns.NAME]`): a failure to reach the endpoint names the provider's
    /// section and the endpoint, so the operator knows which table to fix.
    pub(crate) async fn send_for(&self, section: &str, req: Request, timeout: Duration) -> Result<Response, CapError> {
        let endpoint = req.endpoint.clone();
        self.send(req, timeout)
            .await
            .map_err(|e| CapError::new(e.kind, format!("{section} (endpoint `{endpoint}`): {}", e.message)))
    }

    pub(crate) async fn send(&self, req: Request, timeout: Duration) -> Result<Response, CapError> {
        let ep = self
            .map
            .get(&req.endpoint)
            .ok_or_else(|| CapError::invalid(format!("endpoint `{}` is not defined in [endpoints]", req.endpoint)))?;
        check_path(&req.path)?;
        if let Some(h) = req.headers.iter().find(|h| FORBIDDEN_HEADERS.iter().any(|f| h.key.eq_ignore_ascii_case(f))) {
            return Err(CapError::invalid(format!(
                "header `{}` may not be set by a plugin (credentials are attached by the host; hop-by-hop, host and framing headers are the host's)",
                h.key
            )));
        }
        let base = reqwest::Url::parse(&ep.config.url).map_err(|e| {
            CapError::failed(format!("endpoint `{}`: base URL `{}` is not a URL: {e}", req.endpoint, ep.config.url))
        })?;
        let client = match ep.client.get() {
            Some(c) => c,
            None => {
                let mut builder = reqwest::Client::builder().redirect(same_endpoint_redirects(base.clone()));
                if let Some(ca) = &ep.config.ca_file {
                    let pem = std::fs::read(ca).map_err(|e| {
                        CapError::failed(format!(
                            "endpoint `{}`: cannot read ca_file {}: {e}",
                            req.endpoint,
                            ca.display()
                        ))
                    })?;
                    let cert = reqwest::Certificate::from_pem(&pem).map_err(|e| {
                        CapError::failed(format!("endpoint `{}`: ca_file {}: {e}", req.endpoint, ca.display()))
                    })?;
                    builder = builder.add_root_certificate(cert);
                }
                let built = builder.build().map_err(|e| {
                    CapError::failed(format!("endpoint `{}`: cannot build an HTTP client: {e}", req.endpoint))
                })?;
                ep.client.get_or_init(|| built)
            }
        };
        let url = format!("{}{}", ep.config.url.trim_end_matches('/'), req.path);
        let parsed = reqwest::Url::parse(&url)
            .map_err(|e| CapError::invalid(format!("path `{}` does not make a valid URL: {e}", req.path)))?;
        if !below(&base, &parsed) {
            return Err(CapError::invalid(format!("path `{}` must stay below the endpoint's base URL", req.path)));
        }
        let method = match req.method {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Patch => reqwest::Method::PATCH,
            Method::Delete => reqwest::Method::DELETE,
        };
        let mut builder = client
            .request(method, parsed)
            .timeout(timeout)
            .query(&req.query.iter().map(|e| (&e.key, &e.value)).collect::<Vec<_>>());
        for h in &req.headers {
            builder = builder.header(&h.key, &h.value);
        }
        let token = match &ep.config.token {
            Some(token_ref) => Some(
                ep.token
                    .get_or_init(|| token_ref.resolve())
                    .as_ref()
                    .map_err(|e| CapError::failed(format!("endpoint `{}`: {e}", req.endpoint)))?,
            ),
            None => None,
        };
        if let Some(token) = token {
            builder = match ep.config.auth {
                EndpointAuth::Bearer => builder.bearer_auth(token.expose()),
                EndpointAuth::Token => builder.header("authorization", format!("Token {}", token.expose())),
                EndpointAuth::ApiKey => builder.header("x-api-key", token.expose()),
                EndpointAuth::UnifiLogin => builder,
            };
        }
        if let Some(body) = req.body {
            builder = builder.body(body);
        }
        let session = ep.config.auth == EndpointAuth::UnifiLogin;
        let (status, headers, body) = if session {
            send_unifi(ep, client, &base, builder, token, &req.endpoint).await?
        } else {
            let resp = builder.send().await.map_err(|e| transport_error(&req.endpoint, &e))?;
            let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
            (status, headers, read_body(resp, &req.endpoint).await?)
        };
        let headers = headers
            .iter()
            .filter(|(k, _)| !(session && unifi::SESSION_HEADERS.contains(&k.as_str())))
            .map(|(k, v)| Entry { key: k.to_string(), value: String::from_utf8_lossy(v.as_bytes()).into_owned() })
            .collect();
        Ok(Response { status, headers, body })
    }
}

/// The body of `resp`, at most [`MAX_BODY`] bytes. Refused before reading
/// when the server says it is too big, and reading stops at the cap when it
/// does not: the host never buffers more than MAX_BODY (plus one chunk) of a
/// hostile or broken server.
async fn read_body(mut resp: reqwest::Response, endpoint: &str) -> Result<Vec<u8>, CapError> {
    let too_big = || CapError::failed(format!("endpoint `{endpoint}`: response body over {MAX_BODY} bytes"));
    if resp.content_length().is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_big());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| transport_error(endpoint, &e))? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(too_big());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Send `builder` with the endpoint's UniFi session, logging in first when
/// there is none, and once more after a `401` (an expired session) or a `403
/// Invalid CSRF Token` (a CSRF token the controller retired).
async fn send_unifi(
    ep: &Endpoint,
    client: &reqwest::Client,
    base: &reqwest::Url,
    builder: reqwest::RequestBuilder,
    password: Option<&Secret>,
    name: &str,
) -> Result<(u16, reqwest::header::HeaderMap, Vec<u8>), CapError> {
    let missing = |what: &str| CapError::failed(format!("endpoint `{name}`: auth = \"unifi-login\" needs {what}"));
    let password = password.ok_or_else(|| missing("`token` (the password, as a secret reference)"))?;
    let username = ep.config.username.as_deref().ok_or_else(|| missing("`username`"))?;
    let mut session = ep.session.lock().await;
    let mut refused = "401";
    for attempt in 0..2 {
        if session.is_none() {
            *session = Some(unifi::Session::login(client, name, base, username, password).await?);
        }
        let request =
            builder.try_clone().ok_or_else(|| CapError::failed(format!("endpoint `{name}`: cannot resend")))?;
        let current = session.as_mut().ok_or_else(|| missing("a session"))?;
        let resp = current.attach(request).send().await.map_err(|e| transport_error(name, &e))?;
        let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
        current.update(&headers);
        let body = read_body(resp, name).await?;
        let csrf = unifi::csrf_refused(status, &body);
        if status == 401 || csrf {
            // One new login per request: a session refused right after its
            // login is the controller's problem (the account's role, a
            // clock), not something another login fixes.
            refused = if csrf { "403 Invalid CSRF Token" } else { "401" };
            if attempt == 0 {
                *session = None;
                continue;
            }
            break;
        }
        return Ok((status, headers, body));
    }
    Err(CapError::failed(format!(
        "endpoint `{name}`: UniFi answered {refused} right after a new login: check the account's role on the controller \
         and that the controller's clock is right"
    )))
}

/// A health probe's URL: `http` or `https`, with a host and no user or
/// password (a probe carries no credentials).
pub(crate) fn probe_url(url: &str) -> Result<reqwest::Url, CapError> {
    let parsed =
        reqwest::Url::parse(url).map_err(|e| CapError::invalid(format!("health URL `{url}` is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(CapError::invalid(format!("health URL `{url}`: only http and https are probed")));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(CapError::invalid(format!("health URL `{url}` names no host")));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(CapError::invalid(format!(
            "health URL `{url}`: a probe sends no credentials; remove the user and password"
        )));
    }
    Ok(parsed)
}

/// `GET url` once: the status of the answer (any status; redirects are not
/// followed). No proxy, no credentials, no idle connection kept; the body is
/// not read. A refused connection or a timeout is `transient`.
pub(crate) async fn probe(url: reqwest::Url, timeout: Duration) -> Result<u16, CapError> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    let client = match CLIENT.get() {
        Some(c) => c,
        None => {
            let built = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .pool_max_idle_per_host(0)
                .build()
                .map_err(|e| CapError::failed(format!("cannot build an HTTP client for health probes: {e}")))?;
            CLIENT.get_or_init(|| built)
        }
    };
    let resp = client.get(url.clone()).timeout(timeout).send().await.map_err(|e| {
        let kind = if e.is_timeout() || e.is_connect() { ErrorKind::Transient } else { ErrorKind::Failed };
        CapError::new(kind, format!("GET {url}: {e}"))
    })?;
    Ok(resp.status().as_u16())
}

/// Check a request path before it is appended to the base URL: it starts
/// with `/`, and no segment, once percent-decoded, is `.` or `..` or holds a
/// `/`, `\\`, control character or invalid UTF-8; no `?` or `#`.
fn check_path(path: &str) -> Result<(), CapError> {
    let bad = |why: &str| CapError::invalid(format!("path `{path}` {why}; it must stay below the endpoint"));
    let Some(rest) = path.strip_prefix('/') else {
        return Err(bad("does not start with `/`"));
    };
    if path.contains(['?', '#']) {
        return Err(bad("contains `?` or `#` (pass query parameters in `query`)"));
    }
    for segment in rest.split('/') {
        let decoded = urlencoding::decode(segment).map_err(|_| bad("is not valid UTF-8 once percent-decoded"))?;
        if decoded == "." || decoded == ".." {
            return Err(bad("has a `.` or `..` segment (encoded or not)"));
        }
        if decoded.contains(['/', '\\']) || decoded.chars().any(char::is_control) {
            return Err(bad("has an encoded `/`, a `\\` or a control character"));
        }
    }
    Ok(())
}

/// Whether `url` lies within the endpoint `base`: same scheme, host and port,
/// and a path at or below the base path.
fn below(base: &reqwest::Url, url: &reqwest::Url) -> bool {
    let base_path = base.path().trim_end_matches('/');
    url.scheme() == base.scheme()
        && url.host_str() == base.host_str()
        && url.port_or_known_default() == base.port_or_known_default()
        && (url.path() == base_path || url.path().starts_with(&format!("{base_path}/")))
}

/// Follow a redirect only within the endpoint; stop at any other (the plugin
/// gets the 3xx response), so credentials never travel to another origin.
fn same_endpoint_redirects(base: reqwest::Url) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() >= MAX_REDIRECTS || !below(&base, attempt.url()) {
            attempt.stop()
        } else {
            attempt.follow()
        }
    })
}

fn transport_error(endpoint: &str, e: &reqwest::Error) -> CapError {
    // reqwest errors name the URL, never the headers, so the credential stays out.
    let kind = if e.is_timeout() || e.is_connect() { ErrorKind::Transient } else { ErrorKind::Failed };
    CapError::new(kind, format!("endpoint `{endpoint}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ordinary_path_passes() {
        for p in ["/", "/api/dcim/devices/", "/a%20b/c", "/v1/items/42"] {
            assert!(check_path(p).is_ok(), "{p}");
        }
    }

    #[test]
    fn encoded_dot_segments_are_refused() {
        for p in ["/%2e%2e/%2e%2e/admin", "/%2E%2e/x", "/a/%2e/b", "/../x", "/a/.."] {
            assert!(check_path(p).unwrap_err().message.contains("`.` or `..`"), "{p}");
        }
    }

    #[test]
    fn encoded_slashes_backslashes_and_controls_are_refused() {
        for p in ["/a%2f..%2fadmin", "/a%5c..", "/a%0d%0aHost:%20x", "/a\\b"] {
            assert!(check_path(p).is_err(), "{p}");
        }
    }

    #[test]
    fn a_query_or_fragment_in_the_path_is_refused() {
        assert!(check_path("/x?y=/../admin").unwrap_err().message.contains("`?` or `#`"));
        assert!(check_path("/x#frag").is_err());
        assert!(check_path("relative").is_err());
    }

    #[test]
    fn only_urls_below_the_base_are_within_the_endpoint() {
        let base = reqwest::Url::parse("http://127.0.0.1:8080/base").expect("url");
        let within = |u: &str| below(&base, &reqwest::Url::parse(u).expect("url"));
        assert!(within("http://127.0.0.1:8080/base/x"));
        assert!(within("http://127.0.0.1:8080/base"));
        assert!(!within("http://127.0.0.1:8080/basement"));
        assert!(!within("http://127.0.0.1:8080/admin"));
        assert!(!within("http://127.0.0.1:8081/base/x"), "another port is another origin");
        assert!(!within("https://127.0.0.1:8080/base/x"));
        assert!(!within("http://localhost:8080/base/x"));
    }

    /// Serve one connection with `head`, then `body_len` bytes of `x` in
    /// 64 KiB chunks; returns the endpoints and how many body bytes the
    /// server managed to write before the client hung up.
    async fn serve_once(head: String, body_len: usize) -> (Endpoints, tokio::task::JoinHandle<usize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.expect("accept");
            let mut buf = [0u8; 4096];
            let _ = sock.read(&mut buf).await;
            if sock.write_all(head.as_bytes()).await.is_err() {
                return 0;
            }
            let chunk = vec![b'x'; 64 * 1024];
            let mut sent = 0;
            while sent < body_len {
                if sock.write_all(&chunk).await.is_err() {
                    break;
                }
                sent += chunk.len();
            }
            sent
        });
        let cfg = EndpointConfig { url, token: None, auth: EndpointAuth::Bearer, ca_file: None, username: None };
        (Endpoints::new(&BTreeMap::from([("big".to_string(), cfg)])), server)
    }

    fn get() -> Request {
        Request {
            endpoint: "big".into(),
            method: Method::Get,
            path: "/".into(),
            query: vec![],
            headers: vec![],
            body: None,
        }
    }

    #[tokio::test]
    async fn a_body_announced_over_the_cap_is_refused_before_it_is_read() {
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", 1u64 << 40);
        let (eps, server) = serve_once(head, 0).await;
        let err = eps.send(get(), Duration::from_secs(10)).await.expect_err("too big");
        assert!(err.message.contains("response body over"), "{}", err.message);
        server.abort();
    }

    #[tokio::test]
    async fn an_unannounced_body_stops_being_read_at_the_cap() {
        let head = "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_string();
        let (eps, server) = serve_once(head, 64 * MAX_BODY).await;
        let err = eps.send(get(), Duration::from_secs(60)).await.expect_err("too big");
        assert!(err.message.contains("response body over"), "{}", err.message);
        let sent = server.await.expect("server");
        assert!(sent < 4 * MAX_BODY, "the host kept reading: {sent} bytes sent");
    }

    #[test]
    fn a_health_url_is_http_or_https_with_a_host_and_no_credentials() {
        for ok in ["http://127.0.0.1:8123/", "https://ha.lab/api/", "http://[::1]:8123/"] {
            probe_url(ok).expect(ok);
        }
        for bad in ["ftp://127.0.0.1/", "http://user:pw@127.0.0.1:8123/", "not a url", "file:///etc/passwd"] {
            assert!(probe_url(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_probe_returns_the_status_and_follows_no_redirect() {
        let head = "HTTP/1.1 302 Found\r\nlocation: http://10.0.0.1/\r\ncontent-length: 0\r\n\r\n".to_string();
        let (eps, server) = serve_once(head, 0).await;
        let base = eps.map["big"].config.url.clone();
        let status = probe(probe_url(&base).expect("url"), Duration::from_secs(10)).await.expect("answer");
        assert_eq!(status, 302, "a redirect is an answer, not followed");
        server.abort();
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/", closed.local_addr().expect("addr"));
        drop(closed);
        let e = probe(probe_url(&url).expect("url"), Duration::from_secs(10)).await.expect_err("refused");
        assert_eq!(e.kind, ErrorKind::Transient, "{}", e.message);
        assert!(e.message.contains(&url), "{}", e.message);
    }

    #[test]
    fn host_hop_by_hop_and_credential_headers_are_forbidden() {
        for h in ["host", "authorization", "x-api-key", "cookie", "connection", "transfer-encoding", "te", "upgrade"] {
            assert!(FORBIDDEN_HEADERS.contains(&h), "{h}");
        }
    }
}
