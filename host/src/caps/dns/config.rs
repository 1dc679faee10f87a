//! `[dns.NAME]` in `cradle.toml`: one DNS provider an environment can name
//! with `dns = "NAME"` (or several, `dns = ["a", "b"]`: each call goes to the
//! one whose `zones` hold its zone).
//!
//! Contract: a provider that passes [`DnsProviderConfig::validate`] has at
//! least one zone (each a valid domain name, no duplicates), a TTL inside the
//! range DNS allows, and what its `kind` needs and nothing of another kind's:
//! `rfc2136` a server address, a syntactically valid TSIG key name and a
//! secret; `technitium` the named endpoint (`[endpoints.NAME]`, its API token
//! attached by the host) it is reached through. The TSIG secret is a [`SecretRef`] and is only resolved when the
//! first DNS call needs it (config loading never reads it), like every other
//! credential in cradle.toml. A provider that does not pass is a
//! [`DnsConfigError`] naming the key to fix.

use std::net::SocketAddr;

use hickory_proto::rr::Name;
use serde::Deserialize;

use crate::secrets::SecretRef;

/// Largest TTL DNS allows (RFC 2181 §8).
pub const MAX_TTL: u32 = i32::MAX as u32;

/// `[dns.NAME]`: a DNS server cradle updates.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsProviderConfig {
    /// The provider: `rfc2136` (dynamic update signed with TSIG) or
    /// `technitium` (Technitium DNS Server's HTTP API).
    pub kind: DnsProviderKind,
    /// `rfc2136`: the primary server, as `IP:port` (e.g. `"192.0.2.53:53"`); a
    /// host name is refused so that DNS updates never depend on resolving DNS.
    #[serde(default)]
    pub server: Option<SocketAddr>,
    /// `rfc2136`: the TSIG key name, exactly as in the server's `key "NAME" { ... };`.
    #[serde(default)]
    pub key_name: Option<String>,
    /// `rfc2136`: the TSIG algorithm: `hmac-sha256` (default) or `hmac-sha512`.
    #[serde(default)]
    pub algorithm: TsigAlgorithmName,
    /// `rfc2136`: the base64 TSIG secret (the `secret "..."` of the key), by reference.
    #[serde(default)]
    pub secret: Option<SecretRef>,
    /// `technitium`: the endpoint (a key of `[endpoints]`, `auth = "bearer"`
    /// with an API token) the server's HTTP API is reached through.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// `technitium`: an A/AAAA upsert also keeps its PTR (Technitium's `ptr`
    /// and `createPtrZone`; the PTR of a replaced address that pointed at the
    /// name is deleted). Default true.
    #[serde(default = "default_ptr")]
    pub ptr: bool,
    /// The zones this server is primary for, e.g. `["lab.example.", "10.0.10.in-addr.arpa."]`.
    pub zones: Vec<String>,
    /// The TTL of records written with `ttl = 0` (default 300 s).
    #[serde(default = "default_ttl")]
    pub ttl: u32,
}

/// The provider protocols cradle speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DnsProviderKind {
    /// RFC 2136 dynamic update with RFC 8945 TSIG.
    Rfc2136,
    /// Technitium DNS Server's HTTP API (`/api/zones/records/...`).
    Technitium,
}

impl DnsProviderKind {
    /// The `kind` value.
    pub fn as_str(self) -> &'static str {
        match self {
            DnsProviderKind::Rfc2136 => "rfc2136",
            DnsProviderKind::Technitium => "technitium",
        }
    }
}

/// The TSIG algorithms cradle signs with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum TsigAlgorithmName {
    /// HMAC-SHA256 (what `tsig-keygen` makes by default).
    #[default]
    #[serde(rename = "hmac-sha256")]
    HmacSha256,
    /// HMAC-SHA512.
    #[serde(rename = "hmac-sha512")]
    HmacSha512,
}

impl TsigAlgorithmName {
    /// The name used in named.conf (`hmac-sha256`).
    pub fn as_str(self) -> &'static str {
        match self {
            TsigAlgorithmName::HmacSha256 => "hmac-sha256",
            TsigAlgorithmName::HmacSha512 => "hmac-sha512",
        }
    }
}

fn default_ttl() -> u32 {
    300
}

fn default_ptr() -> bool {
    true
}

/// A text that is not a domain name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Empty, or with spaces around it.
    #[error("`{0}` is not a domain name (empty or surrounded by spaces)")]
    Blank(String),
    /// Refused by the DNS name parser.
    #[error("`{text}` is not a valid domain name: {reason}")]
    Invalid {
        /// The text.
        text: String,
        /// The parser's reason.
        reason: String,
    },
}

