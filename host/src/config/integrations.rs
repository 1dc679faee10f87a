//! Plugin kinds in cradle.toml: which plugins are backends and which are
//! integration plugins (`[plugins.NAME] kind`), and the roles an environment
//! gives integration plugins (`[environments.NAME] plugins = { ROLE = "NAME" }`).
//!
//! Contract: after [`Config::parse`](super::Config::parse), every
//! environment's `backend` is a plugin of kind `backend`, every plugin its
//! `plugins` table maps a role to is configured (or a built-in integration
//! plugin: every built-in integration plugin without a table is added with its
//! default table, like a built-in backend an environment names) and of kind
//! `integration`, and a
//! built-in's table does not contradict the built-in's own kind. A role an
//! environment does not map defaults to the integration plugin of the role's
//! name ([`Config::role_plugin`]); which roles a workflow asks for is only
//! known when it runs, so an unresolvable role is refused then, naming the
//! environment and the role.

use super::{Config, ConfigProblem, PluginConfig};
use crate::builtin::catalogue::PluginKind;

impl Config {
    /// Every built-in integration plugin that `[plugins]` does not configure
    /// gets its built-in table, like a built-in backend an environment names:
    /// a role defaults to the integration plugin of its name, so
    /// `cradle::plugin("netbox")` reaches the built-in `netbox` with no
    /// `[plugins.netbox]`. Its default grants are never destructive and name
    /// no operator resource it could not already reach (no DHCP network, no
    /// DNS zone); a denial under them says which section to write out.
    pub(super) fn add_implied_integrations(&mut self) {
        for builtin in crate::builtin::catalogue::CATALOGUE {
            if builtin.kind == PluginKind::Integration && !self.plugins.contains_key(builtin.name) {
                self.plugins.insert(builtin.name.to_string(), PluginConfig::builtin(builtin));
            }
        }
    }

    /// The configured (or implied) plugins of `kind`, for a message about a
    /// field that takes only that kind.
    pub(super) fn plugin_names_of(&self, kind: PluginKind) -> String {
        let names: Vec<&str> =
            self.plugins.iter().filter(|(n, p)| p.kind(n) == kind).map(|(n, _)| n.as_str()).collect();
        if names.is_empty() { "none".to_string() } else { names.join(", ") }
    }

