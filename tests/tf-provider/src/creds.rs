//! Where the API endpoint, the token and the TLS trust come from: the environment,
//! read exactly as the real providers read it.
//!
//! Contract: [`Endpoint::from_env`] reads the variables of one flavour —
//! telmate: `PM_API_URL` (`https://HOST:PORT/api2/json`), `PM_API_TOKEN_ID`,
//! `PM_API_TOKEN_SECRET`, `PM_TLS_INSECURE`; bpg: `PROXMOX_VE_ENDPOINT`
//! (`https://HOST:PORT/`), `PROXMOX_VE_API_TOKEN` (`USER@REALM!TOKENID=SECRET`),
//! `PROXMOX_VE_INSECURE` — and fails with a message naming the variable that is
//! missing or malformed. TLS verification is off only when the `*_INSECURE` variable
//! is `true` or `1`; otherwise the roots are the PEM bundle in `SSL_CERT_FILE` or, as
//! Go's crypto/x509 does, the first system bundle that exists. The token never
//! appears in an error message or in `Debug` output.

use std::fmt;

/// Which real provider a resource imitates (it decides the environment variables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// `telmate/proxmox` (`proxmox_vm_qemu`).
    Telmate,
    /// `bpg/proxmox` (`proxmox_virtual_environment_vm`).
    Bpg,
}

/// An API endpoint with its credentials.
pub struct Endpoint {
    /// Base URL ending in `/api2/json` (no trailing slash).
    pub base: String,
    /// The `Authorization` header value, `PVEAPIToken=USER@REALM!TOKENID=SECRET` (secret).
    pub auth: String,
    /// Skip TLS verification.
    pub insecure: bool,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint").field("base", &self.base).field("insecure", &self.insecure).finish_non_exhaustive()
    }
}

/// The system CA bundles Go looks for on Linux (`crypto/x509/root_linux.go`).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

fn var(name: &str) -> Result<String, String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        Ok(_) => Err(format!("environment variable {name} is empty")),
        Err(std::env::VarError::NotPresent) => Err(format!("environment variable {name} is not set")),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!("environment variable {name} is not valid UTF-8")),
    }
}

fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| matches!(v.trim(), "true" | "1"))
}

fn check_url(name: &str, url: &str) -> Result<(), String> {
    if url.starts_with("https://") || url.starts_with("http://") {
        Ok(())
    } else {
        Err(format!("environment variable {name} must be an http(s) URL, got '{url}'"))
    }
}

/// `USER@REALM!TOKENID` without the secret, or why the shape is wrong (never echoing it).
fn check_token_id(name: &str, id: &str) -> Result<(), String> {
    let ok = id.split_once('@').is_some_and(|(user, rest)| {
        !user.is_empty() && rest.split_once('!').is_some_and(|(realm, tid)| !realm.is_empty() && !tid.is_empty())
    });
    if ok { Ok(()) } else { Err(format!("environment variable {name} is not of the form USER@REALM!TOKENID")) }
}

impl Endpoint {
    /// Read the endpoint of `flavour` from the environment.
    pub fn from_env(flavour: Flavour) -> Result<Self, String> {
        match flavour {
            Flavour::Telmate => {
                let url = var("PM_API_URL")?;
                check_url("PM_API_URL", &url)?;
                let id = var("PM_API_TOKEN_ID")?;
                check_token_id("PM_API_TOKEN_ID", &id)?;
                let secret = var("PM_API_TOKEN_SECRET")?;
                Ok(Endpoint {
                    base: url.trim_end_matches('/').to_string(),
                    auth: format!("PVEAPIToken={id}={secret}"),
                    insecure: flag("PM_TLS_INSECURE"),
                })
            }
            Flavour::Bpg => {
                let url = var("PROXMOX_VE_ENDPOINT")?;
                check_url("PROXMOX_VE_ENDPOINT", &url)?;
                let token = var("PROXMOX_VE_API_TOKEN")?;
                let Some((id, secret)) = token.split_once('=') else {
                    return Err("environment variable PROXMOX_VE_API_TOKEN is not of the form \
                                USER@REALM!TOKENID=SECRET"
                        .into());
                };
                check_token_id("PROXMOX_VE_API_TOKEN", id)?;
                if secret.is_empty() {
                    return Err("environment variable PROXMOX_VE_API_TOKEN has an empty secret".into());
                }
                Ok(Endpoint {
                    base: format!("{}/api2/json", url.trim_end_matches('/')),
                    auth: format!("PVEAPIToken={token}"),
                    insecure: flag("PROXMOX_VE_INSECURE"),
                })
            }
        }
    }
}

/// The PEM bundle to trust: `SSL_CERT_FILE`, else the first system bundle found.
pub fn trust_bundle() -> Result<Vec<u8>, String> {
    if let Ok(path) = std::env::var("SSL_CERT_FILE")
        && !path.is_empty()
    {
        return std::fs::read(&path).map_err(|e| format!("SSL_CERT_FILE={path}: {e}"));
    }
    for path in SYSTEM_BUNDLES {
        if let Ok(pem) = std::fs::read(path) {
            return Ok(pem);
        }
    }
    Err(format!("no CA bundle: SSL_CERT_FILE is not set and none of {} exists", SYSTEM_BUNDLES.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_ids_are_checked_without_echoing_them() {
        assert!(check_token_id("X", "root@pam!cradle").is_ok());
        for bad in ["root@pam", "root!x", "@pam!x", "root@!x", "root@pam!"] {
            let e = check_token_id("X", bad).unwrap_err();
            assert!(!e.contains(bad), "{e}");
        }
    }

    #[test]
    fn debug_output_hides_the_token() {
        let e =
            Endpoint { base: "https://h/api2/json".into(), auth: "PVEAPIToken=a@b!c=s3cret".into(), insecure: false };
        assert!(!format!("{e:?}").contains("s3cret"));
    }
}
