//! One host → one [`VmPlan`]: the canonical identity (name, VMID, node), the
//! template from `global_os[vms_os]`, hardware and NICs from `vms_config` (falling
//! back to the `global_os` entry for hardware keys), the SSH target and the
//! run switches. The variable reference is `docs/INVENTORY.md`.
//!
//! Failure modes: a missing required variable (`Missing`, saying where to set it),
//! a value of the wrong form (`Invalid`, naming variable, value, origin and the
//! accepted form), an unsupported `{{ }}` expression (`Template`), two hosts with
//! one VMID or name (`Duplicate`). Nothing is defaulted silently except the
//! documented defaults.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use serde::Serialize;
use serde_json::{Map, Value};

use super::hardware::{Hardware, disks, storage_id, tags, warn_unused};
use super::nic::{self, Nic};
use super::spec::{Disk, OsTemplate, ResolveOptions, SpecRecord, VmState};
use super::template::Renderer;
use super::values::{Ctx, is_dns_label};
use super::vmid::{self, VmidSource};
use super::{HostName, Inventory, InventoryError};

/// How cradle reaches the guest over SSH.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SshTarget {
    /// `ansible_host` (default: the inventory hostname).
    pub host: String,
    /// `ansible_user`, if set.
    pub user: Option<String>,
    /// `ansible_port` (default 22).
    pub port: u16,
}

/// Everything cradle knows about one host's VM, resolved from the inventory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmPlan {
    /// The inventory hostname.
    pub host: HostName,
    /// The canonical VM name (`vms_name`, default the inventory hostname).
    pub name: String,
    /// The VMID, or `None` when the workflow must probe `nextid` under the lock.
    pub vmid: Option<u32>,
    /// Where the VMID came from.
    pub vmid_source: VmidSource,
    /// `target_node`.
    pub node: String,
    /// `global_os[vms_os]`.
    pub os: OsTemplate,
    /// Cores.
    pub cores: u32,
    /// Memory in MiB.
    pub memory_mib: u32,
    /// Boot disk size in GiB (`None` keeps the template's size).
    pub disk_gib: Option<u32>,
    /// Storage for the boot disk and the cloud-init drive.
    pub storage: String,
    /// Extra data disks.
    pub disks: Vec<Disk>,
    /// NICs, `nic0` first.
    pub nics: Vec<Nic>,
    /// Proxmox tags.
    pub tags: Vec<String>,
    /// `startup` order.
    pub startup_order: Option<u32>,
    /// The SSH target.
    pub ssh: SshTarget,
    /// `vm_state`.
    pub state: VmState,
    /// `vms_use_terraform`.
    pub use_terraform: bool,
    /// `vms_terraform_allow_replacement`.
    pub terraform_allow_replacement: bool,
    /// `vms_terraform_lock_root`.
    pub terraform_lock_root: Option<PathBuf>,
    /// `vms_finalization_state_dir`.
    pub finalization_state_dir: Option<PathBuf>,
    /// The environment (from [`ResolveOptions`]).
    pub environment: String,
    /// `vms_type`: the VM type whose workflow (`workflows/<type>.rhai`)
    /// provisions, checks and removes this host; `None` for the built-in
    /// cloud-init template type (`provision.rhai`, `remove.rhai`).
    pub vm_type: Option<String>,
}

