//! `cradle plugins list` and `cradle plugins inspect NAME`.
//!
//! `list` loads every plugin in the project's `[plugins]` and shows its version,
//! hash, source and where its grants come from, plus the built-in plugins the
//! project does not use; it exits 1 if any plugin fails to load (its row says
//! why). `inspect` compiles one plugin and shows its manifest, imports, exports,
//! requested, imported and granted capabilities, limits and the admission
//! verdict; it exits 1 when admission refuses the plugin. A name not in
//! `[plugins]`, or a plugin that does not compile, is an error.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::json;

use super::{Cli, Output, outln, print_json};
use crate::caps::Capability;
use crate::plugin::admission;

#[derive(Debug, Subcommand)]
pub enum PluginsCmd {
    /// Every plugin the project uses (configured, or built in and named by an
    /// environment): version, where it and its grants come from (`cradle.toml`
    /// or `default (built-in)`), whether it loads.
    List,
    /// A plugin's imports, exports, and requested vs granted capabilities.
    Inspect {
        /// The plugin's name in cradle.toml.
        name: String,
    },
}

pub fn run(cli: &Cli, cmd: &PluginsCmd) -> anyhow::Result<ExitCode> {
    let project = cli.project()?;
    match cmd {
        PluginsCmd::List => {
            let mut rows = Vec::new();
            let mut all_ok = true;
            for (name, pc) in &project.config.plugins {
                let source = if pc.is_builtin() { "built-in" } else { "file" };
                let grants = crate::config::grants_source(pc);
                match project.load_plugin(name) {
                    Ok(p) => rows.push(json!({
                        "name": name, "version": p.manifest.version, "path": p.path.display().to_string(),
                        "source": source, "grants": grants,
                        "hash": p.hash, "status": "ok", "description": p.manifest.description,
                    })),
                    Err(e) => {
                        all_ok = false;
                        rows.push(json!({ "name": name, "source": source, "grants": grants, "status": "error", "error": e.to_string() }));
                    }
                }
            }
            // Built-ins the project does not use, so the operator knows they exist.
            let available: Vec<&str> = crate::builtin::PLUGINS
                .iter()
                .map(|b| b.name)
                .filter(|n| !project.config.plugins.contains_key(*n))
                .collect();
            match cli.output {
                Output::Json => print_json(&json!({ "plugins": rows, "builtin_unused": available }))?,
                Output::Text => {
                    // The version, description and load error come from the
                    // plugin file: escape them for the terminal.
                    let s = |v: &serde_json::Value| crate::text::printable(v.as_str().unwrap_or("")).into_owned();
                    for r in &rows {
                        match r["status"].as_str() {
                            Some("ok") => outln!(
                                "{:<12} {:<8} {}  {:<40} {}",
                                s(&r["name"]),
                                s(&r["version"]),
                                s(&r["hash"]).chars().take(12).collect::<String>(),
                                source_label(r),
                                s(&r["description"])
                            )?,
                            _ => outln!("{:<12} ERROR    {}", s(&r["name"]), s(&r["error"]))?,
                        }
                    }
                    if !available.is_empty() {
                        outln!("built in, not used by this project: {}", available.join(", "))?;
                    }
                }
            }
            Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        PluginsCmd::Inspect { name } => {
            let pc = project.config.plugins.get(name).ok_or_else(|| {
                anyhow::anyhow!("no plugin `{name}` in [plugins] of {}", project.config_path.display())
            })?;
            let source = project.plugin_source(name)?;
            let path = source.display_path();
            let compiled = project.host.compile_source(name, &source)?;
            let inspected = admission::inspect(project.host.engine(), &compiled.component, name)?;
            let verdict =
                admission::admit(project.host.engine(), &compiled.component, name, &compiled.manifest, &pc.grants);
            let caps: Vec<_> = Capability::ALL
                .iter()
                .map(|c| {
                    json!({
                        "capability": c.name(),
                        "requested": compiled.manifest.needs.contains(c),
                        "imported": inspected.capabilities.contains(c),
                        "granted": pc.grants.allows(*c),
                    })
                })
                .filter(|v| v["requested"] == true || v["imported"] == true || v["granted"] == true)
                .collect();
            let limits = pc.limits.resolve();
            let doc = json!({
                "name": name,
                "manifest": { "name": compiled.manifest.name, "version": compiled.manifest.version, "description": compiled.manifest.description },
                "path": path.display().to_string(),
                "source": if source.is_builtin() { "built-in" } else { "file" },
                "grants_from": crate::config::grants_source(pc),
                "hash": compiled.hash,
                "cache": format!("{:?}", compiled.cache),
                "imports": inspected.imports,
                "exports": inspected.exports.iter().map(|e| e.describe()).collect::<Vec<_>>(),
                "capabilities": caps,
                "limits": {
                    "memory_limit_mib": limits.memory_bytes / (1024 * 1024),
                    "timeout_ms": limits.timeout.as_millis() as u64,
                    "call_timeout_ms": limits.call_timeout.as_millis() as u64,
                    "max_host_calls": limits.max_host_calls,
                    "max_journal_bytes": limits.max_journal_bytes,
                },
                "admitted": verdict.is_ok(),
                "refusal": verdict.as_ref().err().map(|e| e.to_string()),
            });
            match cli.output {
                Output::Json => print_json(&doc)?,
                Output::Text => print_inspect(&doc)?,
            }
            Ok(if verdict.is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
    }
}

/// Where the component and its grants come from: `built-in, grants: default
/// (built-in)` says the operator wrote no `[plugins.NAME]` section.
fn source_label(row: &serde_json::Value) -> String {
    let source = row["source"].as_str().unwrap_or("file");
    format!("{source}, grants: {}", row["grants"].as_str().unwrap_or("cradle.toml"))
}

fn print_inspect(doc: &serde_json::Value) -> std::io::Result<()> {
    // Manifest strings come from the plugin file: escape them for the terminal.
    let s = |v: &serde_json::Value| crate::text::printable(v.as_str().unwrap_or("")).into_owned();
    outln!("plugin      {} ({} {})", s(&doc["name"]), s(&doc["manifest"]["name"]), s(&doc["manifest"]["version"]))?;
    outln!("            {}", s(&doc["manifest"]["description"]))?;
    outln!("file        {} ({}, grants from {})", s(&doc["path"]), s(&doc["source"]), s(&doc["grants_from"]))?;
    outln!("sha256      {}", s(&doc["hash"]))?;
    outln!("cache       {}", s(&doc["cache"]))?;
    outln!(
        "limits      {} MiB memory, {} ms without a host call",
        doc["limits"]["memory_limit_mib"],
        doc["limits"]["timeout_ms"]
    )?;
    outln!(
        "budget      {} ms per call, {} host calls, {} journal bytes",
        doc["limits"]["call_timeout_ms"],
        doc["limits"]["max_host_calls"],
        doc["limits"]["max_journal_bytes"]
    )?;
    outln!("imports")?;
    for i in doc["imports"].as_array().into_iter().flatten() {
        outln!("  {}", s(i))?;
    }
    outln!("exports")?;
    for e in doc["exports"].as_array().into_iter().flatten() {
        outln!("  {}", s(e))?;
    }
    outln!("capabilities   requested  imported  granted")?;
    for c in doc["capabilities"].as_array().into_iter().flatten() {
        let yn = |v: &serde_json::Value| if v == true { "yes" } else { "-" };
        outln!(
            "  {:<12} {:<10} {:<9} {}",
            s(&c["capability"]),
            yn(&c["requested"]),
            yn(&c["imported"]),
            yn(&c["granted"])
        )?;
    }
    match doc["refusal"].as_str() {
        None => outln!("admitted    yes")?,
        Some(r) => outln!("admitted    NO: {}", crate::text::printable(r))?,
    }
    Ok(())
}
