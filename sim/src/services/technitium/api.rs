//! The DNS server's HTTP API: parameters (query, then form), tokens and sessions, the
//! `status` envelopes, and the handlers of the user and zone calls.
//!
//! Contract: see the parent module. Parameters are read as ASP.NET's `QueryOrForm`
//! does (query string first, then an `application/x-www-form-urlencoded` body; names
//! case-insensitive); an empty value counts as missing ("Parameter 'x' missing.").
//! Booleans parse as .NET's `bool.Parse`. Every answer under `/api/` is HTTP 200
//! except unknown paths (404, empty) and methods other than GET/POST (405).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::names::{parse_ttl, reverse_name, reverse_zone};
use super::zones::{NewRecord, RData, RType, Zones};
use crate::services::http::{Handler, Request, Response};
use crate::services::{Secret, eq_ct, random_hex};
use crate::sim::lock;

const INVALID_TOKEN: &str = "Invalid token or session expired.";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Standard,
    ApiToken,
}

#[derive(Debug)]
struct Session {
    kind: Kind,
    last: Instant,
}

/// The server's state: zones and sessions (by token).
#[derive(Debug)]
pub(super) struct State {
    pub zones: Zones,
    sessions: HashMap<String, Session>,
}

impl State {
    pub fn new(zones: Zones, api_token: &Secret) -> State {
        let mut sessions = HashMap::new();
        sessions.insert(api_token.expose().to_string(), Session { kind: Kind::ApiToken, last: Instant::now() });
        State { zones, sessions }
    }

    pub fn expire_sessions(&mut self) {
        self.sessions.retain(|_, s| s.kind == Kind::ApiToken);
    }

    /// `TryValidateSession`: the session of `token`, touched; expired ones are removed.
    fn session(&mut self, token: Option<&str>, timeout: Duration) -> Option<Kind> {
        let token = token?;
        let now = Instant::now();
        let s = self.sessions.get_mut(token)?;
        if s.kind == Kind::Standard && now.duration_since(s.last) > timeout {
            self.sessions.remove(token);
            return None;
        }
        s.last = now;
        Some(s.kind)
    }

    fn open(&mut self, kind: Kind) -> String {
        let token = random_hex(32);
        self.sessions.insert(token.clone(), Session { kind, last: Instant::now() });
        token
    }
}

/// The request handler.
pub(super) struct Api {
    pub username: String,
    pub password: Secret,
    pub server: String,
    pub session_timeout: Duration,
    pub state: Arc<Mutex<State>>,
}

/// A failed call: `status: error` with a message, or `status: invalid-token`.
enum Fail {
    Error(String),
    InvalidToken,
}

impl From<String> for Fail {
    fn from(s: String) -> Self {
        Fail::Error(s)
    }
}

impl From<&str> for Fail {
    fn from(s: &str) -> Self {
        Fail::Error(s.to_string())
    }
}

/// The parameters of one call.
struct Params {
    query: Vec<(String, String)>,
    form: Vec<(String, String)>,
}

impl Params {
    fn new(req: &Request) -> Params {
        Params { query: req.query_pairs(), form: req.form_pairs() }
    }

    /// `QueryOrForm`: the query's value, else the form's.
    fn raw(&self, name: &str) -> Option<&str> {
        fn find<'a>(v: &'a [(String, String)], name: &str) -> Option<&'a str> {
            v.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
        }
        find(&self.query, name).or_else(|| find(&self.form, name))
    }

    fn opt(&self, name: &str) -> Option<&str> {
        self.raw(name).filter(|v| !v.is_empty())
    }

    fn req(&self, name: &str) -> Result<&str, String> {
        self.opt(name).ok_or_else(|| format!("Parameter '{name}' missing."))
    }

    /// `GetQueryOrFormAlt`: `name`, else `alt`; the error names `name`.
    fn alt(&self, name: &str, alt: &str) -> Result<&str, String> {
        self.opt(name).or_else(|| self.opt(alt)).ok_or_else(|| format!("Parameter '{name}' missing."))
    }

    fn bool(&self, name: &str, default: bool) -> Result<bool, String> {
        match self.opt(name) {
            None => Ok(default),
            Some(v) if v.trim().eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.trim().eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(format!("String '{v}' was not recognized as a valid Boolean.")),
        }
    }

    fn ttl(&self, name: &str, default: u32) -> Result<u32, String> {
        self.opt(name).map_or(Ok(default), parse_ttl)
    }

    /// A domain parameter as the server normalises it (dots trimmed).
    fn domain(&self, name: &str) -> Result<String, String> {
        Ok(self.req(name)?.trim_matches('.').to_ascii_lowercase())
    }
}

