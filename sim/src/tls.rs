//! The API's TLS identity: a cluster CA and a node certificate signed by it, as PVE has
//! (`pve-root-ca.pem`, `pve-ssl.pem`).
//!
//! Contract: generated at first start; with a state dir it is kept there (key 0600) and
//! reused, so a pinned fingerprint stays valid across restarts. The fingerprint is the
//! SHA-256 of the node certificate's DER, upper-case hex joined by `:` as PVE shows it.
//! Failure modes: unreadable/unparsable persisted files or a generation error give
//! [`SimError::Tls`] / [`SimError::Io`].

use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

use crate::error::SimError;
use crate::fsutil;

/// The PEM material of the API's TLS identity.
#[derive(Clone)]
pub struct TlsIdentity {
    /// The CA certificate (PEM), for clients that trust a CA file.
    pub ca_pem: String,
    /// The node certificate (PEM).
    pub cert_pem: String,
    key_pem: String,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIdentity").field("fingerprint", &self.fingerprint_sha256()).finish_non_exhaustive()
    }
}

fn tls_err(e: impl std::fmt::Display) -> SimError {
    SimError::Tls(e.to_string())
}

impl TlsIdentity {
    /// Load from `dir` or generate (and store there when given).
    pub fn load_or_generate(dir: Option<&Path>, names: &[String], ips: &[std::net::IpAddr]) -> Result<Self, SimError> {
        if let Some(dir) = dir {
            let ca = fsutil::read_optional(&dir.join("pve-root-ca.pem"))?;
            let cert = fsutil::read_optional(&dir.join("pve-ssl.pem"))?;
            let key = fsutil::read_optional(&dir.join("pve-ssl.key"))?;
            if let (Some(ca), Some(cert), Some(key)) = (ca, cert, key) {
                let s = |v: Vec<u8>| String::from_utf8(v).map_err(tls_err);
                return Ok(TlsIdentity { ca_pem: s(ca)?, cert_pem: s(cert)?, key_pem: s(key)? });
            }
        }
        let id = Self::generate(names, ips)?;
        if let Some(dir) = dir {
            fsutil::write_private(&dir.join("pve-root-ca.pem"), id.ca_pem.as_bytes())?;
            fsutil::write_private(&dir.join("pve-ssl.pem"), id.cert_pem.as_bytes())?;
            fsutil::write_private(&dir.join("pve-ssl.key"), id.key_pem.as_bytes())?;
        }
        Ok(id)
    }

    fn generate(names: &[String], ips: &[std::net::IpAddr]) -> Result<Self, SimError> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(tls_err)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "Proxmox Virtual Environment");
        ca_params.distinguished_name.push(DnType::OrganizationName, "PVE Cluster Manager CA");
        ca_params.key_usages =
            vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().map_err(tls_err)?;
        let ca_cert = ca_params.self_signed(&ca_key).map_err(tls_err)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let mut sans: Vec<String> = vec!["localhost".into()];
        sans.extend(names.iter().cloned());
        let mut params = CertificateParams::new(sans).map_err(tls_err)?;
        for ip in ips {
            params.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        let cn = names.first().cloned().unwrap_or_else(|| "pve".into());
        params.distinguished_name.push(DnType::CommonName, format!("{cn}.sim"));
        params.distinguished_name.push(DnType::OrganizationName, "PVE Cluster Node");
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().map_err(tls_err)?;
        let cert = params.signed_by(&key, &issuer).map_err(tls_err)?;
        Ok(TlsIdentity { ca_pem: ca_cert.pem(), cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// SHA-256 of the node certificate, `AA:BB:...` as PVE shows it.
    pub fn fingerprint_sha256(&self) -> String {
        let Ok(der) = CertificateDer::from_pem_slice(self.cert_pem.as_bytes()) else {
            return String::new();
        };
        let digest = Sha256::digest(der.as_ref());
        digest.iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":")
    }

    /// A rustls server config serving the node certificate (+ CA) over HTTP/1.1.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, SimError> {
        let mut chain = Vec::new();
        for pem in [&self.cert_pem, &self.ca_pem] {
            chain.push(
                CertificateDer::from_pem_slice(pem.as_bytes())
                    .map_err(|e| tls_err(format!("bad certificate PEM: {e}")))?,
            );
        }
        let key =
            PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).map_err(|e| tls_err(format!("bad key PEM: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(tls_err)?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }
}