/// Resolve `host` of `inv` into a [`VmPlan`].
pub fn resolve(inv: &Inventory, host: &str, opts: &ResolveOptions) -> Result<VmPlan, InventoryError> {
    let h = inv.host_index(host)?;
    let vars = inv.merged(h);
    let mut r = Renderer::new(&vars);
    let ctx = Ctx { inv, h };

    let name = vmid::canonical_name(&ctx, &mut r)?;
    if !is_dns_label(&name) {
        return Err(ctx.invalid(
            "vms_name",
            &Value::String(name),
            "a DNS label: letters, digits and hyphens, no hyphen first or last, at most 63 characters, no dots (set vms_name when \
             the inventory hostname is an FQDN). Proxmox's own rule for a VM name (pve_verify_dns_name) also takes dotted and \
             longer names; cradle makes the name the guest's host name and DNS label, which RFC 1035 caps at 63",
        ));
    }
    let (vmid, vmid_source) = vmid::vmid(&ctx, &mut r)?;
    let node = match ctx.var(&mut r, "target_node")? {
        Some(v) => {
            let node = ctx.string("target_node", &v)?;
            if !is_dns_label(&node) {
                return Err(ctx.invalid("target_node", &v, "a Proxmox node name such as pve1"));
            }
            node
        }
        None => return Err(ctx.missing("target_node", "set the Proxmox node the VM runs on, e.g. target_node: pve1")),
    };
    let vm_type = match ctx.var(&mut r, "vms_type")? {
        None => None,
        Some(v) => {
            let t = ctx.string("vms_type", &v)?;
            let ok = !t.is_empty()
                && t.len() <= 64
                && t.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
                && !["provision", "remove", "sample"].contains(&t.as_str());
            if !ok {
                return Err(ctx.invalid(
                    "vms_type",
                    &v,
                    "a VM type: the name of its workflow file workflows/<type>.rhai (lower-case letters, digits, `_`, \
                     `-`; not provision, remove or sample)",
                ));
            }
            Some(t)
        }
    };
    // A VM type that is not a template clone (a baked image, an ISO install)
    // needs no `global_os` entry; one it names is still read.
    let os = if vm_type.is_some() && ctx.var(&mut r, "vms_os")?.is_none() {
        OsTemplate { key: String::new(), template: String::new(), guest_interface: None, settings: Map::new() }
    } else {
        os_template(&ctx, &mut r)?
    };
    let config = match ctx.var(&mut r, "vms_config")? {
        None => Map::new(),
        Some(Value::Object(m)) => m,
        Some(other) => return Err(ctx.invalid("vms_config", &other, "a mapping (cores, memory, disk, nic0, ...)")),
    };
    warn_unused(&ctx, &config);
    let hw = Hardware { ctx: &ctx, config: &config, os: &os };
    let cores = hw.required("cores", |v, p| ctx.int(p, v, 1, 512, "a number of cores, 1..512"))? as u32;
    let memory_mib = hw.required("memory", |v, p| {
        ctx.size(p, v, 1, "memory in MiB (2048) or with a unit (512M, 4G), at least 16 MiB").and_then(|m| {
            if (16..=u64::from(u32::MAX)).contains(&m) { Ok(m) } else { Err(ctx.invalid(p, v, "at least 16 MiB")) }
        })
    })? as u32;
    let disk_gib = hw
        .optional("disk", |v, p| ctx.size(p, v, 1024, "a size in GiB (32) or with a unit (32G, 1T)"))?
        .map(|g| g.min(u64::from(u32::MAX)) as u32);
    let storage = hw.required("storage", |v, p| storage_id(&ctx, p, v))?;
    let disks = disks(&ctx, &config, &storage)?;
    let nics = nic::nics(&ctx, &config, &os, opts)?;
    let tags = match config.get("tags") {
        Some(v) => tags(&ctx, v)?,
        None => Vec::new(),
    };
    let startup_order = hw
        .optional_config("startup_order", |v, p| ctx.int(p, v, 0, u64::from(u32::MAX), "a whole number >= 0"))?
        .map(|n| n as u32);

    let ssh = SshTarget {
        host: match ctx.var(&mut r, "ansible_host")? {
            Some(v) => ctx.string("ansible_host", &v)?,
            None => host.to_string(),
        },
        user: ctx.var(&mut r, "ansible_user")?.map(|v| ctx.string("ansible_user", &v)).transpose()?,
        port: match ctx.var(&mut r, "ansible_port")? {
            Some(v) => ctx.int("ansible_port", &v, 1, 65535, "a TCP port, 1..65535")? as u16,
            None => 22,
        },
    };
    let state = match ctx.var(&mut r, "vm_state")? {
        None => VmState::Present,
        Some(v) => match v.as_str().map(str::trim) {
            Some("present") => VmState::Present,
            Some("absent") => VmState::Absent,
            _ => return Err(ctx.invalid("vm_state", &v, "present or absent")),
        },
    };
    let flag = |r: &mut Renderer<'_>, name: &str| -> Result<bool, InventoryError> {
        ctx.var(r, name)?.map(|v| ctx.boolean(name, &v)).transpose().map(|b| b.unwrap_or(false))
    };
    let use_terraform = flag(&mut r, "vms_use_terraform")?;
    let terraform_allow_replacement = flag(&mut r, "vms_terraform_allow_replacement")?;
    let path = |r: &mut Renderer<'_>, name: &str| -> Result<Option<PathBuf>, InventoryError> {
        ctx.var(r, name)?.map(|v| ctx.string(name, &v).map(PathBuf::from)).transpose()
    };
    Ok(VmPlan {
        host: HostName(host.to_string()),
        name,
        vmid,
        vmid_source,
        node,
        os,
        cores,
        memory_mib,
        disk_gib,
        storage,
        disks,
        nics,
        tags,
        startup_order,
        ssh,
        state,
        use_terraform,
        terraform_allow_replacement,
        terraform_lock_root: path(&mut r, "vms_terraform_lock_root")?,
        finalization_state_dir: path(&mut r, "vms_finalization_state_dir")?,
        environment: opts.environment.clone(),
        vm_type,
    })
}