fn parse_ip(s: &str, rtype: RType) -> Result<IpAddr, String> {
    let ip: IpAddr = s.trim().parse().map_err(|_| "An invalid IP address was specified.".to_string())?;
    match (rtype, ip) {
        (RType::A, IpAddr::V4(_)) | (RType::Aaaa, IpAddr::V6(_)) => Ok(ip),
        _ => Err("An invalid IP address was specified.".into()),
    }
}

/// The record data of an add/delete call (`None` for a CNAME delete: the RRset).
fn rdata(p: &Params, rtype: RType) -> Result<RData, String> {
    Ok(match rtype {
        RType::A | RType::Aaaa => RData::Ip(parse_ip(p.alt("ipAddress", "value")?, rtype)?),
        RType::Cname => RData::Name(p.alt("cname", "value")?.trim_matches('.').to_string()),
        RType::Ptr => RData::Name(p.alt("ptrName", "value")?.trim_matches('.').to_string()),
        RType::Ns => RData::Name(p.alt("nameServer", "value")?.trim_matches('.').to_string()),
        RType::Txt => RData::Txt(p.alt("text", "value")?.to_string()),
        RType::Soa => return Err("The stand-in does not change SOA records.".into()),
    })
}

/// The new data of an update call (`new...`/`newValue`, defaulting to the old).
fn new_rdata(p: &Params, rtype: RType, old: &RData) -> Result<RData, String> {
    let pick = |name: &str| p.opt(name).or_else(|| p.opt("newValue"));
    Ok(match (rtype, old) {
        (RType::A | RType::Aaaa, RData::Ip(ip)) => match pick("newIpAddress") {
            Some(v) => RData::Ip(parse_ip(v, rtype)?),
            None => RData::Ip(*ip),
        },
        (RType::Cname, _) => pick("newCname").map_or(old.clone(), |v| RData::Name(v.trim_matches('.').into())),
        (RType::Ptr, _) => pick("newPtrName").map_or(old.clone(), |v| RData::Name(v.trim_matches('.').into())),
        (RType::Ns, _) => pick("newNameServer").map_or(old.clone(), |v| RData::Name(v.trim_matches('.').into())),
        (RType::Txt, _) => pick("newText").map_or(old.clone(), |v| RData::Txt(v.into())),
        _ => old.clone(),
    })
}

impl Api {
    fn envelope(&self, mut body: Map<String, Value>, status: &str) -> Response {
        body.insert("server".into(), json!(self.server));
        body.insert("status".into(), json!(status));
        Response::json(200, &Value::Object(body))
            .with_header("cache-control", "no-cache, no-store, must-revalidate")
            .with_header("pragma", "no-cache")
            .with_header("expires", "0")
    }

    fn answer(&self, result: Result<Map<String, Value>, Fail>) -> Response {
        match result {
            Ok(body) => self.envelope(body, "ok"),
            Err(Fail::Error(msg)) => self.envelope(obj(json!({"errorMessage": msg})), "error"),
            Err(Fail::InvalidToken) => self.envelope(obj(json!({"errorMessage": INVALID_TOKEN})), "invalid-token"),
        }
    }

    fn authenticate(&self, p: &Params) -> Result<(), Fail> {
        let user = p.req("user")?;
        let pass = p.req("pass")?;
        if eq_ct(user.as_bytes(), self.username.as_bytes()) && self.password.matches(pass) {
            Ok(())
        } else {
            Err(Fail::Error(format!("Invalid username or password for user: {user}")))
        }
    }

