//! A Technitium DNS Server stand-in: the HTTP API cradle uses to publish a VM's A
//! record (and PTR) once it is up.
//!
//! Contract (facts in `docs/STAND-INS.md`, "Technitium DNS"): every call accepts GET
//! or POST (form data); auth is `Authorization: Bearer <token>` or the `token=`
//! parameter; `/api/user/login` gives a session token (expires after
//! `session_timeout` without calls), `/api/user/createToken` a non-expiring API token.
//! Answers are `{"response":{...},"server":"<domain>","status":"ok"}` (login and
//! createToken without `response`), errors `{"status":"error","errorMessage":"..."}`
//! and `{"status":"invalid-token",...}` — all with HTTP 200. Zones are Primary zones
//! with records as [`zones`] describes (overwrite, PTR, delete of the matching PTR,
//! exact error texts). Unknown `/api/` paths answer an empty 404 once authenticated.
//! State lives in memory for the life of the handle.

mod api;
mod names;
mod zones;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::http::{Listen, Served};
use super::{Secret, ServiceError, Stamp};
use crate::sim::lock;

/// How to start a Technitium stand-in.
#[derive(Debug, Clone)]
pub struct TechnitiumConfig {
    /// Where to listen (default plain HTTP on an ephemeral loopback port; the real
    /// server's default is HTTP on 5380).
    pub listen: Listen,
    /// The admin's user name (default `admin`).
    pub username: String,
    /// The admin's password; `None` = generated.
    pub password: Option<Secret>,
    /// A non-expiring API token (named `cradle`) that exists from the start; `None` =
    /// generated.
    pub api_token: Option<Secret>,
    /// Primary zones that exist from the start (default `lab.example.com`).
    pub zones: Vec<String>,
    /// The server's domain (`"server"` in answers, the zones' SOA/NS name; default
    /// `dns.sim`).
    pub server_domain: String,
    /// A login session expires after this long without calls (default 30 minutes).
    pub session_timeout: Duration,
    /// The TTL of records added without `ttl` (default 3600).
    pub default_ttl: u32,
}

impl Default for TechnitiumConfig {
    fn default() -> Self {
        TechnitiumConfig {
            listen: Listen::loopback(),
            username: "admin".into(),
            password: None,
            api_token: None,
            zones: vec!["lab.example.com".into()],
            server_domain: "dns.sim".into(),
            session_timeout: Duration::from_secs(30 * 60),
            default_ttl: 3600,
        }
    }
}

/// A record as the server holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TechnitiumRecord {
    /// The zone it is in.
    pub zone: String,
    /// Its owner name (lower-case, no trailing dot).
    pub name: String,
    /// `A`, `AAAA`, `PTR`, `CNAME`, `TXT`, `NS` or `SOA`.
    pub record_type: String,
    /// TTL in seconds.
    pub ttl: u32,
    /// The data: an address, a target name or the text.
    pub value: String,
    /// Whether it is disabled.
    pub disabled: bool,
    /// Its comments.
    pub comments: Option<String>,
    /// When it was written.
    pub modified: Stamp,
}

/// A running Technitium stand-in; dropping it stops the server.
pub struct Technitium {
    served: Served,
    username: String,
    password: Secret,
    api_token: Secret,
    state: Arc<Mutex<api::State>>,
}

impl std::fmt::Debug for Technitium {
    /// The URL only: sessions and tokens in the state are secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Technitium").field("url", &self.url()).finish_non_exhaustive()
    }
}

/// Start a Technitium stand-in.
pub async fn start(config: TechnitiumConfig) -> Result<Technitium, ServiceError> {
    let bad = |reason: String| ServiceError::Config { service: "Technitium", reason };
    if config.username.is_empty() {
        return Err(bad("username must not be empty".into()));
    }
    let password = config.password.clone().unwrap_or_else(|| Secret::generate(16));
    let api_token = config.api_token.clone().unwrap_or_else(|| Secret::generate(32));
    let mut zones = zones::Zones {
        server: config.server_domain.clone(),
        default_ttl: config.default_ttl,
        ..zones::Zones::default()
    };
    for z in &config.zones {
        let name = z.trim_matches('.').to_ascii_lowercase();
        if name.is_empty() || name.contains('*') {
            return Err(bad(format!("zone '{z}' is not a domain name")));
        }
        zones.create(&name).map_err(bad)?;
    }
    let state = Arc::new(Mutex::new(api::State::new(zones, &api_token)));
    let handler = api::Api {
        username: config.username.clone(),
        password: password.clone(),
        server: config.server_domain.clone(),
        session_timeout: config.session_timeout,
        state: state.clone(),
    };
    let served = Served::start(config.listen, Arc::new(handler)).await?;
    Ok(Technitium { served, username: config.username, password, api_token, state })
}

impl Technitium {
    /// The server's base URL, e.g. `http://127.0.0.1:PORT` (the API is under `/api/`).
    pub fn url(&self) -> String {
        self.served.url()
    }

    /// The CA of the self-signed certificate (PEM), when serving HTTPS.
    pub fn ca_pem(&self) -> Option<String> {
        self.served.ca_pem()
    }

    /// The admin's user name.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The admin's password (a secret).
    pub fn password(&self) -> &Secret {
        &self.password
    }

    /// The API token that exists from the start (a secret).
    pub fn api_token(&self) -> &Secret {
        &self.api_token
    }

    /// Every record of every zone (SOA and NS included), zone by zone.
    pub fn records(&self) -> Vec<TechnitiumRecord> {
        let st = lock(&self.state);
        st.zones.zones.iter().flat_map(|z| z.records.iter().map(|r| r.public(&z.name))).collect()
    }

    /// The records whose owner name is `name` (any case, trailing dot ignored).
    pub fn records_at(&self, name: &str) -> Vec<TechnitiumRecord> {
        let name = name.trim_end_matches('.');
        self.records().into_iter().filter(|r| r.name.eq_ignore_ascii_case(name)).collect()
    }

    /// The zones' names.
    pub fn zones(&self) -> Vec<String> {
        lock(&self.state).zones.zones.iter().map(|z| z.name.clone()).collect()
    }

    /// End every login session (API tokens stay valid): the next call with a session
    /// token gets `invalid-token`, as after the session timeout.
    pub fn expire_sessions(&self) {
        lock(&self.state).expire_sessions();
    }

    /// Write the credentials into `dir` (0600 files `technitium.username`,
    /// `technitium.password`, `technitium.token`); returns their paths.
    pub fn write_credentials(&self, dir: &Path) -> Result<Vec<PathBuf>, ServiceError> {
        super::write_secret_files(
            dir,
            &[
                ("technitium.username", self.username.as_str()),
                ("technitium.password", self.password.expose()),
                ("technitium.token", self.api_token.expose()),
            ],
        )
    }
}
