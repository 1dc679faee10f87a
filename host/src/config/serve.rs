//! `[serve]` in cradle.toml: where `cradle serve` listens, its bounds, and the
//! webhook sources it accepts.
//!
//! ```toml
//! [serve]
//! listen = "127.0.0.1:8085"      # `--listen` overrides
//! concurrency = 4                # pipelines at once
//!
//! [serve.sources.netbox]         # deliveries go to POST /hooks/netbox
//! secret = { file = "/etc/cradle/netbox-webhook.secret" }
//! environment = "lab"            # default: default_environment
//! defaults = "netbox/defaults.yml" # inventory variables under each VM's
//!
//! [serve.status]                 # GET /metrics (and the status page); off without it
//! token = { file = "/etc/cradle/status.token" }   # `Authorization: Bearer`
//! ```
//!
//! The service itself is `crate::serve` (docs/SERVE.md).
//!
//! Contract: [`ServeConfig::validate`] refuses values that cannot work, naming
//! the key; a source's secret is a [`SecretRef`] (never inline) resolved when
//! `cradle serve` starts. `[serve.status]` is off unless present; its token
//! is a [`SecretRef`] too, and a proxy's user header is honoured only when
//! `trust_proxy = true` says so.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::secrets::SecretRef;

/// `[serve]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    /// The address to listen on (`--listen` overrides it).
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// Pipelines that run at once.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// The largest request body accepted (NetBox sends a few KiB per VM).
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Requests per second answered before `429` (all sources together).
    #[serde(default = "default_rate")]
    pub max_requests_per_s: u32,
    /// Accepted events waiting or running before new ones get `503`.
    #[serde(default = "default_queue")]
    pub max_queued: usize,
    /// On SIGTERM, how long running pipelines may take to finish before the
    /// process ends (they resume at the next start).
    #[serde(default = "default_grace")]
    pub shutdown_grace_s: u64,
    /// Webhook sources by name; each is served at `POST /hooks/NAME`.
    #[serde(default)]
    pub sources: BTreeMap<String, SourceConfig>,
    /// The operator's view (`GET /metrics`, later the status page); none
    /// without `[serve.status]`.
    #[serde(default)]
    pub status: Option<StatusConfig>,
}

/// `[serve.status]`: who may read `/metrics` (and the coming status page) on
/// the webhook listener.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusConfig {
    /// The bearer token readers send (`Authorization: Bearer TOKEN`), by
    /// reference. Required when the listener is not open (see `open_on_loopback`)
    /// unless a trusted proxy authenticates readers.
    #[serde(default)]
    pub token: Option<SecretRef>,
    /// On a loopback listen address, readers need no credentials (default true).
    #[serde(default = "default_true")]
    pub open_on_loopback: bool,
    /// A header a reverse proxy sets to the authenticated user (e.g.
    /// `X-Forwarded-User`); honoured only with `trust_proxy = true`.
    #[serde(default)]
    pub proxy_user_header: Option<String>,
    /// The operator's word that only the proxy reaches the listener, so the
    /// header cannot be forged by a client.
    #[serde(default)]
    pub trust_proxy: bool,
}

impl StatusConfig {
    /// Whether a reader on `listen` needs no credentials.
    pub fn open_on(&self, listen: SocketAddr) -> bool {
        self.open_on_loopback && listen.ip().is_loopback()
    }

    /// The proxy header honoured, if any (only when trusted).
    pub fn trusted_header(&self) -> Option<&str> {
        self.proxy_user_header.as_deref().filter(|_| self.trust_proxy)
    }

    /// Refuse a listener on `listen` that nobody could be kept out of: not
    /// open (see [`StatusConfig::open_on`]), and neither a token nor a trusted
    /// proxy header. The message names the keys.
    pub fn check_listen(&self, listen: SocketAddr) -> Result<(), String> {
        if self.open_on(listen) || self.token.is_some() || self.trusted_header().is_some() {
            return Ok(());
        }
        Err(format!(
            "serve.status: cradle serve listens on {listen}, {}, so /metrics needs credentials: set \
             serve.status.token (a secret reference), or serve.status.proxy_user_header with \
             serve.status.trust_proxy = true behind a proxy that authenticates readers",
            if listen.ip().is_loopback() {
                "with serve.status.open_on_loopback = false"
            } else {
                "not a loopback address"
            }
        ))
    }

