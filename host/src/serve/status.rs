//! Who may read the operator's view (`GET /metrics` and the status page under
//! `/status`) on the webhook listener: `[serve.status]`.
//!
//! Contract:
//! - without `[serve.status]` there is no view: its paths answer `404` as any
//!   unknown path does;
//! - on a loopback listen address with `open_on_loopback` (the default), any
//!   reader may read whose request is addressed to a loopback name (`Host`:
//!   `localhost`, `127.0.0.1:PORT`, `[::1]`; none at all is a local client):
//!   a browser sent to a hostile site whose name was rebound to 127.0.0.1
//!   gets `403` (DNS rebinding);
//! - otherwise a reader needs `Authorization: Bearer TOKEN` with the
//!   configured token (compared in constant time and independent of its
//!   length: both sides are MACed under a key made at start), or, only when
//!   `trust_proxy = true`, a non-empty `proxy_user_header`, or a browser
//!   session cookie that `POST /status/login` with the token opened (random,
//!   `HttpOnly`, `SameSite=Strict`, valid [`SESSION_TTL`], at most
//!   [`MAX_SESSIONS`] at once: the oldest is dropped); else `401`;
//! - a listener that nobody could be kept out of does not start
//!   ([`Access::new`] fails naming the keys); the token is never logged or
//!   served.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::HeaderMap;
use hyper::header::{AUTHORIZATION, COOKIE, HOST, HeaderName};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use crate::config::ServeConfig;

/// How long a browser session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Browser sessions held at once.
pub const MAX_SESSIONS: usize = 1024;
/// The session cookie's name.
pub const COOKIE_NAME: &str = "cradle_status";

/// The access rule of the operator's view, ready for requests.
pub struct Access {
    open: bool,
    /// The MAC key and the token's tag under it.
    token: Option<(hmac::Key, hmac::Tag)>,
    proxy_header: Option<HeaderName>,
    /// Browser sessions by id, with when they were opened.
    sessions: Mutex<HashMap<String, Instant>>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("open", &self.open)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("proxy_header", &self.proxy_header)
            .finish()
    }
}

impl Access {
    /// The rule of `config.status` for a listener on `listen`; `None` when
    /// `[serve.status]` is absent. Fails (naming the key) when the listener
    /// would need credentials and none are configured, or the token cannot be
    /// resolved.
    pub fn new(config: &ServeConfig, listen: SocketAddr) -> Result<Option<Access>, String> {
        let Some(status) = &config.status else { return Ok(None) };
        status.check_listen(listen)?;
        let token = match &status.token {
            None => None,
            Some(r) => {
                let secret = r.resolve().map_err(|e| format!("serve.status.token: {e}"))?;
                let key = hmac::Key::generate(hmac::HMAC_SHA256, &SystemRandom::new())
                    .map_err(|_| "serve.status.token: no random key for the comparison".to_string())?;
                let tag = hmac::sign(&key, secret.expose().as_bytes());
                Some((key, tag))
            }
        };
        let proxy_header = match status.trusted_header() {
            None => None,
            Some(h) => Some(
                HeaderName::from_bytes(h.as_bytes())
                    .map_err(|e| format!("serve.status.proxy_user_header = \"{h}\": {e}"))?,
            ),
        };
        Ok(Some(Access { open: status.open_on(listen), token, proxy_header, sessions: Mutex::default() }))
    }

    /// An access rule from its parts (tests).
    #[cfg(test)]
    pub fn from_parts(open: bool, token: Option<&str>, proxy_header: Option<&str>) -> Access {
        let token = token.map(|t| {
            let key = hmac::Key::new(hmac::HMAC_SHA256, b"test key");
            let tag = hmac::sign(&key, t.as_bytes());
            (key, tag)
        });
        let proxy_header = proxy_header.and_then(|h| HeaderName::from_bytes(h.as_bytes()).ok());
        Access { open, token, proxy_header, sessions: Mutex::default() }
    }

