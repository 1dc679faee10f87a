//! The `dns` capability: A, AAAA and PTR records kept by an RFC 2136 server
//! (BIND 9 and friends) through TSIG-signed dynamic updates.
//!
//! Contract:
//! - [`Rfc2136::upsert`] makes the record the *only* record of its name and
//!   type. It first reads the current RRset (a TSIG-signed query over TCP to
//!   the same server); when that already is exactly the wanted record (data
//!   and TTL) it sends nothing and returns `false`. Otherwise it sends one
//!   UPDATE that deletes the RRset and adds the record, with the RRset it read
//!   as prerequisite (RFC 2136 §2.4.2/§2.4.3), and returns `true`. When the
//!   prerequisite fails (someone else changed the name in between) it reads
//!   and tries again, at most three times, then fails with `conflict`.
//! - [`Rfc2136::delete`] removes the RRset of a name and type; `false` when
//!   there was none (also when it vanished between the read and the update).
//! - Both are idempotent: after a `transient` failure (timeout, refused
//!   connection, SERVFAIL) calling again is safe, whether or not the first
//!   UPDATE reached the server.
//! - The zone must be one of `[dns.NAME].zones` and the name must lie inside
//!   it (the `dns` grant checks the same, [`scope`]; this provider checks
//!   again, against its own configuration). A record with `ttl = 0` gets the
//!   provider's `ttl`.
//! - Every message is signed with the TSIG key, and an answer that claims
//!   success must carry a valid signature of that key. The secret is read
//!   from its [`SecretRef`] at the first call, decoded from base64, and never
//!   appears in errors, `Debug` or logs — only the key name does.
//!
//! Failure modes and their error kinds are listed in `errors.rs`: an
//! unreachable or failing server is `transient`; a name outside the zone,
//! NOTZONE or FORMERR is `invalid`; a rejected key (BADSIG, BADKEY, BADTIME),
//! REFUSED (the zone's `allow-update` does not name the key) or NOTAUTH (the
//! server is not primary for the zone) is `failed`, naming the key and what to
//! check in named.conf.
//!
//! Why this implementation: the messages, names, records and TSIG (RFC 8945
//! HMAC-SHA256/512, with `ring`) come from `hickory-proto`, a maintained DNS
//! library. The exchange itself is the dozen lines of `wire::exchange`
//! instead of `hickory-net`'s client, because that client reports a rejected
//! TSIG key as an opaque protocol error (it tries to verify the unsigned
//! BADSIG answer), while an operator needs to be told *which* of secret, key
//! name or clock is wrong. Spawning `nsupdate` would have needed the secret in
//! a temporary file and parsing its text output for every failure mode.
//! Everything goes over TCP: no truncation, no retransmission guesswork, and
//! an answer cannot be spoofed by an off-path sender.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::OnceLock;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::tsig::TsigAlgorithm;
use hickory_proto::rr::rdata::{A, AAAA, PTR};
use hickory_proto::rr::{Name, RData, Record, RecordType, TSigner};

use self::errors::{Ctx, kind_name};
use self::wire::Target;
use crate::contract::{CapError, ErrorKind};
use crate::secrets::SecretRef;

pub use self::config::{DnsConfigError, DnsProviderConfig, DnsProviderKind, NameError, TsigAlgorithmName};
pub use crate::contract::bindings::cradle::host::dns::{DnsRecord, RecordKind};

mod config;
mod errors;
mod host;
pub mod providers;
pub(crate) mod rhai;
pub mod scope;
pub(crate) mod script_args;
pub mod technitium;
mod wire;

#[cfg(test)]
mod bind_fixture;
#[cfg(test)]
mod tests;

/// How long one exchange (connect, send, answer) may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often an upsert re-reads after a failed prerequisite.
const ATTEMPTS: u32 = 3;
/// Accepted clock difference between this host and the server (RFC 8945 recommends 300 s).
const FUDGE: u16 = 300;

/// An RFC 2136 provider: one server, one TSIG key, the zones it is primary for.
pub struct Rfc2136 {
    section: String,
    server: SocketAddr,
    key_name: Name,
    algorithm: TsigAlgorithmName,
    secret: SecretRef,
    signer: OnceLock<Result<TSigner, SignerError>>,
    zones: Vec<Name>,
    ttl: u32,
    timeout: Duration,
}

