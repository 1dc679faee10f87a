//! A small Proxmox VE API client: token auth, PVE's `{"data": …}` envelope, form
//! bodies, and task waiting.
//!
//! Contract: every call either returns the `data` of a 2xx answer or a [`CallError`]
//! whose text names the call (`METHOD /path`, relative to `/api2/json`) and what went
//! wrong: the HTTP status with PVE's message and per-parameter errors, a transport
//! error, or — for calls that start a worker — the task's failed `exitstatus`. Task
//! waits poll `GET /nodes/{node}/tasks/{upid}/status` until `status = stopped`; `OK`
//! is success, `WARNINGS: N` is success with a warning (as PVE and bpg count it),
//! anything else is a failure. The token is only ever sent in the `Authorization`
//! header; no error carries it.

use std::fmt;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::creds::{self, Endpoint};

/// How long a task may run before the wait gives up (the providers' default timeouts).
const TASK_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// A failed API call, naming it.
#[derive(Debug, Clone)]
pub struct CallError {
    /// `GET`, `POST`, …
    pub method: &'static str,
    /// Path below `/api2/json`, e.g. `/nodes/pve1/qemu/120/config`.
    pub path: String,
    /// HTTP status, when there was an answer.
    pub status: Option<u16>,
    /// What went wrong.
    pub detail: String,
}

impl CallError {
    /// Whether PVE answered that the VM's config does not exist (the VM is gone).
    pub fn is_missing_vm(&self) -> bool {
        self.detail.contains("does not exist") && self.detail.contains("qemu-server")
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(s) => write!(f, "{} {}: HTTP {s}: {}", self.method, self.path, self.detail),
            None => write!(f, "{} {}: {}", self.method, self.path, self.detail),
        }
    }
}

/// A connected client.
pub struct Pve {
    http: reqwest::Client,
    base: String,
    auth: String,
}

impl fmt::Debug for Pve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pve").field("base", &self.base).finish_non_exhaustive()
    }
}

/// Percent-encode one path segment (UPIDs carry `:`, `@` and `!`).
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

/// PVE's error text from an error body: the message plus per-parameter errors.
fn pve_message(body: &Value, status: reqwest::StatusCode) -> String {
    let mut msg = body.get("message").and_then(Value::as_str).unwrap_or("").trim().to_string();
    if msg.is_empty() {
        msg = status.canonical_reason().unwrap_or("error").to_string();
    }
    if let Some(errors) = body.get("errors").and_then(Value::as_object) {
        let list: Vec<String> =
            errors.iter().map(|(k, v)| format!("{k}: {}", v.as_str().unwrap_or(&v.to_string()).trim())).collect();
        if !list.is_empty() {
            msg = format!("{msg} ({})", list.join("; "));
        }
    }
    msg
}

impl Pve {
    /// A client for `endpoint` with the TLS trust the environment asks for.
    pub fn new(endpoint: Endpoint) -> Result<Self, String> {
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .timeout(Duration::from_secs(120))
            .connect_timeout(Duration::from_secs(20));
        if endpoint.insecure {
            builder = builder.danger_accept_invalid_certs(true);
        } else {
            let pem = creds::trust_bundle()?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("the CA bundle does not parse: {}", error_chain(&e)))?;
            if certs.is_empty() {
                return Err("the CA bundle holds no certificate".into());
            }
            for c in certs {
                builder = builder.add_root_certificate(c);
            }
        }
        let http = builder.build().map_err(|e| format!("cannot build the HTTPS client: {}", error_chain(&e)))?;
        Ok(Pve { http, base: endpoint.base, auth: endpoint.auth })
    }

    async fn call(&self, method: &'static str, path: &str, params: &[(&str, String)]) -> Result<Value, CallError> {
        let fail = |status: Option<u16>, detail: String| CallError { method, path: path.to_string(), status, detail };
        let url = format!("{}{}", self.base, path);
        let m = reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| fail(None, e.to_string()))?;
        let mut req = self.http.request(m, url).header(reqwest::header::AUTHORIZATION, &self.auth);
        if matches!(method, "GET" | "DELETE") {
            if !params.is_empty() {
                req = req.query(params);
            }
        } else {
            req = req.form(params);
        }
        let resp = req.send().await.map_err(|e| fail(None, format!("request failed: {}", error_chain(&e))))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| fail(Some(status.as_u16()), error_chain(&e)))?;
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(fail(Some(status.as_u16()), pve_message(&body, status)));
        }
        Ok(body.get("data").cloned().unwrap_or(Value::Null))
    }

    /// `GET path?query`.
    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, CallError> {
        self.call("GET", path, query).await
    }

    /// `PUT path` with a form body.
    pub async fn put(&self, path: &str, form: &[(&str, String)]) -> Result<Value, CallError> {
        self.call("PUT", path, form).await
    }

    /// A call that starts a worker (`POST`/`PUT`/`DELETE` answering a UPID), waited
    /// for. Returns the task's warnings; a failed task is an error naming this call.
    pub async fn task(
        &self,
        method: &'static str,
        path: &str,
        params: &[(&str, String)],
    ) -> Result<Vec<String>, CallError> {
        let data = self.call(method, path, params).await?;
        let Some(upid) = data.as_str() else {
            // Synchronous answer (e.g. `null`): nothing to wait for.
            return Ok(Vec::new());
        };
        self.wait(upid).await.map_err(|detail| CallError { method, path: path.to_string(), status: None, detail })
    }

    /// Wait for a task to stop; `Err` is the failure text (the exit status or why the
    /// status could not be read).
    async fn wait(&self, upid: &str) -> Result<Vec<String>, String> {
        let node = upid.split(':').nth(1).filter(|n| !n.is_empty()).ok_or_else(|| format!("bad UPID '{upid}'"))?;
        let path = format!("/nodes/{}/tasks/{}/status", segment(node), segment(upid));
        let start = Instant::now();
        let mut delay = Duration::from_millis(20);
        loop {
            let st = self.get(&path, &[]).await.map_err(|e| format!("waiting for task {upid}: {e}"))?;
            if st.get("status").and_then(Value::as_str) == Some("stopped") {
                let exit = st.get("exitstatus").and_then(Value::as_str).unwrap_or("");
                return match exit {
                    "OK" => Ok(Vec::new()),
                    w if w.starts_with("WARNINGS: ") && !w.contains("ERROR") => {
                        Ok(vec![format!("task {upid} completed with warnings ({w})")])
                    }
                    other => Err(format!("task {upid} failed: {other}")),
                };
            }
            if start.elapsed() > TASK_TIMEOUT {
                return Err(format!("task {upid} still running after {}s", TASK_TIMEOUT.as_secs()));
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upid_segments_are_percent_encoded() {
        assert_eq!(
            segment("UPID:pve1:0001:x:qmclone:9000:root@pam!t:"),
            "UPID%3Apve1%3A0001%3Ax%3Aqmclone%3A9000%3Aroot%40pam%21t%3A"
        );
    }

    #[test]
    fn pve_errors_carry_message_and_parameter_errors() {
        let body = serde_json::json!({"data": null, "message": "Parameter verification failed.\n", "errors": {"vmid": "VM 120 already exists"}});
        let m = pve_message(&body, reqwest::StatusCode::BAD_REQUEST);
        assert_eq!(m, "Parameter verification failed. (vmid: VM 120 already exists)");
    }
}