    /// Whether readers need no credentials.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Whether `given` is the token.
    fn token_matches(&self, given: &[u8]) -> bool {
        self.token.as_ref().is_some_and(|(key, tag)| hmac::verify(key, given, tag.as_ref()).is_ok())
    }

    /// A new browser session for a reader who sent the token, as the cookie
    /// value; `None` for a wrong token (or no token configured).
    pub fn login(&self, given: &[u8]) -> Option<String> {
        if !self.token_matches(given.trim_ascii()) {
            return None;
        }
        let mut raw = [0u8; 32];
        SystemRandom::new().fill(&mut raw).ok()?;
        let id = hex::encode(raw);
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        sessions.retain(|_, opened| now.duration_since(*opened) < SESSION_TTL);
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions.iter().min_by_key(|(_, t)| **t).map(|(k, _)| k.clone())
        {
            sessions.remove(&oldest);
        }
        sessions.insert(id.clone(), now);
        Some(id)
    }

    /// When the session a cookie in `headers` names ends, if it names one.
    fn session_end(&self, headers: &HeaderMap) -> Option<Instant> {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if sessions.is_empty() {
            return None;
        }
        headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().strip_prefix(COOKIE_NAME)?.strip_prefix('='))
            .filter_map(|id| sessions.get(id).map(|opened| *opened + SESSION_TTL))
            .find(|end| Instant::now() < *end)
    }

    /// Whether a request with `headers` may read.
    pub fn allows(&self, headers: &HeaderMap) -> bool {
        matches!(self.admit(headers), Verdict::Reader { .. })
    }

    /// Whether a request with `headers` may read, and for how long (module
    /// docs). An open listener admits only requests addressed to a loopback
    /// name (the `Host` header), so a web page whose name was rebound to
    /// 127.0.0.1 (DNS rebinding) cannot read through the operator's browser.
    pub fn admit(&self, headers: &HeaderMap) -> Verdict {
        let host = headers.get(HOST).map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned());
        if self.open && host.as_deref().is_none_or(loopback_host) {
            return Verdict::Reader { until: None };
        }
        if let Some(given) = headers.get(AUTHORIZATION).and_then(|v| bearer(v.as_bytes()))
            && self.token_matches(given)
        {
            return Verdict::Reader { until: None };
        }
        if let Some(h) = &self.proxy_header
            && headers.get(h).is_some_and(|v| !v.as_bytes().trim_ascii().is_empty())
        {
            return Verdict::Reader { until: None };
        }
        if let Some(end) = self.session_end(headers) {
            return Verdict::Reader { until: Some(end) };
        }
        match host {
            Some(host) if self.open => Verdict::ForeignHost(host),
            _ => Verdict::Refused,
        }
    }
}

/// What [`Access::admit`] says of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It may read, until its session ends (`None`: no end).
    Reader {
        /// When its session ends.
        until: Option<Instant>,
    },
    /// No valid credentials.
    Refused,
    /// Open on loopback, but addressed to this name, not a loopback one.
    ForeignHost(String),
}

impl Verdict {
    /// Why a foreign host was refused, for the answer and the log.
    pub fn foreign_host_message(host: &str) -> String {
        format!(
            "this listener is open on loopback only to requests addressed to a loopback name, not `{}` \
             (a guard against DNS rebinding): open it as http://localhost:PORT or http://127.0.0.1:PORT, \
             or set serve.status.token to read it under another name",
            crate::text::printable(host)
        )
    }
}

