//! What a terraform module may contain: checked by the capability before the
//! module is written and again before every terraform command, so the host,
//! not the plugin, decides what terraform does.
//!
//! Contract ([`check`], pure: no I/O):
//! - Every file is plain JSON (`*.tf.json`) holding one object whose keys are
//!   only `terraform`, `provider` and `resource`, of exactly the shape
//!   `cradle-terraform-logic`'s renderer emits for the configured flavour:
//!   - `terraform` holds only `required_providers.proxmox` with the flavour's
//!     `source` (and optionally a `version`): no `backend`, `cloud`,
//!     `provider_meta` or anything else that moves state or reaches out;
//!   - `provider` holds only an empty `proxmox` block (credentials come from
//!     terraform's environment, set by the host; an endpoint here would send
//!     them elsewhere);
//!   - `resource` holds only the flavour's resource type
//!     (`proxmox_vm_qemu` / `proxmox_virtual_environment_vm`), named `vm`, once
//!     across all files, with only the attributes the renderer writes: no
//!     provisioner, connection, count, for_each, depends_on, provider alias.
//! - No string (value or key) anywhere holds a template sequence (`${` or
//!   `%{`): the renderer emits none, and it is how terraform's JSON syntax
//!   calls functions that read the control node (`file`, `templatefile`,
//!   `fileset`, `filebase64`, `pathexpand`, `abspath`…).
//! - The VM the module creates is returned as a [`ModuleVm`] (VMID, node,
//!   storages, template) for the caller's proxmox grant check.
//!
//! Failure modes: a [`Refusal`] naming the file, the JSON path and the
//! construct, and what the host allows instead.

use serde_json::{Map, Value};

use super::Flavour;

/// The top-level keys a module file may hold.
const TOP_LEVEL: [&str; 3] = ["terraform", "provider", "resource"];

/// The attributes `render.rs` writes for telmate's `proxmox_vm_qemu`.
const TELMATE_ATTRIBUTES: [&str; 14] = [
    "name",
    "vmid",
    "target_node",
    "clone",
    "full_clone",
    "os_type",
    "memory",
    "cpu",
    "power_state",
    "disk",
    "network",
    "cicustom",
    "tags",
    "lifecycle",
];

/// The attributes `render.rs` writes for bpg's `proxmox_virtual_environment_vm`.
const BPG_ATTRIBUTES: [&str; 12] = [
    "name",
    "vm_id",
    "node_name",
    "started",
    "clone",
    "cpu",
    "memory",
    "disk",
    "network_device",
    "initialization",
    "tags",
    "lifecycle",
];

/// The one resource name of a host's module.
const RESOURCE_NAME: &str = "vm";

/// A template the module clones, as the flavour names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateRef {
    /// telmate clones by name.
    Name(String),
    /// bpg clones by VMID.
    Vmid(u32),
}

/// The VM a module creates, for the proxmox grant check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleVm {
    /// Its VMID.
    pub vmid: u32,
    /// The node it is cloned on.
    pub node: String,
    /// Every storage its disks and cloud-init drive name.
    pub storages: Vec<String>,
    /// The template it clones.
    pub template: TemplateRef,
    /// Its cloud-init snippets as a `cicustom` value (`user=local:snippets/…,network=…`):
    /// telmate's `cicustom` as written, bpg's `initialization` `*_data_file_id`s in the
    /// same form, so the proxmox policy checks their storages and that they are this
    /// VM's own snippets, as for the direct backend's `set-config`. None without any.
    pub cicustom: Option<String>,
}

/// A module the host refuses: which file, where in it, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("terraform: module file {file} at {path}: {problem}")]
pub struct Refusal {
    /// The file name.
    pub file: String,
    /// A JSON path (`$.resource.proxmox_vm_qemu.vm.provisioner`).
    pub path: String,
    /// The construct and what is allowed instead.
    pub problem: String,
}

/// Where a problem is, for messages.
struct At<'a> {
    file: &'a str,
}

