//! Sending one request: URL and body encoding, the retry loop, and turning
//! answers into data or [`ProxmoxError`]s.
//!
//! Contract: [`ProxmoxClient::call`] repeats a request only when its [`Call`] says
//! [`Idempotency::Idempotent`] and the failure is transient; everything that came
//! from the server (messages, parameter errors, transport texts) is scrubbed of
//! the token before it is put into an error. A TLS refusal recorded by the
//! verifier replaces the transport's generic "connection failed".

use std::collections::BTreeMap;

use reqwest::Method;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;

use super::decode::DecodeError;
use super::{Idempotency, ProxmoxClient};
use crate::caps::proxmox::errors::{ProxmoxError, classify_answer};
use crate::caps::proxmox::tls::TlsFailure;

/// Largest API answer accepted; PVE answers are far smaller, this bounds a misbehaving server.
const MAX_BODY: usize = 32 * 1024 * 1024;

/// One API request. Parameters go in the query for GET/DELETE, in a form body otherwise.
#[derive(Debug)]
pub(crate) struct Call {
    method: Method,
    path: String,
    params: Vec<(String, String)>,
    idempotency: Idempotency,
}

impl Call {
    /// The method's name for errors (a `&'static str` keeps [`ProxmoxError`] small).
    fn method_name(&self) -> &'static str {
        [Method::GET, Method::POST, Method::PUT, Method::DELETE]
            .iter()
            .zip(["GET", "POST", "PUT", "DELETE"])
            .find(|(m, _)| **m == self.method)
            .map_or("HTTP", |(_, name)| name)
    }

    pub(crate) fn new(method: Method, path: String, idempotency: Idempotency) -> Call {
        Call { method, path, params: Vec::new(), idempotency }
    }

    pub(crate) fn param(mut self, key: &str, value: impl Into<String>) -> Call {
        self.params.push((key.to_string(), value.into()));
        self
    }

    pub(crate) fn opt_param(self, key: &str, value: Option<impl Into<String>>) -> Call {
        match value {
            Some(v) => self.param(key, v),
            None => self,
        }
    }
}

/// `application/x-www-form-urlencoded` of `pairs`, as PVE parses it. Everything but
/// RFC 3986 unreserved characters is percent-encoded (spaces as `%20`).
pub fn encode_form(pairs: &[(String, String)]) -> String {
    let parts: Vec<String> =
        pairs.iter().map(|(k, v)| format!("{}={}", urlencoding::encode(k), urlencoding::encode(v))).collect();
    parts.join("&")
}

/// One path segment (node, storage, UPID, rule id): unreserved characters and the
/// `!`, `:`, `@` of UPIDs and HA ids (`UPID:...:root@pam!cradle:`, `vm:100`) stay as
/// they are, everything else is percent-encoded, so `/`, `?`, `#`, `+` or spaces cannot
/// change the path. `.`, `..` and the empty string are refused.
pub(crate) fn segment(what: &str, value: &str) -> Result<String, ProxmoxError> {
    if value.is_empty() || value == "." || value == ".." {
        return Err(ProxmoxError::InvalidArgument(format!("{what} {value:?} is not a valid path segment")));
    }
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!:@".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Ok(out)
}

/// `0`/`1`, the way PVE takes booleans.
pub(crate) fn flag(value: bool) -> &'static str {
    if value { "1" } else { "0" }
}

impl ProxmoxClient {
    /// Sends `call` and reads its `data` with `parse`; a parse failure becomes
    /// [`ProxmoxError::Decode`] naming the request.
    pub(crate) async fn fetch<T>(
        &self,
        call: Call,
        parse: impl FnOnce(&Value) -> Result<T, DecodeError>,
    ) -> Result<T, ProxmoxError> {
        let data = self.call(&call).await?;
        parse(&data).map_err(|detail| self.decode_error(&call, &detail.to_string()))
    }

