//! A UniFi Network controller stand-in: the client/reservation API cradle uses to give
//! a VM's MAC a fixed IP before its first boot, and the DHCP server that hands it out.
//!
//! Contract (facts in `docs/STAND-INS.md`, "UniFi Network"): one API style per
//! instance — [`UnifiStyle::Classic`] (`POST /api/login` sets the `unifises` and
//! `csrf_token` cookies; API under `/api/s/{site}/...`; `GET /` → 302 to `/manage`) or
//! [`UnifiStyle::UnifiOs`] (`POST /api/auth/login` sets the `TOKEN` cookie and returns
//! `X-CSRF-Token`, which every later request must send as `X-Csrf-Token`; API under
//! `/proxy/network/api/...`; `GET /` → 200; an `X-API-KEY` header replaces login and
//! CSRF; logins are rate-limited with 429). Answers use the envelope
//! `{"meta":{"rc":"ok"},"data":[...]}` or `{"meta":{"rc":"error","msg":"api.err.X"},
//! "data":[]}` (400; 401 for `LoginRequired`; `NoSiteContext` with the configured
//! status). Sessions can expire (`session_ttl`, or [`Unifi::expire_sessions`] at once):
//! the old cookie then gets 401 `api.err.LoginRequired` until the client logs in again;
//! [`Unifi::logins`] counts the logins. The DHCP side ([`UnifiDhcp`]) gives a MAC its reservation's `fixed_ip`,
//! else a free pool address, and records the client as seen — so a later `POST
//! rest/user` for that MAC fails with `api.err.MacUsed`, as on a real controller.
//! State lives in memory for the life of the handle.

mod api;
mod dhcp;
mod state;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use dhcp::{DhcpOffer, UnifiDhcp};

use super::http::{Listen, Served};
use super::{Secret, ServiceError, Stamp};
use crate::sim::lock;

/// Which kind of controller the stand-in is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnifiStyle {
    /// A standalone Network application (`/api/...`, cookie `unifises`).
    Classic,
    /// A UniFi OS console (`/proxy/network/api/...`, cookie `TOKEN`, CSRF header,
    /// API keys).
    UnifiOs,
}

/// Which response header announces a rotated CSRF token (UniFi OS, `rotate_csrf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsrfAnnounce {
    /// `X-Updated-Csrf-Token` (both Go clients read it first).
    Updated,
    /// `X-Csrf-Token`, the login answer's header (`paultyng/go-unifi` reads only this
    /// one; `ubiquiti-community/go-unifi` reads it when there is no
    /// `X-Updated-Csrf-Token`).
    Current,
}

/// A network (`rest/networkconf` object) with its DHCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkSpec {
    /// The site it belongs to.
    pub site: String,
    /// Its name.
    pub name: String,
    /// `ip_subnet` as UniFi writes it: the gateway's address and the prefix length,
    /// e.g. `127.77.0.1/24`.
    pub ip_subnet: String,
    /// Its VLAN id (`vlan_enabled`); `None` = the untagged LAN.
    pub vlan: Option<u16>,
    /// Whether its DHCP server runs (`dhcpd_enabled`).
    pub dhcpd_enabled: bool,
    /// First pool address (`dhcpd_start`).
    pub dhcp_start: Ipv4Addr,
    /// Last pool address (`dhcpd_stop`).
    pub dhcp_stop: Ipv4Addr,
}

impl Default for NetworkSpec {
    /// `Default` in site `default`: `127.77.0.1/24`, pool `.6`–`.254` (UniFi's default
    /// range), untagged, DHCP on — inside loopback, so simulated guests can bind it.
    fn default() -> Self {
        NetworkSpec {
            site: "default".into(),
            name: "Default".into(),
            ip_subnet: "127.77.0.1/24".into(),
            vlan: None,
            dhcpd_enabled: true,
            dhcp_start: Ipv4Addr::new(127, 77, 0, 6),
            dhcp_stop: Ipv4Addr::new(127, 77, 0, 254),
        }
    }
}

