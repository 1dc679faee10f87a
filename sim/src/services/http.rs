//! The HTTP/1.1 server every stand-in runs on (hyper, like the simulator's API), and
//! the small request/response model its handlers use.
//!
//! Contract: [`Served::start`] binds, then serves each connection on its own tokio
//! task until the [`Served`] value is dropped (the listener closes, open connections
//! end). A handler sees the whole request (body capped at 1 MiB: larger bodies get 413
//! without reaching it) and answers synchronously from in-memory state. With TLS the
//! certificate is a fresh self-signed one for `localhost` and the listen IP.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::ServiceError;

/// Largest request body a stand-in reads.
const BODY_LIMIT: usize = 1 << 20;

/// Where a stand-in listens, and whether it speaks TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen {
    /// The address (port 0 = ephemeral; see the handle's `url()`).
    pub addr: SocketAddr,
    /// HTTPS with a self-signed certificate (the handle's `ca_pem()` trusts it).
    pub tls: bool,
}

impl Listen {
    /// Plain HTTP on `addr`.
    pub fn http(addr: SocketAddr) -> Self {
        Listen { addr, tls: false }
    }

    /// HTTPS on `addr`.
    pub fn https(addr: SocketAddr) -> Self {
        Listen { addr, tls: true }
    }

    /// Plain HTTP on an ephemeral loopback port.
    pub fn loopback() -> Self {
        Listen::http(SocketAddr::from(([127, 0, 0, 1], 0)))
    }
}

/// One request as a handler sees it.
#[derive(Debug)]
pub(crate) struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The raw path (not percent-decoded).
    pub path: String,
    /// The raw query string.
    pub query: Option<String>,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl Request {
    /// A header's value (names are case-insensitive); `None` if absent or not text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A cookie's value from the `Cookie` header(s).
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.headers
            .get_all(hyper::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    }

    /// The query string's pairs, decoded.
    pub fn query_pairs(&self) -> Vec<(String, String)> {
        self.query.as_deref().map(decode_pairs).unwrap_or_default()
    }

    /// Whether the body is `application/x-www-form-urlencoded`.
    pub fn is_form(&self) -> bool {
        self.header("content-type").is_some_and(|c| {
            c.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded"))
        })
    }

    /// The form body's pairs, decoded (empty unless [`Request::is_form`]).
    pub fn form_pairs(&self) -> Vec<(String, String)> {
        if !self.is_form() {
            return Vec::new();
        }
        decode_pairs(&String::from_utf8_lossy(&self.body))
    }

    /// The body parsed as JSON.
    pub fn json(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// The path's segments, percent-decoded, empty ones dropped.
    pub fn segments(&self) -> Vec<String> {
        self.path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned())
            .collect()
    }
}

fn decode_pairs(s: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(s.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

/// A handler's answer.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// A response with no body.
    pub fn empty(status: u16) -> Self {
        Response { status, headers: Vec::new(), body: Vec::new() }
    }

    /// A JSON body.
    pub fn json(status: u16, body: &Value) -> Self {
        Response::text(status, "application/json; charset=utf-8", serde_json::to_string(body).unwrap_or_default())
    }

    /// A body with a content type.
    pub fn text(status: u16, content_type: &str, body: impl Into<String>) -> Self {
        Response { status, headers: vec![("content-type".into(), content_type.into())], body: body.into().into_bytes() }
    }

    /// Add a header (repeatable, e.g. `set-cookie`).
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    fn into_hyper(self) -> hyper::Response<Full<Bytes>> {
        let mut resp = hyper::Response::new(Full::new(Bytes::from(self.body)));
        *resp.status_mut() =
            hyper::StatusCode::from_u16(self.status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
        for (k, v) in self.headers {
            if let (Ok(k), Ok(v)) = (hyper::header::HeaderName::try_from(k), hyper::header::HeaderValue::try_from(v)) {
                resp.headers_mut().append(k, v);
            }
        }
        resp
    }
}

/// What a stand-in does with a request.
pub(crate) trait Handler: Send + Sync + 'static {
    /// Answer one request.
    fn handle(&self, req: &Request) -> Response;
}

/// A running server; dropping it stops it.
pub(crate) struct Served {
    addr: SocketAddr,
    ca_pem: Option<String>,
    down: watch::Sender<bool>,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served").field("addr", &self.addr).field("tls", &self.ca_pem.is_some()).finish()
    }
}

impl Served {
    /// Bind `listen` and serve `handler` until dropped.
    pub async fn start(listen: Listen, handler: Arc<dyn Handler>) -> Result<Served, ServiceError> {
        let listener =
            TcpListener::bind(listen.addr).await.map_err(|source| ServiceError::Bind { addr: listen.addr, source })?;
        let addr = listener.local_addr().map_err(|source| ServiceError::Bind { addr: listen.addr, source })?;
        let (acceptor, ca_pem) = if listen.tls {
            let mut ips = vec![std::net::IpAddr::from([127, 0, 0, 1]), addr.ip()];
            ips.dedup();
            let id = crate::tls::TlsIdentity::load_or_generate(None, &["localhost".to_string()], &ips)
                .map_err(|e| ServiceError::Tls(e.to_string()))?;
            let cfg = id.server_config().map_err(|e| ServiceError::Tls(e.to_string()))?;
            (Some(tokio_rustls::TlsAcceptor::from(cfg)), Some(id.ca_pem.clone()))
        } else {
            (None, None)
        };
        let (down, rx) = watch::channel(false);
        tokio::spawn(accept_loop(listener, acceptor, handler, rx));
        Ok(Served { addr, ca_pem, down })
    }

    /// `http://ADDR` or `https://ADDR`.
    pub fn url(&self) -> String {
        let scheme = if self.ca_pem.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The CA certificate (PEM) of the TLS certificate, when serving TLS.
    pub fn ca_pem(&self) -> Option<String> {
        self.ca_pem.clone()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.down.send(true);
    }
}

/// Resolves once `rx` says true or its sender is gone.
async fn stopped(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    handler: Arc<dyn Handler>,
    mut rx: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = stopped(&mut rx) => return,
        };
        let Ok((tcp, _peer)) = accepted else { continue };
        let _ = tcp.set_nodelay(true);
        let handler = handler.clone();
        let acceptor = acceptor.clone();
        let mut rx = rx.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| answer(handler.clone(), req));
            let builder = hyper::server::conn::http1::Builder::new();
            match acceptor {
                Some(acceptor) => {
                    let Ok(stream) = acceptor.accept(tcp).await else { return };
                    tokio::select! {
                        _ = builder.serve_connection(TokioIo::new(stream), svc) => {}
                        () = stopped(&mut rx) => {}
                    }
                }
                None => {
                    tokio::select! {
                        _ = builder.serve_connection(TokioIo::new(tcp), svc) => {}
                        () = stopped(&mut rx) => {}
                    }
                }
            }
        });
    }
}

async fn answer(
    handler: Arc<dyn Handler>,
    req: hyper::Request<Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, std::convert::Infallible> {
    let (parts, body) = req.into_parts();
    let Ok(body) = Limited::new(body, BODY_LIMIT).collect().await.map(|b| b.to_bytes()) else {
        return Ok(Response::empty(413).into_hyper());
    };
    let request = Request {
        method: parts.method.as_str().to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        headers: parts.headers,
        body,
    };
    Ok(handler.handle(&request).into_hyper())
}
