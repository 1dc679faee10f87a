//! Making a built-in connection: the host-key check against the pins, the
//! key exchange limited to the pinned key types, the public-key login
//! (identity, agent, default key files) and the errors each failure is.

use std::io::ErrorKind as IoKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use russh::client::{self, Handle, Handler};
use russh::keys::{Algorithm, HashAlg, PrivateKeyWithHashAlg, PublicKeyBase64, PublicKeyOrCertificate};

use super::super::known_hosts::PublicKey;
use super::super::transport::{Trust, check_identity};
use super::super::{ClientKind, Target};
use crate::contract::{CapError, ErrorKind};

/// Keep-alive interval and how many may go unanswered (as OpenSSH's path).
const KEEPALIVE: Duration = Duration::from_secs(15);
const KEEPALIVE_MAX: usize = 3;

/// What the server offered when it was refused.
#[derive(Debug, Clone)]
struct Offered {
    kind: String,
    fingerprint: String,
}

/// The host-key check: accepts only a pinned key, records what else was offered.
pub(crate) struct Checker {
    pinned: Vec<PublicKey>,
    offered: Arc<Mutex<Option<Offered>>>,
}

impl Handler for Checker {
    type Error = russh::Error;

    async fn check_server_key(&mut self, key: &PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        let (kind, blob) = match key {
            PublicKeyOrCertificate::PublicKey { key, .. } => (key.algorithm().to_string(), key.public_key_bytes()),
            // Never asked for (no certificate algorithms are offered).
            PublicKeyOrCertificate::Certificate(_) => ("a certificate".to_string(), Vec::new()),
        };
        if !blob.is_empty() && self.pinned.iter().any(|p| p.blob() == blob) {
            return Ok(true);
        }
        let fingerprint = super::super::known_hosts::blob_fingerprint(&blob);
        *self.offered.lock().unwrap_or_else(|e| e.into_inner()) = Some(Offered { kind, fingerprint });
        Ok(false)
    }
}

/// A new authenticated connection to `t`, its host key checked against the pins.
pub(super) async fn connect(c: &Trust<'_>, t: &Target) -> Result<Handle<Checker>, CapError> {
    let pinned = c.known_hosts.pinned(&t.host, t.port)?;
    if pinned.is_empty() {
        return Err(c.unknown_key_error(t, "no key is pinned for it; the built-in client made no connection"));
    }
    let mut algorithms: Vec<Algorithm> = Vec::new();
    for p in &pinned {
        let wanted: Vec<Algorithm> = if p.kind == "ssh-rsa" {
            vec![Algorithm::Rsa { hash: Some(HashAlg::Sha512) }, Algorithm::Rsa { hash: Some(HashAlg::Sha256) }]
        } else {
            Algorithm::new(&p.kind).into_iter().collect()
        };
        for a in wanted {
            if russh::Preferred::DEFAULT.key.contains(&a) && !algorithms.contains(&a) {
                algorithms.push(a);
            }
        }
    }
    if algorithms.is_empty() {
        let kinds: Vec<&str> = pinned.iter().map(|p| p.kind.as_str()).collect();
        return Err(CapError::failed(format!(
            "ssh {t}: the built-in client cannot check a {} host key; set `[ssh] client = \"openssh\"`",
            kinds.join(" or ")
        )));
    }
    let config = client::Config {
        preferred: russh::Preferred { key: algorithms.into(), ..russh::Preferred::DEFAULT },
        keepalive_interval: Some(KEEPALIVE),
        keepalive_max: KEEPALIVE_MAX,
        nodelay: true,
        ..client::Config::default()
    };
    let offered = Arc::new(Mutex::new(None));
    let checker = Checker { pinned: pinned.clone(), offered: offered.clone() };
    let limit = c.settings.connect_timeout + Duration::from_secs(10);
    let connected = tokio::time::timeout(limit, client::connect(Arc::new(config), (t.host.as_str(), t.port), checker));
    let mut handle = match connected.await {
        Ok(Ok(h)) => h,
        Err(_) => {
            return Err(CapError::new(
                ErrorKind::Transient,
                format!("ssh {t}: Connection timed out: no SSH session within {} s", limit.as_secs()),
            ));
        }
        Ok(Err(e)) => {
            let offered = offered.lock().unwrap_or_else(|e| e.into_inner()).clone();
            return Err(connect_error(c, t, &pinned, offered, e));
        }
    };
    let mut tried_agent = false;
    if c.settings.identity.is_none()
        && let ClientKind::Builtin { agent: Some(sock), .. } = &c.settings.client
    {
        if agent_login(&mut handle, t, sock).await {
            return Ok(handle);
        }
        tried_agent = true;
    }
    let key = identity(c, t)?;
    let hash = rsa_hash(&handle, &key.algorithm()).await;
    let auth = handle
        .authenticate_publickey(t.user.clone(), PrivateKeyWithHashAlg::new(Arc::new(key), hash))
        .await
        .map_err(|e| match tried_agent {
            // sshd hangs up after MaxAuthTries refused keys: a login failure, not the network's.
            true => c.auth_error(t, &format!("the server ended the login after refusing the agent's keys ({e})")),
            false => transport(t, "authentication", &e),
        })?;
    if !auth.success() {
        return Err(c.auth_error(t, "the server refused the key (Permission denied (publickey))"));
    }
    Ok(handle)
}

