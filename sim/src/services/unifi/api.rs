//! The controller's HTTP API: routing by style, login and sessions, CSRF, API keys,
//! the login rate limit, and the site-scoped endpoints.
//!
//! Contract: see the parent module. Unknown paths under the API prefix answer 404
//! with `api.err.NotFound` once authenticated; paths outside it answer an empty 404.
//! A missing, unknown, ended or expired session (or a wrong API key) is 401
//! `api.err.LoginRequired`; on UniFi OS a missing or stale `X-Csrf-Token` is 403
//! `Invalid CSRF Token`. Sessions expire `session_ttl` after their login.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use super::state::{ApiErr, INVALID_PAYLOAD, Session, State, UNKNOWN_USER};
use super::{CsrfAnnounce, LoginLimit, UnifiConfig, UnifiStyle};
use crate::services::http::{Handler, Request, Response};
use crate::services::{Secret, eq_ct, random_hex};
use crate::sim::lock;

const LOGIN_REQUIRED: ApiErr = ApiErr::new(401, "api.err.LoginRequired");
const INVALID_LOGIN: ApiErr = ApiErr::new(400, "api.err.Invalid");
const NOT_FOUND: ApiErr = ApiErr::new(404, "api.err.NotFound");

/// The request handler of one controller.
pub(super) struct Api {
    style: UnifiStyle,
    tls: bool,
    username: String,
    password: Secret,
    api_key: Option<Secret>,
    no_site_status: u16,
    login_limit: Option<LoginLimit>,
    put_returns_empty: bool,
    create_returns_empty: bool,
    rotate_csrf: bool,
    csrf_announce: CsrfAnnounce,
    login_csrf_header: bool,
    list_seen_clients: bool,
    session_ttl: Option<Duration>,
    server_version: String,
    uuid: String,
    user_id: String,
    state: Arc<Mutex<State>>,
}

fn ok(data: Vec<Value>) -> Response {
    Response::json(200, &json!({"meta": {"rc": "ok"}, "data": data}))
}

