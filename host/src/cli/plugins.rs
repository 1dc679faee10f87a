//! `cradle plugins list`, `cradle plugins inspect NAME|FILE`, and the plugin
//! kit's `cradle plugin new NAME [--backend]`, `cradle plugin build [DIR]`
//! and `cradle plugin test [PATH]` (`plugin` is an alias of `plugins`).
//!
//! `list` loads every plugin in the project's `[plugins]` (with the built-in
//! integration plugins, implied without a table) and shows its kind, version,
//! hash, source and where its grants come from, plus the built-in plugins the
//! project does not use; it exits 1 if any plugin fails to load (its row says
//! why). `inspect` compiles one plugin and shows its manifest, imports, exports,
//! requested, imported and granted capabilities, limits and the admission
//! verdict; it exits 1 when admission refuses the plugin. A name not in
//! `[plugins]` that is not a file, or a plugin that does not compile, is an
//! error. A file is inspected under the grants of the `[plugins]` entry
//! whose `path` is that file, else under no grants at all.
//!
//! `new` writes a crate (`crate::kit::scaffold`), `build` builds one
//! (`crate::kit::cargo`) and shows what its manifest asks for, `test` runs one
//! against a throwaway simulated cluster (`super::plugin_test`).

use std::process::ExitCode;

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde_json::json;

use super::{Cli, Output, outln, print_json};
use crate::builtin::catalogue::PluginKind;
use crate::caps::{Capability, WIT_PACKAGE, WIT_VERSION};
use crate::config::PluginConfig;
use crate::kit::cargo;
use crate::kit::scaffold::{self, Kind};
use crate::plugin::PluginSource;
use crate::plugin::admission;
use crate::project::Project;

#[derive(Debug, Subcommand)]
pub enum PluginsCmd {
    /// Every plugin the project uses (configured, or built in and named by an
    /// environment): version, where it and its grants come from (`cradle.toml`
    /// or `default (built-in)`), whether it loads.
    List,
    /// A plugin's imports, exports, and requested vs granted capabilities.
    Inspect {
        /// The plugin's name in cradle.toml, or a `.wasm` file.
        name: String,
    },
    /// Write a new plugin crate: manifest, lifecycle, tests, README and the
    /// plugin kit of this cradle.
    New(NewArgs),
    /// Build a plugin crate into a component (wasm32-wasip2, release).
    Build(BuildArgs),
    /// Run a plugin on a throwaway simulated cluster: provision, provision
    /// again, remove.
    Test(super::plugin_test::TestArgs),
}

#[derive(Debug, Args)]
pub struct NewArgs {
    /// The plugin's name (its crate name, and its name in cradle.toml).
    pub name: String,
    /// Write a complete backend on the `proxmox` capability (clone, configure,
    /// reconcile, remove) instead of a plugin that only plans and logs.
    #[arg(long)]
    pub backend: bool,
    /// Where to write it (default: ./NAME).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Write into a directory that already has files, overwriting the kit's.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The plugin crate.
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Run `rustup target add wasm32-wasip2` when the target is missing.
    #[arg(long)]
    pub install_target: bool,
}

pub async fn run(cli: &Cli, cmd: &PluginsCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        PluginsCmd::List => list(cli),
        PluginsCmd::Inspect { name } => inspect(cli, name),
        PluginsCmd::New(args) => new(cli, args),
        PluginsCmd::Build(args) => build(cli, args),
        PluginsCmd::Test(args) => super::plugin_test::run(cli, args).await,
    }
}