    fn login(&self, p: &Params) -> Result<Map<String, Value>, Fail> {
        self.authenticate(p)?;
        let include_info = p.bool("includeInfo", false)?;
        let token = lock(&self.state).open(Kind::Standard);
        let mut body = obj(json!({"displayName": "Administrator", "username": self.username, "isSsoUser": false,
            "totpEnabled": false, "token": token}));
        if include_info {
            let ttl = lock(&self.state).zones.default_ttl;
            body.insert(
                "info".into(),
                json!({"version": "15.2", "dnsServerDomain": self.server,
                "defaultRecordTtl": ttl, "defaultNsRecordTtl": 14400, "defaultSoaRecordTtl": 900}),
            );
        }
        Ok(body)
    }

    fn create_token(&self, p: &Params, token: Option<&str>) -> Result<Map<String, Value>, Fail> {
        let session = lock(&self.state).session(token, self.session_timeout);
        match session {
            Some(Kind::ApiToken) => return Err("Access was denied.".into()),
            Some(Kind::Standard) => {}
            None => {
                p.req("user")?;
                p.req("pass")?;
                p.req("tokenName")?;
                self.authenticate(p)?;
            }
        }
        let name = p.req("tokenName")?.to_string();
        let token = lock(&self.state).open(Kind::ApiToken);
        Ok(obj(json!({"username": self.username, "tokenName": name, "token": token})))
    }