fn err(e: ApiErr) -> Response {
    Response::json(e.status, &json!({"meta": {"rc": "error", "msg": e.msg}, "data": []}))
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl Api {
    pub fn new(cfg: &UnifiConfig, password: Secret, api_key: Option<Secret>, state: Arc<Mutex<State>>) -> Self {
        Api {
            style: cfg.style,
            tls: cfg.listen.tls,
            username: cfg.username.clone(),
            password,
            api_key,
            no_site_status: cfg.no_site_context_status,
            login_limit: cfg.login_limit,
            put_returns_empty: cfg.put_returns_empty,
            create_returns_empty: cfg.create_returns_empty,
            rotate_csrf: cfg.rotate_csrf,
            csrf_announce: cfg.csrf_announce,
            login_csrf_header: cfg.login_csrf_header,
            list_seen_clients: cfg.list_seen_clients,
            session_ttl: cfg.session_ttl,
            server_version: cfg.server_version.clone(),
            uuid: crate::model::ids::random_uuid(),
            user_id: crate::model::ids::random_uuid(),
            state,
        }
    }

    fn status(&self) -> Response {
        let meta = json!({"rc": "ok", "up": true, "server_version": self.server_version, "uuid": self.uuid});
        Response::json(200, &json!({"meta": meta, "data": []}))
    }

    /// The credentials of a login body, if they are the admin's.
    fn credentials_ok(&self, req: &Request) -> Result<bool, ApiErr> {
        let body = req.json().map_err(|_| INVALID_PAYLOAD)?;
        let field = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_string);
        let (Some(user), Some(pass)) = (field("username"), field("password")) else { return Ok(false) };
        Ok(eq_ct(user.as_bytes(), self.username.as_bytes()) && self.password.matches(&pass))
    }

    fn cookie_attrs(&self) -> &'static str {
        if self.tls { "; Path=/; Secure; HttpOnly" } else { "; Path=/; HttpOnly" }
    }

    fn login_classic(&self, req: &Request) -> Response {
        match self.credentials_ok(req) {
            Err(e) => return err(e),
            Ok(false) => return err(INVALID_LOGIN),
            Ok(true) => {}
        }
        let (token, csrf) = (random_hex(16), random_hex(16));
        lock(&self.state).add_session(token.clone(), csrf.clone());
        let secure = if self.tls { "; Path=/; Secure" } else { "; Path=/" };
        ok(vec![])
            .with_header("set-cookie", format!("unifises={token}{}", self.cookie_attrs()))
            .with_header("set-cookie", format!("csrf_token={csrf}{secure}"))
    }

    /// Whether this login attempt is over the limit (it counts either way).
    fn rate_limited(&self, st: &mut State) -> bool {
        if st.forced_429 > 0 {
            st.forced_429 -= 1;
            return true;
        }
        let Some(limit) = self.login_limit else { return false };
        let now = tokio::time::Instant::now();
        while st.login_attempts.front().is_some_and(|t| now.duration_since(*t) >= limit.window) {
            st.login_attempts.pop_front();
        }
        if st.login_attempts.len() >= limit.max as usize {
            return true;
        }
        st.login_attempts.push_back(now);
        false
    }

    fn login_os(&self, req: &Request) -> Response {
        if self.rate_limited(&mut lock(&self.state)) {
            // UniFi OS sends no Retry-After.
            return Response::empty(429);
        }
        match self.credentials_ok(req) {
            Err(e) => return err(e),
            Ok(false) => return err(INVALID_LOGIN),
            Ok(true) => {}
        }
        let csrf = crate::model::ids::random_uuid();
        let now = crate::model::ids::now_unix();
        let header = b64(br#"{"alg":"HS256","typ":"JWT"}"#);
        // Real consoles' JWTs say `exp` = `iat` + 2 h; with a `session_ttl`, `iat` + that.
        let lifetime = self.session_ttl.map_or(7200, |d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
        let payload = json!({"userId": self.user_id, "csrfToken": csrf, "jti": crate::model::ids::random_uuid(),
            "iat": now, "exp": now + lifetime});
        let signature: [u8; 32] = crate::model::ids::random_bytes();
        let token = format!("{header}.{}.{}", b64(payload.to_string().as_bytes()), b64(&signature));
        lock(&self.state).add_session(token.clone(), csrf.clone());
        let body = json!({"unique_id": self.user_id, "username": self.username, "isOwner": true});
        let resp = Response::json(200, &body)
            .with_header("set-cookie", format!("TOKEN={token}{}; SameSite=None", self.cookie_attrs()));
        if self.login_csrf_header { resp.with_header("x-csrf-token", csrf) } else { resp }
    }

    fn logout(&self, session: Option<&str>) -> Response {
        if let Some(s) = session {
            lock(&self.state).sessions.remove(s);
        }
        ok(vec![])
    }

    /// The live (not ended, not expired) session of cookie value `token`.
    fn session<'a>(&self, st: &'a mut State, token: &str) -> Option<&'a mut Session> {
        st.session(token, self.session_ttl, tokio::time::Instant::now())
    }

    /// UniFi OS auth: an API key, or the `TOKEN` session plus its CSRF token. `Ok`
    /// carries the rotated CSRF token to announce, if any.
    fn authorize_os(&self, req: &Request) -> Result<Option<String>, Response> {
        if let Some(key) = req.header("x-api-key") {
            return match &self.api_key {
                Some(k) if k.matches(key) => Ok(None),
                _ => Err(err(LOGIN_REQUIRED)),
            };
        }
        let mut st = lock(&self.state);
        let Some(session) = req.cookie("TOKEN").and_then(|t| self.session(&mut st, t)) else {
            return Err(err(LOGIN_REQUIRED));
        };
        let sent = req.header("x-csrf-token").unwrap_or_default();
        if !eq_ct(sent.as_bytes(), session.csrf.as_bytes()) {
            return Err(Response::text(403, "text/plain; charset=utf-8", "Invalid CSRF Token"));
        }
        if !self.rotate_csrf {
            return Ok(None);
        }
        session.csrf = crate::model::ids::random_uuid();
        Ok(Some(session.csrf.clone()))
    }

    /// `{api}/...` once authenticated; `rest` starts after `/api`.
    fn network_api(&self, req: &Request, segs: &[String]) -> Response {
        let method = req.method.as_str();
        match segs {
            [a, b] if a == "self" && b == "sites" && method == "GET" => {
                let st = lock(&self.state);
                let sites = st
                    .sites
                    .iter()
                    .map(|s| {
                        let desc = if s.name == "default" { "Default".to_string() } else { s.name.clone() };
                        json!({"_id": s.id, "name": s.name, "desc": desc, "role": "admin"})
                    })
                    .collect();
                ok(sites)
            }
            [s, site, tail @ ..] if s == "s" => {
                let site_id = match lock(&self.state).site(site) {
                    Some(s) => s.id.clone(),
                    None => return err(ApiErr::new(self.no_site_status, "api.err.NoSiteContext")),
                };
                self.site_api(req, site, &site_id, tail)
            }
            _ => err(NOT_FOUND),
        }
    }

    /// `POST group/user {"objects":[{"data":{...}}]}`: each object created or
    /// refused with its own `meta`. A refused object makes the answer 400
    /// (`api.err.InvalidFixedIP (400 )` for `POST .../group/user` in a third-party
    /// Terraform run); the envelope then names the first refusal.
    fn group_user(&self, req: &Request, site: &str, site_id: &str) -> Response {
        let Ok(b) = req.json() else { return err(INVALID_PAYLOAD) };
        let Some(objects) = b.get("objects").and_then(Value::as_array) else { return err(INVALID_PAYLOAD) };
        let mut st = lock(&self.state);
        let mut results = Vec::new();
        let mut refused: Option<ApiErr> = None;
        for o in objects {
            let data = o.get("data").cloned().unwrap_or(Value::Null);
            results.push(match st.create_user(site, &data) {
                Ok(_) if self.create_returns_empty => json!({"meta": {"rc": "ok"}, "data": []}),
                Ok(u) => json!({"meta": {"rc": "ok"}, "data": [u.json(site_id, false)]}),
                Err(e) => {
                    let nested = json!({"meta": {"rc": "error", "msg": e.msg}, "data": []});
                    refused.get_or_insert(e);
                    nested
                }
            });
        }
        match refused {
            Some(e) => Response::json(e.status, &json!({"meta": {"rc": "error", "msg": e.msg}, "data": results})),
            None => ok(results),
        }
    }

    fn site_api(&self, req: &Request, site: &str, site_id: &str, tail: &[String]) -> Response {
        let tail: Vec<&str> = tail.iter().map(String::as_str).collect();
        if req.method == "POST" && tail == ["group", "user"] {
            return self.group_user(req, site, site_id);
        }
        let mut st = lock(&self.state);
        let result: Result<Vec<Value>, ApiErr> = match (req.method.as_str(), tail.as_slice()) {
            ("GET", ["rest", "networkconf"]) => {
                Ok(st.nets.iter().filter(|n| n.site == site).map(|n| n.json(site_id)).collect())
            }
            ("GET", ["rest", "networkconf", id]) => {
                Ok(st.nets.iter().filter(|n| n.site == site && n.id == *id).map(|n| n.json(site_id)).collect())
            }
            ("GET", ["rest", "user"]) => Ok(st
                .users
                .iter()
                .filter(|u| u.site == site && (u.configured || self.list_seen_clients))
                .map(|u| u.json(site_id, false))
                .collect()),
            ("GET", ["rest", "user", id]) => {
                Ok(st.users.iter().filter(|u| u.site == site && u.id == *id).map(|u| u.json(site_id, false)).collect())
            }
            ("POST", ["rest", "user"]) => req
                .json()
                .map_err(|_| INVALID_PAYLOAD)
                .and_then(|b| st.create_user(site, &b).map(|u| vec![u.json(site_id, false)]))
                .map(|made| if self.create_returns_empty { vec![] } else { made }),
            ("PUT", ["rest", "user", id]) => req.json().map_err(|_| INVALID_PAYLOAD).and_then(|b| {
                let u = st.replace_user(site, id, &b)?;
                Ok(if self.put_returns_empty { vec![] } else { vec![u.json(site_id, false)] })
            }),
            ("DELETE", ["rest", "user", id]) => st.delete_user(site, id).map(|()| vec![]),
            ("GET", ["stat", "user", mac]) => {
                st.user_by_mac(site, mac).map(|u| vec![u.json(site_id, true)]).ok_or(UNKNOWN_USER)
            }
            ("POST", ["cmd", "stamgr"]) => req.json().map_err(|_| INVALID_PAYLOAD).and_then(|b| {
                let macs: Option<Vec<String>> = b
                    .get("macs")
                    .and_then(Value::as_array)
                    .and_then(|a| a.iter().map(|m| m.as_str().map(str::to_string)).collect());
                match (b.get("cmd").and_then(Value::as_str), macs) {
                    (Some("forget-sta"), Some(macs)) => {
                        Ok(st.forget(site, &macs).iter().map(|u| u.json(site_id, false)).collect())
                    }
                    _ => Err(INVALID_PAYLOAD),
                }
            }),
            _ => Err(NOT_FOUND),
        };
        match result {
            Ok(data) => ok(data),
            Err(e) => err(e),
        }
    }
}

