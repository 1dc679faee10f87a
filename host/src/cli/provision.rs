//! `cradle provision -i INVENTORY [--limit PATTERN] [--env NAME] [--forks N] [--check]`.
//!
//! Resolves the selected hosts from the inventory, runs `provision(vm)` (or
//! `check(vm)` with `--check`, which changes nothing) for each with bounded
//! concurrency, prints a summary table (or one JSON document), and exits 0
//! only when every selected host succeeded.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use clap_complete::ArgValueCompleter;
use serde_json::json;

use super::progress::Live;
use super::{Cli, Output, completions, outln, print_json};
use crate::config::ClusterKind;
use crate::inventory::{Inventory, ResolveOptions, VmPlan, resolve_selected};
use crate::project::Project;
use crate::provision::{Action, Extra, HostResult, forks, run_all};
use crate::text::printable;

#[derive(Debug, Args)]
pub struct ProvisionArgs {
    #[command(flatten)]
    pub hosts: SelectionArgs,
    /// VMs worked on at once.
    #[arg(long, default_value_t = 5, value_parser = forks_value)]
    pub forks: usize,
    /// Change nothing; print what would happen for each VM, and why.
    #[arg(long)]
    pub check: bool,
}

pub async fn run(cli: &Cli, args: &ProvisionArgs) -> anyhow::Result<ExitCode> {
    let action = if args.check { Action::Check } else { Action::Provision };
    let results = run_inventory(cli, args.hosts.selection(), action, args.forks, |_, _| Ok(())).await?;
    print_results(cli, &results, args.check)
}

/// Which hosts of which inventory, in which environment.
pub struct Selection<'a> {
    /// The inventory path.
    pub inventory: &'a Path,
    /// The `--limit` pattern.
    pub limit: Option<&'a str>,
    /// The environment (default: `default_environment`).
    pub env: Option<&'a str>,
}

/// `-i INVENTORY [--limit PATTERN] [--env NAME]`: the selection of
/// `cradle provision` and `cradle plan`, with the completions of `--limit`
/// (the inventory's hosts and groups) and `--env`.
#[derive(Debug, Args)]
pub struct SelectionArgs {
    /// The Ansible inventory (file or directory) that says what the VMs should be.
    #[arg(short = 'i', long)]
    pub inventory: PathBuf,
    /// Hosts to work on (Ansible pattern: names, groups, globs, `!x`, `a:b`, `a:&b`).
    #[arg(long, add = ArgValueCompleter::new(completions::limit_candidates))]
    pub limit: Option<String>,
    /// The environment (default: `default_environment`).
    #[arg(long, add = ArgValueCompleter::new(completions::env_candidates))]
    pub env: Option<String>,
}

impl SelectionArgs {
    /// The selection these arguments name.
    pub fn selection(&self) -> Selection<'_> {
        Selection { inventory: &self.inventory, limit: self.limit.as_deref(), env: self.env.as_deref() }
    }
}

