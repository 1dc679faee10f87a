//! `cradle plugin test [PATH] [--check]`: run a plugin against a throwaway
//! simulated cluster, in this process, through the same provision and remove
//! code as `cradle provision` and `cradle remove`.
//!
//! PATH is a plugin crate (built first, as `cradle plugin build` does) or a
//! `.wasm` component. The test project lives in a fresh directory under the
//! system temp dir (0700; removed afterwards unless `--keep`): the simulated
//! cluster at time scale 0, the built-in workflows, two VMs on loopback
//! addresses of their own (so tests can run side by side) whose guests answer
//! SSH on port 2222 (no privileges needed), and the plugin granted exactly
//! what its manifest `needs`, scoped to the simulator. A plugin that needs
//! `dns`, `http` or `terraform` is refused: those need services of the
//! operator's, so test it in a project of yours (`cradle provision --check`).
//!
//! Steps, each printed as the provision table, and each must pass:
//! 1. provision (`--check`: plan only, and the steps stop here);
//! 2. provision again: every VM must be `skipped` (a rerun changes nothing);
//! 3. remove.
//!
//! Exit 0 when every step passed, 1 otherwise (the failing step is named).

use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser as _};

use super::provision::{Selection, print_results, run_inventory};
use super::{Cli, Output, init, outln};
use crate::caps::Capability;
use crate::kit::cargo;
use crate::plugin::manifest::Manifest;
use crate::provision::{Action, HostResult};

#[derive(Debug, Args)]
pub struct TestArgs {
    /// A plugin crate directory, or a built `.wasm` component.
    #[arg(default_value = ".")]
    pub path: PathBuf,
    /// Plan only (`provision --check`); for plugins that create nothing.
    #[arg(long)]
    pub check: bool,
    /// Keep the throwaway project (its path is printed) for a look at the journals.
    #[arg(long)]
    pub keep: bool,
    /// Run `rustup target add wasm32-wasip2` when the target is missing.
    #[arg(long)]
    pub install_target: bool,
}

/// The capabilities the throwaway project can grant, scoped to the simulator.
fn grant(cap: Capability) -> Option<&'static str> {
    Some(match cap {
        Capability::Proxmox => {
            "nodes = [\"*\"]\nvmids = \"100-999999\"\nstorages = [\"*\"]\ntemplates = [\"*\"]\ndestructive = true\n"
        }
        Capability::Lock => "prefixes = [\"*\"]\n",
        Capability::Checkpoint => "",
        Capability::Ssh => "hosts = [\"guests\"]\nupload_dirs = [\"/var/tmp\"]\n",
        _ => return None,
    })
}

/// The throwaway project's cradle.toml for `manifest`'s plugin at `wasm`.
fn config_text(manifest: &Manifest, wasm: &Path) -> anyhow::Result<String> {
    let name = &manifest.name;
    let path = toml::Value::String(wasm.display().to_string()).to_string();
    let mut text = format!(
        "# Written by `cradle plugin test` for {name}.\ndefault_environment = \"plugin-test\"\nstate_dir = \".cradle\"\n\n{}\
         [clusters.sim]\nkind = \"sim\"\n[clusters.sim.sim]\nnodes = [\"pve1\", \"pve2\", \"pve3\"]\ntime_scale = 0\nguest_ssh_port = 2222\n\n\
         [environments.plugin-test]\ncluster = \"sim\"\nbackend = \"{name}\"\n\n[plugins.{name}]\npath = {path}\n",
        init::WORKFLOW_GRANTS
    );
    // `log` is always granted and has no section.
    for cap in manifest.needs.iter().filter(|c| **c != Capability::Log) {
        let body = grant(*cap).ok_or_else(|| {
            anyhow::anyhow!(
                "plugin `{name}` needs `{}`, which `cradle plugin test` cannot grant: it needs a service of yours \
                 (DNS server, HTTP endpoint, Terraform modules). Test it in your own project: \
                 grant it in cradle.toml and run `cradle provision --check`",
                cap.name()
            )
        })?;
        text.push_str(&format!("[plugins.{name}.grants.{}]\n{body}", cap.name()));
    }
    Ok(text)
}

