//! The webhook listener: `POST /hooks/NAME` for each `[serve.sources.NAME]`,
//! and `GET /healthz`.
//!
//! Contract, in the order a request meets it:
//! 1. over `max_requests_per_s` (all sources together): `429`, nothing read;
//! 2. an unknown path `404`, another method `405`;
//! 3. a body over `max_body_bytes` (by `Content-Length`, or as it streams):
//!    `413`; a body not sent within [`BODY_TIMEOUT`]: `408`;
//! 4. the signature ([`super::signature`]) over the raw bytes, before any
//!    parsing: `401` and nothing else happens;
//! 5. the payload ([`super::event::parse`]): `400` if unreadable, `200
//!    ignored` (with the reason) if it starts nothing;
//! 6. the event is recorded durably ([`super::store`]) and only then answered
//!    `202 accepted`; a VM already in flight `202 in-flight`, a body seen
//!    before `200 duplicate`; a full queue or a failed write `503`.
//!
//! Answers are small JSON documents; none holds a secret or echoes the body.
//!
//! With `[serve.status]`, `GET /metrics` (after the rate limit, before the
//! webhook paths) serves [`super::metrics`] to readers [`super::status`]
//! lets in (`401` otherwise), and paths under `/status` are the status page
//! ([`super::page`]); without it, both are unknown paths.
//! Every answer to a `/hooks/NAME` of a source is counted by its result.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_LENGTH, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Method, Request, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::answer::{Answer, BODY_TIMEOUT, full};
use super::event::{Delivery, parse};
use super::metrics::{self, Deliveries, Delivery as Counted, Queue};
use super::signature::{HEADER, WebhookKey};
use super::status::Verdict;
use super::store::{Admission, EventStore};
use super::view::View;

/// Everything a request needs; shared by every connection.
pub struct Listener {
    /// Each source's verification key, by name.
    pub keys: BTreeMap<String, WebhookKey>,
    /// The durable events.
    pub store: Arc<EventStore>,
    /// The largest body accepted.
    pub max_body: usize,
    /// Requests per second.
    pub rate: RateLimit,
    /// Where accepted events go to be run.
    pub dispatch: tokio::sync::mpsc::UnboundedSender<u64>,
    /// Deliveries by source and result, for `/metrics`.
    pub deliveries: Deliveries,
    /// The operator's view (`/metrics`), with `[serve.status]`.
    pub status: Option<Arc<View>>,
    /// `max_queued`, for `/metrics`.
    pub max_queued: usize,
    /// The service manager's `STATUS=`.
    pub announcer: Arc<super::notify::Announcer>,
}

/// A token bucket: `per_s` requests a second, bursts of up to `per_s`.
pub struct RateLimit {
    per_s: f64,
    bucket: Mutex<(f64, Instant)>,
}

impl RateLimit {
    /// A full bucket of `per_s`.
    pub fn new(per_s: u32) -> RateLimit {
        RateLimit { per_s: f64::from(per_s), bucket: Mutex::new((f64::from(per_s), Instant::now())) }
    }

