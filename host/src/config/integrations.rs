//! Plugin kinds in cradle.toml: which plugins are backends and which are
//! integration plugins (`[plugins.NAME] kind`), and the roles an environment
//! gives integration plugins (`[environments.NAME] plugins = { ROLE = "NAME" }`).
//!
//! Contract: after [`Config::parse`](super::Config::parse), every
//! environment's `backend` is a plugin of kind `backend`, every plugin its
//! `plugins` table maps a role to is configured (or a built-in integration
//! plugin, added like an implied backend) and of kind `integration`, and a
//! built-in's table does not contradict the built-in's own kind. A role an
//! environment does not map defaults to the integration plugin of the role's
//! name ([`Config::role_plugin`]); which roles a workflow asks for is only
//! known when it runs, so an unresolvable role is refused then, naming the
//! environment and the role.

use super::{Config, ConfigProblem, PluginConfig, join_keys};
use crate::builtin::catalogue::PluginKind;

impl Config {
    /// A built-in integration plugin that an environment maps a role to and
    /// `[plugins]` does not configure gets its built-in table.
    pub(super) fn add_implied_integrations(&mut self) {
        let named: Vec<String> = self.environments.values().flat_map(|e| e.plugins.values().cloned()).collect();
        for name in named {
            if self.plugins.contains_key(&name) {
                continue;
            }
            if let Some(builtin) = crate::builtin::catalogue::defaults(&name) {
                self.plugins.insert(name, PluginConfig::builtin(builtin));
            }
        }
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
                        known: join_keys(&self.plugins),
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
        assert!(err.contains("environments.test.plugins.netbox = \"ghost\"") && err.contains("known: sample"), "{err}");
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
}