    /// Each plugin is used as the kind it is declared.
    pub(super) fn validate_plugin_kinds(&self) -> Result<(), ConfigProblem> {
        for (name, plugin) in &self.plugins {
            if let (Some(kind), Some(builtin)) = (plugin.kind, crate::builtin::catalogue::defaults(name))
                && plugin.is_builtin()
                && kind != builtin.kind
            {
                return Err(ConfigProblem::BuiltinKind { name: name.clone(), kind, builtin: builtin.kind });
            }
        }
        for (env_name, env) in &self.environments {
            if let Some(plugin) = self.plugins.get(&env.backend)
                && plugin.kind(&env.backend) != PluginKind::Backend
            {
                return Err(ConfigProblem::BackendKind { env: env_name.clone(), backend: env.backend.clone() });
            }
            for (role, name) in &env.plugins {
                let Some(plugin) = self.plugins.get(name) else {
                    return Err(ConfigProblem::RolePlugin {
                        env: env_name.clone(),
                        role: role.clone(),
                        plugin: name.clone(),
                        known: self.plugin_names_of(PluginKind::Integration),
                    });
                };
                if plugin.kind(name) != PluginKind::Integration {
                    return Err(ConfigProblem::RoleKind {
                        env: env_name.clone(),
                        role: role.clone(),
                        plugin: name.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// The plugin environment `env` gives role `role`: its `plugins` entry,
    /// else the integration plugin named like the role; `None` when neither.
    pub fn role_plugin<'a>(&'a self, env: &str, role: &'a str) -> Option<&'a str> {
        let mapped = self.environments.get(env).and_then(|e| e.plugins.get(role)).map(String::as_str);
        mapped.or_else(|| self.plugins.get(role).filter(|p| p.kind(role) == PluginKind::Integration).map(|_| role))
    }

    /// Every role environment `env` can resolve, with its plugin: the
    /// integration plugins under their own names, then the environment's
    /// `plugins` entries over them.
    pub fn roles(&self, env: &str) -> Vec<(String, String)> {
        let mut roles: std::collections::BTreeMap<String, String> = self
            .plugins
            .iter()
            .filter(|(name, p)| p.kind(name) == PluginKind::Integration)
            .map(|(name, _)| (name.clone(), name.clone()))
            .collect();
        if let Some(e) = self.environments.get(env) {
            roles.extend(e.plugins.iter().map(|(r, p)| (r.clone(), p.clone())));
        }
        roles.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::load::fixture::{GOOD, parse};
    use super::*;

    const INTEGRATION: &str = "[plugins.pipe]\npath = \"plugins/pipe.wasm\"\nkind = \"integration\"\n";

    #[test]
    fn a_role_resolves_to_the_environments_mapping_else_to_the_plugin_of_its_name() {
        let text = format!("{GOOD}{INTEGRATION}[plugins.other]\npath = \"o.wasm\"\nkind = \"integration\"\n")
            .replace("backend = \"sample\"", "backend = \"sample\"\nplugins = { netbox = \"other\" }");
        let c = parse(&text).expect("valid");
        assert_eq!(c.role_plugin("test", "netbox"), Some("other"));
        assert_eq!(c.role_plugin("test", "pipe"), Some("pipe"), "default: the plugin named like the role");
        assert_eq!(c.role_plugin("test", "ghost"), None);
        assert_eq!(c.role_plugin("test", "sample"), None, "a backend is no role's default");
        assert_eq!(c.plugins["pipe"].kind("pipe"), PluginKind::Integration);
        assert_eq!(c.plugins["sample"].kind("sample"), PluginKind::Backend, "kind defaults to backend");
    }

    #[test]
    fn an_integration_plugin_named_as_a_backend_is_refused_naming_the_field() {
        let text = format!("{GOOD}{INTEGRATION}").replace("backend = \"sample\"", "backend = \"pipe\"");
        let err = parse(&text).expect_err("integration as backend").to_string();
        assert!(
            err.starts_with("cradle.toml")
                && err.contains("environments.test.backend = \"pipe\"")
                && err.contains("kind = \"integration\""),
            "{err}"
        );
    }

    #[test]
    fn a_backend_mapped_to_a_role_is_refused_naming_the_field() {
        let text = GOOD.replace("backend = \"sample\"", "backend = \"sample\"\nplugins = { netbox = \"sample\" }");
        let err = parse(&text).expect_err("backend as integration").to_string();
        assert!(
            err.starts_with("cradle.toml")
                && err.contains("environments.test.plugins.netbox = \"sample\"")
                && err.contains("kind = \"backend\""),
            "{err}"
        );
    }

    #[test]
    fn a_role_mapped_to_an_unknown_plugin_is_refused() {
        let text = GOOD.replace("backend = \"sample\"", "backend = \"sample\"\nplugins = { netbox = \"ghost\" }");
        let err = parse(&text).expect_err("unknown").to_string();
        assert!(
            err.contains("environments.test.plugins.netbox = \"ghost\"") && err.contains("(known: netbox)"),
            "integration plugins only, not the backend `sample`: {err}"
        );
    }

    #[test]
    fn a_built_in_declared_of_another_kind_is_refused() {
        let text = format!("{GOOD}[plugins.direct]\nkind = \"integration\"\n");
        let err = parse(&text).expect_err("direct is a backend").to_string();
        assert!(err.contains("plugins.direct.kind = \"integration\"") && err.contains("is a backend"), "{err}");
    }

    #[test]
    fn an_unknown_kind_is_refused_naming_the_field() {
        let text = format!("{GOOD}[plugins.x]\npath = \"x.wasm\"\nkind = \"frontend\"\n");
        let err = parse(&text).expect_err("bad kind").to_string();
        assert!(err.contains("frontend") && err.contains("kind"), "{err}");
    }

    #[test]
    fn the_built_in_netbox_is_the_netbox_roles_plugin_without_a_table_with_its_default_grants() {
        let c = parse(GOOD).expect("valid");
        assert_eq!(c.role_plugin("test", "netbox"), Some("netbox"), "an unlisted role defaults to the built-in");
        assert!(c.roles("test").contains(&("netbox".to_string(), "netbox".to_string())));
        let netbox = &c.plugins["netbox"];
        assert!(netbox.is_builtin() && netbox.implicit && netbox.grants.builtin_defaults);
        assert_eq!(netbox.kind("netbox"), PluginKind::Integration);
        let dhcp = netbox.grants.dhcp.as_ref().expect("a dhcp section");
        let dns = netbox.grants.dns.as_ref().expect("a dns section");
        assert!(dhcp.networks.is_empty() && dns.zones.is_empty(), "no operator network or zone by default");
        assert!(!netbox.grants.proxmox.as_ref().is_some_and(|g| g.destructive), "never destructive by default");
    }

    #[test]
    fn a_netbox_table_replaces_the_built_ins_defaults_and_a_role_map_overrides_the_default() {
        let written = format!("{GOOD}[plugins.netbox.grants.dns]\nzones = [\"lab.example\"]\n");
        let c = parse(&written).expect("valid");
        assert!(!c.plugins["netbox"].implicit && c.plugins["netbox"].grants.dhcp.is_none(), "the table as written");
        let mapped = format!("{GOOD}{INTEGRATION}")
            .replace("backend = \"sample\"", "backend = \"sample\"\nplugins = { netbox = \"pipe\" }");
        assert_eq!(parse(&mapped).expect("valid").role_plugin("test", "netbox"), Some("pipe"));
    }
}
