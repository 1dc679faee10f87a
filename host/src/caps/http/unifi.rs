//! `auth = "unifi-login"`: UniFi Network's session login, for controllers
//! without an API key (UniFi Network before 9.0.114, classic controllers).
//!
//! Contract: the host logs in with the endpoint's `username` and its secret
//! (`token`) — `POST {origin}/api/auth/login` on UniFi OS (an endpoint URL
//! ending in `/proxy/network`), `POST {url}/api/login` on a classic
//! controller — keeps the session cookie (`TOKEN`, or `unifises` +
//! `csrf_token`) and the CSRF token (`X-CSRF-Token` of the login answer, or
//! the `csrf_token` cookie), and sends both on every request, taking the
//! newer token from `X-Updated-Csrf-Token`. A `401` (an expired or ended
//! session: a UniFi OS `TOKEN` lives 2 h) logs in again, once per request. None
//! of it reaches the caller: the cookies and tokens are taken out of the
//! answer's headers and registered with the redactor.
//!
//! Failure modes: a refused login names the endpoint and UniFi's `meta.msg`
//! (never the password); `429` (UniFi OS rate-limits logins, without
//! `Retry-After`) says to wait.

use reqwest::Url;
use reqwest::header::HeaderMap;

use crate::contract::CapError;
use crate::secrets::Secret;

/// A logged-in session.
pub(super) struct Session {
    /// The `Cookie` header to send.
    cookie: String,
    /// The CSRF token to send as `X-Csrf-Token`, if any.
    csrf: Option<String>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Session([redacted])")
    }
}

/// Headers of an answer that belong to the session, never to the caller.
pub(super) const SESSION_HEADERS: &[&str] = &["set-cookie", "x-csrf-token", "x-updated-csrf-token"];

/// Whether `base` is a UniFi OS console's Network application.
fn unifi_os(base: &Url) -> bool {
    base.path().trim_end_matches('/').ends_with("/proxy/network")
}

/// `name=value` of each `Set-Cookie` header.
fn cookies(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next()?.split_once('='))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect()
}

impl Session {
    /// Log in to the controller at `base` as `username`.
    pub(super) async fn login(
        client: &reqwest::Client,
        endpoint: &str,
        base: &Url,
        username: &str,
        password: &Secret,
    ) -> Result<Session, CapError> {
        let os = unifi_os(base);
        let url = if os {
            base.join("/api/auth/login")
        } else {
            Url::parse(&format!("{}/api/login", base.as_str().trim_end_matches('/')))
        }
        .map_err(|e| CapError::failed(format!("endpoint `{endpoint}`: no login URL: {e}")))?;
        let body = serde_json::json!({ "username": username, "password": password.expose(), "remember": false });
        let resp = client
            .post(url)
            .json(&body)
            .send()
            .await
            .map_err(|e| CapError::failed(format!("endpoint `{endpoint}`: the UniFi login failed: {e}")))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        if status == 429 {
            return Err(CapError::failed(format!(
                "endpoint `{endpoint}`: UniFi refused the login: too many logins (429); wait a minute, or use an API key (auth = \"api-key\")"
            )));
        }
        if status != 200 {
            let text = resp.text().await.unwrap_or_default();
            let msg = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["meta"]["msg"].as_str().map(str::to_string))
                .unwrap_or_else(|| format!("HTTP {status}"));
            return Err(CapError::failed(format!(
                "endpoint `{endpoint}`: UniFi refused the login of `{username}`: {msg} (check the user and the password secret)"
            )));
        }
        let jar = cookies(&headers);
        let wanted: &[&str] = if os { &["TOKEN"] } else { &["unifises", "csrf_token"] };
        let kept: Vec<&(String, String)> = jar.iter().filter(|(n, _)| wanted.contains(&n.as_str())).collect();
        if kept.is_empty() {
            return Err(CapError::failed(format!(
                "endpoint `{endpoint}`: the UniFi login answered without a session cookie ({}); is the URL {}?",
                wanted.join(" or "),
                if os { "the console's /proxy/network" } else { "the controller's base URL" }
            )));
        }
        let csrf = if os {
            headers.get("x-csrf-token").and_then(|v| v.to_str().ok()).map(str::to_string)
        } else {
            jar.iter().find(|(n, _)| n == "csrf_token").map(|(_, v)| v.clone())
        };
        for (_, v) in &kept {
            crate::secrets::register(v);
        }
        if let Some(c) = &csrf {
            crate::secrets::register(c);
        }
        let cookie = kept.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join("; ");
        Ok(Session { cookie, csrf })
    }

    /// Put the session on a request.
    pub(super) fn attach(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let builder = builder.header("cookie", &self.cookie);
        match &self.csrf {
            Some(c) => builder.header("x-csrf-token", c),
            None => builder,
        }
    }

    /// Take a rotated CSRF token from an answer.
    pub(super) fn update(&mut self, headers: &HeaderMap) {
        if let Some(c) = headers.get("x-updated-csrf-token").and_then(|v| v.to_str().ok()) {
            crate::secrets::register(c);
            self.csrf = Some(c.to_string());
        }
    }
}

#[cfg(test)]
#[path = "unifi_tests.rs"]
mod tests;