/// A `[dns.NAME]` value that cannot work; each names its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsConfigError {
    /// `server` without a port.
    #[error("server = \"{server}\" needs a port, e.g. \"{}:53\"", .server.ip())]
    ServerPort {
        /// The server.
        server: SocketAddr,
    },
    /// `key_name` is not a domain name.
    #[error("key_name: {0}")]
    KeyName(NameError),
    /// `key_name` is the root.
    #[error("key_name must name the TSIG key, e.g. key_name = \"cradle-key\"")]
    RootKeyName,
    /// `zones = []`.
    #[error("zones is empty; list the zones this server is primary for, e.g. zones = [\"lab.example.\"]")]
    NoZones,
    /// A zone that is not a domain name.
    #[error("zones: {0}")]
    Zone(NameError),
    /// The root zone.
    #[error("zones: the root zone cannot be updated by cradle; list the zone itself")]
    RootZone,
    /// A zone listed twice.
    #[error("zones lists `{0}` twice")]
    DuplicateZone(String),
    /// A TTL outside 1..=`MAX_TTL`.
    #[error("ttl = {0} must be between 1 and {MAX_TTL} seconds")]
    Ttl(u32),
    /// A key the provider's kind needs is missing.
    #[error("kind = \"{kind}\" needs {key}")]
    Missing {
        /// The kind.
        kind: &'static str,
        /// The key, with an example.
        key: &'static str,
    },
    /// A key of another kind is set.
    #[error("{key} is not a key of kind = \"{kind}\"; remove it")]
    Foreign {
        /// The kind.
        kind: &'static str,
        /// The key.
        key: &'static str,
    },
}

/// Parse a domain name from cradle.toml or a call, always fully qualified
/// (`lab.example` and `lab.example.` are the same name).
pub(crate) fn parse_name(text: &str) -> Result<Name, NameError> {
    if text.trim().is_empty() || text.trim() != text {
        return Err(NameError::Blank(text.to_string()));
    }
    let mut name =
        Name::from_ascii(text).map_err(|e| NameError::Invalid { text: text.to_string(), reason: e.to_string() })?;
    name.set_fqdn(true);
    Ok(name)
}

impl DnsProviderConfig {
    /// Check the values that do not need the network or the secret; the
    /// error names the key to fix (relative to `[dns.NAME]`).
    pub fn validate(&self) -> Result<(), DnsConfigError> {
        let kind = self.kind.as_str();
        match self.kind {
            DnsProviderKind::Rfc2136 => {
                let missing = |key| DnsConfigError::Missing { kind, key };
                let server = self.server.ok_or_else(|| missing("server = \"IP:port\""))?;
                let key_name = self.key_name.as_deref().ok_or_else(|| missing("key_name = \"KEY\""))?;
                self.secret.as_ref().ok_or_else(|| missing("secret = { file = \"...\" }"))?;
                if self.endpoint.is_some() {
                    return Err(DnsConfigError::Foreign { kind, key: "endpoint" });
                }
                if server.port() == 0 {
                    return Err(DnsConfigError::ServerPort { server });
                }
                let key = parse_name(key_name).map_err(DnsConfigError::KeyName)?;
                if key.is_root() {
                    return Err(DnsConfigError::RootKeyName);
                }
            }
            DnsProviderKind::Technitium => {
                if self.endpoint.as_deref().is_none_or(|e| e.trim().is_empty()) {
                    return Err(DnsConfigError::Missing { kind, key: "endpoint = \"NAME\" (a key of [endpoints])" });
                }
                for (key, set) in [
                    ("server", self.server.is_some()),
                    ("key_name", self.key_name.is_some()),
                    ("secret", self.secret.is_some()),
                ] {
                    if set {
                        return Err(DnsConfigError::Foreign { kind, key });
                    }
                }
            }
        }
        if self.zones.is_empty() {
            return Err(DnsConfigError::NoZones);
        }
        let mut seen: Vec<Name> = Vec::new();
        for zone in &self.zones {
            let parsed = parse_name(zone).map_err(DnsConfigError::Zone)?;
            if parsed.is_root() {
                return Err(DnsConfigError::RootZone);
            }
            if seen.contains(&parsed) {
                return Err(DnsConfigError::DuplicateZone(zone.clone()));
            }
            seen.push(parsed);
        }
        if self.ttl == 0 || self.ttl > MAX_TTL {
            return Err(DnsConfigError::Ttl(self.ttl));
        }
        Ok(())
    }
}
