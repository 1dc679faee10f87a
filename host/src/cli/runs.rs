//! `cradle runs list` and `cradle runs show ID`.
//!
//! Reads the run journals without loading any plugin. The state directory is
//! `--state-dir`, else `state_dir` from cradle.toml, else the default; a
//! cradle.toml that exists but does not load is an error (it may name another
//! state directory). `show` takes a run id or a prefix of exactly one; an
//! unknown or ambiguous prefix is an error.

use std::process::ExitCode;

use clap::Subcommand;

use super::{Cli, Output, out, outln};
use crate::config::ConfigError;
use crate::journal;
use crate::state::StateDir;

#[derive(Debug, Subcommand)]
pub enum RunsCmd {
    /// Recent runs, newest first.
    List,
    /// One run's steps, capability calls and denials.
    Show {
        /// The run id, or a unique prefix of it.
        id: String,
    },
}

pub fn run(cli: &Cli, cmd: &RunsCmd) -> anyhow::Result<ExitCode> {
    // Reading journals needs no plugins: do not compile anything.
    let explicit = match &cli.state_dir {
        Some(p) => Some(p.clone()),
        None => match crate::config::Config::load(&cli.config) {
            Ok(c) => c.state_dir.as_ref().map(|p| c.resolve(p)),
            // No project here: the default state directory.
            Err(ConfigError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
            // A broken cradle.toml may name another state_dir: do not guess.
            Err(e) => anyhow::bail!(
                "cannot tell where the run journals are without a valid cradle.toml (fix it, or pass --state-dir DIR): {e}"
            ),
        },
    };
    let state = StateDir::resolve(explicit.as_deref())?;
    match cmd {
        RunsCmd::List => {
            let runs = journal::list_runs(&state)?;
            match cli.output {
                Output::Json => outln!("{}", journal::render_list_json(&runs)?)?,
                Output::Text => out!("{}", journal::render_list_text(&runs))?,
            }
        }
        RunsCmd::Show { id } => {
            let run = journal::read_run(&state, id)?;
            match cli.output {
                Output::Json => outln!("{}", journal::render_run_json(&run)?)?,
                Output::Text => out!("{}", journal::render_run_text(&run))?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
