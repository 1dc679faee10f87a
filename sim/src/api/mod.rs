//! The HTTPS API server (`/api2/json/...`) with PVE's envelopes, errors and token auth.
//!
//! Contract: every response is `{"data": ...}` or an error body
//! `{"data": null, "message": "<text>\n"[, "errors": {...}]}` whose HTTP reason phrase is
//! the message's first line, as pve-http-server sends it. Missing or wrong tokens get
//! 401; unknown API paths 501 `Method 'GET /api2/json/x' not implemented`; paths outside
//! `/api2/json` 404; a request the token's ACL does not allow 403 `Permission check
//! failed (PATH, PRIVILEGE)` before anything happens (`crate::acl`). Faults are
//! injected here (before or after the action, see [`crate::faults::FaultKind`]); a dropped connection is a service error, so hyper
//! closes the socket without answering. `/sim/requests` (outside /api2, token required)
//! returns the request counters.

mod agent;
mod cdrom;
pub(crate) mod clone;
mod cluster;
mod create;
mod ha;
mod hotplug;
mod lifecycle;
mod lxc;
mod lxc_status;
mod migrate;
mod move_disk;
mod nodes;
pub mod params;
mod qemu;
mod route;
mod storage;
mod upload;
mod upload_task;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::faults::FaultKind;
use crate::sim::Sim;
pub use params::Params;
pub use qemu::check_lock;
pub use storage::usage as storage_usage;

/// An API failure as PVE reports it.
#[derive(Debug)]
pub enum ApiError {
    /// HTTP status and message.
    Status(u16, String),
    /// 400 "Parameter verification failed." with per-parameter errors.
    Params(BTreeMap<String, String>),
}

impl ApiError {
    /// An error with status and message.
    pub fn status(code: u16, msg: impl Into<String>) -> Self {
        ApiError::Status(code, msg.into())
    }
    /// A 500 with a message (PVE's `die` in an API handler).
    pub fn die(msg: impl Into<String>) -> Self {
        ApiError::Status(500, msg.into())
    }
    /// A single parameter error.
    pub fn param(name: &str, msg: impl Into<String>) -> Self {
        ApiError::Params(BTreeMap::from([(name.to_string(), msg.into())]))
    }
}

/// A successful answer: `data` plus optional top-level extras (e.g. `total`).
#[derive(Debug)]
pub struct Reply {
    data: Value,
    extra: Option<(&'static str, Value)>,
}

impl Reply {
    /// Plain data.
    pub fn data(data: Value) -> Self {
        Reply { data, extra: None }
    }
    /// Data with `total`.
    pub fn with_total(data: Value, total: usize) -> Self {
        Reply { data, extra: Some(("total", json!(total))) }
    }
}

/// Result of an API handler.
pub type ApiResult = Result<Reply, ApiError>;

/// The connection is to be dropped without an answer (fault injection).
#[derive(Debug)]
pub struct DropConnection;

impl std::fmt::Display for DropConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by fault injection")
    }
}
impl std::error::Error for DropConnection {}

type Body = Full<Bytes>;

fn respond(code: u16, reason: Option<&str>, body: Value) -> Response<Body> {
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(bytes)));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json;charset=UTF-8"));
    resp.headers_mut().insert(hyper::header::SERVER, hyper::header::HeaderValue::from_static("pve-api-daemon/3.0"));
    if let Some(r) = reason {
        // The reason phrase must be a single visible line.
        let r: String = r.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        if let Ok(rp) = hyper::ext::ReasonPhrase::try_from(r.into_bytes()) {
            resp.extensions_mut().insert(rp);
        }
    }
    resp
}

fn error_response(e: ApiError) -> Response<Body> {
    match e {
        ApiError::Status(code, msg) => {
            let msg = msg.trim_end().to_string();
            let first = msg.lines().next().unwrap_or("").to_string();
            respond(code, Some(&first), json!({"data": null, "message": format!("{msg}\n")}))
        }
        ApiError::Params(errors) => respond(
            400,
            Some("Parameter verification failed."),
            json!({"data": null, "errors": errors, "message": "Parameter verification failed.\n"}),
        ),
    }
}

/// Serve the API on `listener` until shutdown.
pub async fn serve(sim: Arc<Sim>, listener: TcpListener, tls: Arc<rustls::ServerConfig>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let mut down = sim.shutdown.subscribe();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = crate::guest::fired(&mut down) => return,
        };
        let (tcp, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!(error = %e, "accept failed");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let sim = sim.clone();
        let acceptor = acceptor.clone();
        let mut down = sim.shutdown.subscribe();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else { return };
            let svc = hyper::service::service_fn(move |req| handle(sim.clone(), peer, req));
            let conn =
                hyper::server::conn::http1::Builder::new().keep_alive(true).serve_connection(TokioIo::new(stream), svc);
            tokio::select! {
                _ = conn => {}
                _ = crate::guest::fired(&mut down) => {}
            }
        });
    }
}

/// One request; the response leaves only once every change so far is written.
async fn handle(sim: Arc<Sim>, peer: SocketAddr, req: Request<Incoming>) -> Result<Response<Body>, DropConnection> {
    let mut seen = Seen::default();
    let mut response = answer(&sim, peer, req, &mut seen).await;
    if let (Some(recorder), Some(path), Ok(resp)) = (&sim.recorder, &seen.path, response.as_mut()) {
        record(recorder, &seen.method, path, seen.params.as_ref(), resp).await;
    }
    sim.settle().await;
    response
}

