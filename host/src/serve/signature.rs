//! `X-Hook-Signature`: NetBox signs a webhook's raw body with HMAC-SHA512
//! under the webhook's secret and sends the digest as 128 lowercase hex
//! characters (the same code from 3.7 to 4.7).
//!
//! Contract: [`WebhookKey::verify`] is the first thing done with a body — before
//! it is parsed — and compares in constant time (`ring::hmac::verify`). The
//! key never leaves this type: it prints as `[redacted]`.
//!
//! Failure modes: no header, a header that is not 128 hex characters, or a
//! digest that does not match; each is a [`SignatureError`] whose message
//! names the header, never the secret or the expected digest.

use ring::hmac;

/// The header NetBox puts the signature in.
pub const HEADER: &str = "x-hook-signature";

/// Why a delivery's signature is not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No `X-Hook-Signature` header (a webhook without a secret, or not NetBox).
    #[error("no X-Hook-Signature header (set the webhook's secret in NetBox)")]
    Missing,
    /// The header is not a hex HMAC-SHA512 digest.
    #[error("X-Hook-Signature is not 128 hex characters")]
    Malformed,
    /// The digest does not match the body under the configured secret.
    #[error("X-Hook-Signature does not match the body (wrong secret, or the body was altered)")]
    Mismatch,
}

/// A webhook source's secret, ready to verify deliveries.
pub struct WebhookKey(hmac::Key);

impl std::fmt::Debug for WebhookKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookKey([redacted])")
    }
}

impl WebhookKey {
    /// The key for `secret` (the webhook's "Secret" field in NetBox).
    pub fn new(secret: &[u8]) -> WebhookKey {
        WebhookKey(hmac::Key::new(hmac::HMAC_SHA512, secret))
    }

    /// Check `header` (the `X-Hook-Signature` value, if any) against `body`.
    pub fn verify(&self, body: &[u8], header: Option<&[u8]>) -> Result<(), SignatureError> {
        let header = header.ok_or(SignatureError::Missing)?;
        let header = header.trim_ascii();
        if header.len() != 128 {
            return Err(SignatureError::Malformed);
        }
        let digest = hex::decode(header).map_err(|_| SignatureError::Malformed)?;
        hmac::verify(&self.0, body, &digest).map_err(|_| SignatureError::Mismatch)
    }

    /// The signature of `body`, as NetBox would send it (for tests and `cradle
    /// serve`'s own load generator).
    pub fn sign(&self, body: &[u8]) -> String {
        hex::encode(hmac::sign(&self.0, body).as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = include_bytes!("testdata/netbox-4.7.3-vm-staged.body");
    const SIG: &str = include_str!("testdata/netbox-4.7.3-vm-staged.sig");
    const SECRET: &[u8] = b"probe-webhook-secret-0123456789";

    #[test]
    fn a_real_netbox_4_7_3_delivery_verifies_with_its_secret() {
        let key = WebhookKey::new(SECRET);
        key.verify(BODY, Some(SIG.as_bytes())).expect("the real delivery verifies");
        assert_eq!(key.sign(BODY), SIG.trim(), "we sign as NetBox does");
        // Upper-case hex is the same digest.
        key.verify(BODY, Some(SIG.trim().to_uppercase().as_bytes())).expect("hex case does not matter");
    }

    #[test]
    fn a_wrong_secret_an_altered_body_or_a_bad_header_is_refused() {
        let key = WebhookKey::new(SECRET);
        assert_eq!(
            WebhookKey::new(b"another-secret").verify(BODY, Some(SIG.as_bytes())),
            Err(SignatureError::Mismatch)
        );
        let mut altered = BODY.to_vec();
        let at = altered.windows(6).position(|w| w == b"staged").expect("status in body");
        altered[at..at + 6].copy_from_slice(b"active");
        assert_eq!(key.verify(&altered, Some(SIG.as_bytes())), Err(SignatureError::Mismatch));
        let mut extra = BODY.to_vec();
        extra.push(b' ');
        assert_eq!(key.verify(&extra, Some(SIG.as_bytes())), Err(SignatureError::Mismatch), "one added byte");
        assert_eq!(key.verify(BODY, None), Err(SignatureError::Missing));
        assert_eq!(key.verify(BODY, Some(b"sha512=abc")), Err(SignatureError::Malformed));
        let not_hex = "z".repeat(128);
        assert_eq!(key.verify(BODY, Some(not_hex.as_bytes())), Err(SignatureError::Malformed));
        let sha256_len = &SIG.trim()[..64];
        assert_eq!(key.verify(BODY, Some(sha256_len.as_bytes())), Err(SignatureError::Malformed));
    }

    #[test]
    fn the_key_never_prints() {
        let key = WebhookKey::new(b"CANARY-WEBHOOK-SECRET");
        assert!(!format!("{key:?}").contains("CANARY"));
        for e in [SignatureError::Missing, SignatureError::Malformed, SignatureError::Mismatch] {
            assert!(!e.to_string().contains("CANARY"));
        }
    }
}