    /// Take one token, if there is one.
    pub fn take(&self) -> bool {
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        b.0 = (b.0 + now.duration_since(b.1).as_secs_f64() * self.per_s).min(self.per_s);
        b.1 = now;
        if b.0 >= 1.0 {
            b.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

fn answer(status: StatusCode, doc: Value) -> Answer {
    full(status, "application/json", doc.to_string())
}

fn refuse(status: StatusCode, error: impl Into<String>) -> Answer {
    answer(status, json!({ "status": "refused", "error": error.into() }))
}

fn retry_after(mut r: Answer, seconds: u32) -> Answer {
    r.headers_mut().insert(RETRY_AFTER, HeaderValue::from(seconds));
    r
}

impl Listener {
    /// Answer one request from `peer`.
    pub async fn handle(&self, req: Request<Incoming>, peer: SocketAddr) -> Answer {
        if !self.rate.take() {
            if let Some(source) = req.uri().path().strip_prefix("/hooks/") {
                self.deliveries.count(source, Counted::RateLimited);
            }
            return retry_after(refuse(StatusCode::TOO_MANY_REQUESTS, "too many requests; slow down"), 1);
        }
        let path = req.uri().path().to_string();
        if path == "/healthz" && req.method() == Method::GET {
            return answer(StatusCode::OK, json!({ "status": "ok", "queued": self.store.queued() }));
        }
        if path == "/metrics"
            && let Some(view) = &self.status
        {
            return self.metrics(&req, peer, view.clone()).await;
        }
        if (path == "/status" || path.starts_with("/status/"))
            && let Some(view) = &self.status
        {
            return super::page::handle(req, view.clone(), peer).await;
        }
        let Some(source) = path.strip_prefix("/hooks/").filter(|s| self.keys.contains_key(*s)).map(str::to_string)
        else {
            return refuse(
                StatusCode::NOT_FOUND,
                "no such webhook source (the paths are /hooks/NAME of [serve.sources])",
            );
        };
        let source = source.as_str();
        let (what, r) = self.delivery(req, peer, source).await;
        self.deliveries.count(source, what);
        r
    }

    /// A request to `/hooks/SOURCE`: what it was, and the answer.
    async fn delivery(&self, req: Request<Incoming>, peer: SocketAddr, source: &str) -> (Counted, Answer) {
        let source = source.to_string();
        if req.method() != Method::POST {
            let mut r = refuse(StatusCode::METHOD_NOT_ALLOWED, "webhooks are POSTed");
            r.headers_mut().insert(ALLOW, HeaderValue::from_static("POST"));
            return (Counted::MethodNotAllowed, r);
        }
        let declared = req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_body as u64) {
            return (Counted::TooLarge, self.too_large(&source, peer));
        }
        let signature = req.headers().get(HEADER).map(|v| v.as_bytes().to_vec());
        let body = match tokio::time::timeout(BODY_TIMEOUT, Limited::new(req.into_body(), self.max_body).collect())
            .await
        {
            Err(_) => {
                return (Counted::Timeout, refuse(StatusCode::REQUEST_TIMEOUT, "the body was not sent in time"));
            }
            Ok(Err(e)) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
                return (Counted::TooLarge, self.too_large(&source, peer));
            }
            Ok(Err(e)) => {
                return (Counted::BadPayload, refuse(StatusCode::BAD_REQUEST, format!("cannot read the body: {e}")));
            }
            Ok(Ok(collected)) => collected.to_bytes(),
        };
        let key = &self.keys[&source];
        if let Err(e) = key.verify(&body, signature.as_deref()) {
            tracing::warn!(source, %peer, reason = %e, "webhook refused: bad signature");
            return (Counted::Unauthorized, refuse(StatusCode::UNAUTHORIZED, e.to_string()));
        }
        let staged = match parse(&body) {
            Err(e) => {
                tracing::warn!(source, %peer, error = %e, "webhook refused: unreadable payload");
                return (Counted::BadPayload, refuse(StatusCode::BAD_REQUEST, e.to_string()));
            }
            Ok(Delivery::Ignored(reason)) => {
                tracing::debug!(source, %reason, "webhook ignored");
                return (Counted::Ignored, answer(StatusCode::OK, json!({ "status": "ignored", "reason": reason })));
            }
            Ok(Delivery::Staged(vm)) => vm,
        };
        let digest = hex::encode(Sha256::digest(&body));
        match self.store.admit(&source, &staged, digest).await {
            Ok(Admission::Accepted(event)) => {
                tracing::info!(source, vm = %event.vm_name, vm_id = event.vm_id, seq = event.seq, "webhook accepted");
                // The dispatcher is gone only while stopping: the event is on
                // disk and resumes at the next start.
                let _ = self.dispatch.send(event.seq);
                self.announcer.announce(&self.store);
                (Counted::Accepted, answer(StatusCode::ACCEPTED, json!({ "status": "accepted", "event": event.seq })))
            }
            Ok(Admission::InFlight { seq }) => {
                (Counted::InFlight, answer(StatusCode::ACCEPTED, json!({ "status": "in-flight", "event": seq })))
            }
            Ok(Admission::Duplicate { seq }) => {
                (Counted::Duplicate, answer(StatusCode::OK, json!({ "status": "duplicate", "event": seq })))
            }
            Ok(Admission::Full { queued }) => (
                Counted::QueueFull,
                retry_after(
                    refuse(StatusCode::SERVICE_UNAVAILABLE, format!("{queued} events wait already; try again later")),
                    30,
                ),
            ),
            Err(e) => {
                tracing::error!(source, error = %e, "could not record a webhook event");
                (
                    Counted::StoreError,
                    retry_after(refuse(StatusCode::SERVICE_UNAVAILABLE, "cannot record the event now"), 30),
                )
            }
        }
    }

    /// `GET /metrics`: the readers `view` lets in get one scrape.
    async fn metrics(&self, req: &Request<Incoming>, peer: SocketAddr, view: Arc<View>) -> Answer {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            let mut r = refuse(StatusCode::METHOD_NOT_ALLOWED, "metrics are read with GET");
            r.headers_mut().insert(ALLOW, HeaderValue::from_static("GET"));
            return r;
        }
        match view.access.admit(req.headers()) {
            Verdict::Reader { .. } => {}
            Verdict::ForeignHost(host) => {
                let why = Verdict::foreign_host_message(&host);
                tracing::warn!(%peer, "metrics refused: {why}");
                return refuse(StatusCode::FORBIDDEN, why);
            }
            Verdict::Refused => {
                tracing::warn!(%peer, "metrics refused: no valid credentials");
                let mut r = refuse(StatusCode::UNAUTHORIZED, "reading the metrics needs credentials ([serve.status])");
                r.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"cradle\""));
                return r;
            }
        }
        let queue = Queue { depth: self.store.queued(), limit: self.max_queued };
        // Reading journals is file work: off the connection tasks' threads.
        let totals = tokio::task::spawn_blocking(move || {
            let mut journals = view.journals.lock().unwrap_or_else(|e| e.into_inner());
            journals.scan().clone()
        })
        .await;
        let Ok(totals) = totals else {
            return refuse(StatusCode::INTERNAL_SERVER_ERROR, "the metrics could not be read");
        };
        full(StatusCode::OK, metrics::CONTENT_TYPE, metrics::render(&totals, &self.deliveries, queue))
    }

    fn too_large(&self, source: &str, peer: SocketAddr) -> Answer {
        tracing::warn!(source, %peer, max = self.max_body, "webhook refused: body too large");
        refuse(StatusCode::PAYLOAD_TOO_LARGE, format!("the body is larger than {} bytes", self.max_body))
    }
}