/// The login rate limit: at most `max` attempts per `window`; more get 429.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginLimit {
    /// Attempts allowed per window.
    pub max: u32,
    /// The sliding window.
    pub window: Duration,
}

/// How to start a UniFi stand-in.
#[derive(Debug, Clone)]
pub struct UnifiConfig {
    /// Where to listen (default HTTPS on an ephemeral loopback port: controllers only
    /// speak HTTPS, with a self-signed certificate).
    pub listen: Listen,
    /// Classic or UniFi OS (default UniFi OS).
    pub style: UnifiStyle,
    /// The admin's user name (default `admin`).
    pub username: String,
    /// The admin's password; `None` = generated.
    pub password: Option<Secret>,
    /// The API key (UniFi OS only); `None` = generated for UniFi OS, none for classic.
    pub api_key: Option<Secret>,
    /// Site names (default `["default"]`).
    pub sites: Vec<String>,
    /// Networks (default one, [`NetworkSpec::default`]).
    pub networks: Vec<NetworkSpec>,
    /// The HTTP status of `api.err.NoSiteContext` (unknown site): 400, or 200 as some
    /// controllers send it (default 400).
    pub no_site_context_status: u16,
    /// Login rate limit of UniFi OS (`POST /api/auth/login`); `None` = unlimited
    /// (default 20 per minute).
    pub login_limit: Option<LoginLimit>,
    /// `PUT rest/user/{id}` answers with an empty `data` array, as some UDM SE
    /// firmware does (default false).
    pub put_returns_empty: bool,
    /// A create (`POST rest/user`, each object of `POST group/user`) answers ok with
    /// an empty `data` array (default false): a failure no source describes, to
    /// show that a client does not take an empty answer for a client.
    pub create_returns_empty: bool,
    /// UniFi OS: every authenticated answer carries `X-Updated-Csrf-Token` with a new
    /// token, and the old one stops working (default false).
    pub rotate_csrf: bool,
    /// Which header carries a rotated token (default [`CsrfAnnounce::Updated`]).
    pub csrf_announce: CsrfAnnounce,
    /// UniFi OS: the login answer carries the CSRF token as `X-CSRF-Token` (default
    /// true); false = only inside the `TOKEN` JWT's payload (claim `csrfToken`), as
    /// some firmware sends it.
    pub login_csrf_header: bool,
    /// `GET rest/user` lists the clients the DHCP server has only seen, too (default
    /// true); false = only clients written over the API (a reservation, a name, a
    /// note), as some controllers list them — a seen client is then found by
    /// `GET stat/user/{mac}` only, and a create for its MAC still fails `MacUsed`.
    pub list_seen_clients: bool,
    /// How long a login session lives, counted from the login (UniFi OS consoles: the
    /// `TOKEN` JWT's `exp` is `iat` + 2 h). After it, the cookie gets 401
    /// `api.err.LoginRequired`, as a logged-out one. `None` (default) = sessions last
    /// as long as the stand-in; `Some(Duration::ZERO)` = a controller that refuses
    /// every session right after its login.
    pub session_ttl: Option<Duration>,
    /// `server_version` in `/status` (default `9.0.114`).
    pub server_version: String,
}

