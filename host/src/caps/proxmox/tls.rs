//! TLS trust for the Proxmox API: fingerprint pinning, a private CA, or (loudly) nothing.
//!
//! Contract: [`client_config`] turns a [`TlsVerify`] into a rustls `ClientConfig`
//! (ring provider, TLS 1.2/1.3) that reqwest uses as-is, plus a [`TlsFailures`] slot
//! in which the verifier records why it refused a certificate, so the client can
//! report it with the fingerprints involved instead of a bare "handshake failed".
//!
//! - [`TlsVerify::Fingerprint`]: accepts exactly the leaf certificate whose SHA-256
//!   matches. Chain, expiry and host name are deliberately not checked — pinning is
//!   for PVE's self-signed node certificates, where none of those mean anything —
//!   but the handshake signatures are still verified with the ring provider, so the
//!   server must hold the pinned certificate's private key.
//! - [`TlsVerify::CaFile`] / [`TlsVerify::CaPem`]: the chain must lead to that CA and
//!   only that CA (no system roots), and the endpoint's host name must be in the
//!   certificate's subjectAltName. Choice: always strict, never a CN fallback — PVE's
//!   node certificates (`pve-ssl.pem`, signed by `pve-root-ca.pem`) carry SANs for the
//!   node name, its FQDN and its addresses, so strict matching works against real PVE.
//! - [`TlsVerify::Insecure`]: accepts any certificate and warns on every client creation.
//!
//! Failure modes: an unparsable fingerprint, an unreadable CA file or a file without a
//! PEM certificate fail [`client_config`] with `ProxmoxError::TlsSetup` naming the path
//! (the reason is a [`TlsConfigError`]'s text).

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustls::DigitallySignedStruct;
use rustls::SignatureScheme;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use sha2::{Digest, Sha256};

use super::errors::ProxmoxError;

/// How the client decides to trust the API's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsVerify {
    /// Pin the leaf certificate's SHA-256 (`AA:BB:..` or plain hex, any case).
    Fingerprint(String),
    /// Verify the chain against the CA certificate(s) in this PEM file only.
    CaFile(PathBuf),
    /// Verify the chain against the CA certificate(s) in this PEM text only.
    CaPem(String),
    /// Accept any certificate (warned about on every client creation).
    Insecure,
}

/// Why a configured fingerprint or CA cannot be used (the client reports it as
/// [`ProxmoxError::TlsSetup`] naming the endpoint).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsConfigError {
    /// The fingerprint is not hex.
    #[error("fingerprint {text:?} is not hex (expected 32 bytes as AA:BB:.. or 64 hex digits)")]
    FingerprintNotHex {
        /// The configured text.
        text: String,
    },
    /// The fingerprint is not 32 bytes long.
    #[error(
        "fingerprint {text:?} has {bytes} bytes, a SHA-256 fingerprint has 32 (is it SHA-1? use `openssl x509 -fingerprint -sha256`)"
    )]
    FingerprintLength {
        /// The configured text.
        text: String,
        /// How many bytes it has.
        bytes: usize,
    },
    /// The CA file or text has no certificate.
    #[error("{origin} holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)")]
    NoCertificate {
        /// `CA file PATH` or `the configured CA PEM`.
        origin: String,
    },
    /// A CA certificate rustls refuses as a trust anchor.
    #[error("{origin} holds a certificate that cannot be a trust anchor: {reason}")]
    NotAnAnchor {
        /// Where the certificate came from.
        origin: String,
        /// rustls' reason.
        reason: String,
    },
    /// The verifier could not be built from the CA certificates.
    #[error("cannot build a verifier from {origin}: {reason}")]
    Verifier {
        /// Where the certificates came from.
        origin: String,
        /// rustls' reason.
        reason: String,
    },
}

/// A SHA-256 certificate fingerprint.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// Parses `AA:BB:...` or plain hex in any case; surrounding whitespace is ignored.
    pub fn parse(text: &str) -> Result<Fingerprint, TlsConfigError> {
        let text = text.trim();
        let hex_digits: String = text.chars().filter(|c| *c != ':').collect();
        let bytes = hex::decode(&hex_digits).map_err(|_| TlsConfigError::FingerprintNotHex { text: text.into() })?;
        let arr: [u8; 32] = bytes
            .try_into()
            .map_err(|b: Vec<u8>| TlsConfigError::FingerprintLength { text: text.into(), bytes: b.len() })?;
        Ok(Fingerprint(arr))
    }

    /// The fingerprint of a DER certificate.
    pub fn of_der(der: &[u8]) -> Fingerprint {
        Fingerprint(Sha256::digest(der).into())
    }
}

