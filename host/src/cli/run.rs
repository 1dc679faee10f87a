//! `cradle run WORKFLOW [--fn NAME] [ARGS]...`, optionally `--watch`.
//!
//! With `--watch` the workflow runs once, then again after every change to the
//! workflows or plugin files that builds; a change that does not build is
//! reported (file:line) and the last good version stays current. A run in
//! flight is never interrupted by a reload.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use clap_complete::ArgValueCompleter;
use serde_json::json;

use super::{Cli, Output, completions, outln, print_json};
use crate::project::{Project, RunRequest};
use crate::reload::{self, Live, ReloadEvent};
use crate::workflow::WorkflowSource;
use crate::workflow::values::{arg, to_json};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The workflow (`hello` for workflows/hello.rhai).
    pub workflow: String,
    /// The function to call.
    #[arg(long = "fn", default_value = "main")]
    pub func: String,
    /// The environment (default: `default_environment` from cradle.toml).
    #[arg(long, add = ArgValueCompleter::new(completions::env_candidates))]
    pub env: Option<String>,
    /// Watch workflows and plugins; rerun after every change that builds.
    #[arg(long)]
    pub watch: bool,
    /// Arguments: JSON values, or plain strings.
    pub args: Vec<String>,
}

pub async fn run(cli: &Cli, args: &RunArgs) -> anyhow::Result<ExitCode> {
    let project = Arc::new(cli.project()?);
    let live = {
        let p = project.clone();
        Arc::new(Live::new(tokio::task::spawn_blocking(move || p.load()).await??))
    };
    let code = run_once(cli, &project, &live, args).await?;
    if !args.watch {
        return Ok(code);
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let _watcher = reload::watch(project.clone(), live.clone(), move |event| {
        let _ = tx.send(event);
    })?;
    match project.workflow_source() {
        Ok(WorkflowSource::Dir(dir)) => eprintln!("watching {} and the plugin files; Ctrl-C to stop", dir.display()),
        _ => eprintln!(
            "watching the plugin files; the workflows are built in (`cradle init` writes them out to edit); Ctrl-C to stop"
        ),
    }
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(code),
            event = rx.recv() => match event {
                None => return Ok(code),
                Some(ReloadEvent::Failed { changed, error }) => {
                    eprintln!("reload failed after changes to {}: {}", display_paths(&changed), crate::text::printable_paragraph(&error.to_string()));
                    eprintln!("keeping the last good version");
                }
                Some(ReloadEvent::Swapped { changed, workflows_hash }) => {
                    eprintln!("reloaded after changes to {} (workflows {})", display_paths(&changed), &workflows_hash[..12.min(workflows_hash.len())]);
                    run_once(cli, &project, &live, args).await?;
                }
            }
        }
    }
}

fn display_paths(paths: &[std::path::PathBuf]) -> String {
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

async fn run_once(cli: &Cli, project: &Arc<Project>, live: &Arc<Live>, args: &RunArgs) -> anyhow::Result<ExitCode> {
    let loaded = live.current();
    let req = RunRequest {
        env: args.env.clone(),
        script: args.workflow.clone(),
        func: args.func.clone(),
        args: args.args.iter().map(|a| arg(a)).collect::<Result<_, _>>()?,
        argv: std::env::args().collect(),
        vms: Vec::new(),
        backend: None,
    };
    let p = project.clone();
    let report = tokio::task::spawn_blocking(move || p.run(&loaded, req)).await??;
    let ok = report.result.is_ok();
    match cli.output {
        Output::Json => print_json(&json!({
            "run_id": report.run_id,
            "journal": report.journal.display().to_string(),
            "ok": ok,
            "result": report.result.as_ref().ok().map(to_json),
            "error": report.result.as_ref().err().map(|e| e.to_string()),
        }))?,
        Output::Text => {
            match &report.result {
                Ok(v) if !v.is_unit() => outln!("{}", serde_json::to_string_pretty(&to_json(v))?)?,
                Ok(_) => {}
                // Plugin and guest text end up in workflow errors: escape it.
                Err(e) => eprintln!("error: {}", crate::text::printable(&e.to_string())),
            }
            eprintln!(
                "run {} ({}); `cradle runs show {}` for details",
                report.run_id,
                if ok { "succeeded" } else { "failed" },
                report.run_id
            );
        }
    }
    for key in &report.unreleased_locks {
        eprintln!("warning: lock `{key}` could not be released; see `cradle runs show {}`", report.run_id);
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
