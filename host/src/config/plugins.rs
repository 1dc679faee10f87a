//! `[plugins.NAME]` in cradle.toml: one plugin (a backend or an integration
//! plugin, `kind`), its grants and limits,
//! and the built-in plugins' default sections.
//!
//! Contract: a configured plugin's grants and limits are exactly what its
//! table says (nothing granted means nothing allowed); a built-in that no
//! table configures gets its default table ([`PluginConfig::builtin`]), parsed
//! by the same code, destructive only on the simulated cluster
//! ([`PluginConfig::builtin_on_sim`]). [`grants_source`] says which applies.

use std::path::PathBuf;

use serde::Deserialize;

use crate::builtin::catalogue::BuiltinDefaults;
use crate::builtin::catalogue::PluginKind;
use crate::caps::Grants;
use crate::plugin::limits::LimitsConfig;

/// `[plugins.NAME]`: one backend plugin, its grants and limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(from = "RawPluginConfig")]
pub struct PluginConfig {
    /// The component file (`.wasm`); `None` means the component built into
    /// cradle under the same name (only for a built-in's name).
    pub path: Option<PathBuf>,
    /// What the operator grants this plugin. Nothing granted means nothing allowed.
    pub grants: Grants,
    /// Resource limits for each instance.
    pub limits: LimitsConfig,
    /// `kind` as written: `backend` or `integration`; `None` means the
    /// built-in's own kind for a built-in, else a backend ([`PluginConfig::kind`]).
    pub kind: Option<PluginKind>,
    /// `true` when cradle.toml has no `[plugins.NAME]` for this built-in and an
    /// environment names it: the built-in's own grants and limits apply.
    pub implicit: bool,
}

/// Where a plugin's grants come from, for `cradle plugins list`/`inspect`.
pub fn grants_source(pc: &PluginConfig) -> &'static str {
    match (pc.implicit, pc.grants.proxmox.as_ref().is_some_and(|g| g.destructive)) {
        (false, _) => "cradle.toml",
        (true, false) => "default (built-in)",
        (true, true) => "default (built-in, destructive on the simulated cluster)",
    }
}

impl PluginConfig {
    /// A component that no `[plugins]` entry names (`cradle plugins inspect
    /// FILE`): nothing granted, default limits.
    pub fn unconfigured() -> PluginConfig {
        PluginConfig {
            path: None,
            grants: Grants::default(),
            limits: LimitsConfig::default(),
            kind: None,
            implicit: false,
        }
    }

    /// What plugin `name` is: `kind` as written; unwritten, the built-in's
    /// kind for a built-in component, else a backend.
    pub fn kind(&self, name: &str) -> PluginKind {
        let builtin = || crate::builtin::catalogue::defaults(name).filter(|_| self.is_builtin()).map(|b| b.kind);
        self.kind.or_else(builtin).unwrap_or_default()
    }

    /// The built-in plugin `p` with its default grants and limits, parsed from
    /// [`BuiltinDefaults::config`] like any `[plugins.NAME]` table.
    pub fn builtin(p: &BuiltinDefaults) -> PluginConfig {
        let mut config = match toml::from_str::<PluginConfig>(p.config) {
            Ok(config) => PluginConfig { implicit: true, kind: Some(p.kind), ..config },
            Err(e) => {
                // Unit-tested never to happen; fail closed: nothing granted.
                tracing::error!(plugin = p.name, error = %e, "the built-in plugin's default grants do not parse");
                PluginConfig {
                    path: None,
                    grants: Grants::default(),
                    limits: LimitsConfig::default(),
                    kind: Some(p.kind),
                    implicit: true,
                }
            }
        };
        config.grants.builtin_defaults = true;
        config
    }

    /// [`PluginConfig::builtin`] for environments that all run on the built-in
    /// simulated cluster: destructive calls are granted where the built-in
    /// says so ([`BuiltinDefaults::destructive_on_sim`]).
    pub fn builtin_on_sim(p: &BuiltinDefaults) -> PluginConfig {
        let mut config = PluginConfig::builtin(p);
        if p.destructive_on_sim {
            if let Some(pve) = config.grants.proxmox.as_mut() {
                pve.destructive = true;
            }
            if let Some(tf) = config.grants.terraform.as_mut() {
                tf.destructive = true;
            }
        }
        config
    }

    /// Whether the component is the one built into cradle.
    pub fn is_builtin(&self) -> bool {
        self.path.is_none()
    }
}

/// `[plugins.NAME]` as written. The limits are spelled out here instead of
/// `#[serde(flatten)]`ed: flatten loses toml's spans and the list of expected
/// keys, so a bad value or a typo was reported at the table header without
/// naming the field.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPluginConfig {
    #[serde(default)]
    path: Option<PathBuf>,
    #[serde(default)]
    kind: Option<PluginKind>,
    #[serde(default)]
    grants: Grants,
    #[serde(default)]
    memory_limit_mib: Option<u64>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    call_timeout_ms: Option<u64>,
    #[serde(default)]
    max_host_calls: Option<u64>,
    #[serde(default)]
    max_journal_bytes: Option<u64>,
}