impl At<'_> {
    fn refuse(&self, path: &str, problem: impl Into<String>) -> Refusal {
        Refusal { file: self.file.to_string(), path: path.to_string(), problem: problem.into() }
    }
}

/// Check the module's files (name, content) for `flavour`; the VM it creates.
pub fn check(flavour: Flavour, files: &[(String, String)]) -> Result<ModuleVm, Refusal> {
    let mut found: Option<(String, ModuleVm)> = None;
    for (name, content) in files {
        let at = At { file: name };
        if !name.ends_with(".tf.json") {
            return Err(at.refuse("$", "only plain JSON module files (`*.tf.json`) are allowed"));
        }
        let value: Value =
            serde_json::from_str(content).map_err(|e| at.refuse("$", format!("is not plain JSON: {e}")))?;
        templates(&at, "$", &value)?;
        let Value::Object(top) = value else { return Err(at.refuse("$", "must be a JSON object")) };
        for (key, body) in &top {
            let path = format!("$.{key}");
            match key.as_str() {
                "terraform" => terraform_block(&at, &path, flavour, body)?,
                "provider" => provider_block(&at, &path, body)?,
                "resource" => {
                    let vm = resource_block(&at, &path, flavour, body)?;
                    if let Some((first, _)) = &found {
                        return Err(at.refuse(
                            &path,
                            format!(
                                "a second {}.{RESOURCE_NAME} (the first is in {first}); a module declares one VM",
                                flavour_type(flavour)
                            ),
                        ));
                    }
                    found = Some((name.clone(), vm));
                }
                other => {
                    return Err(at.refuse(
                        &path,
                        format!(
                            "`{other}` blocks are not allowed (a module holds only {}: no data sources, modules, outputs, variables, locals, imports or moves)",
                            TOP_LEVEL.join(", ")
                        ),
                    ));
                }
            }
        }
    }
    found.map(|(_, vm)| vm).ok_or_else(|| Refusal {
        file: files.first().map(|(n, _)| n.clone()).unwrap_or_else(|| "(none)".into()),
        path: "$.resource".into(),
        problem: format!(
            "the module declares no {}.{RESOURCE_NAME}; a module declares exactly one VM (a removal is a destroy plan, which needs the terraform grant's `destructive`)",
            flavour_type(flavour)
        ),
    })
}

fn flavour_type(flavour: Flavour) -> &'static str {
    match flavour {
        Flavour::Telmate => "proxmox_vm_qemu",
        Flavour::Bpg => "proxmox_virtual_environment_vm",
    }
}

fn flavour_source(flavour: Flavour) -> &'static str {
    match flavour {
        Flavour::Telmate => "telmate/proxmox",
        Flavour::Bpg => "bpg/proxmox",
    }
}