    fn zones_call(&self, path: &str, p: &Params) -> Option<Result<Value, Fail>> {
        let mut st = lock(&self.state);
        let z = &mut st.zones;
        Some(match path {
            "/api/zones/list" => Ok(json!({"zones": z.zones.iter().map(super::zones::Zone::json).collect::<Vec<_>>()})),
            "/api/zones/create" => create_zone(z, p),
            "/api/zones/records/add" => add_record(z, p),
            "/api/zones/records/get" => get_records(z, p),
            "/api/zones/records/update" => update_record(z, p),
            "/api/zones/records/delete" => delete_record(z, p),
            _ => return None,
        })
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn zone_of(z: &Zones, p: &Params, domain: &str) -> Result<usize, String> {
    let zone = p.raw("zone").map(|s| s.trim_matches('.').to_ascii_lowercase());
    z.target(domain, zone.as_deref())
}

fn create_zone(z: &mut Zones, p: &Params) -> Result<Value, Fail> {
    let raw = p.alt("zone", "domain")?;
    let name = if let Ok(ip) = raw.parse::<IpAddr>() {
        reverse_name(ip)
    } else if let Some((ip, width)) = raw.split_once('/') {
        match (ip.parse::<IpAddr>(), width.parse::<u32>()) {
            (Ok(ip), Ok(w)) if w <= if ip.is_ipv4() { 32 } else { 128 } => reverse_zone(ip, w),
            _ => return Err("The zone name contains an invalid character: /".into()),
        }
    } else {
        raw.trim_matches('.').to_ascii_lowercase()
    };
    if name.contains('*') {
        return Err("Domain name for a zone cannot contain wildcard character.".into());
    }
    match p.opt("type") {
        None => {}
        Some(t) if t.eq_ignore_ascii_case("Primary") => {}
        Some(t) => {
            let known = ["Secondary", "Stub", "Forwarder", "SecondaryForwarder", "Catalog", "SecondaryCatalog"];
            if known.iter().any(|k| k.eq_ignore_ascii_case(t)) {
                return Err(format!("The stand-in only creates Primary zones, not {t}.").into());
            }
            return Err(format!("Requested value '{t}' was not found.").into());
        }
    }
    let zi = z.create(&name)?;
    Ok(json!({"domain": z.zones[zi].name}))
}

fn add_record(z: &mut Zones, p: &Params) -> Result<Value, Fail> {
    let domain = p.domain("domain")?;
    let zi = zone_of(z, p, &domain)?;
    let rtype = RType::parse(p.req("type")?)?;
    let ttl = p.ttl("ttl", z.default_ttl)?;
    let overwrite = p.bool("overwrite", false)?;
    let comments = p.raw("comments").filter(|c| !c.is_empty()).map(str::to_string);
    let expiry_ttl = p.ttl("expiryTtl", 0)?;
    let data = rdata(p, rtype)?;
    let ptr = match rtype {
        RType::A | RType::Aaaa if p.bool("ptr", false)? => Some(p.bool("createPtrZone", false)?),
        _ => None,
    };
    let rec = z.add(zi, NewRecord { domain, rtype, ttl, data, overwrite, comments, expiry_ttl, ptr })?;
    Ok(json!({"zone": z.zones[zi].json(), "addedRecord": rec.json()}))
}

fn get_records(z: &mut Zones, p: &Params) -> Result<Value, Fail> {
    let domain = p.domain("domain")?;
    let zi = zone_of(z, p, &domain)?;
    let list_zone = p.bool("listZone", false)?;
    let records: Vec<Value> = z.get(zi, &domain, list_zone).iter().map(super::zones::Rec::json).collect();
    Ok(json!({"zone": z.zones[zi].json(), "records": records}))
}

fn update_record(z: &mut Zones, p: &Params) -> Result<Value, Fail> {
    let domain = p.domain("domain")?;
    let zi = zone_of(z, p, &domain)?;
    let new_domain = p.opt("newDomain").map_or_else(|| domain.clone(), |d| d.trim_matches('.').to_ascii_lowercase());
    let rtype = RType::parse(p.req("type")?)?;
    let ttl = p.ttl("ttl", z.default_ttl)?;
    let disable = p.bool("disable", false)?;
    let comments = p.raw("comments").map(str::to_string);
    let old = rdata(p, rtype)?;
    let new = new_rdata(p, rtype, &old)?;
    let ptr = match rtype {
        RType::A | RType::Aaaa if p.bool("ptr", false)? => Some(p.bool("createPtrZone", false)?),
        _ => None,
    };
    let rec = z.update(zi, &domain, &new_domain, rtype, old, new, ttl, ptr, disable, comments)?;
    Ok(json!({"zone": z.zones[zi].json(), "updatedRecord": rec.json()}))
}

fn delete_record(z: &mut Zones, p: &Params) -> Result<Value, Fail> {
    let domain = p.domain("domain")?;
    let zi = zone_of(z, p, &domain)?;
    let rtype = RType::parse(p.req("type")?)?;
    let data = if rtype == RType::Cname { None } else { Some(rdata(p, rtype)?) };
    z.delete(zi, &domain, rtype, data.as_ref())?;
    Ok(json!({}))
}

/// `GetAuthorizationToken`: a `Bearer` header, else the `token` parameter.
fn token<'a>(req: &'a Request, p: &'a Params) -> Option<&'a str> {
    let bearer = req
        .headers
        .get_all("authorization")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.get(..7).is_some_and(|p| p.eq_ignore_ascii_case("bearer ")))
        .and_then(|v| v.get(7..))
        .map(str::trim);
    bearer.or_else(|| p.opt("token")).filter(|t| !t.is_empty())
}

impl Handler for Api {
    fn handle(&self, req: &Request) -> Response {
        let path = req.path.as_str();
        if !path.starts_with("/api/") {
            return match path {
                "/" => Response::text(
                    200,
                    "text/html; charset=utf-8",
                    "<!DOCTYPE html><html><head><title>Technitium DNS Server</title></head></html>",
                ),
                _ => Response::empty(404),
            };
        }
        if req.method != "GET" && req.method != "POST" {
            return Response::empty(405);
        }
        let p = Params::new(req);
        let token = token(req, &p);
        match path {
            "/api/user/login" => self.answer(self.login(&p)),
            "/api/user/createToken" => self.answer(self.create_token(&p, token)),
            "/api/user/logout" => {
                if let Some(t) = token {
                    lock(&self.state).sessions.remove(t);
                }
                self.answer(Ok(Map::new()))
            }
            _ => {
                if lock(&self.state).session(token, self.session_timeout).is_none() {
                    return self.answer(Err(Fail::InvalidToken));
                }
                match self.zones_call(path, &p) {
                    None => Response::empty(404),
                    Some(result) => self.answer(result.map(|v| {
                        let mut m = Map::new();
                        m.insert("response".into(), v);
                        m
                    })),
                }
            }
        }
    }
}
