//! The Proxmox VE API client behind the `proxmox` capability.
//!
//! Contract: one async method per function of `wit/proxmox.wit` (in [`vms`],
//! [`cluster`] and [`tasks`]), returning the `bindgen!` types. Every request goes
//! to `<endpoint>/api2/json<path>` with `Authorization: PVEAPIToken=<token>`,
//! parameters form-encoded (`application/x-www-form-urlencoded`; query string for
//! GET and DELETE), and the `{"data": ...}` envelope unwrapped. Error answers become
//! [`ProxmoxError::Api`] with status, reason, `message` and the 400 `errors` map.
//!
//! Retries (invariant 5): every call states its [`Idempotency`] where it is made.
//! Only [`Idempotency::Idempotent`] calls are repeated, only after a transient
//! error, with exponential backoff; such a call is sent at most
//! [`RetryPolicy::max_attempts`] times in all (the first attempt included).
//! Clone, migrate, power, destroy, resize, config writes and HA writes are sent
//! exactly once; after an ambiguous failure the caller re-discovers.
//!
//! Secrets (invariant 7): the token lives in a sensitive header value and a
//! [`Secret`]; `Debug` of the settings and the client redact it, server messages
//! are scrubbed of it, and redirects are refused so it is never sent elsewhere.

mod answers;
pub mod cluster;
mod decode;
mod flights;
mod lxc;
mod request;
mod storage;
pub mod tasks;
pub mod vms;

#[cfg(test)]
mod test_server;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderValue;

pub use self::answers::{Upid, parse_upid};
pub use self::decode::UpidError;
pub use self::request::encode_form;
pub(crate) use self::request::{Call, flag, segment};
use super::errors::ProxmoxError;
use super::tls::{TlsFailures, TlsVerify, client_config};
use crate::secrets::Secret;

/// How to reach and trust one cluster's API.
#[derive(Clone)]
pub struct ClientSettings {
    /// The base URL, `https://host:8006` (no path).
    pub endpoint: String,
    /// The resolved API token, `USER@REALM!TOKENID=SECRET`.
    pub token: String,
    /// How the server certificate is trusted.
    pub verify: TlsVerify,
    /// Timeout of one HTTP request (connect + answer).
    pub timeout: Duration,
    /// Retry bounds for idempotent calls.
    pub retry: RetryPolicy,
    /// How the cluster's clock runs against PVE's usual task durations, which
    /// the task poll schedule is fitted to: 1 for a real cluster, the
    /// simulator's `time_scale` for a simulated one.
    pub task_time_scale: f64,
}

impl fmt::Debug for ClientSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientSettings")
            .field("endpoint", &self.endpoint)
            .field("token", &token_id_for_display(&self.token))
            .field("verify", &self.verify)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .field("task_time_scale", &self.task_time_scale)
            .finish()
    }
}

/// `USER@REALM!TOKENID=[redacted]`, or only `[redacted]` when the shape is unclear.
fn token_id_for_display(token: &str) -> String {
    match token.split_once('=') {
        Some((id, _)) if id.contains('@') && id.contains('!') => {
            format!("{id}={}", crate::secrets::REDACTED)
        }
        _ => crate::secrets::REDACTED.to_string(),
    }
}

/// Bounds for repeating idempotent calls after transient errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, including the first (1 = never retry).
    pub max_attempts: u32,
    /// The pause before the first retry; doubled for each further one.
    pub initial_backoff: Duration,
    /// The longest pause.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// 4 attempts, 250 ms doubling up to 4 s: rides out a node-local flock timeout
    /// or a pveproxy restart without hiding a real outage for long.
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(4),
        }
    }
}

impl RetryPolicy {
    /// The pause before retry number `retry` (1-based). Deterministic (no jitter):
    /// cradle's concurrency is a handful of VMs, not a thundering herd, and
    /// deterministic pauses keep test runs reproducible.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.saturating_sub(1)).unwrap_or(u32::MAX);
        self.initial_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// Whether a call may be repeated after a transient failure. Stated at every call
/// site so a reviewer sees which requests can be sent twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idempotency {
    /// Repeating it changes nothing (reads, probes, agent ping).
    Idempotent,
    /// It acts on the cluster; sent exactly once (invariant 5).
    NotIdempotent,
}