/// The example inventory of `cradle init`, on loopback addresses of this
/// process's own (`127.X.Y.10`, `.11`), with the guests' SSH on port 2222.
fn inventory(dir: &Path) -> anyhow::Result<PathBuf> {
    let n = std::process::id();
    let net = format!("127.{}.{}", 21 + n % 200, (n / 200) % 250);
    let hosts = init::INVENTORY_HOSTS
        .replace("127.20.0", &net)
        .replace("ansible_user=cradle", "ansible_user=cradle\nansible_port=2222");
    let all = init::INVENTORY_ALL.replace("127.20.0", &net);
    let inv = dir.join("inventory");
    std::fs::create_dir_all(inv.join("group_vars"))?;
    std::fs::write(inv.join("hosts.ini"), hosts)?;
    std::fs::write(inv.join("group_vars/all.yml"), all)?;
    Ok(inv)
}

/// A fresh owner-only directory under the system temp dir.
fn scratch(name: &str) -> anyhow::Result<PathBuf> {
    let base = std::env::temp_dir();
    for attempt in 0..100u32 {
        let dir = base.join(format!("cradle-plugin-test-{name}-{}-{attempt}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
        }
    }
    anyhow::bail!("cannot create a scratch directory under {}", base.display())
}

pub async fn run(cli: &Cli, args: &TestArgs) -> anyhow::Result<ExitCode> {
    let wasm = if args.path.is_dir() { cargo::build(&args.path, args.install_target)?.wasm } else { args.path.clone() };
    let wasm = std::path::absolute(&wasm).with_context(|| format!("cannot resolve {}", wasm.display()))?;
    let bytes = std::fs::read(&wasm).with_context(|| format!("cannot read {}", wasm.display()))?;
    let manifest = Manifest::read(&bytes, &wasm)?;
    let dir = scratch(&manifest.name)?;
    let result = steps(cli, args, &manifest, &wasm, &dir).await;
    if args.keep {
        eprintln!("the test project is kept in {}", dir.display());
    } else if let Err(e) = std::fs::remove_dir_all(&dir) {
        eprintln!("warning: cannot remove {}: {e}", dir.display());
    }
    result
}

async fn steps(cli: &Cli, args: &TestArgs, manifest: &Manifest, wasm: &Path, dir: &Path) -> anyhow::Result<ExitCode> {
    let config = dir.join("cradle.toml");
    std::fs::write(&config, config_text(manifest, wasm)?)
        .with_context(|| format!("cannot write {}", config.display()))?;
    let inv = inventory(dir).with_context(|| format!("cannot write the inventory under {}", dir.display()))?;
    // The command line an operator would type for this project.
    let mut argv = vec!["cradle".into(), "--config".into(), config.display().to_string()];
    if cli.output == Output::Json {
        argv.extend(["--output".into(), "json".into()]);
    }
    if cli.quiet {
        argv.push("--quiet".into());
    }
    argv.extend(["provision".into(), "-i".into(), inv.display().to_string()]);
    let project_cli = Cli::try_parse_from(&argv).context("the test project's command line")?;
    let steps: &[(&str, Action, Option<&str>)] = if args.check {
        &[("provision --check", Action::Check, None)]
    } else {
        &[
            ("provision", Action::Provision, Some("created")),
            ("provision again (nothing may change)", Action::Provision, Some("skipped")),
            ("remove", Action::Remove, None),
        ]
    };
    for (step, action, want) in steps {
        if cli.output == Output::Text {
            outln!("== {} {step}", manifest.name)?;
        }
        let selection = Selection { inventory: &inv, limit: None, env: None };
        let results = run_inventory(&project_cli, selection, *action, 2, |_, _| Ok(())).await?;
        print_results(&project_cli, &results, *action == Action::Check)?;
        if let Some(problem) = judge(&results, *want) {
            eprintln!("error: {} failed at `{step}`: {problem}", manifest.name);
            return Ok(ExitCode::FAILURE);
        }
    }
    if cli.output == Output::Text {
        outln!("== {} passed: {}", manifest.name, steps.iter().map(|s| s.0).collect::<Vec<_>>().join(", "))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What is wrong with a step's results, if anything.
fn judge(results: &[HostResult], want: Option<&str>) -> Option<String> {
    if results.is_empty() {
        return Some("the inventory selected no VM".into());
    }
    let bad: Vec<String> = results
        .iter()
        .filter(|r| !r.ok() || r.result == "blocked" || want.is_some_and(|w| r.result != w))
        .map(|r| {
            format!("{} is {}{}", r.name, r.result, r.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default())
        })
        .collect();
    (!bad.is_empty()).then(|| match want {
        Some(w) => format!("every VM must be {w}: {}", bad.join("; ")),
        None => bad.join("; "),
    })
}