fn new(cli: &Cli, args: &NewArgs) -> anyhow::Result<ExitCode> {
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(&args.name));
    let kind = if args.backend { Kind::Backend } else { Kind::Minimal };
    let written = scaffold::write(&dir, &args.name, kind, args.force)?;
    match cli.output {
        Output::Json => print_json(&json!({
            "ok": true, "dir": dir.display().to_string(),
            "written": written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        }))?,
        Output::Text => {
            outln!("wrote {} ({} files, plugin kit for {WIT_PACKAGE}@{WIT_VERSION})", dir.display(), written.len())?;
            outln!()?;
            outln!("next:")?;
            outln!("  cradle plugin build {}", dir.display())?;
            outln!("  cradle plugin test {}{}", dir.display(), if args.backend { "" } else { " --check" })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn build(cli: &Cli, args: &BuildArgs) -> anyhow::Result<ExitCode> {
    let built = cargo::build(&args.dir, args.install_target)?;
    let needs: Vec<&str> = built.manifest.needs.iter().map(|c| c.name()).collect();
    match cli.output {
        Output::Json => print_json(&json!({
            "ok": true, "wasm": built.wasm.display().to_string(), "name": built.manifest.name,
            "version": built.manifest.version, "needs": needs,
        }))?,
        Output::Text => {
            let s = |t: &str| crate::text::printable(t).into_owned();
            outln!("built {} {}: {}", s(&built.manifest.name), s(&built.manifest.version), built.wasm.display())?;
            outln!("needs {}", needs.join(", "))?;
            outln!("grant them under [plugins.{}.grants.CAPABILITY] in cradle.toml; then:", s(&built.manifest.name))?;
            outln!("  cradle plugins inspect {}", built.wasm.display())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The plugin `name` of the project, or the `[plugins]` entry whose `path`
/// is the file `name`, or that file under no grants.
fn inspected(project: &Project, name: &str) -> anyhow::Result<(String, PluginConfig, PluginSource)> {
    if let Some(pc) = project.config.plugins.get(name) {
        return Ok((name.to_string(), pc.clone(), project.plugin_source(name)?));
    }
    let file = Path::new(name);
    if !file.is_file() {
        anyhow::bail!("no plugin `{name}` in [plugins] of {}, and no such file", project.config_path.display());
    }
    let canonical = file.canonicalize().with_context(|| format!("cannot resolve {name}"))?;
    for (configured, pc) in &project.config.plugins {
        let same =
            pc.path.as_ref().and_then(|p| project.config.resolve(p).canonicalize().ok()).as_ref() == Some(&canonical);
        if same {
            return Ok((configured.clone(), pc.clone(), PluginSource::File(canonical)));
        }
    }
    let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| name.to_string());
    Ok((stem, PluginConfig::unconfigured(), PluginSource::File(canonical)))
}

fn list(cli: &Cli) -> anyhow::Result<ExitCode> {
    let project = cli.project()?;
    let mut rows = Vec::new();
    let mut all_ok = true;
    for (name, pc) in &project.config.plugins {
        let source = if pc.is_builtin() { "built-in" } else { "file" };
        let grants = crate::config::grants_source(pc);
        let kind = pc.kind(name).as_str();
        match project.load_plugin(name) {
            Ok(p) => rows.push(json!({
                "name": name, "kind": kind, "version": p.manifest.version, "path": p.path.display().to_string(),
                "source": source, "grants": grants,
                "hash": p.hash, "status": "ok", "description": p.manifest.description,
            })),
            Err(e) => {
                all_ok = false;
                rows.push(json!({ "name": name, "kind": kind, "source": source, "grants": grants, "status": "error", "error": e.to_string() }));
            }
        }
    }
    // Built-ins the project does not use, so the operator knows they exist.
    let available: Vec<&str> =
        crate::builtin::PLUGINS.iter().map(|b| b.name).filter(|n| !project.config.plugins.contains_key(*n)).collect();
    match cli.output {
        Output::Json => print_json(&json!({ "plugins": rows, "builtin_unused": available }))?,
        Output::Text => {
            // The version, description and load error come from the
            // plugin file: escape them for the terminal.
            let s = |v: &serde_json::Value| crate::text::printable(v.as_str().unwrap_or("")).into_owned();
            for r in &rows {
                match r["status"].as_str() {
                    Some("ok") => outln!(
                        "{:<12} {:<11} {:<8} {}  {:<40} {}",
                        s(&r["name"]),
                        s(&r["kind"]),
                        s(&r["version"]),
                        s(&r["hash"]).chars().take(12).collect::<String>(),
                        source_label(r),
                        s(&r["description"])
                    )?,
                    _ => outln!("{:<12} {:<11} ERROR    {}", s(&r["name"]), s(&r["kind"]), s(&r["error"]))?,
                }
            }
            if !available.is_empty() {
                outln!("built in, not used by this project: {}", available.join(", "))?;
            }
        }
    }
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn inspect(cli: &Cli, name: &str) -> anyhow::Result<ExitCode> {
    let project = cli.project()?;
    let (name, pc, source) = inspected(&project, name)?;
    let (name, pc) = (name.as_str(), &pc);
    let path = source.display_path();
    let compiled = project.host.compile_source(name, &source)?;
    // A configured plugin is inspected as the kind cradle.toml declares; a
    // bare file as a backend, or as an integration plugin when it exports
    // cradle interfaces but no lifecycle.
    let engine = project.host.engine();
    let kind = match (project.config.plugins.contains_key(name), pc.kind(name)) {
        (true, kind) | (false, kind @ PluginKind::Integration) => kind,
        (false, PluginKind::Backend) => {
            match admission::inspect(engine, &compiled.component, name, PluginKind::Backend) {
                Err(admission::AdmissionError::NoLifecycle { exports, .. }) if !exports.is_empty() => {
                    PluginKind::Integration
                }
                _ => PluginKind::Backend,
            }
        }
    };
    let inspected = admission::inspect(engine, &compiled.component, name, kind)?;
    let verdict = admission::admit(engine, &compiled.component, name, kind, &compiled.manifest, &pc.grants);
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
        "grants_from": if project.config.plugins.contains_key(name) { crate::config::grants_source(pc) } else { "none (not in [plugins] of cradle.toml)" },
        "kind": kind.as_str(),
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
    outln!("kind        {}", s(&doc["kind"]))?;
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
