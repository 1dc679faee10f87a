//! `cradle remove -i INVENTORY --limit HOST [--yes]` and `cradle unlock VM`.
//!
//! Removal destroys VMs, so it needs an explicit confirmation: `--yes`, or
//! typing `yes` at an interactive prompt. Without a terminal and without
//! `--yes` it refuses. `unlock` removes a lock only once its holder is shown
//! to be gone (invariant 1); it exits 1 when there was nothing to unlock (the
//! key it looked for is printed, so a wrong VM name or environment shows), so
//! a script never mistakes "no such lock" for "unlocked". The key is built by
//! [`crate::caps::lock::lock_key`], the one function workflows use too.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use clap_complete::ArgValueCompleter;

use super::provision::{Selection, print_results, run_inventory};
use super::{Cli, completions, outln};
use crate::caps::lock::{Removal, local_liveness};
use crate::provision::Action;
use crate::state::StateDir;

#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// The Ansible inventory (file or directory).
    #[arg(short = 'i', long)]
    pub inventory: PathBuf,
    /// The hosts to remove (required: removal never defaults to everything).
    #[arg(long, add = ArgValueCompleter::new(completions::limit_candidates))]
    pub limit: String,
    /// The environment (default: `default_environment`).
    #[arg(long, add = ArgValueCompleter::new(completions::env_candidates))]
    pub env: Option<String>,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
    /// VMs worked on at once.
    #[arg(long, default_value_t = 5, value_parser = super::provision::forks_value)]
    pub forks: usize,
}

#[derive(Debug, Args)]
pub struct UnlockArgs {
    /// The canonical VM name whose lock to remove.
    pub vm: String,
    /// The environment (default: `default_environment`).
    #[arg(long, add = ArgValueCompleter::new(completions::env_candidates))]
    pub env: Option<String>,
}

pub async fn remove(cli: &Cli, args: &RemoveArgs) -> anyhow::Result<ExitCode> {
    let selection = Selection { inventory: &args.inventory, limit: Some(&args.limit), env: args.env.as_deref() };
    let results = run_inventory(cli, selection, Action::Remove, args.forks, |env, plans| {
        let list: Vec<String> = plans
            .iter()
            .map(|p| format!("{} (vmid {})", p.name, p.vmid.map(|v| v.to_string()).unwrap_or("?".into())))
            .collect();
        if !args.yes && !confirm(env, &list)? {
            anyhow::bail!("nothing removed");
        }
        Ok(())
    })
    .await?;
    print_results(cli, &results, false)
}

fn confirm(env: &str, list: &[String]) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "cradle remove would destroy {} VM(s) in `{env}`: {}; pass --yes to confirm (stdin is not a terminal, so cradle cannot ask)",
            list.len(),
            list.join(", ")
        );
    }
    let mut err = std::io::stderr().lock();
    writeln!(err, "This destroys {} VM(s) in environment `{env}`, with their disks:", list.len())?;
    for vm in list {
        writeln!(err, "  {vm}")?;
    }
    write!(err, "Type `yes` to continue: ")?;
    err.flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(answer.trim() == "yes")
}

pub fn unlock(cli: &Cli, args: &UnlockArgs) -> anyhow::Result<ExitCode> {
    let config = crate::config::Config::load(&cli.config)?;
    let (_, env) = config.environment(args.env.as_deref())?;
    let cluster = &config.clusters[&env.cluster];
    let key = crate::caps::lock::lock_key(&crate::cluster::cluster_id(&env.cluster, cluster), &args.vm);
    let explicit = config.state_dir_override(cli.state_dir.as_deref());
    let state = StateDir::resolve(explicit.as_deref())?;
    let locks = crate::caps::lock::open_store(&config.coordination, &config.base_dir, || state.locks())?;
    match locks.holder(&key)? {
        None => {
            eprintln!("error: nothing to unlock: {} is not locked (lock key `{key}`)", args.vm);
            return Ok(ExitCode::FAILURE);
        }
        Some(h) => outln!("{} is locked by {h}", args.vm)?,
    }
    match locks.remove_stale(&key, &local_liveness)? {
        Removal::NotLocked => {
            eprintln!("error: nothing to unlock: {} was released meanwhile (lock key `{key}`)", args.vm);
            Ok(ExitCode::FAILURE)
        }
        Removal::Removed { .. } => {
            outln!("removed the stale lock of {}", args.vm)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