impl Handler for Api {
    fn handle(&self, req: &Request) -> Response {
        let path = req.path.as_str();
        if path.starts_with("/api/s/") || path.starts_with("/proxy/network/api/") {
            lock(&self.state).calls.push(format!("{} {path}", req.method));
        }
        let post = req.method == "POST";
        match self.style {
            UnifiStyle::Classic => match path {
                // A standalone controller redirects to its UI.
                "/" => Response::empty(302).with_header("location", "/manage"),
                "/status" => self.status(),
                "/api/login" if post => self.login_classic(req),
                "/api/logout" if post => self.logout(req.cookie("unifises")),
                p if p.starts_with("/api/") => {
                    let known =
                        req.cookie("unifises").is_some_and(|t| self.session(&mut lock(&self.state), t).is_some());
                    if !known {
                        return err(LOGIN_REQUIRED);
                    }
                    self.network_api(req, &req.segments()[1..])
                }
                _ => Response::empty(404),
            },
            UnifiStyle::UnifiOs => match path {
                "/" => Response::text(
                    200,
                    "text/html; charset=utf-8",
                    "<!DOCTYPE html><html><head><title>UniFi OS</title></head><body></body></html>",
                ),
                "/proxy/network/status" => self.status(),
                "/api/auth/login" if post => self.login_os(req),
                "/api/auth/logout" if post => self.logout(req.cookie("TOKEN")),
                p if p.starts_with("/proxy/network/api/") => match self.authorize_os(req) {
                    Err(resp) => resp,
                    Ok(rotated) => {
                        let resp = self.network_api(req, &req.segments()[3..]);
                        let header = match self.csrf_announce {
                            CsrfAnnounce::Updated => "x-updated-csrf-token",
                            CsrfAnnounce::Current => "x-csrf-token",
                        };
                        match rotated {
                            Some(t) => resp.with_header(header, t),
                            None => resp,
                        }
                    }
                },
                _ => Response::empty(404),
            },
        }
    }
}
