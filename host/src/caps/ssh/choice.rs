//! Which SSH client serves a cluster when `[ssh] client` is `auto` (the
//! default): the built-in client (`native/`) wherever it can log in as
//! OpenSSH would, else the operator's OpenSSH, with the reason said once per
//! process.
//!
//! The built-in client cannot serve, and OpenSSH can, when the key cradle
//! logs in with is one it cannot use:
//! - a configured identity that is passphrase-protected (OpenSSH signs with
//!   the agent's copy of it; nothing can prompt), a security-key (FIDO, `sk-`)
//!   key, or a file it cannot read as a private key;
//! - with no identity configured and no agent (`SSH_AUTH_SOCK`): the default
//!   key the built-in client would take (the first of `~/.ssh/id_ed25519`,
//!   `id_ecdsa`, `id_rsa`) is one of those, or there is none of them but one
//!   of OpenSSH's other default names (`id_ecdsa_sk`, `id_ed25519_sk`,
//!   `id_dsa`, `id_xmss`).
//!
//! Both clients run with `-F /dev/null` semantics (cradle's own options only),
//! so an operator's `~/.ssh/config` (ProxyJump, aliases) plays no part in the
//! choice: neither client honours it. Ansible playbooks (`ssh::playbook`)
//! always run OpenSSH's `ssh`, whatever is chosen here. A file that does not
//! exist is not judged here: the chosen client reports it with its fix.

use std::path::{Path, PathBuf};
use std::sync::Once;

use russh::keys::Algorithm;

/// `[ssh] client`, as the capability sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preference {
    /// The built-in client where it serves, else OpenSSH.
    Auto,
    /// Always OpenSSH.
    OpenSsh,
    /// Always the built-in client.
    Builtin,
}

/// What [`choose`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// Whether the built-in client serves.
    pub builtin: bool,
    /// Why `auto` fell back to OpenSSH (`None` when it did not).
    pub fallback: Option<String>,
}

/// The client for a login with `identity` (cradle.toml's, or the simulator's),
/// the operator's agent socket `agent` and home directory `home`.
pub fn choose(pref: Preference, identity: Option<&Path>, agent: Option<&Path>, home: Option<&Path>) -> Choice {
    match pref {
        Preference::OpenSsh => Choice { builtin: false, fallback: None },
        Preference::Builtin => Choice { builtin: true, fallback: None },
        Preference::Auto => match builtin_cannot_serve(identity, agent, home) {
            Some(why) => Choice { builtin: false, fallback: Some(why) },
            None => Choice { builtin: true, fallback: None },
        },
    }
}

/// Says once per process (a `warn` line) that `auto` fell back to OpenSSH for
/// cluster `cluster`, and why.
pub fn warn_fallback_once(cluster: &str, why: &str) {
    static SAID: Once = Once::new();
    SAID.call_once(|| {
        tracing::warn!(
            "cluster `{cluster}`: cradle logs in with OpenSSH's ssh, not its built-in SSH client, because {why}; \
             set `[ssh] client = \"openssh\"` in cradle.toml to choose OpenSSH and silence this, or give cradle a key \
             the built-in client can use (an unencrypted ed25519, ECDSA or RSA key, or one held by your agent)"
        );
    });
}

/// Why the built-in client cannot log in as OpenSSH would (see the module docs).
fn builtin_cannot_serve(identity: Option<&Path>, agent: Option<&Path>, home: Option<&Path>) -> Option<String> {
    if let Some(path) = identity {
        return unusable(path).map(|why| format!("the identity {} {why}", path.display()));
    }
    if agent.is_some() {
        // The agent signs for the built-in client as for OpenSSH.
        return None;
    }
    let ssh_dir = home?.join(".ssh");
    let first = ["id_ed25519", "id_ecdsa", "id_rsa"].iter().map(|n| ssh_dir.join(n)).find(|p| p.exists());
    match first {
        Some(path) => unusable(&path).map(|why| {
            format!("no identity is configured, no agent is running, and the default key {} {why}", path.display())
        }),
        None => {
            let others: Vec<PathBuf> = ["id_ecdsa_sk", "id_ed25519_sk", "id_dsa", "id_xmss"]
                .iter()
                .map(|n| ssh_dir.join(n))
                .filter(|p| p.exists())
                .collect();
            let list: Vec<String> = others.iter().map(|p| p.display().to_string()).collect();
            (!others.is_empty()).then(|| {
                format!(
                    "no identity is configured, no agent is running, and the only default keys, {}, are of kinds \
                     the built-in client does not use",
                    list.join(", ")
                )
            })
        }
    }
}

