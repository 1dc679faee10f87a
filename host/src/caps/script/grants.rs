//! `cradle::check_grants(vm)` and `cradle::check_grants(vm, opts)`: the VM's
//! VMID, node, storages and template held against the `proxmox` grants of
//! those who will act on it — the environment's backend plugin
//! (`[plugins.NAME.grants.proxmox]`, or a built-in's default grants) and the
//! workflow itself (`[workflow.grants.proxmox]`) — before the run has any side
//! effect (invariant 9). Without it a VMID outside the grant passed
//! validation, the snippets (with the guest's private host key) were uploaded
//! and a creation record written, and only the backend's `create` was denied.
//!
//! Contract: no cluster call, no file written, no lock taken; each fact is
//! checked by [`policy::check`], the one permission check every capability
//! call meets (no second matcher), as the call that will carry it: the
//! backend's clone names the template's node, the VMID, the boot-disk storage
//! and the template; its `set-config` the extra disks' storages and the
//! snippet storage; the workflow's migrate, start and finalization the nodes
//! and the VMID. It throws `#{kind: "denied", message}` naming the host, the
//! inventory variable and its value, the refusal (the grant key and its
//! value) and the cradle.toml section to widen.
//!
//! `opts` (a map, every key optional):
//! - `template`: the template the VM is cloned from, as `proxmox::list_vms()`
//!   returns it (`vmid`, `name`, `node`); `()` before it has been looked up;
//! - `creator`: `"backend"` (default: the backend clones and configures, the
//!   built-in template type) or `"workflow"` (a VM type whose workflow creates
//!   the VM with its own `proxmox::create_vm`/`create_container`): who must be
//!   granted the storages;
//! - `backend`: `false` when the backend plugin never acts on the VM (an LXC
//!   type that discovers and reconciles in its workflow).
//!
//! A grant holder without a `proxmox` section at all is skipped: its first
//! call is refused before it can change anything, and a backend importing
//! `proxmox` without the grant is refused when it is loaded.

use std::sync::Arc;

use rhai::{Dynamic, Map, NativeCallContext};

use crate::caps::creation::script_args::{opt_str, snippet_storage, str_of};
use crate::caps::policy::{self, RunScope};
use crate::caps::proxmox::scope::ProxmoxCall;
use crate::caps::script_glue::{Res, throw};
use crate::caps::script_run::with_run;
use crate::caps::{Call, Capability, Grants};
use crate::contract::CapError;

/// Who acts on the VM with a set of grants.
struct Holder {
    /// `the `direct` backend` / `the workflow`, for messages.
    who: String,
    /// Where the grants are (`plugins.direct.grants`).
    origin: String,
    grants: Arc<Grants>,
    /// The built-in plugin's defaults: cradle.toml has no section to widen yet.
    implicit_plugin: Option<String>,
}

/// One fact of the VM and the call that will carry it.
struct Fact {
    /// The inventory variable (`vms_vmid`, `target_node`).
    field: String,
    /// Its value, as the message shows it.
    value: String,
    node: Option<String>,
    vmid: Option<u32>,
    storage: Option<String>,
    template: Option<(u32, String)>,
    /// Checked against the backend's grants.
    backend: bool,
    /// Checked against the workflow's grants.
    workflow: bool,
}

impl Fact {
    fn new(field: impl Into<String>, value: impl Into<String>) -> Fact {
        Fact {
            field: field.into(),
            value: value.into(),
            node: None,
            vmid: None,
            storage: None,
            template: None,
            backend: false,
            workflow: false,
        }
    }

    fn call(&self) -> ProxmoxCall<'_> {
        ProxmoxCall {
            node: self.node.as_deref(),
            vmid: self.vmid,
            storage: self.storage.as_deref(),
            template: self.template.as_ref().map(|(id, name)| (*id, Some(name.as_str()))),
            ..Default::default()
        }
    }
}

fn invalid(message: String) -> Box<rhai::EvalAltResult> {
    throw(CapError::invalid(message))
}

fn map_of(v: &Dynamic) -> Option<Map> {
    v.clone().try_cast::<Map>()
}

fn int_of(map: &Map, key: &str) -> Option<i64> {
    map.get(key).and_then(|v| v.as_int().ok())
}

/// Who creates the VM (`opts.creator`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Creator {
    Backend,
    Workflow,
}