/// Resolve every host of `hosts` and refuse shared VMIDs or names, among them and
/// against every other host of the inventory that has a VMID (invariant 6).
pub fn resolve_selected(
    inv: &Inventory,
    hosts: &[HostName],
    opts: &ResolveOptions,
) -> Result<Vec<VmPlan>, InventoryError> {
    let plans = hosts.iter().map(|h| resolve(inv, h.as_str(), opts)).collect::<Result<Vec<_>, _>>()?;
    check_unique(inv, &plans)?;
    Ok(plans)
}

/// Refuse two plans (or a plan and any other host of the inventory that has a VMID)
/// sharing a VMID or a canonical name (names compare case-insensitively, as DNS does).
fn check_unique(inv: &Inventory, plans: &[VmPlan]) -> Result<(), InventoryError> {
    let mut ids: HashMap<u32, &HostName> = HashMap::new();
    let mut names: HashMap<String, &HostName> = HashMap::new();
    for p in plans {
        if let Some(id) = p.vmid
            && let Some(first) = ids.insert(id, &p.host)
        {
            return Err(dup(format!("VMID {id}"), first, &p.host));
        }
        if let Some(first) = names.insert(p.name.to_ascii_lowercase(), &p.host) {
            return Err(dup(format!("the VM name `{}`", p.name), first, &p.host));
        }
    }
    // Hosts outside the selection: only their identity is computed; a host that
    // does not resolve is not part of this run and is not judged here.
    let planned: HashSet<&str> = plans.iter().map(|p| p.host.as_str()).collect();
    for (h, host) in inv.hosts.iter().enumerate() {
        if planned.contains(host.name.as_str()) {
            continue;
        }
        let vars = inv.merged(h);
        let mut r = Renderer::new(&vars);
        let ctx = Ctx { inv, h };
        let Ok((Some(id), _)) = vmid::vmid(&ctx, &mut r) else { continue };
        let other = HostName(host.name.clone());
        if let Some(first) = ids.get(&id) {
            return Err(dup(format!("VMID {id}"), first, &other));
        }
        if let Ok(name) = vmid::canonical_name(&ctx, &mut r)
            && let Some(first) = names.get(&name.to_ascii_lowercase())
        {
            return Err(dup(format!("the VM name `{name}`"), first, &other));
        }
    }
    Ok(())
}

fn dup(what: String, first: &HostName, second: &HostName) -> InventoryError {
    InventoryError::Duplicate { what, first: first.to_string(), second: second.to_string() }
}

