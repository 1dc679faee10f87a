//! `[ssh]` in cradle.toml: the identity cradle logs in with, the keys its
//! guests authorize, connection sharing and which SSH client speaks.
//!
//! Contract: every key has a default (a missing `[ssh]` is the default
//! section: no identity, connection sharing on, the client chosen per login).

use std::path::PathBuf;

use serde::Deserialize;

/// `[ssh]`: how cradle logs in to nodes and guests.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshConfig {
    /// The private key cradle uses (must be 0600); a `sim` cluster supplies its own.
    #[serde(default)]
    pub identity: Option<PathBuf>,
    /// Public keys authorized for the guests' management user.
    #[serde(default)]
    pub authorized_keys: Vec<String>,
    /// Share one connection per target within a run (OpenSSH `ControlMaster`,
    /// sockets in `<state_dir>/mux`); `false` opens one connection per command.
    #[serde(default = "default_multiplex")]
    pub multiplex: bool,
    /// Which SSH client speaks to nodes and guests.
    #[serde(default)]
    pub client: SshClientChoice,
}

/// `[ssh] client`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SshClientChoice {
    /// The built-in client wherever it can serve the login, else OpenSSH,
    /// saying once why (`caps::ssh::choice`). The default.
    #[default]
    Auto,
    /// The operator's OpenSSH `ssh`.
    OpenSsh,
    /// cradle's in-process client: no process per connection (for many guests).
    Builtin,
}

fn default_multiplex() -> bool {
    true
}

impl Default for SshConfig {
    fn default() -> Self {
        SshConfig {
            identity: None,
            authorized_keys: Vec::new(),
            multiplex: default_multiplex(),
            client: SshClientChoice::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load::fixture::{GOOD, parse};

    #[test]
    fn ssh_connection_sharing_is_on_unless_turned_off() {
        assert!(parse(GOOD).expect("valid").ssh.multiplex, "on by default");
        assert!(SshConfig::default().multiplex);
        let off = format!("{GOOD}[ssh]\nmultiplex = false\n");
        assert!(!parse(&off).expect("valid").ssh.multiplex);
        assert_eq!(parse(GOOD).expect("valid").ssh.client, SshClientChoice::Auto, "built-in where it serves");
        for (name, choice) in [
            ("auto", SshClientChoice::Auto),
            ("openssh", SshClientChoice::OpenSsh),
            ("builtin", SshClientChoice::Builtin),
        ] {
            let text = format!("{GOOD}[ssh]\nclient = \"{name}\"\n");
            assert_eq!(parse(&text).expect("valid").ssh.client, choice, "{name}");
        }
        let bad = format!("{GOOD}[ssh]\nclient = \"putty\"\n");
        let e = parse(&bad).expect_err("an unknown client").to_string();
        assert!(e.contains("auto") && e.contains("openssh") && e.contains("builtin"), "{e}");
    }
}
