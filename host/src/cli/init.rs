//! `cradle init [DIR] [--force]`: write a starter project.
//!
//! Writes `DIR/cradle.toml` (the built-in simulated cluster, the built-in
//! `direct` and `sample` backends with their default grants written out),
//! the built-in workflows under `DIR/workflows/` (the project's copy then
//! replaces the built-in set, so the operator edits these), and an example
//! inventory under `DIR/inventory/`.
//!
//! Contract: without `--force`, every target is checked before the first
//! write, and an existing one (file, directory or symlink) is an error naming
//! it and `--force`, with nothing written. An I/O error part-way (disk full)
//! names the file; what was written before it stays. Files are created 0644
//! and directories with the default mode (0777), both less the umask; each
//! file is written to a temporary file and renamed into place. None holds a secret: credentials in cradle.toml are
//! references, and the state directory cradle later creates is 0700 on its own.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use serde_json::json;

use super::{Cli, Output, outln, print_json};
use crate::builtin;
use crate::config::DEFAULT_WORKFLOW_DIR;

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The project directory (created if missing).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Overwrite files that already exist.
    #[arg(long)]
    pub force: bool,
}

pub(super) const INVENTORY_HOSTS: &str = r#"# Two test VMs on the built-in simulated cluster. Addresses are on loopback
# so the simulated guests answer real SSH locally.

[test]
test-0 ansible_host=127.20.0.10
test-1 ansible_host=127.20.0.11

[test:vars]
# VMIDs are vms_vmid_base + the host's index in this group: 150, 151.
vms_vmid_base=150
target_node=pve2
ansible_user=cradle
"#;

pub(super) const INVENTORY_ALL: &str = r#"---
global_os:
  debian12:
    template: debian-12-cloud
    interface: ens18
    storage: local-lvm
    cores: 2
    memory: 2048

vms_os: debian12
vms_config:
  disk: 12
  tags: [cradle]
  startup_order: 10
  network:
    nic0:
      bridge: vmbr0
      vlan: 20
      ip: "{{ ansible_host }}/16"
      gateway: 127.20.0.1
      nameservers: [127.0.0.53]
      search: lab.example
"#;

/// The top of the starter cradle.toml.
const HEADER: &str = r#"# cradle.toml: written by `cradle init`. Every key: docs/CONFIG.md.
# Paths are relative to this file.
#
#   cradle --config cradle.toml provision -i inventory --check
#   cradle --config cradle.toml provision -i inventory
#   cradle --config cradle.toml run sample --env demo test-0

default_environment = "test"
# Journals, locks, checkpoints, the simulated cluster and the component cache
# (created owner-only, 0700).
state_dir = ".cradle"

# The workflows are read from workflows/ next to this file, which `cradle init`
# filled with the built-in ones: edit them there. Without that directory cradle
# uses the workflows built into it.

"#;

/// What the workflow scripts may do: the built-in workflows need exactly this
/// (also used by `cradle plugin test`'s throwaway project).
pub(super) const WORKFLOW_GRANTS: &str = r#"# What the workflow scripts themselves may do.
[workflow.grants.lock]
prefixes = ["*"]
[workflow.grants.checkpoint]
[workflow.grants.proxmox]
nodes = ["*"]
vmids = "100-999999"
storages = ["*"]
[workflow.grants.ssh]
hosts = ["guests", "nodes"]
# Snippets, and the disk images of VM types built from an image (docs/VM-TYPES.md).
upload_dirs = ["/var/lib/vz/snippets", "/var/tmp/cradle-images"]
# Ansible playbooks a post_provision stage may run (docs/PROVISIONING.md).
playbooks = ["playbooks"]

"#;

/// The simulated cluster and the environments of the starter project.
const CLUSTER_AND_ENVIRONMENTS: &str = r#"# The simulated Proxmox VE cluster built into cradle. A real cluster:
#   [clusters.lab]
#   endpoint = "https://pve1.lab:8006"
#   token = { env = "PVE_TOKEN" }
#   fingerprint = "AA:BB:..."
[clusters.sim]
kind = "sim"
[clusters.sim.sim]
nodes = ["pve1", "pve2", "pve3"]
time_scale = 0.02     # 1 = realistic durations; 0 = instant

# `test` provisions with the direct backend; `demo` only plans, with the sample one.
[environments.test]
cluster = "sim"
backend = "direct"

[environments.demo]
cluster = "sim"
backend = "sample"

# The plugins built into cradle (backends, named by an environment's
# `backend`, and integration plugins, reached from a workflow with
# cradle::plugin("ROLE")), with their default grants written out. Without its
# table a built-in keeps exactly these defaults; a table replaces them whole.
# No `path`: the component inside the cradle binary. `path = "x.wasm"` uses a
# component file instead. Nothing granted means nothing allowed.
"#;