fn os_template(ctx: &Ctx<'_>, r: &mut Renderer<'_>) -> Result<OsTemplate, InventoryError> {
    let key = match ctx.var(r, "vms_os")? {
        Some(v) => ctx.string("vms_os", &v)?,
        None => return Err(ctx.missing("vms_os", "name the OS entry of global_os, e.g. vms_os: debian12")),
    };
    let all = match ctx.var(r, "global_os")? {
        Some(Value::Object(m)) => m,
        Some(other) => return Err(ctx.invalid("global_os", &other, "a mapping of OS keys to { template: NAME, ... }")),
        None => {
            return Err(ctx.missing(
                "global_os",
                "define global_os in group_vars/all.yml, e.g. global_os: { debian12: { template: debian-12-cloud } }",
            ));
        }
    };
    let Some(entry) = all.get(&key) else {
        let known: Vec<&str> = all.keys().map(String::as_str).collect();
        return Err(ctx.invalid(
            "vms_os",
            &Value::String(key.clone()),
            &format!(
                "one of the keys of global_os: {}",
                if known.is_empty() { "none defined".into() } else { known.join(", ") }
            ),
        ));
    };
    let settings = match entry {
        Value::Object(m) => m.clone(),
        other => return Err(ctx.invalid(&format!("global_os.{key}"), other, "a mapping with at least template: NAME")),
    };
    let template = match settings.get("template") {
        Some(v) => ctx.string(&format!("global_os.{key}.template"), v)?,
        None => return Err(ctx.missing(&format!("global_os.{key}.template"), "name the template VM to clone")),
    };
    let guest_interface =
        settings.get("interface").map(|v| ctx.string(&format!("global_os.{key}.interface"), v)).transpose()?;
    Ok(OsTemplate { key, template, guest_interface, settings })
}

impl VmPlan {
    /// The WIT `vm-spec` record as the Rhai bridge expects it (snake_case keys).
    /// `probed` is the VMID chosen under the lock when the inventory sets none;
    /// it must be absent (or equal) when the inventory sets one. With neither,
    /// see [`VmPlan::vm_spec_unallocated`].
    pub fn vm_spec(&self, probed: Option<u32>) -> Result<SpecRecord, InventoryError> {
        let vmid = match (self.vmid, probed) {
            (Some(a), Some(b)) if a != b => {
                return Err(InventoryError::Invalid {
                    host: self.host.to_string(),
                    variable: "vmid".into(),
                    value: b.to_string(),
                    origin: "probed by the run".into(),
                    expected: format!("the inventory's VMID {a}"),
                });
            }
            (Some(a), _) | (None, Some(a)) => a,
            (None, None) => {
                return Err(InventoryError::Missing {
                    host: self.host.to_string(),
                    variable: "vms_vmid".into(),
                    hint: "the inventory sets no VMID; probe nextid under the VM's lock first".into(),
                });
            }
        };
        Ok(self.spec_with(Some(vmid)))
    }

    /// The `vm-spec` of a host whose inventory sets no VMID: `vmid` is null
    /// until the workflow finds the VM's VMID or probes one (workflows/lib/vmid.rhai);
    /// a backend call before that fails naming `vmid`.
    pub fn vm_spec_unallocated(&self) -> SpecRecord {
        self.spec_with(None)
    }

    fn spec_with(&self, vmid: Option<u32>) -> SpecRecord {
        SpecRecord {
            name: self.name.clone(),
            vmid,
            node: self.node.clone(),
            template: self.os.template.clone(),
            storage: self.storage.clone(),
            cores: self.cores,
            memory_mib: self.memory_mib,
            disk_gib: self.disk_gib,
            disks: self.disks.clone(),
            nics: self.nics.iter().map(Nic::spec).collect(),
            startup_order: self.startup_order,
            tags: self.tags.clone(),
            environment: self.environment.clone(),
            allow_replacement: self.terraform_allow_replacement,
        }
    }
}
