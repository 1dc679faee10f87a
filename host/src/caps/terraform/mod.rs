//! The `terraform` capability: the real `terraform` binary, run with a fixed
//! set of subcommands in one module directory per host under the grant's
//! module root.
//!
//! - [`config`]: `[terraform]` (binary, CLI config, plugin cache, flavour,
//!   timeout).
//! - [`module_dir`]: the module directory and its file rules (0700/0600,
//!   symlinks refused, no configuration file the plugin did not render).
//! - [`plans`]: the run's saved plans, by opaque id.
//! - [`runner`]: the child process, its clean environment with the cluster's
//!   credentials, redacted line-by-line output, the limit.
//! - `host.rs`: the WIT adapter (the guard, then [`Terraform`]).
//!
//! [`Terraform`] is the provider. After every command it makes the module
//! directory owner-only again (terraform writes state and backups with its
//! own modes). A failed plan or apply leaves `terraform-failure.log` and says
//! to inspect state and Proxmox before retrying; cradle never deletes state
//! or its backups. `init` is serialized within the process (all runs, all
//! environments), because terraform's plugin cache is not safe for concurrent
//! installs.
//!
//! Failure modes: `invalid` for names and files the operator must fix,
//! `not-found` for a plan id of another run or a missing module, `failed` for
//! everything terraform itself reports (with its last lines, redacted).

pub mod approval;
pub mod config;
mod host;
pub mod module_check;
#[cfg(test)]
mod module_check_tests;
pub mod module_dir;
pub mod plans;
pub mod runner;
pub mod scope;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::time::Duration;

use approval::ApplyRule;
pub use config::{Flavour, TerraformConfig, TerraformConfigError};
use cradle_terraform_logic::approve::{self, Approval, Mode, Rejection};
use module_dir::ModuleDir;
use plans::Plans;
pub use runner::{Credentials, TlsTrust};
use runner::{Output, Runner, Stream};

use crate::contract::{CapError, ErrorKind};

/// How many of terraform's last lines an error message quotes.
const QUOTED_LINES: usize = 12;

/// The environment's terraform.
#[derive(Debug)]
pub struct Terraform {
    runner: Runner,
    flavour: Flavour,
    tls: TlsTrust,
    cluster: String,
    cache_dir: PathBuf,
    /// `[maintenance] plan_max_age`: a kept plan older than this can never be
    /// applied, so keeping another removes it (`plans::Plans::keep`); `None`
    /// (not configured) removes none.
    kept_max_age: Option<Duration>,
}

/// One `terraform init` at a time in this process: terraform's plugin cache is
/// not safe for concurrent installs, and every run (each with its own
/// [`Terraform`]) shares the environment's cache.
static INIT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Where terraform's lines go while it runs.
pub type Sink<'a> = &'a (dyn Fn(&str) + Sync);

impl Terraform {
    /// The provider for cluster `cluster` (for messages), with its plugin
    /// cache at `cache_dir` (created at first use).
    pub fn new(cfg: &TerraformConfig, creds: Credentials, cluster: &str, cache_dir: PathBuf) -> Terraform {
        // The whole token and its secret alone (PM_API_TOKEN_SECRET carries it so).
        let token = creds.token.expose();
        crate::secrets::register(token);
        if let Some((_, secret)) = token.split_once('=') {
            crate::secrets::register(secret);
        }
        Terraform {
            runner: Runner::new(cfg, &creds, &cache_dir),
            flavour: cfg.provider,
            tls: creds.tls.clone(),
            cluster: cluster.to_string(),
            cache_dir,
            kept_max_age: None,
        }
    }

    /// With kept plans older than `max_age` removed at each keep
    /// (`[maintenance] plan_max_age`).
    pub fn with_kept_max_age(mut self, max_age: Duration) -> Terraform {
        self.kept_max_age = Some(max_age);
        self
    }

    /// How old a kept plan may grow before a keep in its module removes it.
    pub fn kept_max_age(&self) -> Option<Duration> {
        self.kept_max_age
    }

    /// The provider flavour modules are rendered for.
    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// The longest a command may run (`[terraform] timeout_s`).
    pub fn timeout(&self) -> Duration {
        self.runner.timeout()
    }

    /// The flavour and terraform's version.
    pub async fn settings(&self) -> Result<(Flavour, String), CapError> {
        Ok((self.flavour, self.runner.version().await?))
    }

    /// Commands that reach the provider need certificate trust it can use.
    fn check_trust(&self) -> Result<(), CapError> {
        if self.tls == TlsTrust::FingerprintOnly {
            return Err(CapError::invalid(format!(
                "terraform: clusters.{} pins only a certificate fingerprint, which terraform's Proxmox providers cannot check; set clusters.{}.ca_file to the cluster's CA (/etc/pve/pve-root-ca.pem on a node)",
                self.cluster, self.cluster
            )));
        }
        Ok(())
    }

    async fn run(
        &self,
        m: &ModuleDir,
        args: &[&str],
        stream: Stream,
        limit: Duration,
        sink: Sink<'_>,
    ) -> Result<Output, CapError> {
        let dir = m.existing()?;
        let out = self.runner.run(dir, args, stream, limit, sink).await;
        m.tighten()?;
        out
    }