/// The starter cradle.toml.
fn config_text() -> String {
    let mut text = String::from(HEADER);
    text.push_str(WORKFLOW_GRANTS);
    text.push_str(CLUSTER_AND_ENVIRONMENTS);
    for p in builtin::PLUGINS {
        text.push_str(&format!("\n# {} ({}): {}\n[plugins.{}]\n", p.name, p.kind, p.summary, p.name));
        // The built-in's body: top-level keys first, then its grant tables
        // (renamed under this plugin).
        for line in p.config.lines() {
            match line.strip_prefix("[grants.") {
                Some(rest) => text.push_str(&format!("[plugins.{}.grants.{rest}\n", p.name)),
                None => {
                    text.push_str(line);
                    text.push('\n');
                }
            }
            // The project runs on the simulated cluster: the opt-in is written
            // out, so pointing it at a real cluster keeps it visible.
            if p.destructive_on_sim && line == "[grants.proxmox]" {
                text.push_str("destructive = true    # `cradle remove` stops and destroys; opt-in on a real cluster\n");
            }
            if p.destructive_on_sim && line == "[grants.terraform]" {
                text.push_str(
                    "destructive = true    # `cradle remove` applies a destroy plan; opt-in on a real cluster\n",
                );
            }
        }
    }
    text
}

/// Every file `init` writes: (path relative to DIR, content).
fn files() -> Vec<(PathBuf, String)> {
    let mut files = vec![(PathBuf::from(crate::config::CONFIG_FILE), config_text())];
    for (rel, text) in builtin::WORKFLOWS {
        files.push((Path::new(DEFAULT_WORKFLOW_DIR).join(rel), text.to_string()));
    }
    files.push((PathBuf::from("inventory/hosts.ini"), INVENTORY_HOSTS.to_string()));
    files.push((PathBuf::from("inventory/group_vars/all.yml"), INVENTORY_ALL.to_string()));
    files
}

pub fn run(cli: &Cli, args: &InitArgs) -> anyhow::Result<ExitCode> {
    let files = files();
    if !args.force {
        let existing: Vec<String> = files
            .iter()
            .map(|(rel, _)| args.dir.join(rel))
            .filter(|p| p.symlink_metadata().is_ok())
            .map(|p| p.display().to_string())
            .collect();
        if let Some(first) = existing.first() {
            let named = match existing.len() {
                1 => format!("{first} already exists"),
                n => format!("{first} and {} more of the files it would write already exist", n - 1),
            };
            anyhow::bail!(
                "{named}; nothing was written (pass --force to overwrite {})",
                if existing.len() == 1 { "it" } else { "them" }
            );
        }
    }
    let mut written = Vec::new();
    for (rel, text) in &files {
        let path = args.dir.join(rel);
        write_file(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path.display().to_string());
    }
    let config = args.dir.join(crate::config::CONFIG_FILE);
    let inventory = args.dir.join("inventory");
    match cli.output {
        Output::Json => print_json(&json!({ "ok": true, "written": written }))?,
        Output::Text => {
            for w in &written {
                outln!("wrote {w}")?;
            }
            outln!()?;
            outln!("next:")?;
            outln!("  cradle --config {} workflows check", config.display())?;
            outln!("  cradle --config {} provision -i {} --check", config.display(), inventory.display())?;
            outln!("  cradle --config {} provision -i {}", config.display(), inventory.display())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates `path` (and its parents) with mode 0644 (less the umask). The
/// content goes to a temporary file renamed over `path`, so a `--force`
/// overwrite replaces the file itself — never writes through a symlink — and
/// no reader sees half a file.
fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = parent.join(format!(".{name}.cradle-init-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_starter_config_is_valid_and_grants_the_built_ins_their_defaults() {
        let text = config_text();
        let c = crate::config::Config::parse(&text, Path::new("cradle.toml"), Path::new("/p")).expect("valid");
        for p in builtin::PLUGINS {
            let written = &c.plugins[p.name];
            assert!(written.is_builtin() && !written.implicit, "{}", p.name);
            // The defaults of a project on the simulated cluster, written out.
            let mut default = crate::config::PluginConfig::builtin_on_sim(p);
            default.grants.builtin_defaults = false;
            // A module root is relative to cradle.toml, resolved at load.
            if let Some(tf) = default.grants.terraform.as_mut() {
                tf.module_root = Path::new("/p").join(&tf.module_root);
            }
            assert_eq!(format!("{:?}", written.grants), format!("{:?}", default.grants), "{}", p.name);
            assert_eq!(format!("{:?}", written.limits), format!("{:?}", default.limits), "{}", p.name);
        }
        assert_eq!(c.workflow_dir(), PathBuf::from("/p/workflows"));
    }

    #[test]
    fn the_starter_config_says_each_built_ins_kind() {
        let text = config_text();
        assert!(text.contains("\n# direct (backend): ") && text.contains("\n# netbox (integration): "), "{text}");
        assert!(text.contains("cradle::plugin(\"ROLE\")"), "how an integration plugin is reached: {text}");
    }

    #[test]
    fn every_built_in_workflow_is_written_under_workflows() {
        let files = files();
        for (rel, _) in builtin::WORKFLOWS {
            assert!(files.iter().any(|(p, _)| *p == Path::new("workflows").join(rel)), "{rel}");
        }
    }
}

#[cfg(test)]
#[path = "init_package_tests.rs"]
mod package_tests;