    fn validate(&self) -> Result<(), String> {
        match (&self.proxy_user_header, self.trust_proxy) {
            (Some(h), false) => {
                return Err(format!(
                    "serve.status.proxy_user_header = \"{h}\" is honoured only behind a proxy you trust: \
                     set serve.status.trust_proxy = true (and let only the proxy reach the listener)"
                ));
            }
            (None, true) => {
                return Err("serve.status.trust_proxy = true needs serve.status.proxy_user_header \
                            (the header the proxy sets, e.g. \"X-Forwarded-User\")"
                    .into());
            }
            (Some(h), true) => {
                let token = !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
                if !token || h.eq_ignore_ascii_case("authorization") {
                    return Err(format!(
                        "serve.status.proxy_user_header = \"{h}\" must be a header name (letters, digits, `-`), \
                         not Authorization"
                    ));
                }
            }
            (None, false) => {}
        }
        Ok(())
    }
}

/// `[serve.sources.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// What sends the webhooks.
    #[serde(default)]
    pub kind: SourceKind,
    /// The webhook's secret (NetBox: the Webhook's "Secret"), by reference.
    pub secret: SecretRef,
    /// The environment the pipeline runs in (default: `default_environment`).
    #[serde(default)]
    pub environment: Option<String>,
    /// The workflow run for an event (`netbox` for workflows/netbox.rhai):
    /// its `host(event)`, `staged(event, vm)` and `failed(event, failure)`.
    #[serde(default = "default_workflow")]
    pub workflow: String,
    /// Inventory variables every VM of this source starts from (a YAML
    /// mapping, as `group_vars/all.yml`), under what `host(event)` returns.
    #[serde(default)]
    pub defaults: Option<PathBuf>,
}

/// Kinds of webhook sources.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// NetBox 3.7–4.7 event-rule webhooks, signed with `X-Hook-Signature`.
    #[default]
    Netbox,
}

impl Default for ServeConfig {
    fn default() -> ServeConfig {
        ServeConfig {
            listen: None,
            concurrency: default_concurrency(),
            max_body_bytes: default_max_body(),
            max_requests_per_s: default_rate(),
            max_queued: default_queue(),
            shutdown_grace_s: default_grace(),
            sources: BTreeMap::new(),
            status: None,
        }
    }
}

fn default_concurrency() -> usize {
    4
}
fn default_max_body() -> usize {
    1024 * 1024
}
fn default_rate() -> u32 {
    5000
}
fn default_queue() -> usize {
    10_000
}
fn default_grace() -> u64 {
    30
}
fn default_true() -> bool {
    true
}
fn default_workflow() -> String {
    "netbox".into()
}

