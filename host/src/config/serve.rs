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
//! ```
//!
//! The service itself is `crate::serve` (docs/SERVE.md).
//!
//! Contract: [`ServeConfig::validate`] refuses values that cannot work, naming
//! the key; a source's secret is a [`SecretRef`] (never inline) resolved when
//! `cradle serve` starts.

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
        ];
        for (text, want) in cases {
            let err = parse(&text).expect_err(want);
            assert!(err.contains(want), "{want}: {err}");
        }
    }
}
