//! `[endpoints.NAME]` in cradle.toml: a named HTTP endpoint the `http`
//! capability may reach, its credential (a [`SecretRef`], never inline) and
//! how the host attaches it.
//!
//! Contract: serde's shape only (unknown keys refused); the `cradle.toml`
//! loader checks the URL's scheme and the `unifi-login` pairing.

use serde::Deserialize;

use crate::secrets::SecretRef;

/// `[endpoints.NAME]`: a named HTTP endpoint; the host attaches its credentials.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// The base URL; requests append their path to it.
    pub url: String,
    /// The credential, by reference.
    #[serde(default)]
    pub token: Option<SecretRef>,
    /// How the credential is sent.
    #[serde(default)]
    pub auth: EndpointAuth,
    /// A PEM file of the CA (or the self-signed certificate) the endpoint's
    /// TLS certificate is checked against, besides the system's roots (a UniFi
    /// console's own certificate, say). Relative to cradle.toml.
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    /// The user `auth = "unifi-login"` logs in as.
    #[serde(default)]
    pub username: Option<String>,
}

/// How an endpoint's credential is attached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndpointAuth {
    /// `Authorization: Bearer <token>`.
    #[default]
    Bearer,
    /// `Authorization: Token <token>` (NetBox).
    Token,
    /// `X-API-KEY: <token>` (UniFi).
    ApiKey,
    /// UniFi Network's session login with `username` and the `token` secret
    /// as the password; the host keeps the session cookie and CSRF token.
    UnifiLogin,
}
