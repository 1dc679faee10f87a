//! Reading `cradle.toml`: [`Config::load`] and [`Config::parse`], which turn the
//! text into a [`Config`], add the built-in plugins environments name,
//! resolve relative paths against the file's directory and validate the
//! sections against each other.
//!
//! Contract: the result is either a fully validated [`Config`] or a
//! [`ConfigError`] naming the file, the key and what to change; a parse error
//! never echoes a credential's value (toml quotes the offending line).

use std::path::{Path, PathBuf};

use super::{ClusterKind, Config, ConfigError, ConfigProblem, EndpointAuth, PluginConfig, join_keys};
use crate::builtin::catalogue::PluginKind;

impl Config {
    /// Read and validate `path`.
    ///
    /// The one loader of every command: `path` is made absolute first, so the
    /// bare default `cradle.toml` (whose parent is the empty path) resolves
    /// its relative paths against the current directory exactly as
    /// `./cradle.toml` or `--config /abs/cradle.toml` would, and state,
    /// workflow and module-root paths come out absolute (the SSH control
    /// directory and `terraform.module_root` must be).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let path = &std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        let base = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let base = std::path::absolute(&base).unwrap_or(base);
        Config::parse(&text, path, &base)
    }

    /// Parse `text` as if read from `path`, resolving relative paths against `base`.
    pub fn parse(text: &str, path: &Path, base: &Path) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            // toml quotes the offending line; an inline secret must not be echoed.
            message: hide_quoted_secrets(&crate::secrets::redact(e.to_string().trim_end())),
        })?;
        config.base_dir = base.to_path_buf();
        config.add_implied_builtins();
        config.add_implied_integrations();
        config.resolve_module_roots();
        config.resolve_guest_images();
        config.resolve_relative_paths();
        config.resolve_terraform_paths();
        config
            .validate()
            .map_err(|problem| ConfigError::Invalid { path: path.to_path_buf(), problem: Box::new(problem) })?;
        Ok(config)
    }

    /// `[serve.sources.NAME] defaults`, `[endpoints.NAME] ca_file` and every
    /// secret `{ file = .. }` are relative to cradle.toml.
    fn resolve_relative_paths(&mut self) {
        let base = self.base_dir.clone();
        let secrets = self
            .clusters
            .values_mut()
            .filter_map(|c| c.token.as_mut())
            .chain(self.endpoints.values_mut().filter_map(|e| e.token.as_mut()))
            .chain(self.serve.sources.values_mut().map(|s| &mut s.secret))
            .chain(self.dns.values_mut().filter_map(|d| d.secret.as_mut()))
            .chain(self.coordination.password.as_mut())
            .chain(self.coordination.records_key.as_mut())
            .chain(self.serve.status.as_mut().and_then(|s| s.token.as_mut()));
        for secret in secrets {
            secret.anchor(&base);
        }
        for ep in self.endpoints.values_mut() {
            if let Some(ca) = ep.ca_file.as_mut()
                && ca.is_relative()
            {
                *ca = base.join(&*ca);
            }
        }
        for source in self.serve.sources.values_mut() {
            if let Some(d) = source.defaults.as_mut()
                && d.is_relative()
            {
                *d = base.join(&*d);
            }
        }
    }

    /// `[terraform] cli_config` and `plugin_cache_dir` are relative to
    /// cradle.toml (terraform itself runs in a host's module directory, where a
    /// relative `TF_CLI_CONFIG_FILE` would name another file); `binary` too
    /// unless it is a bare name, which is looked up on `PATH`.
    fn resolve_terraform_paths(&mut self) {
        let base = self.base_dir.clone();
        let tf = &mut self.terraform;
        let bare = |p: &Path| p.components().count() == 1 && !p.is_absolute();
        let binary = tf.binary.as_mut().filter(|p| !bare(p));
        for path in [binary, tf.cli_config.as_mut(), tf.plugin_cache_dir.as_mut()].into_iter().flatten() {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        }
    }

    fn resolve_guest_images(&mut self) {
        let base = self.base_dir.clone();
        for c in self.clusters.values_mut() {
            if let Some(image) = c.sim.qemu.as_mut().and_then(|q| q.image.as_mut())
                && image.is_relative()
            {
                *image = base.join(&*image);
            }
        }
    }

    /// `[plugins.NAME.grants.terraform] module_root` is relative to cradle.toml
    /// (the built-in `terraform` plugin's default is `terraform/` beside it),
    /// like every other path the file gives.
    fn resolve_module_roots(&mut self) {
        let base = self.base_dir.clone();
        let grants = self.plugins.values_mut().map(|p| &mut p.grants).chain(std::iter::once(&mut self.workflow.grants));
        for g in grants {
            if let Some(tf) = g.terraform.as_mut()
                && tf.module_root.is_relative()
            {
                tf.module_root = base.join(&tf.module_root);
            }
        }
    }

    /// An environment naming a built-in plugin that `[plugins]` does not
    /// configure gets the built-in, with the built-in's grants and limits.
    /// Grants belong to the plugin, not the environment, so the simulated
    /// cluster's destructive default applies only when every environment
    /// naming the plugin runs on a `kind = "sim"` cluster; one environment on
    /// a real cluster (or an unknown one) keeps it opt-in for all.
    fn add_implied_builtins(&mut self) {
        for env in self.environments.values() {
            if self.plugins.contains_key(&env.backend) {
                continue;
            }
            let Some(builtin) = crate::builtin::catalogue::defaults(&env.backend) else { continue };
            let all_sim = self
                .environments
                .values()
                .filter(|e| e.backend == env.backend)
                .all(|e| self.clusters.get(&e.cluster).is_some_and(|c| c.kind == ClusterKind::Sim));
            let config = if all_sim { PluginConfig::builtin_on_sim(builtin) } else { PluginConfig::builtin(builtin) };
            self.plugins.insert(env.backend.clone(), config);
        }
    }

    fn validate(&self) -> Result<(), ConfigProblem> {
        if let Some(env) = &self.default_environment
            && !self.environments.contains_key(env)
        {
            return Err(ConfigProblem::DefaultEnvironment { env: env.clone(), known: join_keys(&self.environments) });
        }
        for (name, env) in &self.environments {
            if !self.clusters.contains_key(&env.cluster) {
                return Err(ConfigProblem::Cluster {
                    env: name.clone(),
                    cluster: env.cluster.clone(),
                    known: join_keys(&self.clusters),
                });
            }
            if !self.plugins.contains_key(&env.backend) {
                return Err(ConfigProblem::Backend {
                    env: name.clone(),
                    backend: env.backend.clone(),
                    known: self.plugin_names_of(PluginKind::Backend),
                    builtin: crate::builtin::catalogue::names_of(PluginKind::Backend),
                });
            }
            if let Some(dns) = env.dns.iter().find(|d| !self.dns.contains_key(*d)) {
                return Err(ConfigProblem::Dns { env: name.clone(), dns: dns.clone(), known: join_keys(&self.dns) });
            }
            for (i, a) in env.dns.iter().enumerate() {
                for b in &env.dns[i + 1..] {
                    let (za, zb) = (&self.dns[a].zones, &self.dns[b].zones);
                    let norm = |z: &String| z.trim_end_matches('.').to_ascii_lowercase();
                    if let Some(zone) = za.iter().find(|z| zb.iter().any(|y| norm(y) == norm(z))) {
                        return Err(ConfigProblem::DnsZoneTwice {
                            env: name.clone(),
                            zone: zone.clone(),
                            first: a.clone(),
                            second: b.clone(),
                        });
                    }
                }
            }
            if let Some(dhcp) = &env.dhcp
                && !self.dhcp.contains_key(dhcp)
            {
                return Err(ConfigProblem::Dhcp {
                    env: name.clone(),
                    dhcp: dhcp.clone(),
                    known: join_keys(&self.dhcp),
                });
            }
            if let Some(post) = &env.post
                && !self.post.contains_key(post)
            {
                return Err(ConfigProblem::Post {
                    env: name.clone(),
                    post: post.clone(),
                    known: join_keys(&self.post),
                });
            }
        }
        self.validate_plugin_kinds()?;
        self.terraform.validate().map_err(ConfigProblem::Terraform)?;
        self.coordination.validate().map_err(ConfigProblem::Coordination)?;
        let envs: Vec<&str> = self.environments.keys().map(String::as_str).collect();
        self.serve.validate(&envs).map_err(ConfigProblem::Serve)?;
        for (name, dns) in &self.dns {
            dns.validate().map_err(|problem| ConfigProblem::DnsProvider { name: name.clone(), problem })?;
            if let Some(endpoint) = &dns.endpoint
                && !self.endpoints.contains_key(endpoint)
            {
                return Err(ConfigProblem::DnsEndpoint {
                    name: name.clone(),
                    endpoint: endpoint.clone(),
                    known: join_keys(&self.endpoints),
                });
            }
        }
        for (name, dhcp) in &self.dhcp {
            let problem = dhcp.validate().err().or_else(|| {
                (!self.endpoints.contains_key(&dhcp.endpoint)).then(|| {
                    format!(
                        "endpoint = \"{}\" is not defined in [endpoints] (known: {})",
                        dhcp.endpoint,
                        join_keys(&self.endpoints)
                    )
                })
            });
            if let Some(problem) = problem {
                return Err(ConfigProblem::DhcpProvider { name: name.clone(), problem });
            }
        }
        for (name, post) in &self.post {
            let problem = post.validate().err().or_else(|| {
                (!self.endpoints.contains_key(&post.endpoint)).then(|| {
                    format!(
                        "endpoint = \"{}\" is not defined in [endpoints] (known: {})",
                        post.endpoint,
                        join_keys(&self.endpoints)
                    )
                })
            });
            if let Some(problem) = problem {
                return Err(ConfigProblem::PostProvider { name: name.clone(), problem });
            }
        }
        for (name, cluster) in &self.clusters {
            cluster.validate().map_err(|problem| ConfigProblem::ClusterValue { name: name.clone(), problem })?;
        }
        for (name, plugin) in &self.plugins {
            if plugin.path.is_none() && crate::builtin::catalogue::defaults(name).is_none() {
                return Err(ConfigProblem::PluginPath {
                    name: name.clone(),
                    builtin: crate::builtin::catalogue::names_with_kinds(),
                });
            }
            plugin.grants.validate().map_err(|problem| ConfigProblem::PluginGrants { name: name.clone(), problem })?;
            plugin.limits.validate().map_err(|problem| ConfigProblem::PluginLimits { name: name.clone(), problem })?;
            if let Some(http) = &plugin.grants.http {
                for alias in &http.endpoints {
                    if !self.endpoints.contains_key(alias) {
                        return Err(ConfigProblem::HttpEndpoint {
                            name: name.clone(),
                            alias: alias.clone(),
                            known: join_keys(&self.endpoints),
                        });
                    }
                }
            }
        }
        self.workflow.grants.validate().map_err(|problem| ConfigProblem::WorkflowGrants { problem })?;
        if self.workflow.max_operations == 0 {
            return Err(ConfigProblem::MaxOperations);
        }
        for (name, ep) in &self.endpoints {
            if !(ep.url.starts_with("https://") || ep.url.starts_with("http://")) {
                return Err(ConfigProblem::EndpointUrl { name: name.clone(), url: ep.url.clone() });
            }
            let login = ep.auth == EndpointAuth::UnifiLogin;
            if login && (ep.username.is_none() || ep.token.is_none()) {
                return Err(ConfigProblem::EndpointLogin {
                    name: name.clone(),
                    problem: "auth = \"unifi-login\" needs username and token (the password, as a secret reference)",
                });
            }
            if !login && ep.username.is_some() {
                return Err(ConfigProblem::EndpointLogin {
                    name: name.clone(),
                    problem: "username is only used with auth = \"unifi-login\"",
                });
            }
        }
        Ok(())
    }
}