impl fmt::Display for Fingerprint {
    /// Upper-case, colon-separated, as `pvenode cert info` and openssl print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|b| format!("{b:02X}")).collect();
        f.write_str(&parts.join(":"))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// Why the verifier refused the server's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsFailure {
    /// The pinned fingerprint did not match.
    Mismatch {
        /// What the server presented.
        presented: Fingerprint,
        /// What is configured.
        expected: Fingerprint,
    },
    /// The CA verifier refused the chain or the name.
    Rejected(String),
}

/// The last refusal of a client's verifier. Shared between the verifier (inside
/// rustls, where errors are flattened into an io error) and the client, which
/// takes it when a request fails to connect.
#[derive(Debug, Clone, Default)]
pub struct TlsFailures(Arc<Mutex<Option<TlsFailure>>>);

impl TlsFailures {
    fn record(&self, failure: TlsFailure) {
        // A poisoned slot only means a panic elsewhere; the value is still a plain enum.
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(failure);
    }

    /// Takes the recorded refusal, if any.
    pub fn take(&self) -> Option<TlsFailure> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Builds the rustls configuration for `verify`; `endpoint` only names errors.
pub fn client_config(verify: &TlsVerify, endpoint: &str) -> Result<(rustls::ClientConfig, TlsFailures), ProxmoxError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algs = provider.signature_verification_algorithms;
    let failures = TlsFailures::default();
    let setup_err = |reason: String| ProxmoxError::TlsSetup { endpoint: endpoint.to_string(), reason };
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        TlsVerify::Fingerprint(text) => {
            let expected = Fingerprint::parse(text).map_err(|e| setup_err(e.to_string()))?;
            Arc::new(PinnedVerifier { expected, algs, failures: failures.clone() })
        }
        TlsVerify::CaFile(path) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<_, _>>())
                .map_err(|e| setup_err(format!("cannot read CA certificates from {}: {e}", path.display())))?;
            ca_verifier(certs, &format!("CA file {}", path.display()), provider.clone(), &failures)
                .map_err(|e| setup_err(e.to_string()))?
        }
        TlsVerify::CaPem(pem) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| setup_err(format!("cannot parse the configured CA PEM: {e}")))?;
            ca_verifier(certs, "the configured CA PEM", provider.clone(), &failures)
                .map_err(|e| setup_err(e.to_string()))?
        }
        TlsVerify::Insecure => {
            tracing::warn!(
                endpoint,
                "TLS verification is DISABLED for this Proxmox endpoint: anyone on the path can read the API token; pin the certificate fingerprint instead"
            );
            Arc::new(InsecureVerifier { algs })
        }
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| setup_err(format!("TLS protocol setup: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok((config, failures))
}

fn ca_verifier(
    certs: Vec<CertificateDer<'static>>,
    source: &str,
    provider: Arc<CryptoProvider>,
    failures: &TlsFailures,
) -> Result<Arc<dyn ServerCertVerifier>, TlsConfigError> {
    let origin = || source.to_string();
    if certs.is_empty() {
        return Err(TlsConfigError::NoCertificate { origin: origin() });
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| TlsConfigError::NotAnAnchor { origin: origin(), reason: e.to_string() })?;
    }
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| TlsConfigError::Verifier { origin: origin(), reason: e.to_string() })?;
    Ok(Arc::new(RecordingVerifier { inner, failures: failures.clone() }))
}

/// Accepts exactly the pinned leaf; still checks handshake signatures.
#[derive(Debug)]
struct PinnedVerifier {
    expected: Fingerprint,
    algs: WebPkiSupportedAlgorithms,
    failures: TlsFailures,
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let presented = Fingerprint::of_der(end_entity.as_ref());
        if presented == self.expected {
            return Ok(ServerCertVerified::assertion());
        }
        self.failures.record(TlsFailure::Mismatch { presented, expected: self.expected });
        Err(rustls::Error::InvalidCertificate(rustls::CertificateError::ApplicationVerificationFailure))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// The webpki verifier, recording its refusals for the client's error message.
#[derive(Debug)]
struct RecordingVerifier {
    inner: Arc<WebPkiServerVerifier>,
    failures: TlsFailures,
}

impl ServerCertVerifier for RecordingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now).inspect_err(|e| {
            self.failures.record(TlsFailure::Rejected(format!("{e} (server name {})", server_name.to_str())));
        })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Accepts any certificate; the handshake signature is still checked so the