/// A client for one cluster's API. Cheap to clone (shared connection pool).
#[derive(Clone)]
pub struct ProxmoxClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    endpoint: String,
    base: String,
    auth: HeaderValue,
    token: Secret,
    retry: RetryPolicy,
    task_time_scale: f64,
    tls_failures: TlsFailures,
    /// Concurrent VM listings share requests (`flights`).
    listing: flights::Flights<Vec<crate::contract::bindings::cradle::host::proxmox::VmResource>>,
}

impl fmt::Debug for ProxmoxClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxmoxClient")
            .field("endpoint", &self.inner.endpoint)
            .field("token", &token_id_for_display(self.inner.token.expose()))
            .field("retry", &self.inner.retry)
            .finish_non_exhaustive()
    }
}

impl ProxmoxClient {
    /// A client for `settings.endpoint`, which must be an `https://` base URL.
    pub fn new(settings: ClientSettings) -> Result<ProxmoxClient, ProxmoxError> {
        ProxmoxClient::build(settings, false)
    }

    /// A client that speaks plain HTTP, for the canned-response servers of unit tests only.
    #[cfg(test)]
    pub(crate) fn new_plain_http_for_tests(settings: ClientSettings) -> Result<ProxmoxClient, ProxmoxError> {
        ProxmoxClient::build(settings, true)
    }

    fn build(settings: ClientSettings, plain_http: bool) -> Result<ProxmoxClient, ProxmoxError> {
        let endpoint = settings.endpoint.trim().trim_end_matches('/').to_string();
        let bad = |reason: &str| ProxmoxError::Endpoint { endpoint: endpoint.clone(), reason: reason.to_string() };
        let url = reqwest::Url::parse(&endpoint).map_err(|e| bad(&format!("not a URL ({e})")))?;
        match url.scheme() {
            "https" => {}
            "http" if plain_http => {}
            _ => {
                return Err(bad("only https:// is accepted, so the API token never travels in clear"));
            }
        }
        if url.host_str().is_none() {
            return Err(bad("it has no host"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad("it must not carry credentials; the API token is configured separately"));
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err(bad("it must be the base URL only (cradle appends /api2/json itself)"));
        }
        check_token(&settings.token).map_err(|reason| ProxmoxError::Token { endpoint: endpoint.clone(), reason })?;
        let mut auth =
            HeaderValue::from_str(&format!("PVEAPIToken={}", settings.token)).map_err(|_| ProxmoxError::Token {
                endpoint: endpoint.clone(),
                reason: "it contains characters not allowed in an HTTP header",
            })?;
        auth.set_sensitive(true);

        let mut builder = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
            // A redirect would carry the token to wherever the server points.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("cradle/", env!("CARGO_PKG_VERSION")));
        let mut tls_failures = TlsFailures::default();
        if !plain_http {
            let (config, failures) = client_config(&settings.verify, &endpoint)?;
            tls_failures = failures;
            builder = builder.use_preconfigured_tls(config);
        }
        let http = builder.build().map_err(|e| ProxmoxError::TlsSetup {
            endpoint: endpoint.clone(),
            reason: format!("HTTP client setup: {e}"),
        })?;
        Ok(ProxmoxClient {
            inner: Arc::new(Inner {
                http,
                base: format!("{endpoint}/api2/json"),
                endpoint,
                auth,
                token: Secret::new(settings.token),
                retry: settings.retry,
                task_time_scale: if settings.task_time_scale.is_finite() {
                    settings.task_time_scale.clamp(0.0, 100.0)
                } else {
                    1.0
                },
                tls_failures,
                listing: flights::Flights::default(),
            }),
        })
    }

    /// The endpoint this client talks to (`https://host:8006`).
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }
}

/// Checks the `USER@REALM!TOKENID=SECRET` shape; the reason never quotes the token.
fn check_token(token: &str) -> Result<(), &'static str> {
    let Some((id, secret)) = token.split_once('=') else {
        return Err("it has no '=' between the token id and the secret");
    };
    let Some((user, token_name)) = id.split_once('!') else {
        return Err("the token id has no '!' between USER@REALM and TOKENID");
    };
    if !user.contains('@') || user.starts_with('@') || user.ends_with('@') {
        return Err("the user part is not USER@REALM");
    }
    if token_name.is_empty() || secret.is_empty() {
        return Err("the token name or the secret is empty");
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("it contains whitespace or control characters");
    }
    Ok(())
}