impl Default for UnifiConfig {
    fn default() -> Self {
        UnifiConfig {
            listen: Listen::https(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            style: UnifiStyle::UnifiOs,
            username: "admin".into(),
            password: None,
            api_key: None,
            sites: vec!["default".into()],
            networks: vec![NetworkSpec::default()],
            no_site_context_status: 400,
            login_limit: Some(LoginLimit { max: 20, window: Duration::from_secs(60) }),
            put_returns_empty: false,
            create_returns_empty: false,
            rotate_csrf: false,
            csrf_announce: CsrfAnnounce::Updated,
            login_csrf_header: true,
            list_seen_clients: true,
            session_ttl: None,
            server_version: "9.0.114".into(),
        }
    }
}

/// A known client as the controller stores it (a reservation when `use_fixedip` and
/// `fixed_ip` are set).
#[derive(Debug, Clone, PartialEq)]
pub struct UnifiClient {
    /// `_id`.
    pub id: String,
    /// Site name.
    pub site: String,
    /// MAC, lower-case.
    pub mac: String,
    /// `name`.
    pub name: Option<String>,
    /// `note`.
    pub note: Option<String>,
    /// `use_fixedip`.
    pub use_fixedip: bool,
    /// `fixed_ip`.
    pub fixed_ip: Option<Ipv4Addr>,
    /// `network_id`.
    pub network_id: Option<String>,
    /// When it was created (over the API, or by the DHCP server seeing it).
    pub created: Stamp,
    /// When it last changed over the API.
    pub updated: Stamp,
    /// When its current reservation (fixed IP + network) was set; `None` = not one.
    pub reserved_at: Option<Stamp>,
    /// The address the DHCP server last gave it.
    pub ip: Option<Ipv4Addr>,
    /// The stored object as written by clients (without `_id`, `site_id`).
    pub json: serde_json::Value,
}

impl UnifiClient {
    /// Whether this is a DHCP reservation.
    pub fn is_reservation(&self) -> bool {
        self.reserved_at.is_some()
    }
}

/// A network as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnifiNetwork {
    /// `_id` (what reservations give as `network_id`).
    pub id: String,
    /// Site name.
    pub site: String,
    /// `name`.
    pub name: String,
    /// `ip_subnet`.
    pub ip_subnet: String,
    /// The gateway (the address in `ip_subnet`).
    pub gateway: Ipv4Addr,
    /// Prefix length.
    pub prefix: u8,
    /// VLAN id.
    pub vlan: Option<u16>,
    /// `dhcpd_enabled`.
    pub dhcpd_enabled: bool,
    /// `dhcpd_start`.
    pub dhcp_start: Ipv4Addr,
    /// `dhcpd_stop`.
    pub dhcp_stop: Ipv4Addr,
}

/// A running UniFi stand-in; dropping it stops the server.
pub struct Unifi {
    served: Served,
    style: UnifiStyle,
    username: String,
    password: Secret,
    api_key: Option<Secret>,
    state: Arc<Mutex<state::State>>,
}

impl std::fmt::Debug for Unifi {
    /// The URL only: sessions and tokens in the state are secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unifi").field("url", &self.url()).field("style", &self.style).finish_non_exhaustive()
    }
}

/// Start a UniFi stand-in.
pub async fn start(config: UnifiConfig) -> Result<Unifi, ServiceError> {
    let bad = |reason: String| ServiceError::Config { service: "UniFi", reason };
    if config.style == UnifiStyle::Classic && config.api_key.is_some() {
        return Err(bad("API keys exist on UniFi OS only; use style UnifiOs or no api_key".into()));
    }
    if !matches!(config.no_site_context_status, 200 | 400) {
        return Err(bad(format!("no_site_context_status must be 200 or 400, not {}", config.no_site_context_status)));
    }
    if config.username.is_empty() {
        return Err(bad("username must not be empty".into()));
    }
    let st = state::State::new(&config.sites, &config.networks).map_err(bad)?;
    let password = config.password.clone().unwrap_or_else(|| Secret::generate(16));
    let api_key = match config.style {
        UnifiStyle::UnifiOs => Some(config.api_key.clone().unwrap_or_else(|| Secret::generate(24))),
        UnifiStyle::Classic => None,
    };
    let state = Arc::new(Mutex::new(st));
    let handler = api::Api::new(&config, password.clone(), api_key.clone(), state.clone());
    let served = Served::start(config.listen, Arc::new(handler)).await?;
    Ok(Unifi { served, style: config.style, username: config.username, password, api_key, state })
}

