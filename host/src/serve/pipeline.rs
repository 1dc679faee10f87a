//! The pipeline of an event: three functions of the source's workflow
//! (`workflows/netbox.rhai` unless it names another), each run like `cradle
//! run` runs one — its own run id and journal, in the source's environment,
//! with the workflows of the moment (hot reload applies to the next event):
//!
//! 1. `host(event)` reads the VM (from NetBox, through the `http`
//!    capability) and answers `#{ name, vars }` — inventory variables — or
//!    `#{ skip: "why" }` when there is nothing to do (the VM is no longer
//!    Staged: a stale or replayed event);
//! 2. the host resolves `vars` over the source's `defaults` like an inventory
//!    host ([`super::host`]): the same checks, the same `vm` value, and the
//!    run's scope (this VM, its guest);
//! 3. `staged(event, vm)` runs the pipeline, scoped to that VM;
//! 4. any failure of 1–3 runs `failed(event, failure)` with `#{ step,
//!    message, run_id }` (step `validate` for 1 and 2; `message` is what
//!    went wrong without the workflow's file and line: NetBox users read
//!    it), which records it where the operator looks (NetBox: status Failed
//!    and a journal entry). The event's outcome keeps the error in full.
//!
//! Contract: [`WorkflowPipeline::check`] refuses, before the service starts,
//! a source whose workflow lacks one of the three functions. The event is a
//! map: `source`, `seq`, `vm_id`, `vm_name`, `request_id`, `user`,
//! `trigger` (`staged`, `created`, `primary-ip`, `sync`),
//! `netbox_timestamp`, `received`, `attempt`.

use std::collections::BTreeMap;
use std::sync::Arc;

use rhai::Dynamic;
use serde_json::json;

use super::dispatch::{Outcome, Pipeline};
use super::host::{Wanted, resolve_host, wanted};
use super::store::Event;
use crate::caps::policy::ScopedVm;
use crate::config::{ServeConfig, SourceConfig};
use crate::project::{Loaded, Project, RunRequest};
use crate::reload::Live;
use crate::workflow::values::{from_json, to_json};

/// The functions a source's workflow defines, with their arity.
const FUNCTIONS: [(&str, usize, &str); 3] =
    [("host", 1, "host(event)"), ("staged", 2, "staged(event, vm)"), ("failed", 2, "failed(event, failure)")];

/// Runs each event's workflow functions.
pub struct WorkflowPipeline {
    project: Arc<Project>,
    live: Arc<Live>,
    sources: BTreeMap<String, SourceConfig>,
}

/// A failed phase: the step, what went wrong, the run.
struct Failure {
    step: String,
    /// In full, with where in the workflow (the event's outcome, the log).
    message: String,
    /// For the workflow's `failed` (written where NetBox users read it): the
    /// message without the workflow's file and line, when it has them.
    reason: Option<String>,
    run_id: Option<String>,
}

impl WorkflowPipeline {
    /// The pipeline of `config`'s sources.
    pub fn new(project: Arc<Project>, live: Arc<Live>, config: &ServeConfig) -> WorkflowPipeline {
        WorkflowPipeline { project, live, sources: config.sources.clone() }
    }

    /// Every source's workflow has its three functions.
    pub fn check(config: &ServeConfig, loaded: &Loaded) -> Result<(), String> {
        for (name, source) in &config.sources {
            let functions = loaded.workflows.functions(&source.workflow).map_err(|_| {
                format!(
                    "serve.sources.{name}: there is no workflows/{}.rhai (write it, or `cradle init` for the built-in ones)",
                    source.workflow
                )
            })?;
            for (function, arity, shown) in FUNCTIONS {
                if !functions.iter().any(|f| f.name == function && f.params.len() == arity) {
                    return Err(format!(
                        "serve.sources.{name}: workflows/{}.rhai has no function `{shown}` (docs/SERVE.md)",
                        source.workflow
                    ));
                }
            }
        }
        Ok(())
    }

    /// Run `function` of `source`'s workflow; its run id and value.
    fn call(
        &self,
        source: &SourceConfig,
        function: &str,
        args: Vec<Dynamic>,
        vms: Vec<ScopedVm>,
        event: &Event,
    ) -> Result<(String, Dynamic), Failure> {
        let req = RunRequest {
            env: source.environment.clone(),
            script: source.workflow.clone(),
            func: function.to_string(),
            args,
            argv: vec!["cradle".into(), "serve".into(), format!("--event={}", event.seq), format!("--fn={function}")],
            vms,
            backend: None,
        };
        let report = self.project.run(&self.live.current(), req).map_err(|e| Failure {
            step: function.to_string(),
            message: e.to_string(),
            reason: None,
            run_id: None,
        })?;
        for key in &report.unreleased_locks {
            tracing::warn!(run = %report.run_id, key, "a lock could not be released");
        }
        match report.result {
            Ok(v) => Ok((report.run_id, v)),
            Err(e) => Err(Failure {
                step: e.step_name().unwrap_or(function).to_string(),
                message: e.to_string(),
                reason: Some(e.reason()),
                run_id: Some(report.run_id),
            }),
        }
    }

