//! DNS messages on the wire: the RFC 2136 UPDATE and query messages cradle
//! sends, one TCP exchange (RFC 1035 §4.2.2 length prefix), and the TSIG
//! check of the answer.
//!
//! Every message is TSIG-signed, queries included, so the state cradle reads
//! before deciding to change it is authenticated too. A response that claims
//! success is accepted only with a valid signature from the same key; an
//! error response may be unsigned (a server that rejects the key cannot sign),
//! and is reported as the error it carries.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hickory_proto::op::{Message, OpCode, Query, ResponseCode, UpdateMessage};
use hickory_proto::rr::rdata::tsig::TsigError;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType, TSigner};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What an exchange is about, for messages.
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// The zone (fully qualified).
    pub zone: Name,
    /// The owner name, inside `zone`.
    pub name: Name,
    /// A, AAAA or PTR.
    pub kind: RecordType,
}

/// How an exchange failed before a DNS answer was there to interpret.
#[derive(Debug)]
pub(super) enum WireError {
    /// No answer in time.
    Timeout,
    /// Connect, write or read failed.
    Io(std::io::Error),
    /// The answer could not be decoded, or did not answer this message.
    Malformed(String),
    /// The answer claims success but its TSIG signature is missing or wrong.
    Unauthenticated(String),
    /// The server rejected our TSIG signature (RFC 8945 §5.2).
    Tsig(TsigError),
    /// Building or signing the message failed.
    Build(String),
}

/// The query for the RRset of `t` (signed like every message).
pub(super) fn query(t: &Target) -> Message {
    let mut msg = Message::query();
    msg.metadata.recursion_desired = false;
    msg.add_query(Query::query(t.name.clone(), t.kind));
    msg
}

fn update(t: &Target) -> Message {
    let mut msg = Message::query();
    msg.metadata.op_code = OpCode::Update;
    msg.metadata.recursion_desired = false;
    let mut zone = Query::new();
    zone.set_name(t.zone.clone()).set_query_class(DNSClass::IN).set_query_type(RecordType::SOA);
    msg.add_zone(zone);
    msg
}

/// Prerequisite "the RRset is exactly `current`" (RFC 2136 §2.4.2), or "it
/// does not exist" (§2.4.3) when `current` is empty.
fn expect_current(msg: &mut Message, t: &Target, current: &[Record]) {
    if current.is_empty() {
        let mut none = Record::update0(t.name.clone(), 0, t.kind);
        none.dns_class = DNSClass::NONE;
        msg.add_pre_requisite(none);
    } else {
        for r in current {
            let mut exact = Record::from_rdata(t.name.clone(), 0, r.data.clone());
            exact.dns_class = DNSClass::IN;
            msg.add_pre_requisite(exact);
        }
    }
}

/// Replace the RRset of `t`, last seen as `current`, by the single `new` record.
pub(super) fn replace(t: &Target, current: &[Record], new: Record) -> Message {
    let mut msg = update(t);
    expect_current(&mut msg, t, current);
    let mut delete = Record::update0(t.name.clone(), 0, t.kind);
    delete.dns_class = DNSClass::ANY;
    msg.add_update(delete);
    msg.add_update(new);
    msg
}

/// Delete the RRset of `t`, provided it still exists (RFC 2136 §2.4.1).
pub(super) fn delete(t: &Target) -> Message {
    let mut msg = update(t);
    let mut exists = Record::update0(t.name.clone(), 0, t.kind);
    exists.dns_class = DNSClass::ANY;
    msg.add_pre_requisite(exists);
    let mut delete = Record::update0(t.name.clone(), 0, t.kind);
    delete.dns_class = DNSClass::ANY;
    msg.add_update(delete);
    msg
}

/// The records of `t`'s name and type in an answer.
pub(super) fn rrset(answer: &Message, t: &Target) -> Vec<Record> {
    answer.answers.iter().filter(|r| r.record_type() == t.kind && r.name == t.name).cloned().collect()
}

/// The record `value` of `kind` (already parsed) at `t`.
pub(super) fn record(t: &Target, ttl: u32, data: RData) -> Record {
    Record::from_rdata(t.name.clone(), ttl, data)
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Sign `msg`, send it to `server` over TCP and return the checked answer
/// with its RCODE (interpreting the RCODE is the caller's business).
pub(super) async fn exchange(
    server: SocketAddr,
    signer: &TSigner,
    mut msg: Message,
    timeout: Duration,
) -> Result<Message, WireError> {
    let verifier = msg.finalize(signer, now()).map_err(|e| WireError::Build(e.to_string()))?;
    let bytes = msg.to_vec().map_err(|e| WireError::Build(e.to_string()))?;
    let len = u16::try_from(bytes.len()).map_err(|_| WireError::Build("message over 65535 bytes".into()))?;
    let raw = tokio::time::timeout(timeout, async {
        let mut stream = TcpStream::connect(server).await?;
        let mut framed = Vec::with_capacity(bytes.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(&bytes);
        stream.write_all(&framed).await?;
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).await?;
        let mut raw = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    })
    .await
    .map_err(|_| WireError::Timeout)?
    .map_err(WireError::Io)?;
    let answer = Message::from_vec(&raw).map_err(|e| WireError::Malformed(e.to_string()))?;
    if answer.metadata.id != msg.metadata.id {
        return Err(WireError::Malformed(format!(
            "answer id {} does not match the request id {}",
            answer.metadata.id, msg.metadata.id
        )));
    }
    if let Some(sig) = answer.signature()
        && let Some(err) = sig.data.error
    {
        return Err(WireError::Tsig(err));
    }
    let signed = answer.signature().is_some_and(|s| !s.data.mac.is_empty());
    let success = matches!(answer.metadata.response_code, ResponseCode::NoError | ResponseCode::NXDomain);
    if signed {
        let mut verifier = verifier.ok_or_else(|| WireError::Build("the signer returned no verifier".into()))?;
        verifier.verify(&raw).map_err(|e| WireError::Unauthenticated(e.to_string()))?;
    } else if success {
        return Err(WireError::Unauthenticated("the answer carries no TSIG signature".into()));
    }
    Ok(answer)
}