/// The facts of `vm` (and its template) and whose grants must allow each.
fn facts(vm: &Map, name: &str, opts: &Map) -> Res<Vec<Fact>> {
    let spec = vm.get("spec").and_then(map_of).ok_or_else(|| invalid(format!("{name}: `vm.spec` is missing")))?;
    let creator = match opts.get("creator").map(|v| v.to_string()).as_deref() {
        None | Some("backend") => Creator::Backend,
        Some("workflow") => Creator::Workflow,
        Some(other) => {
            return Err(invalid(format!(
                "cradle::check_grants: creator must be \"backend\" or \"workflow\", not `{other}`"
            )));
        }
    };
    let backend_acts = opts.get("backend").and_then(|v| v.as_bool().ok()).unwrap_or(true);
    let by_creator = |f: &mut Fact| match creator {
        Creator::Backend => f.backend = backend_acts,
        Creator::Workflow => f.workflow = true,
    };
    let mut out = Vec::new();

    // VMID and node: every call on the VM names them, whoever makes it.
    let vmid = match spec.get("vmid") {
        Some(v) if v.is_unit() => None,
        Some(v) => Some(
            v.as_int()
                .ok()
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| invalid(format!("{name}: `spec.vmid` must be a VMID, not {v}")))?,
        ),
        None => None,
    };
    if let Some(vmid) = vmid {
        let mut f = Fact::new("vms_vmid", vmid.to_string());
        f.vmid = Some(vmid);
        (f.backend, f.workflow) = (backend_acts, true);
        out.push(f);
    }
    let node = match opt_str(vm, "node") {
        Some(node) => node,
        None => str_of(&spec, "node", "cradle::check_grants")?,
    };
    let mut f = Fact::new("target_node", node.clone());
    f.node = Some(node);
    (f.backend, f.workflow) = (backend_acts, true);
    out.push(f);

    // Storages: the boot disk's (the clone's target, or the workflow's
    // create), each extra disk's, and (the backend's cicustom) the snippets'.
    let storage = str_of(&spec, "storage", "cradle::check_grants")?;
    let mut f = Fact::new("vms_config.storage", storage.clone());
    f.storage = Some(storage);
    by_creator(&mut f);
    out.push(f);
    let disks = spec.get("disks").and_then(|d| d.clone().into_array().ok()).unwrap_or_default();
    for (i, disk) in disks.iter().enumerate() {
        let Some(storage) = map_of(disk).and_then(|d| opt_str(&d, "storage")) else { continue };
        let mut f = Fact::new(format!("vms_config.disks[{i}].storage"), storage.clone());
        f.storage = Some(storage);
        by_creator(&mut f);
        out.push(f);
    }
    if creator == Creator::Backend {
        let storage = snippet_storage(vm);
        let mut f = Fact::new("vms_snippet_storage", storage.clone());
        f.storage = Some(storage);
        f.backend = backend_acts;
        out.push(f);
    }

    // The template: cloned by the backend on the template's node; the
    // workflow migrates the clone from there to target_node.
    if let Some(t) = opts.get("template").filter(|t| !t.is_unit()) {
        let t = map_of(t)
            .ok_or_else(|| invalid(format!("{name}: cradle::check_grants: `template` must be a list_vms() record")))?;
        let tname = opt_str(&spec, "template").or_else(|| opt_str(&t, "name")).unwrap_or_default();
        let tvmid = int_of(&t, "vmid")
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| invalid(format!("{name}: cradle::check_grants: the template has no `vmid`")))?;
        let mut f = Fact::new("global_os[vms_os].template", format!("{tname} (VMID {tvmid})"));
        f.template = Some((tvmid, tname.clone()));
        f.backend = backend_acts;
        out.push(f);
        if let Some(tnode) = opt_str(&t, "node") {
            let value = format!("{tname} on node {tnode} (where the clone is made)");
            let mut f = Fact::new("global_os[vms_os].template", value);
            f.node = Some(tnode);
            (f.backend, f.workflow) = (backend_acts, true);
            out.push(f);
        }
    }
    Ok(out)
}

/// The message of a refused fact.
fn refusal(vm: &str, fact: &Fact, holder: &Holder, denied: &policy::Denied) -> String {
    let section = format!("[{}.proxmox]", holder.origin);
    let widen = match &holder.implicit_plugin {
        Some(plugin) => format!(
            "write the grant out and widen it: the `{plugin}` plugin runs with its built-in default grants, so \
             cradle.toml has no [plugins.{plugin}] with a {section} yet (`cradle init` writes the defaults out)"
        ),
        None => format!("widen {section} in cradle.toml"),
    };
    format!(
        "host {vm}: {} {} is not granted to {} ({denied}): change {} in the inventory, or {widen}. Nothing was \
         changed",
        fact.field, fact.value, holder.who, fact.field
    )
}

pub(super) fn check_grants(ctx: &NativeCallContext, vm: &Map, opts: &Map) -> Res<()> {
    let name = str_of(vm, "name", "cradle::check_grants")?;
    let facts = facts(vm, &name, opts)?;
    let (backend, workflow) = with_run(ctx, |d| (d.backend_grants.clone(), d.workflow_grants.clone()))?;
    let backend = backend.map(|b| Holder {
        who: format!("the `{}` backend", b.name),
        origin: format!("plugins.{}.grants", b.name),
        implicit_plugin: b.grants.builtin_defaults.then(|| b.name.clone()),
        grants: b.grants,
    });
    let workflow = Holder {
        who: "the workflow".into(),
        origin: "workflow.grants".into(),
        grants: workflow,
        implicit_plugin: None,
    };
    let scope = RunScope::default();
    for fact in &facts {
        let holders = [fact.backend.then_some(backend.as_ref()).flatten(), fact.workflow.then_some(&workflow)];
        for holder in holders.into_iter().flatten() {
            if !holder.grants.allows(Capability::Proxmox) {
                continue;
            }
            if let Err(denied) = policy::check(&holder.grants, &holder.origin, &scope, &Call::Proxmox(fact.call())) {
                return Err(throw(CapError::new(
                    crate::contract::ErrorKind::Denied,
                    refusal(&name, fact, holder, &denied),
                )));
            }
        }
    }
    Ok(())
}
