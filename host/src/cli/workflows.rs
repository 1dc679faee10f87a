//! `cradle workflows check`: compile every script and shared module, and say
//! where they come from (the project's directory, or built into cradle).
//!
//! Exits 1 when the scripts do not compile (the error names file:line:column)
//! or a configured plugin does not load; a plugin's load error is printed as a
//! warning (`plugin_errors` in JSON) and the scripts are still checked.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::json;

use super::{Cli, Output, outln, print_json};
use crate::workflow::WorkflowSource;

#[derive(Debug, Subcommand)]
pub enum WorkflowsCmd {
    /// Compile every workflow (the project's, or the built-in ones); exit 1
    /// naming file:line:column on the first error.
    Check,
}

pub fn run(cli: &Cli, cmd: &WorkflowsCmd) -> anyhow::Result<ExitCode> {
    let WorkflowsCmd::Check = cmd;
    let project = cli.project()?;
    // Backends that load register their methods; one that does not is reported
    // but does not stop the scripts from being checked.
    let mut plugins = std::collections::BTreeMap::new();
    let mut plugin_errors = Vec::new();
    for name in project.config.plugins.keys() {
        match project.load_plugin(name) {
            Ok(p) => {
                plugins.insert(name.clone(), std::sync::Arc::new(p));
            }
            Err(e) => plugin_errors.push(e.to_string()),
        }
    }
    let source = project.workflow_source();
    let result = project.compile_workflows(&plugins);
    let ok = result.is_ok() && plugin_errors.is_empty();
    let (source_kind, source_dir) = match &source {
        Ok(WorkflowSource::Dir(dir)) => ("project", Some(dir.display().to_string())),
        Ok(WorkflowSource::Builtin) => ("built-in", None),
        Err(_) => ("none", None),
    };
    match cli.output {
        Output::Json => {
            let doc = match &result {
                Ok(set) => json!({
                    "ok": ok,
                    "source": source_kind,
                    "dir": source_dir,
                    "scripts": set.scripts().iter().map(|s| json!({"name": s.name, "file": s.file, "hash": s.hash})).collect::<Vec<_>>(),
                    "modules": set.modules().iter().map(|s| json!({"name": s.name, "file": s.file, "hash": s.hash})).collect::<Vec<_>>(),
                    "plugin_errors": plugin_errors,
                }),
                Err(e) => json!({ "ok": false, "error": e.to_string(), "plugin_errors": plugin_errors }),
            };
            print_json(&doc)?;
        }
        Output::Text => {
            for e in &plugin_errors {
                eprintln!("warning: {e}");
            }
            match &source_dir {
                Some(dir) => outln!("workflows from {dir}")?,
                None if source_kind == "built-in" => outln!(
                    "workflows built into cradle (no {} next to the config; `cradle init` writes them out to edit)",
                    project.workflow_dir().display()
                )?,
                None => {}
            }
            match &result {
                Ok(set) => {
                    for s in set.scripts().iter().chain(set.modules()) {
                        outln!("ok  {}", s.file)?;
                    }
                }
                Err(e) => eprintln!("error: {e}"),
            }
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