/// Why the built-in client cannot use the private key at `path`, if it cannot.
fn unusable(path: &Path) -> Option<String> {
    if !path.exists() {
        return None;
    }
    match russh::keys::load_secret_key(path, None) {
        Ok(key) if matches!(key.algorithm(), Algorithm::SkEd25519 | Algorithm::SkEcdsaSha2NistP256) => {
            Some("is a security-key (FIDO) key, which only OpenSSH can sign with".into())
        }
        Ok(_) => None,
        Err(russh::keys::Error::KeyIsEncrypted) => {
            Some("is passphrase-protected (OpenSSH signs with the agent's copy of it; nothing can prompt)".into())
        }
        Err(e) => Some(format!("cannot be read by the built-in client ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn key_file(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write key");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        path
    }

    /// A fresh unencrypted ed25519 key in OpenSSH's format.
    fn ed25519() -> String {
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        rt.block_on(super::super::generate_host_key("test")).expect("key").private_openssh.expose().to_string()
    }

    #[test]
    fn auto_uses_the_builtin_client_for_a_plain_key_and_the_explicit_choices_stand() {
        let dir = tempfile::tempdir().expect("tmp");
        let id = key_file(dir.path(), "id", &ed25519());
        let auto = choose(Preference::Auto, Some(&id), None, None);
        assert_eq!(auto, Choice { builtin: true, fallback: None });
        assert!(!choose(Preference::OpenSsh, Some(&id), None, None).builtin);
        let garbage = key_file(dir.path(), "garbage", "not a key\n");
        assert!(choose(Preference::Builtin, Some(&garbage), None, None).builtin, "an explicit choice is kept");
    }

    #[test]
    fn auto_falls_back_to_openssh_for_a_key_the_builtin_client_cannot_use_and_says_why() {
        let dir = tempfile::tempdir().expect("tmp");
        let garbage = key_file(dir.path(), "id_garbage", "not a key\n");
        let c = choose(Preference::Auto, Some(&garbage), None, None);
        assert!(!c.builtin);
        let why = c.fallback.expect("a reason");
        assert!(why.contains(&garbage.display().to_string()) && why.contains("cannot be read"), "{why}");
    }

    #[test]
    fn without_identity_the_agent_serves_else_the_default_key_is_judged() {
        let home = tempfile::tempdir().expect("tmp");
        std::fs::create_dir(home.path().join(".ssh")).expect("mkdir");
        // No key at all: both clients would fail alike; the built-in one says so.
        assert!(choose(Preference::Auto, None, None, Some(home.path())).builtin);
        key_file(&home.path().join(".ssh"), "id_ed25519_sk", "sk key\n");
        let c = choose(Preference::Auto, None, None, Some(home.path()));
        assert!(!c.builtin && c.fallback.as_deref().is_some_and(|w| w.contains("id_ed25519_sk")), "{c:?}");
        key_file(&home.path().join(".ssh"), "id_ed25519", "broken\n");
        let c = choose(Preference::Auto, None, None, Some(home.path()));
        assert!(c.fallback.as_deref().is_some_and(|w| w.contains("default key") && w.contains("id_ed25519 ")), "{c:?}");
        let agent = home.path().join("agent.sock");
        assert!(choose(Preference::Auto, None, Some(&agent), Some(home.path())).builtin, "the agent signs for both");
        key_file(&home.path().join(".ssh"), "id_ed25519", &ed25519());
        assert!(choose(Preference::Auto, None, None, Some(home.path())).builtin);
    }
}