    /// Record `failure` through `failed(event, failure)`; the event's outcome.
    fn fail(&self, source: &SourceConfig, event: &Event, failure: Failure) -> Outcome {
        let reason = failure.reason.as_deref().unwrap_or(&failure.message);
        let doc = json!({ "step": failure.step, "message": reason, "run_id": failure.run_id });
        let mut detail = format!("failed at `{}`: {}", failure.step, failure.message);
        match from_json(&doc).map_err(|e| e.to_string()).and_then(|arg| {
            self.call(source, "failed", vec![event_arg(event)?, arg], Vec::new(), event).map_err(|f| f.message)
        }) {
            Ok(_) => {}
            Err(e) => {
                tracing::error!(seq = event.seq, error = %e, "could not record a failed event");
                detail.push_str(&format!("; recording the failure failed too: {e}"));
            }
        }
        Outcome { ok: false, run_id: failure.run_id, detail }
    }
}

impl WorkflowPipeline {
    /// The VMs `staged_vms(filter, limit)` of `source`'s workflow lists:
    /// `(NetBox id, name)`.
    pub fn staged_vms(
        &self,
        source: &str,
        filter: &BTreeMap<String, String>,
        limit: usize,
    ) -> Result<Vec<(u64, String)>, String> {
        let config = self.sources.get(source).ok_or_else(|| format!("no [serve.sources.{source}] in cradle.toml"))?;
        let filter = from_json(&json!(filter)).map_err(|e| e.to_string())?;
        let probe = Event::found(source, 0, "netbox-sync");
        let (_, found) = self
            .call(config, "staged_vms", vec![filter, Dynamic::from_int(limit as i64)], Vec::new(), &probe)
            .map_err(|f| f.message)?;
        let list = to_json(&found);
        let items = list.as_array().ok_or_else(|| format!("staged_vms returned {list}, not a list"))?;
        items
            .iter()
            .map(|v| match (v["id"].as_u64(), v["name"].as_str()) {
                (Some(id), Some(name)) => Ok((id, name.to_string())),
                _ => Err(format!("staged_vms returned {v}, not #{{ id, name }}")),
            })
            .collect()
    }
}

/// The event as the workflow sees it.
fn event_arg(event: &Event) -> Result<Dynamic, String> {
    from_json(&json!({
        "source": event.source,
        "seq": event.seq,
        "vm_id": event.vm_id,
        "vm_name": event.vm_name,
        "request_id": event.request_id,
        "user": event.user,
        "trigger": event.trigger,
        "netbox_timestamp": event.netbox_timestamp,
        "received": event.received,
        "attempt": event.attempts,
    }))
    .map_err(|e| format!("cannot pass the event: {e}"))
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
        let arg = match event_arg(event) {
            Ok(a) => a,
            Err(detail) => return Outcome { ok: false, run_id: None, detail },
        };
        let validate = |message: String, run_id: Option<String>| Failure {
            step: "validate".into(),
            message,
            reason: None,
            run_id,
        };
        let (host_run, answer) = match self.call(source, "host", vec![arg.clone()], Vec::new(), event) {
            Ok(r) => r,
            Err(f) => return self.fail(source, event, Failure { step: "validate".into(), ..f }),
        };
        let (name, vars) = match wanted(&answer) {
            Ok(Wanted::Skip(why)) => {
                return Outcome { ok: true, run_id: Some(host_run), detail: format!("skipped: {why}") };
            }
            Ok(Wanted::Host { name, vars }) => (name, vars),
            Err(message) => return self.fail(source, event, validate(message, Some(host_run))),
        };
        let environment = match self.project.config.environment(source.environment.as_deref()) {
            Ok((env, _)) => env.to_string(),
            Err(e) => return self.fail(source, event, validate(e.to_string(), Some(host_run))),
        };
        let resolved = match resolve_host(&name, vars, source.defaults.as_deref(), &environment) {
            Ok(r) => r,
            Err(message) => return self.fail(source, event, validate(message, Some(host_run))),
        };
        match self.call(source, "staged", vec![arg, resolved.vm], vec![resolved.scoped], event) {
            Ok((run_id, v)) => {
                let detail = if v.is_unit() { "done".to_string() } else { to_json(&v).to_string() };
                Outcome { ok: true, run_id: Some(run_id), detail }
            }
            Err(f) => self.fail(source, event, f),
        }
    }
}