/// toml's parse errors quote the offending source line (`8 | token = "…`).
/// When that line sets a credential, its value is not shown: a value toml
/// could not even parse (an unterminated string) never reaches the secret
/// deserializer that would otherwise refuse it without echoing it.
fn hide_quoted_secrets(message: &str) -> String {
    const SECRET_WORDS: [&str; 4] = ["token", "password", "passwd", "secret"];
    message
        .lines()
        .map(|line| {
            if let Some((gutter, src)) = line.split_once(" | ")
                && !gutter.trim().is_empty()
                && gutter.trim().chars().all(|c| c.is_ascii_digit())
                && let Some((key, _)) = src.split_once('=')
                && SECRET_WORDS.iter().any(|w| src.to_ascii_lowercase().contains(w))
            {
                format!("{gutter} | {key}= [value not shown]")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The configuration the section tests parse, and how they parse it (also the
/// capabilities' provider-section tests, through `crate::config::fixture`).
#[cfg(test)]
pub(crate) mod fixture {
    use std::path::Path;

    use super::super::{Config, ConfigError};

    pub(crate) fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("cradle.toml"), Path::new("/proj"))
    }

    pub(crate) const GOOD: &str = r#"
default_environment = "test"
[clusters.lab]
kind = "sim"
[environments.test]
cluster = "lab"
backend = "sample"
[plugins.sample]
path = "plugins/sample.wasm"
memory_limit_mib = 32
[plugins.sample.grants.lock]
prefixes = ["*"]
[plugins.sample.grants.proxmox]
nodes = ["pve1"]
vmids = "100-199"
"#;

    pub(crate) const REAL: &str =
        "endpoint = \"https://pve1:8006\"\ntoken = { env = \"PVE_TOKEN\" }\nfingerprint = \"AA\"";
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::fixture::{GOOD, parse};
    use crate::secrets::SecretRef;

    #[test]
    fn secret_files_are_relative_to_cradle_toml_not_to_the_working_directory() {
        let text = format!(
            "{GOOD}[endpoints.sem]\nurl = \"http://127.0.0.1:3000\"\ntoken = {{ file = \"sem.token\" }}\n\
             [endpoints.abs]\nurl = \"http://127.0.0.1:3001\"\ntoken = {{ file = \"/etc/cradle/abs.token\" }}\n"
        );
        let c = parse(&text).expect("valid");
        let token = |name: &str| match &c.endpoints[name].token {
            Some(SecretRef::File(p)) => p.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(token("sem"), PathBuf::from("/proj/sem.token"));
        assert_eq!(token("abs"), PathBuf::from("/etc/cradle/abs.token"));
    }

    #[test]
    fn terraform_paths_are_relative_to_cradle_toml_and_a_bare_binary_stays_on_path() {
        let base = format!(
            "{GOOD}[terraform]\ncli_config = \"terraform.rc\"\nplugin_cache_dir = \"cache\"\nbinary = \"terraform\"\n"
        );
        let c = parse(&base).expect("valid");
        assert_eq!(c.terraform.cli_config, Some(PathBuf::from("/proj/terraform.rc")));
        assert_eq!(c.terraform.plugin_cache_dir, Some(PathBuf::from("/proj/cache")));
        assert_eq!(c.terraform.binary, Some(PathBuf::from("terraform")));
        let nested = base.replace("binary = \"terraform\"", "binary = \"bin/terraform\"");
        assert_eq!(parse(&nested).expect("valid").terraform.binary, Some(PathBuf::from("/proj/bin/terraform")));
    }

    #[test]
    fn a_valid_config_loads_with_paths_relative_to_its_directory() {
        let c = parse(GOOD).expect("valid");
        let p = &c.plugins["sample"];
        assert_eq!(c.resolve(p.path.as_deref().expect("path")), PathBuf::from("/proj/plugins/sample.wasm"));
        assert_eq!(c.workflow_dir(), PathBuf::from("/proj/workflows"));
        assert_eq!(p.limits.memory_limit_mib, Some(32));
        assert_eq!(c.environment(None).expect("env").0, "test");
    }

    #[test]
    fn an_unknown_key_is_an_error_naming_it() {
        let text = GOOD.replace("prefixes = [\"*\"]", "prefixes = [\"*\"]\n[plugins.sample.grants.proxmux]");
        let err = parse(&text).expect_err("typo").to_string();
        assert!(err.contains("proxmux"), "{err}");
        assert!(err.starts_with("cradle.toml"), "{err}");
    }

    #[test]
    fn an_environment_naming_a_missing_plugin_is_refused() {
        let err = parse(&GOOD.replace("backend = \"sample\"", "backend = \"ghost\"")).expect_err("bad");
        assert!(err.to_string().contains("environments.test.backend = \"ghost\""), "{err}");
        assert!(err.to_string().contains("built-in: direct, sample"), "{err}");
    }

    #[test]
    fn a_missing_backend_error_lists_only_backends_not_the_built_in_integration_plugins() {
        let text = format!("{GOOD}[plugins.pipe]\npath = \"p.wasm\"\nkind = \"integration\"\n")
            .replace("backend = \"sample\"", "backend = \"ghost\"");
        let err = parse(&text).expect_err("no such backend").to_string();
        assert!(
            err.contains("(known: sample) nor built in (built-in: direct, sample, terraform)"),
            "backends only, configured and built in: {err}"
        );
        assert!(
            !err.contains("netbox") && !err.contains("pipe"),
            "no integration plugin is offered as a backend: {err}"
        );
    }

    #[test]
    fn a_plugin_without_path_error_says_which_built_ins_are_which_kind() {
        let err = parse(&format!("{GOOD}[plugins.custom]\nkind = \"integration\"\n")).expect_err("no path").to_string();
        assert!(err.contains("plugins.custom: path is required"), "{err}");
        assert!(err.contains("direct (backend)") && err.contains("netbox (integration)"), "{err}");
    }

    #[test]
    fn a_unifi_login_endpoint_needs_its_user_and_password_and_a_user_needs_the_login() {
        let ep = |extra: &str| format!("{GOOD}\n[endpoints.unifi]\nurl = \"https://unifi/proxy/network\"\n{extra}");
        let missing = parse(&ep("auth = \"unifi-login\"\ntoken = { file = \"/etc/u\" }\n")).expect_err("no user");
        assert!(missing.to_string().contains("endpoints.unifi: auth = \"unifi-login\" needs username"), "{missing}");
        let stray = parse(&ep("username = \"admin\"\ntoken = { file = \"/etc/u\" }\n")).expect_err("stray user");
        assert!(stray.to_string().contains("username is only used with"), "{stray}");
        parse(&ep("auth = \"unifi-login\"\nusername = \"admin\"\ntoken = { file = \"/etc/u\" }\n")).expect("valid");
    }

    #[test]
    fn an_inline_token_is_refused() {
        let text = GOOD.replace(
            "kind = \"sim\"",
            "endpoint = \"https://pve1:8006\"\ntoken = \"root@pam!x=CANARY-SECRET\"\nfingerprint = \"AA\"",
        );
        let err = parse(&text).expect_err("inline").to_string();
        assert!(!err.contains("CANARY-SECRET"), "secret leaked into the error: {err}");
    }

    #[test]
    fn an_unterminated_inline_token_is_not_echoed() {
        let text = GOOD.replace(
            "kind = \"sim\"",
            "endpoint = \"https://pve1:8006\"\ntoken = \"root@pam!x=CANARY-SECRET\nfingerprint = \"AA\"",
        );
        let err = parse(&text).expect_err("unterminated").to_string();
        assert!(err.contains("line 5"), "{err}");
        assert!(!err.contains("CANARY-SECRET"), "secret leaked into the error: {err}");
    }
}
