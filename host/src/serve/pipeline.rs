//! The pipeline of an event: a workflow function (`workflows/netbox.rhai`'s
//! `staged(event)` unless the source names another), run like `cradle run`
//! does: its own run id and journal, in the source's environment, with the
//! workflows of the moment (hot reload applies to the next event).
//!
//! Contract: [`WorkflowPipeline::check`] refuses, before the service starts,
//! a source whose workflow or function does not exist. The event reaches the
//! function as a map: `source`, `seq`, `vm_id`, `vm_name`, `request_id`,
//! `user`, `netbox_timestamp`, `received`, `attempt`. A thrown error fails
//! the event with that error; the function's value (if any) is its detail.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::dispatch::{Outcome, Pipeline};
use super::store::Event;
use crate::config::{ServeConfig, SourceConfig};
use crate::project::{Loaded, Project, RunRequest};
use crate::reload::Live;
use crate::workflow::values::{from_json, to_json};

/// Runs each event's workflow function.
pub struct WorkflowPipeline {
    project: Arc<Project>,
    live: Arc<Live>,
    sources: BTreeMap<String, SourceConfig>,
}

impl WorkflowPipeline {
    /// The pipeline of `config`'s sources.
    pub fn new(project: Arc<Project>, live: Arc<Live>, config: &ServeConfig) -> WorkflowPipeline {
        WorkflowPipeline { project, live, sources: config.sources.clone() }
    }

    /// Every source's workflow has its function, taking one argument.
    pub fn check(config: &ServeConfig, loaded: &Loaded) -> Result<(), String> {
        for (name, source) in &config.sources {
            let functions = loaded.workflows.functions(&source.workflow).map_err(|_| {
                format!(
                    "serve.sources.{name}: there is no workflows/{}.rhai (write it, or `cradle init` for the built-in ones)",
                    source.workflow
                )
            })?;
            if !functions.iter().any(|f| f.name == source.function && f.params.len() == 1) {
                return Err(format!(
                    "serve.sources.{name}: workflows/{}.rhai has no function `{}(event)`",
                    source.workflow, source.function
                ));
            }
        }
        Ok(())
    }
}

/// The event as the workflow sees it.
fn event_value(event: &Event) -> serde_json::Value {
    json!({
        "source": event.source,
        "seq": event.seq,
        "vm_id": event.vm_id,
        "vm_name": event.vm_name,
        "request_id": event.request_id,
        "user": event.user,
        "netbox_timestamp": event.netbox_timestamp,
        "received": event.received,
        "attempt": event.attempts,
    })
}

impl Pipeline for WorkflowPipeline {
    fn run(&self, event: &Event) -> Outcome {
        let Some(source) = self.sources.get(&event.source) else {
            return Outcome {
                ok: false,
                run_id: None,
                detail: format!("source `{}` is no longer configured", event.source),
            };
        };
        let arg = match from_json(&event_value(event)) {
            Ok(v) => v,
            Err(e) => return Outcome { ok: false, run_id: None, detail: format!("cannot pass the event: {e}") },
        };
        let req = RunRequest {
            env: source.environment.clone(),
            script: source.workflow.clone(),
            func: source.function.clone(),
            args: vec![arg],
            argv: vec!["cradle".into(), "serve".into(), format!("--event={}", event.seq)],
            vms: Vec::new(),
            backend: None,
        };
        match self.project.run(&self.live.current(), req) {
            Err(e) => Outcome { ok: false, run_id: None, detail: e.to_string() },
            Ok(report) => {
                for key in &report.unreleased_locks {
                    tracing::warn!(run = %report.run_id, key, "a lock could not be released");
                }
                let detail = match &report.result {
                    Ok(v) if v.is_unit() => "done".to_string(),
                    Ok(v) => to_json(v).to_string(),
                    Err(e) => e.to_string(),
                };
                Outcome { ok: report.result.is_ok(), run_id: Some(report.run_id), detail }
            }
        }
    }
}