/// No `${` / `%{` in any string or key: terraform would evaluate it.
fn templates(at: &At<'_>, path: &str, v: &Value) -> Result<(), Refusal> {
    let bad = |s: &str| s.contains("${") || s.contains("%{");
    match v {
        Value::String(s) if bad(s) => Err(at.refuse(
            path,
            format!("`{}` is a template expression; modules hold literal values only (no functions such as file() or templatefile())", clip(s)),
        )),
        Value::Array(items) => {
            items.iter().enumerate().try_for_each(|(i, item)| templates(at, &format!("{path}[{i}]"), item))
        }
        Value::Object(map) => {
            for (k, item) in map {
                let here = format!("{path}.{k}");
                if bad(k) {
                    return Err(at.refuse(&here, "a key holding a template expression is not allowed"));
                }
                templates(at, &here, item)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// At most 80 characters of a value, for messages.
fn clip(s: &str) -> String {
    let cut: String = s.chars().take(80).collect();
    if cut.len() < s.len() { format!("{cut}…") } else { cut }
}

fn object<'v>(at: &At<'_>, path: &str, v: &'v Value) -> Result<&'v Map<String, Value>, Refusal> {
    v.as_object().ok_or_else(|| at.refuse(path, "must be a JSON object"))
}

fn only_keys(at: &At<'_>, path: &str, map: &Map<String, Value>, allowed: &[&str], what: &str) -> Result<(), Refusal> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(at.refuse(
            &format!("{path}.{k}"),
            format!(
                "`{k}` is not allowed in {what} (allowed: {})",
                if allowed.is_empty() { "nothing".into() } else { allowed.join(", ") }
            ),
        )),
        None => Ok(()),
    }
}

fn terraform_block(at: &At<'_>, path: &str, flavour: Flavour, v: &Value) -> Result<(), Refusal> {
    let map = object(at, path, v)?;
    only_keys(
        at,
        path,
        map,
        &["required_providers"],
        "the terraform block (no backend or cloud: the state stays in the module directory)",
    )?;
    let path = format!("{path}.required_providers");
    let Some(req) = map.get("required_providers") else { return Ok(()) };
    let req = object(at, &path, req)?;
    only_keys(at, &path, req, &["proxmox"], "required_providers")?;
    let Some(proxmox) = req.get("proxmox") else { return Ok(()) };
    let path = format!("{path}.proxmox");
    let proxmox = object(at, &path, proxmox)?;
    only_keys(at, &path, proxmox, &["source", "version"], "the provider requirement")?;
    let want = flavour_source(flavour);
    match proxmox.get("source").and_then(Value::as_str) {
        Some(source) if source.eq_ignore_ascii_case(want) => {}
        other => {
            return Err(at.refuse(
                &format!("{path}.source"),
                format!("is {other:?}; the configured flavour's provider is `{want}`"),
            ));
        }
    }
    if let Some(version) = proxmox.get("version")
        && !version.is_string()
    {
        return Err(at.refuse(&format!("{path}.version"), "must be a version constraint string"));
    }
    Ok(())
}

fn provider_block(at: &At<'_>, path: &str, v: &Value) -> Result<(), Refusal> {
    let map = object(at, path, v)?;
    only_keys(at, path, map, &["proxmox"], "the provider block (no external, local, http, null or other provider)")?;
    if let Some(p) = map.get("proxmox") {
        let path = format!("{path}.proxmox");
        let settings = object(at, &path, p)?;
        only_keys(
            at,
            &path,
            settings,
            &[],
            "the proxmox provider block (its endpoint and credentials come from the host)",
        )?;
    }
    Ok(())
}

fn resource_block(at: &At<'_>, path: &str, flavour: Flavour, v: &Value) -> Result<ModuleVm, Refusal> {
    let map = object(at, path, v)?;
    let kind = flavour_type(flavour);
    only_keys(
        at,
        path,
        map,
        &[kind],
        &format!(
            "resources: only `{kind}` of the configured flavour (no terraform_data, null_resource, local_file, external, http or other type)"
        ),
    )?;
    let path = format!("{path}.{kind}");
    let named = object(at, &path, map.get(kind).unwrap_or(&Value::Null))?;
    only_keys(at, &path, named, &[RESOURCE_NAME], &format!("{kind} (the one resource is named `{RESOURCE_NAME}`)"))?;
    let path = format!("{path}.{RESOURCE_NAME}");
    let body = object(at, &path, named.get(RESOURCE_NAME).unwrap_or(&Value::Null))?;
    let allowed: &[&str] = match flavour {
        Flavour::Telmate => &TELMATE_ATTRIBUTES,
        Flavour::Bpg => &BPG_ATTRIBUTES,
    };
    only_keys(
        at,
        &path,
        body,
        allowed,
        &format!("{kind}.{RESOURCE_NAME} (no provisioner, connection, count, for_each, depends_on or provider)"),
    )?;
    if let Some(lifecycle) = body.get("lifecycle") {
        let lpath = format!("{path}.lifecycle");
        let l = object(at, &lpath, lifecycle)?;
        only_keys(at, &lpath, l, &["ignore_changes"], "lifecycle")?;
    }
    match flavour {
        Flavour::Telmate => telmate_vm(at, &path, body),
        Flavour::Bpg => bpg_vm(at, &path, body),
    }
}

fn vmid(at: &At<'_>, path: &str, body: &Map<String, Value>, key: &str) -> Result<u32, Refusal> {
    body.get(key)
        .and_then(Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| at.refuse(&format!("{path}.{key}"), "a VMID (a whole number) is required"))
}

fn string(at: &At<'_>, path: &str, v: Option<&Value>, what: &str) -> Result<String, Refusal> {
    v.and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| at.refuse(path, format!("{what} (a string) is required")))
}