/// The SHA-2 an RSA key signs with: the best the server announces (`None`
/// for other keys).
async fn rsa_hash(handle: &Handle<Checker>, key: &Algorithm) -> Option<HashAlg> {
    match key {
        Algorithm::Rsa { .. } => handle.best_supported_rsa_hash().await.ok().flatten().flatten(),
        _ => None,
    }
}

/// Logs in with a key the agent at `sock` holds: whether one was accepted.
/// An agent that cannot be reached or declines to sign is passed over, as
/// OpenSSH passes it over.
async fn agent_login(handle: &mut Handle<Checker>, t: &Target, sock: &Path) -> bool {
    let Ok(mut agent) = russh::keys::agent::client::AgentClient::connect_uds(sock).await else {
        tracing::debug!("ssh {t}: the agent at {} cannot be reached", sock.display());
        return false;
    };
    let Ok(identities) = agent.request_identities().await else { return false };
    for id in identities {
        let key = id.public_key().into_owned();
        let hash = rsa_hash(handle, &key.algorithm()).await;
        if let Ok(r) = handle.authenticate_publickey_with(t.user.clone(), key, hash, &mut agent).await
            && r.success()
        {
            return true;
        }
    }
    false
}

/// The private key to log in with (see the module docs).
fn identity(c: &Trust<'_>, t: &Target) -> Result<russh::keys::PrivateKey, CapError> {
    let path = match &c.settings.identity {
        Some(p) => p.clone(),
        None => {
            let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
            ["id_ed25519", "id_ecdsa", "id_rsa"]
                .iter()
                .map(|n| home.join(".ssh").join(n))
                .find(|p| p.exists())
                .ok_or_else(|| {
                    c.auth_error(t, "no identity is configured and ~/.ssh has no id_ed25519, id_ecdsa or id_rsa")
                })?
        }
    };
    if c.settings.identity.is_none() {
        // A configured identity was checked when the client was made; a
        // default one is refused here as OpenSSH refuses it.
        check_identity(&path)?;
    }
    russh::keys::load_secret_key(&path, None).map_err(|e| {
        let why = match e {
            russh::keys::Error::KeyIsEncrypted => {
                "it is encrypted and nothing can prompt for its passphrase (leave `identity` unset and add the key \
                 to your agent, SSH_AUTH_SOCK, or use an unencrypted key kept for cradle)"
                    .to_string()
            }
            other => other.to_string(),
        };
        CapError::failed(format!("ssh {t}: the identity file {} cannot be used: {why}", path.display()))
    })
}

/// The error for a connection that did not come up.
fn connect_error(
    c: &Trust<'_>,
    t: &Target,
    pinned: &[PublicKey],
    offered: Option<Offered>,
    e: russh::Error,
) -> CapError {
    if let russh::Error::NoCommonAlgo { kind: russh::AlgorithmKind::Key, ours, theirs } = &e {
        return c.unknown_key_error(
            t,
            &format!(
                "it offers none of the pinned host key types (key types: {} / {})",
                ours.join(","),
                theirs.join(",")
            ),
        );
    }
    if let Some(o) = offered {
        if pinned.iter().any(|p| same_family(&p.kind, &o.kind)) {
            return c.changed_key_error(t, &o.fingerprint);
        }
        return c.unknown_key_error(t, &format!("it offered a {} key, {}", o.kind, o.fingerprint));
    }
    if let russh::Error::IO(io) = &e {
        let text = match io.kind() {
            IoKind::ConnectionRefused => Some("Connection refused"),
            IoKind::ConnectionReset | IoKind::ConnectionAborted => Some("Connection reset"),
            IoKind::TimedOut => Some("Connection timed out"),
            IoKind::HostUnreachable => Some("No route to host"),
            IoKind::NetworkUnreachable => Some("Network is unreachable"),
            IoKind::UnexpectedEof | IoKind::BrokenPipe => Some("Connection closed"),
            _ => None,
        };
        if let Some(text) = text {
            return CapError::new(ErrorKind::Transient, format!("ssh {t}: {text} ({io})"));
        }
        let said = io.to_string();
        if said.contains("Temporary failure") {
            return CapError::new(
                ErrorKind::Transient,
                format!("ssh {t}: Temporary failure in name resolution ({io})"),
            );
        }
        if said.contains("lookup") || said.contains("resolve") {
            return CapError::failed(format!(
                "ssh {t}: the host name does not resolve; check the inventory address ({io})"
            ));
        }
    }
    transport(t, "connecting", &e)
}

/// Whether two key algorithm names are the same kind of key (`ssh-rsa` and
/// `rsa-sha2-512` are one RSA key).
fn same_family(a: &str, b: &str) -> bool {
    fn family(s: &str) -> &str {
        if s == "ssh-rsa" || s.starts_with("rsa-sha2") { "rsa" } else { s }
    }
    family(a) == family(b)
}

pub(super) fn transport(t: &Target, what: &str, e: &russh::Error) -> CapError {
    CapError::new(ErrorKind::Transient, format!("ssh {t}: connection failed while {what} ({e})"))
}
