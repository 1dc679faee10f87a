//! The status page under `/status` on `cradle serve`'s listener (with
//! `[serve.status]`): runs in flight and recent, each run's step timeline per
//! VM, the NetBox pipeline's stages, live through server-sent events.
//!
//! Paths (read-only; `GET`, `HEAD` where it makes sense):
//! - `/status`: the page; without credentials `401` and a form asking for
//!   the token (`POST /status/login`, which answers `303` with a session
//!   cookie, or `401` again; its body is bounded in size and time), and `403`
//!   for a request to a foreign name on an open listener (`status`);
//! - `/status/app.js`, `/status/app.css`, `/status/favicon.svg`: the page's
//!   code and icon, compiled into the binary (no CDN, no network); served to
//!   anyone, they hold no data;
//! - `/status/api/runs?vm=&result=&env=&kind=&limit=`: the run list
//!   (`board::List`; `kind` is `WORKFLOW:FUNCTION` or a bare workflow);
//! - `/status/api/runs/ID`: one run's card and timeline;
//! - `/status/events`: the live stream (`live`).
//!
//! Every answer carries a Content-Security-Policy that allows only the
//! page's own script and style (`'self'`, no inline code), `nosniff`,
//! `no-referrer`, no framing and `no-store`. Strings reach the page only
//! through `render::page_json`; the page sets them as text, never as HTML.
//! Module map: `board` (the model), `render` (escaping), `live` (SSE).

use std::sync::Arc;

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{
    ALLOW, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, HeaderName, HeaderValue, LOCATION, REFERRER_POLICY,
    SET_COOKIE, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use super::answer::{Answer, BODY_TIMEOUT, full};
use super::status::{COOKIE_NAME, SESSION_TTL, Verdict};
use super::view::View;

pub mod board;
pub mod live;
pub mod render;

pub use live::Live;

const INDEX: &str = include_str!("assets/index.html");
const LOGIN: &str = include_str!("assets/login.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");
const FAVICON: &str = include_str!("assets/favicon.svg");
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; \
                   form-action 'self'; base-uri 'none'; frame-ancestors 'none'";
/// The largest login form read.
const MAX_LOGIN_BODY: usize = 4096;
/// Runs a list answer holds unless the page asks for another number.
const DEFAULT_LIMIT: usize = 200;

/// Answer a request for a path under `/status`.
pub async fn handle(req: Request<Incoming>, view: Arc<View>, peer: std::net::SocketAddr) -> Answer {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let reading = method == Method::GET || method == Method::HEAD;
    match path.as_str() {
        "/status/app.js" if reading => return asset(APP_JS, "text/javascript; charset=utf-8"),
        "/status/app.css" if reading => return asset(APP_CSS, "text/css; charset=utf-8"),
        "/status/favicon.svg" if reading => return asset(FAVICON, "image/svg+xml"),
        "/status/login" if method == Method::POST => return login(req, &view, peer).await,
        "/status/login" => return not_allowed("POST"),
        _ => {}
    }
    if !reading {
        return not_allowed("GET");
    }
    let until = match view.access.admit(req.headers()) {
        Verdict::Reader { until } => until,
        Verdict::Refused => {
            tracing::warn!(%peer, path, "status page refused: no valid credentials");
            return page(StatusCode::UNAUTHORIZED, LOGIN);
        }
        Verdict::ForeignHost(host) => {
            let why = Verdict::foreign_host_message(&host);
            tracing::warn!(%peer, path, "status page refused: {why}");
            return json_answer(StatusCode::FORBIDDEN, json!({ "error": why }).to_string());
        }
    };
    match path.as_str() {
        "/status" | "/status/" => page(StatusCode::OK, INDEX),
        "/status/events" => events(&view, until),
        "/status/api/runs" => list(req.uri().query().unwrap_or(""), view).await,
        p => match p.strip_prefix("/status/api/runs/") {
            Some(id) if !id.is_empty() && !id.contains('/') => run(id.to_string(), view).await,
            _ => with_headers(full(
                StatusCode::NOT_FOUND,
                "application/json",
                json!({"error": "no such page"}).to_string(),
            )),
        },
    }
}

fn with_headers(mut r: Answer) -> Answer {
    let h = r.headers_mut();
    h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.entry(CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    r
}

fn asset(text: &'static str, kind: &'static str) -> Answer {
    let mut r = full(StatusCode::OK, kind, text);
    r.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    with_headers(r)
}

fn page(status: StatusCode, html: &'static str) -> Answer {
    with_headers(full(status, "text/html; charset=utf-8", html))
}

fn not_allowed(allow: &'static str) -> Answer {
    let mut r = full(StatusCode::METHOD_NOT_ALLOWED, "application/json", json!({"error": "read-only"}).to_string());
    r.headers_mut().insert(ALLOW, HeaderValue::from_static(allow));
    with_headers(r)
}

fn json_answer(status: StatusCode, body: String) -> Answer {
    with_headers(full(status, "application/json", body))
}

/// `POST /status/login`: `token=...` (a form) opens a session.
async fn login(req: Request<Incoming>, view: &View, peer: std::net::SocketAddr) -> Answer {
    let https = req
        .headers()
        .get(HeaderName::from_static("x-forwarded-proto"))
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    // Bounded in size and in time, as webhook bodies: a client that sends
    // nothing must not hold a connection.
    let body = match tokio::time::timeout(BODY_TIMEOUT, Limited::new(req.into_body(), MAX_LOGIN_BODY).collect()).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(_)) => return page(StatusCode::PAYLOAD_TOO_LARGE, LOGIN),
        Err(_) => {
            return json_answer(
                StatusCode::REQUEST_TIMEOUT,
                json!({"error": "the form was not sent in time"}).to_string(),
            );
        }
    };
    let token = form_urlencoded::parse(&body).find(|(k, _)| k == "token").map(|(_, v)| v.into_owned());
    match token.and_then(|t| view.access.login(t.as_bytes())) {
        Some(session) => {
            tracing::info!(%peer, "status page: a browser session was opened with the token");
            let mut r = full(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
            // `Secure` behind a TLS proxy (a forged header only keeps the
            // cookie from coming back over plain HTTP).
            let cookie = format!(
                "{COOKIE_NAME}={session}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
                SESSION_TTL.as_secs(),
                if https { "; Secure" } else { "" }
            );
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                r.headers_mut().insert(SET_COOKIE, v);
            }
            r.headers_mut().insert(LOCATION, HeaderValue::from_static("/status"));
            with_headers(r)
        }
        None => {
            tracing::warn!(%peer, "status page: login refused (wrong token)");
            page(StatusCode::UNAUTHORIZED, LOGIN)
        }
    }
}

