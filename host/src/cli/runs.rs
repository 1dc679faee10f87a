//! `cradle runs list` and `cradle runs show ID`.
//!
//! `show` prints the run's header and event log, then its timeline: a text
//! Gantt chart, one line per step per VM, the bar placed and scaled within the
//! run's span, failed steps marked `✗` with the error below, the failing step
//! named (`journal::timeline`). `show --timeline` prints only the header and
//! the chart, and with `--output json` the timeline model instead of the
//! journal's events. Colour only when stdout is a terminal and `NO_COLOR` is
//! unset; every journal string is escaped for the terminal.
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
use crate::journal::timeline::{GanttStyle, Timeline, render_gantt, render_timeline_json, render_timeline_text};
use crate::state::StateDir;

#[derive(Debug, Subcommand)]
pub enum RunsCmd {
    /// Recent runs, newest first.
    List,
    /// One run's steps, capability calls and denials, and its timeline.
    Show {
        /// The run id, or a unique prefix of it.
        id: String,
        /// Only the timeline: a Gantt chart of each VM's steps (with
        /// `--output json`, the timeline model instead of the raw events).
        #[arg(long)]
        timeline: bool,
    },
}

pub fn run(cli: &Cli, cmd: &RunsCmd) -> anyhow::Result<ExitCode> {
    // Reading journals needs no plugins: do not compile anything.
    let explicit = match &cli.state_dir {
        Some(p) => Some(p.clone()),
        None => match crate::config::Config::load(&cli.config) {
            Ok(c) => c.state_dir_override(None),
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
        RunsCmd::Show { id, timeline } => {
            let run = journal::read_run(&state, id)?;
            let chart = Timeline::from_record(&run, journal::Timestamp::now());
            let style = GanttStyle { color: color(), ..GanttStyle::default() };
            match (cli.output, timeline) {
                (Output::Json, false) => outln!("{}", journal::render_run_json(&run)?)?,
                (Output::Json, true) => outln!("{}", render_timeline_json(&chart)?)?,
                (Output::Text, false) => {
                    out!("{}\ntimeline\n{}", journal::render_run_text(&run), render_gantt(&chart, style))?
                }
                (Output::Text, true) => out!("{}", render_timeline_text(&chart, style))?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Colour on stdout: a terminal, and `NO_COLOR` unset or empty.
fn color() -> bool {
    use std::io::IsTerminal as _;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
