//! From DNS failures to [`CapError`]s an operator can act on.
//!
//! Every message names the provider section (`dns.NAME`), the server, the zone
//! and owner name, the RCODE or TSIG error as the server sent it, and what to
//! check. Never the TSIG secret: only the key *name* is ever shown.
//!
//! | what happened | kind |
//! |---|---|
//! | timeout, connection refused/reset, SERVFAIL | `transient` |
//! | FORMERR, NOTZONE, a bad name or value | `invalid` |
//! | NOTAUTH, REFUSED, a non-authoritative answer, TSIG BADSIG/BADKEY/BADTIME, NOTIMP, an unsigned "success", a malformed answer, any other RCODE | `failed` |
//! | the RRset kept changing under us | `conflict` |
//! | the name is a CNAME (raised by `Rfc2136` in `mod.rs`) | `conflict` |

use std::net::SocketAddr;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::tsig::TsigError;
use hickory_proto::rr::{Name, RecordType};

use super::wire::{Target, WireError};
use crate::contract::{CapError, ErrorKind};

/// Who was asked what, for messages.
pub(super) struct Ctx<'a> {
    /// `dns.NAME`.
    pub provider: &'a str,
    /// The server.
    pub server: SocketAddr,
    /// The TSIG key name.
    pub key: &'a Name,
    /// The algorithm, as in named.conf.
    pub algorithm: &'a str,
    /// The zone, name and type.
    pub target: &'a Target,
}