/// Each `key` of each object in the list `list` (a missing list is empty).
fn storages_in(at: &At<'_>, path: &str, list: Option<&Value>, key: &str, out: &mut Vec<String>) -> Result<(), Refusal> {
    let Some(list) = list else { return Ok(()) };
    let items = list.as_array().ok_or_else(|| at.refuse(path, "must be a list"))?;
    for (i, item) in items.iter().enumerate() {
        let here = format!("{path}[{i}]");
        let item = object(at, &here, item)?;
        if let Some(s) = item.get(key) {
            out.push(string(at, &format!("{here}.{key}"), Some(s), "a storage")?);
        }
    }
    Ok(())
}

fn telmate_vm(at: &At<'_>, path: &str, body: &Map<String, Value>) -> Result<ModuleVm, Refusal> {
    let mut storages = Vec::new();
    storages_in(at, &format!("{path}.disk"), body.get("disk"), "storage", &mut storages)?;
    Ok(ModuleVm {
        vmid: vmid(at, path, body, "vmid")?,
        node: string(at, &format!("{path}.target_node"), body.get("target_node"), "the node")?,
        storages,
        template: TemplateRef::Name(string(at, &format!("{path}.clone"), body.get("clone"), "the template to clone")?),
        cicustom: match body.get("cicustom") {
            None => None,
            some => Some(string(at, &format!("{path}.cicustom"), some, "cicustom")?),
        },
    })
}

fn bpg_vm(at: &At<'_>, path: &str, body: &Map<String, Value>) -> Result<ModuleVm, Refusal> {
    let mut storages = Vec::new();
    storages_in(at, &format!("{path}.disk"), body.get("disk"), "datastore_id", &mut storages)?;
    storages_in(at, &format!("{path}.initialization"), body.get("initialization"), "datastore_id", &mut storages)?;
    let clone_path = format!("{path}.clone");
    let clone = body
        .get("clone")
        .and_then(Value::as_array)
        .filter(|c| c.len() == 1)
        .and_then(|c| c[0].as_object())
        .ok_or_else(|| at.refuse(&clone_path, "one clone block naming the template is required"))?;
    Ok(ModuleVm {
        vmid: vmid(at, path, body, "vm_id")?,
        node: string(at, &format!("{path}.node_name"), body.get("node_name"), "the node")?,
        storages,
        template: TemplateRef::Vmid(vmid(at, &format!("{clone_path}[0]"), clone, "vm_id")?),
        cicustom: bpg_snippets(at, &format!("{path}.initialization"), body.get("initialization"))?,
    })
}

/// bpg's snippet references (`user_data_file_id`, …) of every `initialization` block,
/// as one `cicustom` value (`user=VOLID,network=VOLID,…`).
fn bpg_snippets(at: &At<'_>, path: &str, list: Option<&Value>) -> Result<Option<String>, Refusal> {
    const PARTS: [(&str, &str); 4] = [
        ("user_data_file_id", "user"),
        ("network_data_file_id", "network"),
        ("meta_data_file_id", "meta"),
        ("vendor_data_file_id", "vendor"),
    ];
    let Some(list) = list else { return Ok(None) };
    let items = list.as_array().ok_or_else(|| at.refuse(path, "must be a list"))?;
    let mut parts = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let here = format!("{path}[{i}]");
        let item = object(at, &here, item)?;
        for (key, part) in PARTS {
            if let Some(v) = item.get(key) {
                parts.push(format!("{part}={}", string(at, &format!("{here}.{key}"), Some(v), "a snippet volume")?));
            }
        }
    }
    Ok((!parts.is_empty()).then(|| parts.join(",")))
}