/// session is at least bound to the presented key.
#[derive(Debug)]
struct InsecureVerifier {
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for InsecureVerifier {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DER: &[u8] = b"not really a certificate, but the pin only hashes the bytes";

    fn pinned(expected: Fingerprint) -> (PinnedVerifier, TlsFailures) {
        let failures = TlsFailures::default();
        let algs = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        (PinnedVerifier { expected, algs, failures: failures.clone() }, failures)
    }

    fn verify(v: &PinnedVerifier) -> Result<ServerCertVerified, rustls::Error> {
        let name = ServerName::try_from("pve1.example.net").expect("valid name");
        v.verify_server_cert(&CertificateDer::from(DER), &[], &name, &[], UnixTime::now())
    }

    #[test]
    fn fingerprints_parse_with_or_without_colons_in_any_case() {
        let hex_lower = hex::encode(Sha256::digest(DER));
        let colon_upper = Fingerprint::of_der(DER).to_string();
        assert_eq!(colon_upper.len(), 32 * 3 - 1);
        assert_eq!(colon_upper, colon_upper.to_uppercase());
        let a = Fingerprint::parse(&hex_lower).expect("plain hex");
        let b = Fingerprint::parse(&colon_upper).expect("colon form");
        let c = Fingerprint::parse(&format!("  {}\n", colon_upper.to_lowercase())).expect("lower colon form");
        assert_eq!(a, Fingerprint::of_der(DER));
        assert_eq!(a, b);
        assert_eq!(b, c);
    }

    #[test]
    fn malformed_fingerprints_say_what_is_expected() {
        let short = Fingerprint::parse("AA:BB:CC").expect_err("too short").to_string();
        assert!(short.contains("3 bytes") && short.contains("32"), "{short}");
        let sha1 = Fingerprint::parse(&"AB".repeat(20)).expect_err("sha1 length").to_string();
        assert!(sha1.contains("SHA-1"), "{sha1}");
        let junk = Fingerprint::parse("zz:zz").expect_err("not hex").to_string();
        assert!(junk.contains("not hex"), "{junk}");
    }

    #[test]
    fn pinned_verifier_accepts_exactly_the_pinned_leaf() {
        let (v, failures) = pinned(Fingerprint::of_der(DER));
        assert!(verify(&v).is_ok());
        assert_eq!(failures.take(), None);
    }

    #[test]
    fn pinned_verifier_refuses_another_leaf_and_records_both_fingerprints() {
        let expected = Fingerprint::parse(&"00".repeat(32)).expect("zero pin");
        let (v, failures) = pinned(expected);
        assert!(verify(&v).is_err());
        assert_eq!(failures.take(), Some(TlsFailure::Mismatch { presented: Fingerprint::of_der(DER), expected }));
    }

    #[test]
    fn mismatch_error_shows_presented_and_configured_fingerprints_and_how_to_fix() {
        let e = ProxmoxError::FingerprintMismatch {
            endpoint: "https://pve1:8006".into(),
            presented: Fingerprint::of_der(DER).to_string(),
            expected: "00".repeat(32),
        };
        let text = e.to_string();
        assert!(text.contains(&Fingerprint::of_der(DER).to_string()), "{text}");
        assert!(text.contains(&"00".repeat(32)), "{text}");
        assert!(text.contains("pvenode cert info"), "{text}");
    }

    #[test]
    fn bad_trust_configuration_fails_setup_naming_the_source() {
        let missing = PathBuf::from("/nonexistent/cradle-ca.pem");
        let e = client_config(&TlsVerify::CaFile(missing), "https://pve1:8006").expect_err("missing file");
        assert!(matches!(e, ProxmoxError::TlsSetup { .. }));
        assert!(e.to_string().contains("/nonexistent/cradle-ca.pem"), "{e}");
        let e = client_config(&TlsVerify::CaPem("no pem here".into()), "https://pve1:8006").expect_err("no cert");
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
        let e = client_config(&TlsVerify::Fingerprint("abc".into()), "https://pve1:8006").expect_err("bad pin");
        assert!(e.to_string().contains("https://pve1:8006"), "{e}");
        assert!(client_config(&TlsVerify::Fingerprint("00".repeat(32)), "https://pve1:8006").is_ok());
        assert!(client_config(&TlsVerify::Insecure, "https://pve1:8006").is_ok());
    }
}