impl Ctx<'_> {
    fn what(&self, stage: &str) -> String {
        format!(
            "{} ({}): {stage} of `{}` {} in zone `{}`",
            self.provider,
            self.server,
            self.target.name,
            kind_name(self.target.kind),
            self.target.zone
        )
    }

    /// A failure to get a usable answer at all.
    pub fn wire(&self, stage: &str, e: WireError) -> CapError {
        let what = self.what(stage);
        let key = self.key;
        match e {
            WireError::Timeout => CapError::new(
                ErrorKind::Transient,
                format!(
                    "{what}: no answer in time; check that named runs and is reachable over TCP at {}",
                    self.server
                ),
            ),
            WireError::Io(io) => CapError::new(
                ErrorKind::Transient,
                format!(
                    "{what}: cannot talk to the server over TCP ({io}); check that named runs and listens on {}",
                    self.server
                ),
            ),
            WireError::Malformed(m) => {
                CapError::failed(format!("{what}: the server's answer is not a valid DNS message ({m})"))
            }
            WireError::Build(m) => CapError::failed(format!("{what}: cannot build the signed message ({m})")),
            WireError::Unauthenticated(m) => CapError::failed(format!(
                "{what}: the answer is not authenticated by TSIG key `{key}` ({m}); nothing it says was trusted — check that the server uses the same key"
            )),
            WireError::Tsig(TsigError::BadSig) => CapError::failed(format!(
                "{what}: the server rejected the TSIG signature of key `{key}` (BADSIG): the secret in {}.secret does not match the server's key `{key}` — compare it with the `secret` of that key in named.conf",
                self.provider
            )),
            WireError::Tsig(TsigError::BadKey) => CapError::failed(format!(
                "{what}: the server does not know TSIG key `{key}` with algorithm {} (BADKEY): check {p}.key_name and {p}.algorithm against the `key` statement in named.conf",
                self.algorithm,
                p = self.provider
            )),
            WireError::Tsig(TsigError::BadTime) => CapError::failed(format!(
                "{what}: the server rejected the time of the TSIG signature of key `{key}` (BADTIME): the clocks of this host and the DNS server differ by more than 5 minutes — check NTP on both"
            )),
            WireError::Tsig(other) => CapError::failed(format!(
                "{what}: the server rejected TSIG key `{key}` (TSIG error {}); check the key in named.conf",
                u16::from(other)
            )),
        }
    }

    /// A query answered with an error RCODE, or (`None`) a NOERROR answer
    /// without the authoritative flag.
    pub fn query_rcode(&self, rcode: Option<ResponseCode>) -> CapError {
        let what = self.what("query");
        let said = match rcode {
            None => "a non-authoritative answer".to_string(),
            Some(r @ (ResponseCode::Refused | ResponseCode::NotAuth)) => rcode_name(r),
            Some(other) => return self.rcode(&what, other),
        };
        CapError::failed(format!(
            "{what}: the server does not serve zone `{}` ({said}) — check that {}.server is the zone's primary and that its named.conf has a `zone \"{}\"` statement",
            self.target.zone,
            self.provider,
            self.target.zone.to_ascii().trim_end_matches('.')
        ))
    }

    /// An UPDATE answered with an error RCODE (prerequisite failures are
    /// handled by the caller before this).
    pub fn update_rcode(&self, rcode: ResponseCode) -> CapError {
        let what = self.what("update");
        let key = self.key;
        let zone = &self.target.zone;
        match rcode {
            ResponseCode::Refused => CapError::failed(format!(
                "{what}: the server refused the update signed with TSIG key `{key}` (REFUSED): the zone's `allow-update {{ key \"{key}\"; }};` (or `update-policy`) in named.conf must grant this key"
            )),
            ResponseCode::NotAuth => CapError::failed(format!(
                "{what}: the server is not authoritative for zone `{zone}` or does not accept key `{key}` for it (NOTAUTH): check that {}.server is the zone's primary and that its allow-update names key `{key}`",
                self.provider
            )),
            other => self.rcode(&what, other),
        }
    }

    fn rcode(&self, what: &str, rcode: ResponseCode) -> CapError {
        let name = rcode_name(rcode);
        match rcode {
            ResponseCode::ServFail => CapError::new(
                ErrorKind::Transient,
                format!(
                    "{what}: the server failed ({name}); it may be loading the zone — see the named log, then retry"
                ),
            ),
            ResponseCode::FormErr => CapError::invalid(format!(
                "{what}: the server could not parse the request ({name}); check the name and value"
            )),
            ResponseCode::NotZone => CapError::invalid(format!(
                "{what}: the name is not inside zone `{}` ({name}); use the zone that contains it",
                self.target.zone
            )),
            ResponseCode::NotImp => CapError::failed(format!(
                "{what}: the server does not implement dynamic update ({name}); {} must point at a server that accepts RFC 2136 updates",
                self.provider
            )),
            _ => CapError::failed(format!("{what}: the server answered {name}; see the named log")),
        }
    }

    /// The RRset kept changing between our read and our update.
    pub fn conflict(&self, attempts: u32) -> CapError {
        CapError::new(
            ErrorKind::Conflict,
            format!(
                "{}: the records changed between reading and updating them {attempts} times; another writer is updating this name — retry when it is done",
                self.what("update")
            ),
        )
    }
}

/// `A`, `AAAA`, `PTR`.
pub(super) fn kind_name(kind: RecordType) -> &'static str {
    match kind {
        RecordType::A => "A",
        RecordType::AAAA => "AAAA",
        RecordType::PTR => "PTR",
        _ => "record",
    }
}

/// The RCODE mnemonic as DNS tools print it.
fn rcode_name(rcode: ResponseCode) -> String {
    match rcode {
        ResponseCode::NoError => "NOERROR".into(),
        ResponseCode::FormErr => "FORMERR".into(),
        ResponseCode::ServFail => "SERVFAIL".into(),
        ResponseCode::NXDomain => "NXDOMAIN".into(),
        ResponseCode::NotImp => "NOTIMP".into(),
        ResponseCode::Refused => "REFUSED".into(),
        ResponseCode::YXDomain => "YXDOMAIN".into(),
        ResponseCode::YXRRSet => "YXRRSET".into(),
        ResponseCode::NXRRSet => "NXRRSET".into(),
        ResponseCode::NotAuth => "NOTAUTH".into(),
        ResponseCode::NotZone => "NOTZONE".into(),
        other => format!("RCODE {}", u16::from(other)),
    }
}
