//! An environment's DNS providers (`dns = "NAME"` or `dns = ["a", "b"]`):
//! each call goes to the provider whose `zones` hold its zone (the loader
//! refuses a zone two of them serve). With one provider every call goes to
//! it, so its own message names a zone it does not serve.

use std::time::Duration;

use super::technitium::Technitium;
use super::{DnsRecord, RecordKind, Rfc2136};
use crate::contract::CapError;

/// One configured provider.
#[derive(Debug)]
pub enum Provider {
    /// RFC 2136 + TSIG (boxed: its signer and key make it several times
    /// Technitium's size).
    Rfc2136(Box<Rfc2136>),
    /// Technitium's HTTP API.
    Technitium(Technitium),
}

impl Provider {
    fn serves(&self, zone: &str) -> bool {
        match self {
            Provider::Rfc2136(p) => p.serves(zone),
            Provider::Technitium(p) => p.serves(zone),
        }
    }
}

/// The providers of an environment, in the order `dns` names them.
#[derive(Debug)]
pub struct DnsProviders {
    list: Vec<(String, Provider)>,
}

impl From<Rfc2136> for DnsProviders {
    fn from(p: Rfc2136) -> DnsProviders {
        DnsProviders { list: vec![("dns".into(), Provider::Rfc2136(Box::new(p)))] }
    }
}

impl From<Technitium> for DnsProviders {
    fn from(p: Technitium) -> DnsProviders {
        DnsProviders { list: vec![("dns".into(), Provider::Technitium(p))] }
    }
}

impl DnsProviders {
    /// The providers `[dns.NAME]` by name.
    pub fn new(list: Vec<(String, Provider)>) -> DnsProviders {
        DnsProviders { list }
    }

    fn pick(&self, zone: &str) -> Result<&Provider, CapError> {
        if let [(_, only)] = self.list.as_slice() {
            return Ok(only);
        }
        self.list.iter().find(|(_, p)| p.serves(zone)).map(|(_, p)| p).ok_or_else(|| {
            let names: Vec<String> = self.list.iter().map(|(n, _)| format!("[dns.{n}]")).collect();
            CapError::invalid(format!(
                "dns: zone `{zone}` is in the zones of none of this environment's providers ({}); add it to the one that serves it",
                names.join(", ")
            ))
        })
    }

    /// Make `rec` the only record of its name and kind, on the provider of its zone.
    pub async fn upsert(&self, rec: &DnsRecord, timeout: Duration) -> Result<bool, CapError> {
        match self.pick(&rec.zone)? {
            Provider::Rfc2136(p) => p.upsert(rec).await,
            Provider::Technitium(p) => p.upsert(rec, timeout).await,
        }
    }

    /// Delete every record of `name` and `kind` in `zone`, on the provider of the zone.
    pub async fn delete(&self, zone: &str, name: &str, kind: RecordKind, timeout: Duration) -> Result<bool, CapError> {
        match self.pick(zone)? {
            Provider::Rfc2136(p) => p.delete(zone, name, kind).await,
            Provider::Technitium(p) => p.delete(zone, name, kind, timeout).await,
        }
    }
}