/// Resolve the selected hosts, let `approve` see them (environment, plans)
/// before anything is loaded or changed, then run `action` for each with the
/// live display on a terminal. Shared by `provision` and `remove`.
pub async fn run_inventory(
    cli: &Cli,
    selection: Selection<'_>,
    action: Action,
    forks: usize,
    approve: impl FnOnce(&str, &[VmPlan]) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<HostResult>> {
    let selected = select(cli, selection)?;
    approve(&selected.env, &selected.plans)?;
    let plans = selected.plans.clone();
    selected.run(plans, action, forks, Extra::default()).await
}

/// The project, environment, inventory and resolved hosts of a selection,
/// before anything is loaded or run (`cradle plan`/`apply` look at them first).
pub struct Selected {
    /// The project (with the live display's sink on a terminal).
    pub project: Arc<Project>,
    /// The environment's name.
    pub env: String,
    /// The inventory.
    pub inv: Arc<Inventory>,
    /// The selected hosts, resolved.
    pub plans: Vec<VmPlan>,
    live: Option<Arc<Live>>,
    simulated: bool,
}

/// Open the project and resolve the selected hosts of the inventory.
pub fn select(cli: &Cli, selection: Selection<'_>) -> anyhow::Result<Selected> {
    select_in(cli, cli.project()?, selection)
}

/// Resolve the selected hosts of the inventory in a project already open
/// (`cradle apply` opened it to read the plan file with its config).
pub fn select_in(cli: &Cli, mut project: Project, selection: Selection<'_>) -> anyhow::Result<Selected> {
    let live = Live::wanted(cli.quiet, cli.output == Output::Json).then(|| Arc::new(Live::default()));
    if let Some(live) = &live {
        project.progress = live.sink();
    }
    let project = Arc::new(project);
    let (env_name, environment) = project.config.environment(selection.env)?;
    // An in-process simulator keeps files open for every VM in this process.
    let simulated = project.config.clusters.get(&environment.cluster).is_some_and(|c| c.kind == ClusterKind::Sim);
    let env = env_name.to_string();
    let inv = Arc::new(Inventory::load(selection.inventory)?);
    let hosts = inv.select(selection.limit)?;
    let opts = ResolveOptions { environment: env.clone(), ..ResolveOptions::default() };
    let plans = resolve_selected(&inv, &hosts, &opts)?;
    Ok(Selected { project, env, inv, plans, live, simulated })
}

impl Selected {
    /// Load the project and run `action` for each of `plans` (some or all of
    /// the selected ones), `extra` added to their `vm`.
    pub async fn run(
        self,
        plans: Vec<VmPlan>,
        action: Action,
        forks: usize,
        extra: Extra,
    ) -> anyhow::Result<Vec<HostResult>> {
        let nofile = forks::raise_open_files_limit();
        let per_vm = if self.simulated { forks::SIM_FILES_PER_VM } else { 0 };
        let forks = forks::cap(forks, plans.len(), nofile, per_vm);
        if let Some(w) = &forks.warning {
            eprintln!("warning: {w}");
        }
        let forks = forks.granted.min(plans.len().max(1));
        let loaded = {
            let p = self.project.clone();
            Arc::new(tokio::task::spawn_blocking(move || p.load()).await??)
        };
        let redraw = self.live.as_ref().map(|l| l.start());
        let results = run_all(self.project, loaded, self.inv, plans, Some(self.env), action, forks, extra).await;
        if let Some(r) = redraw {
            r.finish().await;
        }
        Ok(results?)
    }
}

/// The summary table (or JSON document); exit 0 only when every VM succeeded.
pub fn print_results(cli: &Cli, results: &[HostResult], check: bool) -> anyhow::Result<ExitCode> {
    let ok = results.iter().all(HostResult::ok);
    match cli.output {
        Output::Json => print_json(&json!({
            "ok": ok,
            "check": check,
            "hosts": results.iter().map(|r| json!({
                "name": r.name, "vmid": r.vmid, "node": r.node, "result": if r.ok() { r.result.as_str() } else { "failed" },
                "detail": r.detail, "error": r.error, "run_id": r.run_id, "duration_ms": r.duration.as_millis() as u64,
            })).collect::<Vec<_>>(),
        }))?,
        Output::Text => {
            outln!("{:<20} {:>6} {:<8} {:<10} {:>9}  DETAIL", "VM", "VMID", "NODE", "RESULT", "TIME")?;
            for r in results {
                let result = if r.ok() { r.result.as_str() } else { "failed" };
                // The problem first, where the workflow raised it after.
                let detail = r.problem.as_deref().or(r.error.as_deref()).or(r.detail.as_deref()).unwrap_or("");
                let vmid = r.vmid.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
                // The detail is plugin, guest or cluster text: escape it.
                outln!(
                    "{:<20} {:>6} {:<8} {:<10} {:>8.1}s  {}",
                    printable(&r.name),
                    vmid,
                    printable(&r.node),
                    result,
                    r.duration.as_secs_f64(),
                    printable(detail)
                )?;
            }
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `--forks N`: at least one VM at a time. Zero would run nothing, so it is a
/// usage error rather than a silent no-op (or a silent 1).
pub(super) fn forks_value(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1 (how many VMs are worked on at once)".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("`{text}` is not a number of VMs: {e}")),
    }
}
