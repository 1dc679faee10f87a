//! Shared records: where checkpoints and creation records live when
//! `[coordination] backend = "etcd"`, and the sealing of the secret they hold.
//!
//! - Keys: `<prefix>checkpoints/<vm>` and `<prefix>creation/<vm>`; the VMID
//!   reservations are the creation records under `<prefix>creation/`, so every
//!   control node sees every reservation.
//! - Every write and delete goes through [`EtcdConn::fenced`] with the fencing
//!   token of the VM's lock held by the writing run, and the token is stored in
//!   the record (`fence`): a run that lost its lock writes nothing.
//! - A creation record's private host key is sealed before it leaves the
//!   process: ChaCha20-Poly1305 under a key derived (HKDF-SHA256) from the
//!   `records_key` secret reference, a fresh random nonce per write, and the
//!   VM name and VMID as associated data, so a sealed key copied onto another
//!   record does not open. etcd never holds it in clear.
//!
//! Failure modes: a wrong `records_key` (or a tampered record) is an error
//! naming the record, never an empty key; etcd errors as [`EtcdConn`] says.

use std::sync::Arc;

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hkdf;
use ring::rand::{SecureRandom, SystemRandom};

use super::etcd::EtcdConn;
use crate::secrets::{Secret, SecretRef};

/// The etcd connection and the sealing key of the shared records.
#[derive(Debug, Clone)]
pub struct SharedRecords {
    /// The connection (shared with the lock store).
    pub conn: Arc<EtcdConn>,
    /// Seals creation records' private keys.
    pub sealer: Arc<Sealer>,
}

impl SharedRecords {
    /// The etcd key of `kind`'s record of `vm`.
    pub fn key(&self, kind: &str, vm: &str) -> String {
        format!("{}{kind}/{vm}", self.conn.prefix)
    }

    /// The prefix of every record of `kind`.
    pub fn prefix(&self, kind: &str) -> String {
        format!("{}{kind}/", self.conn.prefix)
    }
}

/// The sealing key of creation records.
pub struct Sealer {
    key: LessSafeKey,
    rng: SystemRandom,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer([redacted])")
    }
}

/// Why a sealed value could not be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SealError {
    /// The secret reference could not be read.
    #[error("coordination.records_key: {0}")]
    Key(String),
    /// Sealing failed (no randomness).
    #[error("cannot seal a creation record: the system's random source failed")]
    Seal,
    /// Opening failed: another key, or tampered data.
    #[error(
        "the sealed host key does not open with coordination.records_key (another key on this node than on the node that wrote it, or a tampered record)"
    )]
    Open,
    /// Not the sealed form.
    #[error("the sealed host key is malformed ({0})")]
    Malformed(String),
}

const SALT: &[u8] = b"cradle creation records";
const INFO: &[&[u8]] = &[b"chacha20-poly1305 v1"];

impl Sealer {
    /// The sealer of the secret `records_key` names.
    pub fn from_ref(records_key: &SecretRef) -> Result<Sealer, SealError> {
        let secret = records_key.resolve().map_err(|e| SealError::Key(e.to_string()))?;
        Sealer::from_secret(&secret)
    }

    /// The sealer of `secret` (any length; use 32 random bytes or more).
    pub fn from_secret(secret: &Secret) -> Result<Sealer, SealError> {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, SALT).extract(secret.expose().as_bytes());
        let mut bytes = [0u8; 32];
        // 32 bytes is CHACHA20_POLY1305's key length: ring accepts it.
        let derived = prk.expand(INFO, &CHACHA20_POLY1305).and_then(|okm| okm.fill(&mut bytes));
        let key =
            derived.and_then(|()| UnboundKey::new(&CHACHA20_POLY1305, &bytes).map_err(|_| ring::error::Unspecified));
        bytes.fill(0);
        let key = key.map_err(|_| SealError::Key("cannot derive a sealing key from it".into()))?;
        Ok(Sealer { key: LessSafeKey::new(key), rng: SystemRandom::new() })
    }

    /// `plain` sealed, bound to `context` (hex of nonce || ciphertext || tag).
    pub fn seal(&self, plain: &str, context: &str) -> Result<String, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).map_err(|_| SealError::Seal)?;
        let mut data = plain.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(context.as_bytes()), &mut data)
            .map_err(|_| SealError::Seal)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        Ok(hex::encode(out))
    }

    /// What [`Sealer::seal`] sealed with the same `context`.
    pub fn open(&self, sealed: &str, context: &str) -> Result<Secret, SealError> {
        let bytes = hex::decode(sealed).map_err(|e| SealError::Malformed(e.to_string()))?;
        if bytes.len() < NONCE_LEN + CHACHA20_POLY1305.tag_len() {
            return Err(SealError::Malformed("too short".into()));
        }
        let (nonce, rest) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Malformed("nonce".into()))?;
        let mut data = rest.to_vec();
        let plain =
            self.key.open_in_place(nonce, Aad::from(context.as_bytes()), &mut data).map_err(|_| SealError::Open)?;
        let text = String::from_utf8(plain.to_vec()).map_err(|_| SealError::Open)?;
        data.fill(0);
        Ok(Secret::new(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer(secret: &str) -> Sealer {
        Sealer::from_secret(&Secret::new(secret.to_string())).expect("sealer")
    }

    #[test]
    fn a_sealed_key_opens_only_with_the_same_secret_and_the_same_record() {
        let s = sealer("records-key-0123456789abcdef0123456789");
        let sealed = s.seal("-----BEGIN OPENSSH PRIVATE KEY-----\nCANARY\n", "web-0|150").expect("seal");
        assert!(!sealed.contains("CANARY") && !hex::decode(&sealed).expect("hex").windows(6).any(|w| w == b"CANARY"));
        assert_eq!(
            s.open(&sealed, "web-0|150").expect("open").expose(),
            "-----BEGIN OPENSSH PRIVATE KEY-----\nCANARY\n"
        );
        assert!(matches!(s.open(&sealed, "web-1|150"), Err(SealError::Open)), "bound to its record");
        assert!(matches!(sealer("another key").open(&sealed, "web-0|150"), Err(SealError::Open)));
        assert_ne!(s.seal("x", "c").expect("seal"), s.seal("x", "c").expect("seal"), "a fresh nonce every time");
        let mut tampered = hex::decode(&sealed).expect("hex");
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert!(matches!(s.open(&hex::encode(tampered), "web-0|150"), Err(SealError::Open)));
        assert!(matches!(s.open("zz", "web-0|150"), Err(SealError::Malformed(_))));
    }
}