/// What [`answer`] saw of an API request, for the conformance recording.
#[derive(Default)]
struct Seen {
    method: String,
    /// Below `/api2/json`, segments percent-decoded; `None` outside the API.
    path: Option<String>,
    /// `None` until parsed (and for streamed uploads).
    params: Option<BTreeMap<String, String>>,
}

/// Record one exchange (the body is rebuilt from the bytes read back).
async fn record(
    recorder: &crate::conformance::record::Recorder,
    method: &str,
    path: &str,
    params: Option<&BTreeMap<String, String>>,
    resp: &mut Response<Body>,
) {
    let bytes = match std::mem::take(resp.body_mut()).collect().await {
        Ok(b) => b.to_bytes(),
        Err(never) => match never {},
    };
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    recorder.record(method, path, params, resp.status().as_u16(), &body);
    *resp.body_mut() = Full::new(bytes);
}

async fn answer(
    sim: &Arc<Sim>,
    _peer: SocketAddr,
    req: Request<Incoming>,
    seen: &mut Seen,
) -> Result<Response<Body>, DropConnection> {
    let (parts, body) = req.into_parts();
    let method = parts.method.as_str().to_string();
    let path = parts.uri.path().to_string();
    let auth = parts.headers.get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok());

    if path == "/sim/requests" {
        if let Err(m) = sim.check_auth(auth) {
            return Ok(error_response(ApiError::status(401, m)));
        }
        let counts = crate::sim::lock(&sim.counts).clone();
        return Ok(respond(200, None, json!({ "data": counts })));
    }
    let Some(rest) = path.strip_prefix("/api2/json") else {
        return Ok(respond(404, Some("Not Found"), json!({"data": null, "message": "Not Found\n"})));
    };
    let segs: Vec<String> = rest
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    let pattern = route::pattern(&segs);
    sim.count(format!("{method} {pattern}"));
    seen.method.clone_from(&method);
    seen.path = Some(format!("/{}", segs.join("/")));

    if let Err(m) = sim.check_auth(auth) {
        return Ok(error_response(ApiError::status(401, m)));
    }
    // Uploads stream to the node's disk; every other body is capped and read whole.
    if let Some((node, storage)) = upload::target(&method, &segs) {
        return upload::handle(sim, &parts, body, &node, &storage).await.map(reply_response);
    }
    let body = match Limited::new(body, 4 << 20).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(error_response(ApiError::status(413, "request entity too large"))),
    };
    let ctype = parts.headers.get(hyper::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let params = match Params::parse(parts.uri.query(), ctype, &body) {
        Ok(p) => p,
        Err(e) => return Ok(error_response(e)),
    };
    seen.params = Some(params.map.clone());

    let class = route::classify(&method, &segs);
    // Faults that strike before anything happened.
    if sim.faults.fire(FaultKind::Api500) {
        return Ok(error_response(ApiError::die("Can't connect to 127.0.0.1:85 (Connection refused)")));
    }
    if class.vm_write {
        if sim.faults.fire(FaultKind::Locked) {
            return Ok(error_response(ApiError::die("VM is locked (backup)")));
        }
        if sim.faults.fire(FaultKind::LockFile) {
            let vmid = segs.get(3).cloned().unwrap_or_default();
            return Ok(error_response(ApiError::die(format!(
                "can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout"
            ))));
        }
    }
    if class.starts_task && sim.faults.fire(FaultKind::NoWorker) {
        return Ok(error_response(ApiError::die("got no worker upid - start worker failed")));
    }

    // Permissions: the token's ACL, as PVE checks it before (and inside) the handler.
    let denied =
        crate::acl::endpoints::check_request(&sim.cfg.access, &crate::sim::lock(&sim.state), &method, &segs, &params);
    if let Err(d) = denied {
        return Ok(error_response(ApiError::status(403, d.to_string())));
    }
    let mut result = route::dispatch(sim, &method, &segs, &params);
    if let Ok(reply) = &mut result {
        crate::acl::endpoints::filter_reply(&sim.cfg.access, &method, &segs, &mut reply.data);
    }

    // Faults that strike after the action happened: the client cannot tell.
    if class.starts_task && result.is_ok() {
        if sim.faults.fire(FaultKind::Http596) {
            return Ok(error_response(ApiError::status(596, "Connection timed out")));
        }
        if sim.faults.fire(FaultKind::Drop) {
            return Err(DropConnection);
        }
    }
    Ok(reply_response(result))
}

fn reply_response(result: ApiResult) -> Response<Body> {
    match result {
        Ok(reply) => {
            let mut body = json!({ "data": reply.data });
            if let (Some((k, v)), Some(obj)) = (reply.extra, body.as_object_mut()) {
                obj.insert(k.to_string(), v);
            }
            respond(200, None, body)
        }
        Err(e) => error_response(e),
    }
}

/// Start a VM as the HA manager does (a `qmstart` task).
pub fn lifecycle_start(sim: &Arc<Sim>, node: &str, vmid: u32) {
    lifecycle::start_task(sim, node, vmid, false);
}

/// Cold-start a stopped VM now, as a start worker does (for `recover`).
pub fn cold_start(sim: &Arc<Sim>, vmid: u32) -> Result<(), String> {
    lifecycle::cold_start(sim, vmid, false)
}

/// Shut a VM down as the HA manager does (a `qmshutdown` task).
pub fn lifecycle_shutdown(sim: &Arc<Sim>, node: &str, vmid: u32) {
    lifecycle::stop_task(sim, node, vmid, "qmshutdown", false, true);
}

/// The guest powered itself off (`poweroff` inside it): QEMU exits, PVE shows stopped.
pub fn guest_poweroff(sim: &Arc<Sim>, vmid: u32) {
    lifecycle::halt(sim, vmid);
}