impl fmt::Debug for Rfc2136 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rfc2136")
            .field("section", &self.section)
            .field("server", &self.server)
            .field("key_name", &self.key_name.to_ascii())
            .field("algorithm", &self.algorithm.as_str())
            .field("secret", &self.secret.to_string())
            .field("zones", &self.zones.iter().map(Name::to_ascii).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Rfc2136 {
    /// The provider `[dns.<name>]`; the secret is resolved at the first call.
    pub fn new(name: &str, cfg: &DnsProviderConfig) -> Result<Rfc2136, CapError> {
        let section = format!("dns.{name}");
        cfg.validate().map_err(|m| CapError::invalid(format!("{section}: {m}")))?;
        let parse = |text: &str| config::parse_name(text).map_err(|m| CapError::invalid(format!("{section}: {m}")));
        let (Some(server), Some(key_name), Some(secret), DnsProviderKind::Rfc2136) =
            (cfg.server, cfg.key_name.as_deref(), cfg.secret.clone(), cfg.kind)
        else {
            return Err(CapError::invalid(format!(
                "{section}: not an rfc2136 provider with server, key_name and secret"
            )));
        };
        Ok(Rfc2136 {
            server,
            key_name: parse(key_name)?,
            algorithm: cfg.algorithm,
            secret,
            signer: OnceLock::new(),
            zones: cfg.zones.iter().map(|z| parse(z)).collect::<Result<_, _>>()?,
            ttl: cfg.ttl,
            timeout: DEFAULT_TIMEOUT,
            section,
        })
    }

    /// Whether `zone` is one of this provider's zones.
    pub fn serves(&self, zone: &str) -> bool {
        config::parse_name(zone).is_ok_and(|z| self.zones.contains(&z))
    }

    /// The same provider with another exchange timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Rfc2136 {
        self.timeout = timeout;
        self
    }

    /// Make `rec` the only record of its name and kind; `true` when something changed.
    pub async fn upsert(&self, rec: &DnsRecord) -> Result<bool, CapError> {
        let target = self.target(&rec.zone, &rec.name, rec.kind)?;
        let data = self.value(&target, &rec.value)?;
        let ttl = if rec.ttl == 0 { self.ttl } else { rec.ttl };
        if ttl > config::MAX_TTL {
            return Err(CapError::invalid(format!("{}: ttl {ttl} is over {}", self.section, config::MAX_TTL)));
        }
        let signer = self.signer()?;
        let ctx = self.ctx(&target);
        for _ in 0..ATTEMPTS {
            let current = self.current(&signer, &ctx).await?;
            if let [only] = current.as_slice()
                && only.data == data
                && only.ttl == ttl
            {
                return Ok(false);
            }
            let new = wire::record(&target, ttl, data.clone());
            if self.apply(&signer, &ctx, wire::replace(&target, &current, new)).await? {
                tracing::info!(provider = %self.section, zone = %target.zone, name = %target.name,
                    kind = kind_name(target.kind), value = %rec.value, ttl, "dns record set");
                return Ok(true);
            }
        }
        Err(ctx.conflict(ATTEMPTS))
    }

    /// Delete every record of `name` and `kind` in `zone`; `true` when something was deleted.
    pub async fn delete(&self, zone: &str, name: &str, kind: RecordKind) -> Result<bool, CapError> {
        let target = self.target(zone, name, kind)?;
        let signer = self.signer()?;
        let ctx = self.ctx(&target);
        if self.current(&signer, &ctx).await?.is_empty() {
            return Ok(false);
        }
        let deleted = self.apply(&signer, &ctx, wire::delete(&target)).await?;
        if deleted {
            tracing::info!(provider = %self.section, zone = %target.zone, name = %target.name,
                kind = kind_name(target.kind), "dns records deleted");
        }
        Ok(deleted)
    }

    fn ctx<'a>(&'a self, target: &'a Target) -> Ctx<'a> {
        Ctx {
            provider: &self.section,
            server: self.server,
            key: &self.key_name,
            algorithm: self.algorithm.as_str(),
            target,
        }
    }

    /// The current RRset of the target (empty when the name or type does not exist).
    async fn current(&self, signer: &TSigner, ctx: &Ctx<'_>) -> Result<Vec<Record>, CapError> {
        let t = ctx.target;
        let answer = wire::exchange(self.server, signer, wire::query(t), self.timeout)
            .await
            .map_err(|e| ctx.wire("query", e))?;
        let rcode = answer.metadata.response_code;
        if !matches!(rcode, ResponseCode::NoError | ResponseCode::NXDomain) {
            return Err(ctx.query_rcode(Some(rcode)));
        }
        if !answer.metadata.authoritative {
            return Err(ctx.query_rcode(None));
        }
        if answer.answers.iter().any(|r| r.record_type() == RecordType::CNAME && r.name == t.name) {
            return Err(CapError::new(
                ErrorKind::Conflict,
                format!(
                    "{} ({}): `{}` in zone `{}` is a CNAME, which cannot have other records; remove the CNAME first",
                    self.section, self.server, t.name, t.zone
                ),
            ));
        }
        Ok(wire::rrset(&answer, t))
    }

    /// Send an UPDATE; `Ok(false)` when its prerequisite did not hold.
    async fn apply(&self, signer: &TSigner, ctx: &Ctx<'_>, msg: hickory_proto::op::Message) -> Result<bool, CapError> {
        let answer = wire::exchange(self.server, signer, msg, self.timeout).await.map_err(|e| ctx.wire("update", e))?;
        match answer.metadata.response_code {
            ResponseCode::NoError => Ok(true),
            ResponseCode::YXRRSet | ResponseCode::NXRRSet | ResponseCode::YXDomain | ResponseCode::NXDomain => {
                Ok(false)
            }
            other => Err(ctx.update_rcode(other)),
        }
    }

    fn target(&self, zone: &str, name: &str, kind: RecordKind) -> Result<Target, CapError> {
        let s = &self.section;
        let zone_n = config::parse_name(zone).map_err(|m| CapError::invalid(format!("{s}: zone {m}")))?;
        if !self.zones.contains(&zone_n) {
            let known = self.zones.iter().map(Name::to_ascii).collect::<Vec<_>>().join(", ");
            return Err(CapError::invalid(format!(
                "{s}: zone `{zone}` is not one of {s}.zones ({known}); add it there if {} is its primary server",
                self.server
            )));
        }
        let name_n = config::parse_name(name).map_err(|m| CapError::invalid(format!("{s}: name {m}")))?;
        if !zone_n.zone_of(&name_n) {
            return Err(CapError::invalid(format!("{s}: name `{name}` is not inside zone `{zone}`")));
        }
        let kind = match kind {
            RecordKind::A => RecordType::A,
            RecordKind::Aaaa => RecordType::AAAA,
            RecordKind::Ptr => RecordType::PTR,
        };
        Ok(Target { zone: zone_n, name: name_n, kind })
    }

    fn value(&self, t: &Target, value: &str) -> Result<RData, CapError> {
        let bad = |what: &str| {
            CapError::invalid(format!(
                "{}: value `{value}` of the {} record `{}` is not {what}",
                self.section,
                kind_name(t.kind),
                t.name
            ))
        };
        match t.kind {
            RecordType::A => {
                value.parse::<Ipv4Addr>().map(|ip| RData::A(A::from(ip))).map_err(|_| bad("an IPv4 address"))
            }
            RecordType::AAAA => {
                value.parse::<Ipv6Addr>().map(|ip| RData::AAAA(AAAA::from(ip))).map_err(|_| bad("an IPv6 address"))
            }
            _ => config::parse_name(value).map(|n| RData::PTR(PTR(n))).map_err(|_| bad("a domain name")),
        }
    }

    /// The TSIG signer, built from the secret on first use (a failure is
    /// kept too: the secret is read once).
    fn signer(&self) -> Result<TSigner, CapError> {
        let section = || self.section.clone();
        let secret = || self.secret.to_string();
        self.signer
            .get_or_init(|| {
                let value = self
                    .secret
                    .resolve()
                    .map_err(|e| SignerError::Secret { section: section(), reason: e.to_string() })?;
                let key = data_encoding::BASE64
                    .decode(value.expose().trim().as_bytes())
                    .map_err(|e| SignerError::Base64 { section: section(), secret: secret(), reason: e.to_string() })?;
                if key.is_empty() {
                    return Err(SignerError::Empty { section: section(), secret: secret() });
                }
                let algorithm = match self.algorithm {
                    TsigAlgorithmName::HmacSha256 => TsigAlgorithm::HmacSha256,
                    TsigAlgorithmName::HmacSha512 => TsigAlgorithm::HmacSha512,
                };
                TSigner::new(key, algorithm, self.key_name.clone(), FUDGE).map_err(|e| SignerError::Key {
                    section: section(),
                    key_name: self.key_name.to_string(),
                    reason: e.to_string(),
                })
            })
            .clone()
            .map_err(|e| CapError::failed(e.to_string()))
    }
}

/// Why the TSIG signer cannot be built. Names the secret's reference, never its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum SignerError {
    /// The secret reference does not resolve.
    #[error("{section}.secret: {reason}")]
    Secret { section: String, reason: String },
    /// The secret is not base64.
    #[error(
        "{section}.secret ({secret}): not the base64 `secret` of a TSIG key ({reason}); copy it from the key statement `tsig-keygen` printed"
    )]
    Base64 { section: String, secret: String, reason: String },
    /// The secret decodes to nothing.
    #[error("{section}.secret ({secret}) decodes to an empty key")]
    Empty { section: String, secret: String },
    /// The key is refused by the TSIG implementation.
    #[error("{section}: cannot use TSIG key `{key_name}`: {reason}")]
    Key { section: String, key_name: String, reason: String },
}