impl Unifi {
    /// The controller's base URL, e.g. `https://127.0.0.1:PORT` (what clients are
    /// given; they find the API style with `GET /`).
    pub fn url(&self) -> String {
        self.served.url()
    }

    /// The API prefix: `{url}/api` (classic) or `{url}/proxy/network/api` (UniFi OS).
    pub fn api_url(&self) -> String {
        match self.style {
            UnifiStyle::Classic => format!("{}/api", self.url()),
            UnifiStyle::UnifiOs => format!("{}/proxy/network/api", self.url()),
        }
    }

    /// The API style.
    pub fn style(&self) -> UnifiStyle {
        self.style
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

    /// The API key (UniFi OS only; a secret).
    pub fn api_key(&self) -> Option<&Secret> {
        self.api_key.as_ref()
    }

    /// Every known client, in creation order.
    pub fn clients(&self) -> Vec<UnifiClient> {
        lock(&self.state).users.iter().map(state::User::public).collect()
    }

    /// The clients that are DHCP reservations.
    pub fn reservations(&self) -> Vec<UnifiClient> {
        self.clients().into_iter().filter(UnifiClient::is_reservation).collect()
    }

    /// The client with this MAC (any case) in `site`.
    pub fn client(&self, site: &str, mac: &str) -> Option<UnifiClient> {
        lock(&self.state).user_by_mac(site, mac).map(state::User::public)
    }

    /// The configured networks.
    pub fn networks(&self) -> Vec<UnifiNetwork> {
        lock(&self.state).nets.iter().map(state::Net::public).collect()
    }

    /// The DHCP server of `site`, to link a simulated cluster to
    /// (`SimConfig::dhcp`).
    pub fn dhcp(&self, site: &str) -> UnifiDhcp {
        UnifiDhcp::new(self.state.clone(), site)
    }

    /// Refuse the next `n` logins with 429 (UniFi OS), whatever the rate.
    pub fn refuse_next_logins(&self, n: u32) {
        lock(&self.state).forced_429 = n;
    }

    /// End every session now, as if each had reached its lifetime: the next request
    /// with one of their cookies gets 401 `api.err.LoginRequired`.
    pub fn expire_sessions(&self) {
        lock(&self.state).sessions.clear();
    }

    /// Give every session a new CSRF token without announcing it (as when the
    /// controller re-issued it in an answer the client did not read): the old token
    /// then gets 403 `Invalid CSRF Token` on every request, until the client logs in
    /// again. UniFi OS only (classic controllers do not check the token).
    pub fn expire_csrf_tokens(&self) {
        for s in lock(&self.state).sessions.values_mut() {
            s.csrf = crate::model::ids::random_uuid();
        }
    }

    /// `METHOD path` of every request under the API prefix so far (e.g. `POST
    /// /proxy/network/api/s/default/group/user`), to tell which calls a client made.
    pub fn calls(&self) -> Vec<String> {
        lock(&self.state).calls.clone()
    }

    /// How many logins succeeded (sessions made) so far.
    pub fn logins(&self) -> u64 {
        lock(&self.state).logins
    }

    /// Write the credentials into `dir` (0600 files `unifi.username`,
    /// `unifi.password`, for UniFi OS `unifi.api-key`, and with TLS the CA to trust,
    /// `unifi-ca.pem`); returns their paths.
    pub fn write_credentials(&self, dir: &Path) -> Result<Vec<PathBuf>, ServiceError> {
        let ca = self.ca_pem();
        let mut files = vec![("unifi.username", self.username.as_str()), ("unifi.password", self.password.expose())];
        if let Some(k) = &self.api_key {
            files.push(("unifi.api-key", k.expose()));
        }
        if let Some(ca) = &ca {
            files.push(("unifi-ca.pem", ca.as_str()));
        }
        super::write_secret_files(dir, &files)
    }
}