/// Whether a `Host` header value names this machine's loopback: `localhost`
/// (and `*.localhost`, which browsers resolve to loopback themselves) or a
/// loopback address, with or without a port.
fn loopback_host(host: &str) -> bool {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The token of `Bearer TOKEN` (the scheme is case-insensitive).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let value = value.trim_ascii();
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first().is_none_or(|b| *b != b' ') {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).expect("value"));
        }
        h
    }

    #[test]
    fn a_bearer_token_is_needed_unless_open_and_a_proxy_header_only_when_trusted() {
        let none = headers(&[]);
        assert!(Access::from_parts(true, None, None).allows(&none), "open on loopback");
        let closed = Access::from_parts(false, Some("s3cret-token"), None);
        assert!(!closed.allows(&none));
        assert!(closed.allows(&headers(&[("authorization", "Bearer s3cret-token")])));
        assert!(closed.allows(&headers(&[("authorization", "bearer   s3cret-token ")])));
        for wrong in ["Bearer s3cret-toke", "Bearer s3cret-token2", "Basic s3cret-token", "Bearer ", "s3cret-token"] {
            assert!(!closed.allows(&headers(&[("authorization", wrong)])), "{wrong}");
        }
        assert!(!closed.allows(&headers(&[("x-forwarded-user", "alice")])), "no proxy configured");
        let proxied = Access::from_parts(false, None, Some("X-Forwarded-User"));
        assert!(proxied.allows(&headers(&[("x-forwarded-user", "alice")])));
        assert!(!proxied.allows(&headers(&[("x-forwarded-user", " ")])));
        assert!(!proxied.allows(&none));
    }

    #[test]
    fn a_session_cookie_is_opened_only_by_the_token_and_lets_its_browser_in() {
        let a = Access::from_parts(false, Some("s3cret-token"), None);
        assert_eq!(a.login(b"wrong"), None);
        assert!(!a.allows(&headers(&[("cookie", "cradle_status=guessed")])));
        let id = a.login(b"s3cret-token\n").expect("the token opens a session");
        assert_eq!(id.len(), 64);
        assert!(a.allows(&headers(&[("cookie", &format!("other=1; cradle_status={id}"))])));
        assert!(!a.allows(&headers(&[("cookie", &format!("cradle_status={id}x"))])));
        assert!(!a.allows(&headers(&[("cookie", &format!("xcradle_status={id}"))])));
        let proxied = Access::from_parts(false, None, Some("X-Forwarded-User"));
        assert_eq!(proxied.login(b""), None, "no token configured: no login");
    }

    #[test]
    fn open_on_loopback_admits_only_requests_addressed_to_a_loopback_name() {
        let open = Access::from_parts(true, None, None);
        for host in
            ["localhost", "LOCALHOST:8085", "127.0.0.1:8085", "127.1.2.3", "[::1]:8085", "app.localhost", "localhost."]
        {
            assert!(open.allows(&headers(&[("host", host)])), "{host}");
        }
        for host in ["evil.example", "evil.example:8085", "127.0.0.1.evil.example", "10.0.0.1:8085", "localhost.evil"] {
            assert_eq!(open.admit(&headers(&[("host", host)])), Verdict::ForeignHost(host.to_string()), "{host}");
        }
        let with_token = Access::from_parts(true, Some("s3cret-token"), None);
        let both = headers(&[("host", "cradle.example"), ("authorization", "Bearer s3cret-token")]);
        assert_eq!(with_token.admit(&both), Verdict::Reader { until: None }, "credentials still work");
    }

    #[test]
    fn a_session_admits_until_it_ends() {
        let a = Access::from_parts(false, Some("t0ken"), None);
        let id = a.login(b"t0ken").expect("session");
        match a.admit(&headers(&[("cookie", &format!("cradle_status={id}"))])) {
            Verdict::Reader { until: Some(end) } => {
                let left = end.saturating_duration_since(Instant::now());
                assert!(left > SESSION_TTL - Duration::from_secs(60) && left <= SESSION_TTL, "{left:?}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(a.admit(&headers(&[])), Verdict::Refused);
    }

    #[test]
    fn the_token_is_never_printed() {
        let a = Access::from_parts(false, Some("CANARY-STATUS-TOKEN"), None);
        assert!(!format!("{a:?}").contains("CANARY"), "{a:?}");
    }
}