    /// Sends `call`, repeating it after transient errors only when it is idempotent.
    pub(crate) async fn call(&self, call: &Call) -> Result<Value, ProxmoxError> {
        let retry = self.inner.retry;
        let mut attempt = 1u32;
        loop {
            match self.send_once(call).await {
                Ok(data) => return Ok(data),
                Err(e)
                    if call.idempotency == Idempotency::Idempotent
                        && e.is_transient()
                        && attempt < retry.max_attempts =>
                {
                    let pause = retry.backoff(attempt);
                    tracing::debug!(method = %call.method, path = %call.path, attempt, ?pause, error = %e, "retrying idempotent Proxmox call");
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn send_once(&self, call: &Call) -> Result<Value, ProxmoxError> {
        let in_query = call.method == Method::GET || call.method == Method::DELETE;
        let mut url = format!("{}{}", self.inner.base, call.path);
        if in_query && !call.params.is_empty() {
            url.push('?');
            url.push_str(&encode_form(&call.params));
        }
        let mut request = self
            .inner
            .http
            .request(call.method.clone(), &url)
            .header(AUTHORIZATION, self.inner.auth.clone())
            .header(ACCEPT, "application/json");
        if !in_query {
            request = request.header(CONTENT_TYPE, "application/x-www-form-urlencoded").body(encode_form(&call.params));
        }
        let response = request.send().await.map_err(|e| self.transport_error(call, &url, &e))?;
        let status = response.status();
        let body = read_body(response).await.map_err(|e| self.transport_error(call, &url, &e))?;
        if status.is_success() {
            let envelope: Value = serde_json::from_slice(&body)
                .map_err(|e| self.decode_error(call, &format!("the body is not JSON ({e})")))?;
            return match envelope {
                Value::Object(mut map) => Ok(map.remove("data").unwrap_or(Value::Null)),
                _ => Err(self.decode_error(call, "the body is not a {\"data\": ...} object")),
            };
        }
        Err(self.api_error(call, status, &body))
    }

    fn api_error(&self, call: &Call, status: reqwest::StatusCode, body: &[u8]) -> ProxmoxError {
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        let message = match parsed.as_ref().and_then(|v| v.get("message")).and_then(Value::as_str) {
            Some(m) => m.trim().to_string(),
            // Not JSON (a proxy page, an empty 596): keep a short excerpt of the text.
            None => String::from_utf8_lossy(body).trim().chars().take(300).collect(),
        };
        let message = self.scrub(&message);
        let mut errors = BTreeMap::new();
        if let Some(Value::Object(map)) = parsed.as_ref().and_then(|v| v.get("errors")) {
            for (k, v) in map {
                let text = v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
                errors.insert(k.clone(), self.scrub(text.trim()));
            }
        }
        let reason = match message.lines().next() {
            Some(first) if !first.is_empty() => first.to_string(),
            _ => status.canonical_reason().unwrap_or("").to_string(),
        };
        let kind = classify_answer(status.as_u16(), &message, &errors);
        ProxmoxError::Api {
            method: call.method_name(),
            path: call.path.clone(),
            status: status.as_u16(),
            reason,
            message,
            errors,
            kind,
        }
    }

    fn transport_error(&self, call: &Call, url: &str, e: &reqwest::Error) -> ProxmoxError {
        match self.inner.tls_failures.take() {
            Some(TlsFailure::Mismatch { presented, expected }) => ProxmoxError::FingerprintMismatch {
                endpoint: self.inner.endpoint.clone(),
                presented: presented.to_string(),
                expected: expected.to_string(),
            },
            Some(TlsFailure::Rejected(detail)) => {
                ProxmoxError::TlsRejected { endpoint: self.inner.endpoint.clone(), detail }
            }
            // No connection, so no request: say so instead of "may have acted".
            None if e.is_connect() => ProxmoxError::Unreachable {
                endpoint: self.inner.endpoint.clone(),
                method: call.method_name(),
                path: call.path.clone(),
                detail: self.scrub(&error_chain(e)),
            },
            None => ProxmoxError::Transport {
                method: call.method_name(),
                url: url.to_string(),
                detail: self.scrub(&error_chain(e)),
                timed_out: e.is_timeout(),
            },
        }
    }

    pub(crate) fn decode_error(&self, call: &Call, detail: &str) -> ProxmoxError {
        ProxmoxError::Decode {
            endpoint: self.inner.endpoint.clone(),
            method: call.method_name(),
            path: call.path.clone(),
            detail: self.scrub(detail),
        }
    }

    /// Removes the token (whole, and its secret part) from text that came from outside.
    fn scrub(&self, text: &str) -> String {
        let token = self.inner.token.expose();
        let mut out = text.replace(token, crate::secrets::REDACTED);
        if let Some((_, secret)) = token.split_once('=')
            && !secret.is_empty()
        {
            out = out.replace(secret, crate::secrets::REDACTED);
        }
        crate::secrets::redact(&out).into_owned()
    }
}

async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        // Stop reading at the cap; the truncated text still yields a clear decode error.
        let room = MAX_BODY.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if room <= chunk.len() {
            break;
        }
    }
    Ok(body)
}

/// `e` and its sources, `: `-joined.
fn error_chain(e: &reqwest::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

/// One multipart upload (`POST .../storage/{storage}/upload`): text fields
/// first, then the file, streamed from disk.
pub(crate) struct Upload<'a> {
    /// The API path.
    pub path: String,
    /// Fields sent before the file, in order (PVE reads `content` and the
    /// checksum before the file part).
    pub fields: Vec<(&'static str, String)>,
    /// The local file.
    pub file: &'a std::path::Path,
    /// The file name PVE stores it under.
    pub filename: String,
    /// How long the whole request may take.
    pub timeout: std::time::Duration,
}

impl ProxmoxClient {
    /// Sends `upload` once (never retried: PVE overwrites, but a second
    /// transfer of gigabytes is the caller's decision). Returns the `data` of
    /// the answer (the UPID of the `imgcopy` task).
    pub(crate) async fn send_upload(&self, upload: Upload<'_>) -> Result<Value, ProxmoxError> {
        let call = Call::new(Method::POST, upload.path.clone(), Idempotency::NotIdempotent);
        let url = format!("{}{}", self.inner.base, upload.path);
        let file = tokio::fs::File::open(upload.file).await.map_err(|e| {
            ProxmoxError::InvalidArgument(format!("cannot read {} for the upload: {e}", upload.file.display()))
        })?;
        let len = file.metadata().await.map(|m| m.len()).map_err(|e| {
            ProxmoxError::InvalidArgument(format!("cannot read {} for the upload: {e}", upload.file.display()))
        })?;
        let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(file, 1 << 20));
        let mut form = reqwest::multipart::Form::new();
        for (k, v) in upload.fields {
            form = form.text(k, v);
        }
        let part = reqwest::multipart::Part::stream_with_length(body, len)
            .file_name(upload.filename)
            .mime_str("application/octet-stream")
            .map_err(|e| self.transport_error(&call, &url, &e))?;
        form = form.part("filename", part);
        let response = self
            .inner
            .http
            .post(&url)
            .header(AUTHORIZATION, self.inner.auth.clone())
            .header(ACCEPT, "application/json")
            .timeout(upload.timeout)
            .multipart(form)
            .send()
            .await
            .map_err(|e| self.transport_error(&call, &url, &e))?;
        let status = response.status();
        let body = read_body(response).await.map_err(|e| self.transport_error(&call, &url, &e))?;
        if status.is_success() {
            let envelope: Value = serde_json::from_slice(&body)
                .map_err(|e| self.decode_error(&call, &format!("the body is not JSON ({e})")))?;
            return match envelope {
                Value::Object(mut map) => Ok(map.remove("data").unwrap_or(Value::Null)),
                _ => Err(self.decode_error(&call, "the body is not a {\"data\": ...} object")),
            };
        }
        Err(self.api_error(&call, status, &body))
    }
}
