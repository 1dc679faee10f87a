//! `cradle serve [--listen ADDR]`: the webhook service of `[serve]`
//! (docs/SERVE.md). It checks everything it needs before it listens (the
//! sources' secrets and workflows), prints the address it listens on, and
//! stops on SIGTERM or Ctrl-C: running pipelines get `shutdown_grace_s` to
//! finish; the process then exits 0 at once, leaving the rest as a kill would
//! (no step of theirs fails, `failed()` is not called), and they resume at the
//! next start. Workflows reload when their files change; the next event runs
//! the new version.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use super::Cli;
use crate::reload::{self, Live, ReloadEvent};
use crate::serve::page::board::Board;
use crate::serve::pipeline::WorkflowPipeline;
use crate::serve::scan::{Journals, RunLabels};
use crate::serve::status::Access;
use crate::serve::view::View;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on (default: `[serve] listen`), e.g. 127.0.0.1:8085.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
}

pub async fn run(cli: &Cli, args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let project = Arc::new(cli.project()?);
    let config = project.config.serve.clone();
    // Either half stands alone: webhook sources without the status page, or
    // the status page (and /metrics) over the journals of provision runs
    // with no webhook source at all.
    if config.sources.is_empty() && config.status.is_none() {
        anyhow::bail!(
            "{}: [serve] has nothing to serve: add [serve.sources.netbox] with its webhook secret, \
             or [serve.status] for the status page and /metrics, or both (docs/SERVE.md)",
            project.config_path.display()
        );
    }
    let listen =
        args.listen.or(config.listen).context("no address to listen on: pass --listen ADDR or set [serve] listen")?;
    let loaded = {
        let p = project.clone();
        tokio::task::spawn_blocking(move || p.load()).await??
    };
    WorkflowPipeline::check(&config, &loaded).map_err(anyhow::Error::msg)?;
    let keys = crate::serve::keys(&config)?;
    let access = Access::new(&config, listen).map_err(|e| anyhow::anyhow!("{}: {e}", project.config_path.display()))?;
    let live = Arc::new(Live::new(loaded));
    let _watcher = reload::watch(project.clone(), live.clone(), |event| match event {
        ReloadEvent::Swapped { workflows_hash, .. } => {
            tracing::info!(workflows = &workflows_hash[..12.min(workflows_hash.len())], "workflows reloaded");
        }
        ReloadEvent::Failed { error, .. } => {
            tracing::warn!(error = %error, "reload failed; keeping the last good version");
        }
    })?;
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    let bound = listener.local_addr()?;
    let paths: Vec<String> = config.sources.keys().map(|s| format!("/hooks/{s}")).collect();
    let hooks = if paths.is_empty() { "no webhook sources".to_string() } else { paths.join(", ") };
    eprintln!("cradle serve: listening on http://{bound} ({hooks})");
    let status = match access {
        None => None,
        Some(access) => {
            let how = if config.status.as_ref().is_some_and(|s| s.open_on(listen)) {
                "open on loopback"
            } else {
                "credentials required"
            };
            eprintln!("cradle serve: status page at http://{bound}/status, metrics at http://{bound}/metrics ({how})");
            let runs = project.state.runs()?;
            let journals = Journals::new(runs.clone(), run_labels(&project.config));
            let pipelines = config.sources.values().map(|s| s.workflow.clone()).collect();
            Some(View::new(access, journals, Board::new(runs, pipelines)))
        }
    };
    let store_dir = project.state.root().join("serve");
    let pipeline = Arc::new(WorkflowPipeline::new(project.clone(), live, &config));
    let stopped = crate::serve::serve(listener, &config, keys, &store_dir, pipeline, status, stop_signal()).await?;
    if stopped.left_running > 0 {
        eprintln!(
            "cradle serve: stopped; {} pipeline(s) were still running and resume at the next start",
            stopped.left_running
        );
        // Leave now, as a kill would: shutting the runtime down (what
        // returning does) fails the abandoned pipelines' host calls, their
        // steps fail, and the workflow's `failed()` runs (NetBox: status
        // Failed) for events that resume at the next start.
        std::process::exit(0);
    } else {
        eprintln!("cradle serve: stopped");
    }
    Ok(ExitCode::SUCCESS)
}

/// How `/metrics` labels a run's environment when its command line names
/// none: the default environment, and for pipeline runs the sources' one
/// environment (none when they differ: the journal does not say which).
fn run_labels(config: &crate::config::Config) -> RunLabels {
    let default = config.environment(None).ok().map(|(name, _)| name.to_string());
    let envs: std::collections::BTreeSet<Option<&String>> =
        config.serve.sources.values().map(|s| s.environment.as_ref().or(default.as_ref())).collect();
    let serve_environment = match envs.into_iter().collect::<Vec<_>>().as_slice() {
        [Some(one)] => Some((*one).clone()),
        _ => None,
    };
    RunLabels { default_environment: default, serve_environment }
}

/// SIGTERM (service managers) or Ctrl-C.
async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            // No handler: Ctrl-C still stops it.
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        () = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