fn events(view: &View, until: Option<std::time::Instant>) -> Answer {
    let Some(stream) = view.live.open(until) else {
        return json_answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"error": "too many open status pages"}).to_string(),
        );
    };
    let mut r = Response::new(stream.boxed());
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // nginx buffers responses unless told not to; a buffered stream is not live.
    h.insert(HeaderName::from_static("x-accel-buffering"), HeaderValue::from_static("no"));
    with_headers(r)
}

/// The query of a list request.
fn filter_of(query: &str) -> (board::Filter, usize) {
    let mut filter = board::Filter::default();
    let mut limit = DEFAULT_LIMIT;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let v = Some(v.into_owned()).filter(|v| !v.is_empty());
        match &*k {
            "vm" => filter.vm = v,
            "result" => filter.result = v,
            "env" => filter.environment = v,
            "kind" => filter.kind = v,
            "limit" => limit = v.and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_LIMIT),
            _ => {}
        }
    }
    (filter, limit)
}

async fn list(query: &str, view: Arc<View>) -> Answer {
    let (filter, limit) = filter_of(query);
    let body = tokio::task::spawn_blocking(move || {
        // Rendered after the board is let go: the watcher waits for no page.
        let list = view.board.lock().unwrap_or_else(|e| e.into_inner()).list(&filter, limit);
        render::page_json(&list)
    })
    .await;
    match body {
        Ok(body) => json_answer(StatusCode::OK, body),
        Err(_) => {
            json_answer(StatusCode::INTERNAL_SERVER_ERROR, json!({"error": "the runs could not be read"}).to_string())
        }
    }
}

async fn run(id: String, view: Arc<View>) -> Answer {
    let body = tokio::task::spawn_blocking(move || {
        let run = view.board.lock().unwrap_or_else(|e| e.into_inner()).run(&id);
        run.map(|(card, timeline)| render::page_json(&json!({ "card": card, "timeline": timeline })))
    })
    .await;
    match body {
        Ok(Some(body)) => json_answer(StatusCode::OK, body),
        Ok(None) => json_answer(StatusCode::NOT_FOUND, json!({"error": "no such run"}).to_string()),
        Err(_) => {
            json_answer(StatusCode::INTERNAL_SERVER_ERROR, json!({"error": "the run could not be read"}).to_string())
        }
    }
}

/// Bytes of the page's own files (benchmarks count what a browser fetches).
pub fn asset_bytes() -> usize {
    INDEX.len() + APP_JS.len() + APP_CSS.len() + FAVICON.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_query_names_its_filters_and_an_unreadable_limit_is_the_default() {
        let (f, limit) = filter_of("vm=web%201&result=failed&env=prod&kind=maintain%3Aapply_vm&limit=5&other=x");
        assert_eq!(f.vm.as_deref(), Some("web 1"));
        assert_eq!(f.result.as_deref(), Some("failed"));
        assert_eq!(f.environment.as_deref(), Some("prod"));
        assert_eq!(f.kind.as_deref(), Some("maintain:apply_vm"));
        assert_eq!(limit, 5);
        assert_eq!(filter_of("kind=maintain").0.kind.as_deref(), Some("maintain"));
        let (f, limit) = filter_of("vm=&kind=&limit=lots");
        assert_eq!(f, board::Filter::default());
        assert_eq!(limit, DEFAULT_LIMIT);
    }

    #[test]
    fn the_page_has_no_inline_code_and_fetches_nothing_from_elsewhere() {
        for (name, text) in [("index.html", INDEX), ("login.html", LOGIN)] {
            assert!(!text.contains("<script>") && !text.contains("style="), "{name}: inline code breaks the CSP");
            assert!(!text.contains(" onclick") && !text.contains(" onload"), "{name}: inline handlers");
        }
        for (name, text) in [("index.html", INDEX), ("login.html", LOGIN), ("app.js", APP_JS), ("app.css", APP_CSS)] {
            // (The SVG's own xmlns is a name, not a fetch.)
            assert!(!text.contains("http://") && !text.contains("https://") && !text.contains("//cdn"), "{name}");
        }
        assert!(!APP_JS.contains("innerHTML") && !APP_JS.contains("insertAdjacentHTML"), "strings go in as text");
        assert!(!APP_JS.contains("setInterval"), "no polling loop: updates come by server-sent events");
    }
}