impl ServeConfig {
    /// Refuse values that cannot work; the message names the key.
    pub fn validate(&self, environments: &[&str]) -> Result<(), String> {
        if !(1..=256).contains(&self.concurrency) {
            return Err(format!("serve.concurrency = {} must be between 1 and 256", self.concurrency));
        }
        if !(1024..=64 * 1024 * 1024).contains(&self.max_body_bytes) {
            return Err(format!("serve.max_body_bytes = {} must be between 1024 and 67108864", self.max_body_bytes));
        }
        if self.max_requests_per_s == 0 {
            return Err("serve.max_requests_per_s must be at least 1".into());
        }
        if self.max_queued == 0 {
            return Err("serve.max_queued must be at least 1".into());
        }
        if let Some(status) = &self.status {
            status.validate()?;
        }
        for (name, source) in &self.sources {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                return Err(format!(
                    "serve.sources.{name}: a source name is letters, digits, `-` and `_` (it is the URL path /hooks/NAME)"
                ));
            }
            if let Some(env) = &source.environment
                && !environments.contains(&env.as_str())
            {
                return Err(format!(
                    "serve.sources.{name}.environment = \"{env}\" is not defined in [environments] (known: {})",
                    if environments.is_empty() { "none".to_string() } else { environments.join(", ") }
                ));
            }
            let bare =
                |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !bare(&source.workflow) {
                return Err(format!(
                    "serve.sources.{name}.workflow = \"{}\" must be a plain name (workflows/NAME.rhai)",
                    source.workflow
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ServeConfig, String> {
        let c: ServeConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        c.validate(&["lab"]).map(|()| c)
    }

    #[test]
    fn defaults_are_sane_and_a_source_needs_only_its_secret() {
        let c = parse("[sources.netbox]\nsecret = { file = \"/etc/cradle/hook\" }\n").expect("valid");
        assert_eq!((c.concurrency, c.max_body_bytes, c.max_queued), (4, 1024 * 1024, 10_000));
        let s = &c.sources["netbox"];
        assert_eq!((s.kind, s.workflow.as_str(), s.defaults.as_deref()), (SourceKind::Netbox, "netbox", None));
    }

    #[test]
    fn status_is_off_unless_configured_and_open_only_on_loopback() {
        let src = "[sources.netbox]\nsecret = { file = \"/x\" }\n";
        assert!(parse(src).expect("valid").status.is_none(), "off unless configured");
        let open = parse(&format!("{src}[status]\n")).expect("valid").status.expect("on");
        let lo: SocketAddr = "127.0.0.1:8085".parse().expect("addr");
        let lo2: SocketAddr = "127.0.0.2:8085".parse().expect("addr");
        let any: SocketAddr = "0.0.0.0:8085".parse().expect("addr");
        let v6: SocketAddr = "[::1]:8085".parse().expect("addr");
        assert!(open.open_on(lo) && open.open_on(lo2) && open.open_on(v6) && !open.open_on(any));
        assert!(open.check_listen(lo).is_ok());
        let err = open.check_listen(any).expect_err("no credentials off loopback");
        assert!(err.contains("serve.status.token") && err.contains("not a loopback"), "{err}");
        let closed = parse(&format!("{src}[status]\nopen_on_loopback = false\n")).expect("valid").status.expect("on");
        assert!(closed.check_listen(lo).expect_err("closed").contains("open_on_loopback = false"));
        let token = parse(&format!("{src}[status]\ntoken = {{ file = \"/t\" }}\n")).expect("valid").status.expect("on");
        assert!(token.check_listen(any).is_ok() && !token.open_on(any));
        let proxy = parse(&format!("{src}[status]\nproxy_user_header = \"X-Forwarded-User\"\ntrust_proxy = true\n"))
            .expect("valid")
            .status
            .expect("on");
        assert_eq!(proxy.trusted_header(), Some("X-Forwarded-User"));
        assert!(proxy.check_listen(any).is_ok());
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        let src = "[sources.netbox]\nsecret = { file = \"/x\" }\n";
        let cases = [
            (format!("concurrency = 0\n{src}"), "serve.concurrency"),
            (format!("max_body_bytes = 10\n{src}"), "serve.max_body_bytes"),
            (format!("max_requests_per_s = 0\n{src}"), "serve.max_requests_per_s"),
            (format!("{src}environment = \"prod\"\n"), "environment = \"prod\" is not defined"),
            (format!("{src}workflow = \"../x\"\n"), "plain name"),
            ("[sources.\"a b\"]\nsecret = { file = \"/x\" }\n".to_string(), "/hooks/NAME"),
            ("[sources.netbox]\nsecret = \"CANARY-INLINE\"\n".to_string(), "secret"),
            (format!("{src}kind = \"gitlab\"\n"), "unknown variant"),
            (format!("{src}[status]\nproxy_user_header = \"X-Forwarded-User\"\n"), "serve.status.trust_proxy = true"),
            (format!("{src}[status]\ntrust_proxy = true\n"), "serve.status.proxy_user_header"),
            (
                format!("{src}[status]\ntrust_proxy = true\nproxy_user_header = \"Authorization\"\n"),
                "not Authorization",
            ),
            (format!("{src}[status]\ntoken = \"CANARY-INLINE\"\n"), "token"),
            (format!("{src}[status]\nopen = true\n"), "unknown field"),
        ];
        for (text, want) in cases {
            let err = parse(&text).expect_err(want);
            assert!(err.contains(want), "{want}: {err}");
        }
    }
}