impl From<RawPluginConfig> for PluginConfig {
    fn from(raw: RawPluginConfig) -> Self {
        PluginConfig {
            path: raw.path,
            kind: raw.kind,
            grants: raw.grants,
            limits: LimitsConfig {
                memory_limit_mib: raw.memory_limit_mib,
                timeout_ms: raw.timeout_ms,
                call_timeout_ms: raw.call_timeout_ms,
                max_host_calls: raw.max_host_calls,
                max_journal_bytes: raw.max_journal_bytes,
            },
            implicit: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::load::fixture::{GOOD, REAL, parse};

    #[test]
    fn an_environment_naming_an_unconfigured_built_in_gets_it_with_its_own_grants() {
        let c = parse(&GOOD.replace("backend = \"sample\"", "backend = \"direct\"")).expect("built-in");
        let direct = &c.plugins["direct"];
        assert!(direct.is_builtin() && direct.implicit);
        let proxmox = direct.grants.proxmox.as_ref().expect("the built-in grants proxmox");
        assert!(proxmox.destructive && proxmox.nodes == ["*"], "destructive by default on the simulated cluster");
        assert_eq!(grants_source(direct), "default (built-in, destructive on the simulated cluster)");
        assert_eq!(grants_source(&c.plugins["sample"]), "cradle.toml");
        // Configured plugins stay as written.
        assert_eq!(c.plugins["sample"].path.as_deref(), Some(Path::new("plugins/sample.wasm")));
    }

    #[test]
    fn the_built_in_default_grants_are_not_destructive_on_a_real_cluster() {
        let text = GOOD.replace("backend = \"sample\"", "backend = \"direct\"").replace("kind = \"sim\"", REAL);
        let c = parse(&text).expect("built-in on a real cluster");
        let direct = &c.plugins["direct"];
        assert!(direct.implicit && direct.grants.builtin_defaults);
        assert!(!direct.grants.proxmox.as_ref().expect("proxmox").destructive, "opt-in on kind = proxmox");
        assert_eq!(grants_source(direct), "default (built-in)");
        // One environment on a real cluster keeps it opt-in for the plugin's every environment.
        let mixed = format!(
            "{}[clusters.prod]\n{REAL}\n[environments.prod]\ncluster = \"prod\"\nbackend = \"direct\"\n",
            GOOD.replace("backend = \"sample\"", "backend = \"direct\"")
        );
        let c = parse(&mixed).expect("mixed");
        assert!(!c.plugins["direct"].grants.proxmox.as_ref().expect("proxmox").destructive);
        // Written out, the operator's choice stands.
        let explicit = format!(
            "{text}[plugins.direct.grants.proxmox]\nnodes = [\"*\"]\nvmids = \"100-199\"\ndestructive = true\n"
        );
        let c = parse(&explicit).expect("explicit");
        assert!(c.plugins["direct"].grants.proxmox.as_ref().expect("proxmox").destructive);
        assert!(!c.plugins["direct"].grants.builtin_defaults);
    }

    #[test]
    fn a_built_in_without_path_takes_the_operators_grants_only() {
        let text = GOOD.replace("backend = \"sample\"", "backend = \"direct\"")
            + "[plugins.direct.grants.lock]\nprefixes = [\"vm/\"]\n";
        let c = parse(&text).expect("built-in with own grants");
        let direct = &c.plugins["direct"];
        assert!(direct.is_builtin() && !direct.implicit);
        assert!(direct.grants.proxmox.is_none(), "the built-in's defaults are replaced, not merged");
        assert!(direct.grants.lock.is_some());
    }

    #[test]
    fn a_non_built_in_plugin_needs_a_path() {
        let err = parse(&GOOD.replace("path = \"plugins/sample.wasm\"\n", "").replace("sample", "mine"))
            .expect_err("no path");
        assert!(err.to_string().contains("plugins.mine: path is required"), "{err}");
    }

    #[test]
    fn a_bad_limit_is_reported_at_its_line_naming_the_field() {
        let err =
            parse(&GOOD.replace("memory_limit_mib = 32", "memory_limit_mib = \"big\"")).expect_err("bad").to_string();
        assert!(err.contains("memory_limit_mib") && err.contains("line 10"), "{err}");
        let err = parse(&GOOD.replace("memory_limit_mib = 32", "memory_limit = 32")).expect_err("typo").to_string();
        assert!(err.contains("unknown field `memory_limit`") && err.contains("`memory_limit_mib`"), "{err}");
    }

    #[test]
    fn a_malformed_vmid_range_names_the_field() {
        let err = parse(&GOOD.replace("\"100-199\"", "\"199-100\"")).expect_err("bad range");
        assert!(err.to_string().contains("vmids"), "{err}");
    }
}
