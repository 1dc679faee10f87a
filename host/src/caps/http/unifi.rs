//! `auth = "unifi-login"`: UniFi Network's session login, for controllers
//! without an API key (UniFi Network before 9.0.114, classic controllers).
//!
//! Contract: the host logs in with the endpoint's `username` and its secret
//! (`token`) — `POST {origin}/api/auth/login` on UniFi OS (an endpoint URL
//! ending in `/proxy/network`), `POST {url}/api/login` on a classic
//! controller — keeps the session cookie (`TOKEN`, or `unifises` +
//! `csrf_token`) and the CSRF token, and sends both on every request. The CSRF
//! token is taken as both Go clients take it (`ubiquiti-community/go-unifi`
//! `unifi/unifi.go` `doRequest`): from every answer's `X-Updated-Csrf-Token`,
//! else its `X-Csrf-Token`; on UniFi OS, when the login answer has neither,
//! from the `csrfToken` claim of the `TOKEN` cookie (a JWT), and a `TOKEN`
//! re-issued in `Set-Cookie` replaces the cookie and its token. A `401` (an
//! expired or ended session: a UniFi OS `TOKEN` lives 2 h) or a `403 Invalid
//! CSRF Token` (a token the controller retired) logs in again, once per
//! request. None of it reaches the caller: the cookies and tokens are taken
//! out of the answer's headers and registered with the redactor.
//!
//! Failure modes: a refused login names the endpoint and UniFi's `meta.msg`
//! (never the password); `429` (UniFi OS rate-limits logins, without
//! `Retry-After`) says to wait; a CSRF token refused right after a new login
//! names the endpoint and says what to check.

use reqwest::Url;
use reqwest::header::HeaderMap;

use crate::contract::CapError;
use crate::secrets::Secret;

/// A logged-in session.
pub(super) struct Session {
    /// The session cookies to send (`name`, `value`).
    cookies: Vec<(String, String)>,
    /// The CSRF token to send as `X-Csrf-Token`, if any.
    csrf: Option<String>,
    /// A UniFi OS console (the `TOKEN` cookie carries the CSRF token).
    os: bool,
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

/// The `csrfToken` claim of a UniFi OS `TOKEN` cookie (a JWT: base64url
/// `header.payload.signature`), if it has one. The signature is not checked:
/// the token is only echoed back to the controller that made it.
fn jwt_csrf(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let json: serde_json::Value = serde_json::from_slice(&base64url(payload)?).ok()?;
    json.get("csrfToken")?.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

/// Decode unpadded (or padded) base64url; `None` if it is not.
fn base64url(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).ok()?);
        }
    }
    Some(out)
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
            // Some firmware sends the token only inside the TOKEN JWT.
            headers
                .get("x-csrf-token")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
                .or_else(|| kept.iter().find_map(|(_, v)| jwt_csrf(v)))
        } else {
            jar.iter().find(|(n, _)| n == "csrf_token").map(|(_, v)| v.clone())
        };
        for (_, v) in &kept {
            crate::secrets::register(v);
        }
        if let Some(c) = &csrf {
            crate::secrets::register(c);
        }
        let cookies = kept.into_iter().cloned().collect();
        Ok(Session { cookies, csrf, os })
    }

    /// Put the session on a request.
    pub(super) fn attach(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let cookie = self.cookies.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join("; ");
        let builder = builder.header("cookie", cookie);
        match &self.csrf {
            Some(c) => builder.header("x-csrf-token", c),
            None => builder,
        }
    }

    /// Take a rotated CSRF token (and a re-issued session cookie) from an
    /// answer, in the Go clients' order: `X-Updated-Csrf-Token`, else
    /// `X-Csrf-Token`, else the `csrfToken` of a new `TOKEN` cookie.
    pub(super) fn update(&mut self, headers: &HeaderMap) {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty());
        let mut csrf = header("x-updated-csrf-token").or_else(|| header("x-csrf-token")).map(str::to_string);
        for (name, value) in cookies(headers) {
            let Some(kept) = self.cookies.iter_mut().find(|(n, _)| *n == name) else { continue };
            if value.is_empty() {
                continue;
            }
            crate::secrets::register(&value);
            if self.os && name == "TOKEN" && csrf.is_none() {
                csrf = jwt_csrf(&value);
            }
            if !self.os && name == "csrf_token" && csrf.is_none() {
                csrf = Some(value.clone());
            }
            kept.1 = value;
        }
        if let Some(c) = csrf {
            crate::secrets::register(&c);
            self.csrf = Some(c);
        }
    }
}

/// Whether an answer is UniFi OS refusing the CSRF token (`403`, body
/// `Invalid CSRF Token`): the token was retired, a new login gets a new one.
pub(super) fn csrf_refused(status: u16, body: &[u8]) -> bool {
    status == 403 && String::from_utf8_lossy(body).to_ascii_lowercase().contains("invalid csrf token")
}

#[cfg(test)]
#[path = "unifi_tests.rs"]
mod tests;
