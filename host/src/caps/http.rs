//! The `http` capability: requests to named endpoints only.
//!
//! The operator maps an alias to a base URL and a credential in `[endpoints]`;
//! the host resolves the credential when first needed and attaches it, so the
//! plugin never sees it. A plugin may not set `authorization` itself, may not
//! leave the endpoint's base URL (no absolute URLs, no `..`), and receives any
//! HTTP status as a response — only transport failures are errors.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::context::{CapCtx, CapError, ErrorKind};
use super::policy::Call;
use crate::config::{EndpointAuth, EndpointConfig};
use crate::plugin::bindings::cradle::host::http::{Host, Method, Request, Response};
use crate::plugin::bindings::cradle::host::types::{Entry, Error as WitError};
use crate::secrets::Secret;

/// Largest response body handed to a plugin.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// The configured endpoints and one shared HTTP client.
#[derive(Debug, Clone, Default)]
pub struct Endpoints {
    map: Arc<BTreeMap<String, Endpoint>>,
}

#[derive(Debug)]
struct Endpoint {
    config: EndpointConfig,
    token: OnceLock<Result<Secret, String>>,
    client: OnceLock<reqwest::Client>,
}

impl Endpoints {
    /// Endpoints from `[endpoints]`.
    pub fn new(config: &BTreeMap<String, EndpointConfig>) -> Endpoints {
        let map = config
            .iter()
            .map(|(k, v)| (k.clone(), Endpoint { config: v.clone(), token: OnceLock::new(), client: OnceLock::new() }))
            .collect();
        Endpoints { map: Arc::new(map) }
    }

    async fn send(&self, req: Request) -> Result<Response, CapError> {
        let ep = self
            .map
            .get(&req.endpoint)
            .ok_or_else(|| CapError::invalid(format!("endpoint `{}` is not defined in [endpoints]", req.endpoint)))?;
        if !req.path.starts_with('/') || req.path.contains("..") || req.path.contains("://") {
            return Err(CapError::invalid(format!(
                "path `{}` must start with `/` and stay below the endpoint",
                req.path
            )));
        }
        if req
            .headers
            .iter()
            .any(|h| h.key.eq_ignore_ascii_case("authorization") || h.key.eq_ignore_ascii_case("x-api-key"))
        {
            return Err(CapError::invalid("credentials are attached by the host; do not set authorization headers"));
        }
        let client = ep.client.get_or_init(|| {
            reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap_or_else(|_| reqwest::Client::new())
        });
        let url = format!("{}{}", ep.config.url.trim_end_matches('/'), req.path);
        let method = match req.method {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Patch => reqwest::Method::PATCH,
            Method::Delete => reqwest::Method::DELETE,
        };
        let mut builder =
            client.request(method, &url).query(&req.query.iter().map(|e| (&e.key, &e.value)).collect::<Vec<_>>());
        for h in &req.headers {
            builder = builder.header(&h.key, &h.value);
        }
        if let Some(token_ref) = &ep.config.token {
            let token = ep
                .token
                .get_or_init(|| token_ref.resolve().map_err(|e| e.to_string()))
                .as_ref()
                .map_err(|e| CapError::failed(format!("endpoint `{}`: {e}", req.endpoint)))?;
            builder = match ep.config.auth {
                EndpointAuth::Bearer => builder.bearer_auth(token.expose()),
                EndpointAuth::Token => builder.header("authorization", format!("Token {}", token.expose())),
                EndpointAuth::ApiKey => builder.header("x-api-key", token.expose()),
            };
        }
        if let Some(body) = req.body {
            builder = builder.body(body);
        }
        let resp = builder.send().await.map_err(|e| transport_error(&req.endpoint, &e))?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| Entry { key: k.to_string(), value: String::from_utf8_lossy(v.as_bytes()).into_owned() })
            .collect();
        let body = resp.bytes().await.map_err(|e| transport_error(&req.endpoint, &e))?;
        if body.len() > MAX_BODY {
            return Err(CapError::failed(format!("endpoint `{}`: response body over {MAX_BODY} bytes", req.endpoint)));
        }
        Ok(Response { status, headers, body: body.to_vec() })
    }
}

fn transport_error(endpoint: &str, e: &reqwest::Error) -> CapError {
    // reqwest errors name the URL, never the headers, so the credential stays out.
    let kind = if e.is_timeout() || e.is_connect() { ErrorKind::Transient } else { ErrorKind::Failed };
    CapError::new(kind, format!("endpoint `{endpoint}`: {e}"))
}

impl Host for CapCtx {
    fn send(&mut self, req: Request) -> Result<Response, WitError> {
        let endpoint = req.endpoint.clone();
        let http = self.services.http.clone();
        self.guard("send", Call::Http { endpoint: &endpoint }, || self.block_on(http.send(req))).map_err(Into::into)
    }
}