    /// `terraform init -input=false`.
    pub async fn init(&self, m: &ModuleDir, limit: Duration, sink: Sink<'_>) -> Result<String, CapError> {
        self.check_trust()?;
        crate::state::create_private_dir(&self.cache_dir).map_err(|e| CapError::failed(format!("terraform: {e}")))?;
        let _one_at_a_time = INIT.lock().await;
        let out = self.run(m, &["init", "-input=false", "-no-color"], Stream::Lines, limit, sink).await?;
        module_dir::tighten_tree(&self.cache_dir)?;
        succeeded(m, "init", &out, false)?;
        Ok(out.transcript)
    }

    /// A saved plan (`-destroy` when `destroy`): its id and whether it has changes.
    pub async fn plan(
        &self,
        m: &ModuleDir,
        plans: &Plans,
        destroy: bool,
        limit: Duration,
        sink: Sink<'_>,
    ) -> Result<(String, bool), CapError> {
        self.check_trust()?;
        let dir = m.existing()?;
        for stale in Plans::prune_dead(dir)? {
            tracing::info!(plan = %stale.display(), "removed the saved plan of an attempt whose process is gone");
        }
        let (id, file) = plans.reserve(dir, destroy);
        let out_arg = format!("-out={}", file.display());
        let mut args = vec!["plan", "-input=false", "-no-color", "-detailed-exitcode", out_arg.as_str()];
        if destroy {
            args.push("-destroy");
        }
        let out = match self.run(m, &args, Stream::Lines, limit, sink).await {
            Ok(out) => out,
            Err(e) => {
                let _ = plans.discard(dir, &id);
                return Err(e);
            }
        };
        match out.status {
            0 => Ok((id, false)),
            2 => Ok((id, true)),
            _ => {
                let _ = plans.discard(dir, &id);
                Err(failure(m, "plan", &out, true))
            }
        }
    }

    /// `terraform show -json <plan>`.
    pub async fn show_plan(&self, m: &ModuleDir, plans: &Plans, id: &str, limit: Duration) -> Result<String, CapError> {
        let file = plans.file(m.existing()?, id)?;
        let file = file.display().to_string();
        let out = self.run(m, &["show", "-json", "-no-color", &file], Stream::Json, limit, &|_| {}).await?;
        succeeded(m, "show", &out, false)?;
        Ok(out.stdout)
    }

    /// `terraform apply <plan>`: exactly the saved plan `id`, once the host's
    /// own approval ([`approval`]) of that plan file passed; what it approved.
    #[allow(clippy::too_many_arguments, reason = "the module, its plans, the rule and the run's limits: one call")]
    pub async fn apply(
        &self,
        m: &ModuleDir,
        plans: &Plans,
        id: &str,
        rule: &ApplyRule,
        origin: &str,
        limit: Duration,
        sink: Sink<'_>,
    ) -> Result<Approval, CapError> {
        self.check_trust()?;
        let dir = m.existing()?;
        let file = plans.file(dir, id)?;
        let mode = if plans.is_destroy(dir, id)? { Mode::Destroy } else { Mode::Apply };
        let module = m.name();
        let expected = rule.expected(&module, origin, mode)?;
        let file = file.display().to_string();
        let shown = self.run(m, &["show", "-json", "-no-color", &file], Stream::Json, limit, &|_| {}).await?;
        succeeded(m, "show", &shown, false)?;
        let approval = approve::check(&shown.stdout, &expected).map_err(|r| {
            let mut message =
                format!("terraform: the saved plan of module `{module}` is refused, nothing was applied: {r}");
            if matches!(r, Rejection::ReplacementNotAllowed { .. }) {
                message.push_str(&format!(" ({})", rule.replacement_requirement(origin)));
            }
            CapError::new(ErrorKind::Denied, message)
        })?;
        let out = self.run(m, &["apply", "-input=false", "-no-color", &file], Stream::Lines, limit, sink).await?;
        succeeded(m, "apply", &out, true)?;
        // The state moved on: every kept plan of the module is stale now.
        for stale in Plans::remove_kept(dir)? {
            tracing::info!(plan = %stale.display(), "removed a kept plan made stale by an apply in its module");
        }
        Ok(approval)
    }

    /// `terraform show -json` of the state; `None` without a module or state.
    pub async fn show_state(&self, m: &ModuleDir, limit: Duration) -> Result<Option<String>, CapError> {
        if !m.has_state()? {
            return Ok(None);
        }
        let out = self.run(m, &["show", "-json", "-no-color"], Stream::Json, limit, &|_| {}).await?;
        succeeded(m, "show", &out, false)?;
        Ok(Some(out.stdout))
    }
}

fn succeeded(m: &ModuleDir, what: &str, out: &Output, log: bool) -> Result<(), CapError> {
    if out.status == 0 { Ok(()) } else { Err(failure(m, what, out, log)) }
}

/// The error for a failed command; with `log`, the transcript is left as
/// `terraform-failure.log` first.
fn failure(m: &ModuleDir, what: &str, out: &Output, log: bool) -> CapError {
    let dir = m.path().display();
    let lines: Vec<&str> = out.transcript.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(QUOTED_LINES)..].join(" | ");
    let mut message = format!("terraform {what} failed in {dir} (exit {}): {tail}", out.status);
    if log {
        match m.write_failure_log(&out.transcript) {
            Ok(path) => message.push_str(&format!(
                ". The whole output is in {} (owner-only; it may hold secrets: do not publish it)",
                path.display()
            )),
            Err(e) => message.push_str(&format!(". (The failure log could not be written: {})", e.message)),
        }
        message.push_str(&format!(
            ". Inspect the state (`terraform state list` in {dir}) and the VM in Proxmox before retrying; never delete terraform.tfstate or its backups"
        ));
    }
    CapError::failed(message)
}
