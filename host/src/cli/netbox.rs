//! `cradle netbox sync [--source NAME] [--limit N] [--query KEY=VALUE]...`:
//! the pipeline of `cradle serve`, run now for every VM NetBox has Staged —
//! for webhooks that were lost (NetBox does not retry a failed delivery by
//! default) or never configured. The VMs come from the source workflow's
//! `staged_vms(filter, limit)`; each runs `host` → `staged` → `failed` as
//! an event would, at most `[serve] concurrency` at once. A VM a running
//! `cradle serve` is building is refused by its lock, never built twice.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::json;

use super::{Cli, Output, outln, print_json};
use crate::reload::Live;
use crate::serve::pipeline::WorkflowPipeline;
use crate::serve::{Event, Pipeline};
use crate::text::printable;

#[derive(Debug, Subcommand)]
pub enum NetboxCmd {
    /// Run the pipeline for every VM NetBox has Staged.
    Sync(SyncArgs),
}

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The `[serve.sources.NAME]` whose NetBox and workflow to use (default:
    /// the only one).
    #[arg(long)]
    pub source: Option<String>,
    /// At most this many VMs.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// More NetBox filters for the VM list (`cluster=lab`, `tag=cradle`,
    /// `name__isw=web-`), repeatable.
    #[arg(long = "query", value_name = "KEY=VALUE")]
    pub query: Vec<String>,
}

pub async fn run(cli: &Cli, cmd: &NetboxCmd) -> anyhow::Result<ExitCode> {
    let NetboxCmd::Sync(args) = cmd;
    let project = Arc::new(cli.project()?);
    let config = project.config.serve.clone();
    let source = match (&args.source, config.sources.len()) {
        (Some(s), _) => s.clone(),
        (None, 1) => config.sources.keys().next().cloned().unwrap_or_default(),
        (None, 0) => anyhow::bail!("[serve] has no sources; add [serve.sources.netbox] (docs/SERVE.md)"),
        (None, _) => anyhow::bail!(
            "several [serve.sources]: pick one with --source ({})",
            config.sources.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
    };
    let mut filter = BTreeMap::new();
    for q in &args.query {
        let (k, v) = q.split_once('=').ok_or_else(|| anyhow::anyhow!("--query {q}: write KEY=VALUE"))?;
        filter.insert(k.to_string(), v.to_string());
    }
    let loaded = {
        let p = project.clone();
        tokio::task::spawn_blocking(move || p.load()).await??
    };
    WorkflowPipeline::check(&config, &loaded).map_err(anyhow::Error::msg)?;
    let pipeline = Arc::new(WorkflowPipeline::new(project.clone(), Arc::new(Live::new(loaded)), &config));
    let vms = {
        let (p, source, limit) = (pipeline.clone(), source.clone(), args.limit);
        tokio::task::spawn_blocking(move || p.staged_vms(&source, &filter, limit)).await?
    }
    .map_err(|e| anyhow::anyhow!("listing the Staged VMs: {e}"))?;
    let permits = Arc::new(tokio::sync::Semaphore::new(config.concurrency.max(1)));
    let mut tasks = Vec::new();
    for (id, name) in vms {
        let (p, permits, event) = (pipeline.clone(), permits.clone(), Event::found(&source, id, &name));
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
            let outcome = tokio::task::spawn_blocking(move || (p.run(&event), event)).await;
            outcome.map(|(o, e)| (e.vm_name, e.vm_id, o))
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await??);
    }
    let ok = results.iter().all(|(_, _, o)| o.ok);
    match cli.output {
        Output::Json => print_json(&json!({
            "ok": ok,
            "vms": results.iter().map(|(name, id, o)| json!({
                "name": name, "netbox_id": id, "ok": o.ok, "run_id": o.run_id, "detail": o.detail,
            })).collect::<Vec<_>>(),
        }))?,
        Output::Text => {
            if results.is_empty() {
                outln!("no VM is Staged in NetBox")?;
            }
            for (name, id, o) in &results {
                let result = if o.ok { "done" } else { "failed" };
                outln!("{:<24} {:>6} {:<7} {}", printable(name), id, result, printable(&o.detail))?;
            }
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
