//! Day-two maintenance over the inventory: `cradle plan` runs
//! `workflows/maintain.rhai::plan_vm(vm)` for each selected VM (reads only, no
//! lock) and gathers the answers into a [`PlanFile`]; `cradle apply` reads a
//! plan file, re-resolves its inventory and runs `apply_vm(vm)` for each VM with
//! operations. Both go through [`crate::provision::run_all`] (the same
//! runs, journals, `--forks` and live display as `cradle provision`), each
//! VM's `vm` carrying `vm.maintenance = #{ allow, planned, reboot,
//! terraform_plan }`.
//!
//! Contract:
//! - [`spec_digest`] is the sha256 of a VM's resolved vm-spec JSON; apply
//!   refuses a VM whose spec now resolves differently (the inventory changed
//!   since the review), and one no longer selected, without running anything
//!   for it.
//! - A VM whose plan holds no operation is reported `unchanged` with no run
//!   (unless `--reboot if-needed` and PVE held changes pending at plan time:
//!   its run reboots it for them).
//! - The plan file is checked before anything else (format, id, age,
//!   environment, cluster: [`plan_file::read`]); apply runs in the plan's
//!   environment only.

use std::path::Path;
use std::time::Duration;

use rhai::{Dynamic, Map};
use sha2::{Digest, Sha256};

use crate::caps::maintenance::{Allow, VmChanges};
use crate::config::Config;
use crate::inventory::{Inventory, VmPlan};
use crate::project::ProjectError;
use crate::provision::{Extra, HostResult, WorkflowVm};

pub mod plan_file;

pub use plan_file::{PlanFile, PlanFileError, PlannedVm};

/// The key of `vm` the maintenance workflow reads.
pub const VM_KEY: &str = "maintenance";

/// `--reboot`: whether apply may cold-start a VM whose changes PVE keeps
/// pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reboot {
    /// Never: pending changes stay pending until the operator's next boot.
    Never,
    /// A reboot through the API when a change is pending, verified by a new boot id.
    IfNeeded,
}

impl Reboot {
    /// As the workflow reads it (`vm.maintenance.reboot`).
    pub fn as_str(self) -> &'static str {
        match self {
            Reboot::Never => "never",
            Reboot::IfNeeded => "if-needed",
        }
    }
}

/// The cluster identity environment `env` uses now (the one lock keys use),
/// or a sentence saying there is no such environment.
pub fn cluster_of(config: &Config, env: &str) -> Result<String, String> {
    let (_, environment) = config.environment(Some(env)).map_err(|e| e.to_string())?;
    let cluster = config.clusters.get(&environment.cluster).ok_or_else(|| {
        format!("environment `{env}` names cluster `{}`, which cradle.toml does not define", environment.cluster)
    })?;
    Ok(crate::cluster::cluster_id(&environment.cluster, cluster))
}

/// sha256 hex of `plan`'s resolved vm-spec as JSON.
pub fn spec_digest(plan: &VmPlan, inv: &Inventory) -> Result<String, ProjectError> {
    let vm = WorkflowVm::new(plan, inv).map_err(|e| ProjectError::Environment(e.to_string()))?;
    let json = serde_json::to_string(&vm.spec)
        .map_err(|e| ProjectError::Environment(format!("the vm-spec of {}: {e}", plan.name)))?;
    Ok(hex::encode(Sha256::digest(json.as_bytes())))
}

/// The backend a host's VM is on.
fn backend_of(plan: &VmPlan) -> &'static str {
    if plan.use_terraform { "terraform" } else { "direct" }
}

fn to_script(value: &impl serde::Serialize, what: &str) -> Result<Dynamic, ProjectError> {
    rhai::serde::to_dynamic(value).map_err(|e| ProjectError::Environment(format!("{what}: {e}")))
}

/// `vm.maintenance` for `plan_vm(vm)`: the flags; nothing planned yet.
pub fn plan_extra(allow: Allow, plans: &[VmPlan]) -> Result<Extra, ProjectError> {
    let mut value = Map::new();
    value.insert("allow".into(), to_script(&allow, "the --allow flags")?);
    value.insert("planned".into(), Dynamic::UNIT);
    value.insert("reboot".into(), Dynamic::UNIT);
    value.insert("terraform_plan".into(), Dynamic::UNIT);
    let value: Dynamic = value.into();
    Ok(Extra { key: VM_KEY, by_vm: plans.iter().map(|p| (p.name.clone(), value.clone())).collect() })
}

/// One VM's answer to `plan_vm(vm)`.
#[derive(Debug, Clone)]
pub struct PlanOutcome {
    /// The run's outcome (`result`: `changes`, `unchanged`, `blocked`, or failed).
    pub host: HostResult,
    /// The VM's entry in the plan file, when it could be planned.
    pub planned: Option<PlannedVm>,
}

impl PlanOutcome {
    /// Whether the VM was planned (not failed, not blocked).
    pub fn ok(&self) -> bool {
        self.host.ok() && self.planned.is_some()
    }
}

/// What the plan file records besides its VMs.
pub struct PlanHeader<'a> {
    /// The cluster identity.
    pub cluster: String,
    /// The environment.
    pub environment: String,
    /// The inventory path as given.
    pub inventory: &'a Path,
    /// `--limit`.
    pub limit: Option<String>,
    /// The `--allow-*` flags.
    pub allow: Allow,
}

/// Gather `plan_vm(vm)`'s answers into the plan file (VMs in inventory order)
/// and each VM's outcome. A `blocked` VM, or one whose run failed, is not in
/// the file.
pub fn collect_plan(
    header: PlanHeader<'_>,
    plans: &[VmPlan],
    inv: &Inventory,
    results: Vec<HostResult>,
) -> Result<(PlanFile, Vec<PlanOutcome>), ProjectError> {
    let inventory = std::path::absolute(header.inventory)
        .map_err(|e| ProjectError::Environment(format!("the inventory path {}: {e}", header.inventory.display())))?;
    let mut file = PlanFile {
        format: plan_file::FORMAT.into(),
        id: String::new(),
        created: plan_file::now_rfc3339(),
        cluster: header.cluster,
        environment: header.environment,
        inventory,
        limit: header.limit,
        allow: header.allow,
        vms: Vec::new(),
    };
    let mut outcomes = Vec::new();
    for mut host in results {
        let plan = plans.iter().find(|p| p.name == host.name);
        let planned = match (plan, host.ok(), host.result.as_str()) {
            (Some(plan), true, "changes" | "unchanged") => match planned_vm(plan, inv, &host) {
                Ok(p) => Some(p),
                Err(e) => {
                    host.error = Some(e.clone());
                    host.problem = Some(e);
                    None
                }
            },
            _ => None,
        };
        if let Some(p) = &planned {
            file.vms.push(p.clone());
        }
        outcomes.push(PlanOutcome { host, planned });
    }
    Ok((file, outcomes))
}

fn planned_vm(plan: &VmPlan, inv: &Inventory, host: &HostResult) -> Result<PlannedVm, String> {
    let value = host.value.as_ref().ok_or("the workflow returned no result map")?;
    let planned = value.get("planned").ok_or("maintain.rhai's plan_vm(vm) returned no `planned`")?;
    let changes: VmChanges = serde_json::from_value(crate::workflow::values::to_json(planned))
        .map_err(|e| format!("maintain.rhai's plan_vm(vm) returned a `planned` that is not a VM's changes: {e}"))?;
    let terraform_plan = value.get("terraform_plan").filter(|v| !v.is_unit()).map(|v| v.to_string());
    Ok(PlannedVm {
        host: plan.host.as_str().to_string(),
        backend: backend_of(plan).into(),
        spec_digest: spec_digest(plan, inv).map_err(|e| e.to_string())?,
        changes,
        terraform_plan,
    })
}

/// What `cradle apply` runs, and what it settles without a run.
pub struct ApplySelection {
    /// The VMs to run `apply_vm(vm)` for.
    pub run: Vec<VmPlan>,
    /// Their `vm.maintenance`.
    pub extra: Extra,
    /// VMs refused (failed) or unchanged without a run.
    pub settled: Vec<HostResult>,
    /// The plan file's VM names, in its order (the order results are shown).
    pub order: Vec<String>,
}

fn settled(pv: &PlannedVm, result: &str, error: Option<String>, detail: Option<String>) -> HostResult {
    HostResult {
        name: pv.changes.name.clone(),
        vmid: Some(pv.changes.vmid),
        node: pv.changes.node.clone(),
        result: result.into(),
        detail,
        problem: error.clone(),
        error,
        run_id: None,
        duration: Duration::ZERO,
        value: None,
    }
}

/// Match the plan file's VMs with the inventory as it resolves now (`plans`:
/// the plan's inventory, `--limit` and environment).
pub fn apply_selection(
    file: &PlanFile,
    plans: Vec<VmPlan>,
    inv: &Inventory,
    reboot: Reboot,
) -> Result<ApplySelection, ProjectError> {
    let mut sel = ApplySelection {
        run: Vec::new(),
        extra: Extra { key: VM_KEY, ..Extra::default() },
        settled: Vec::new(),
        order: Vec::new(),
    };
    let mut plans: Vec<Option<VmPlan>> = plans.into_iter().map(Some).collect();
    for pv in &file.vms {
        sel.order.push(pv.changes.name.clone());
        let Some(plan) =
            plans.iter_mut().find(|p| p.as_ref().is_some_and(|p| p.host.as_str() == pv.host)).and_then(Option::take)
        else {
            let why = format!(
                "{}: host `{}` is no longer selected in {}{}; plan again",
                pv.changes.name,
                pv.host,
                file.inventory.display(),
                file.limit.as_deref().map(|l| format!(" with --limit {l}")).unwrap_or_default()
            );
            sel.settled.push(settled(pv, "refused", Some(why), None));
            continue;
        };
        if spec_digest(&plan, inv)? != pv.spec_digest {
            let why = format!(
                "{}: the inventory changed since the plan (the VM's spec resolves differently now); nothing was \
                 changed; plan again",
                pv.changes.name
            );
            sel.settled.push(settled(pv, "refused", Some(why), None));
            continue;
        }
        let owed_reboot = reboot == Reboot::IfNeeded && pv.had_pending();
        if !pv.has_operations() && !owed_reboot {
            sel.settled.push(settled(pv, "unchanged", None, Some("nothing to apply".into())));
            continue;
        }
        let mut value = Map::new();
        value.insert("allow".into(), to_script(&file.allow, "the plan's allow")?);
        let planned = crate::caps::maintenance::rhai::planned_map(&pv.changes)
            .map_err(|e| ProjectError::Environment(format!("the plan of {}: {e}", pv.changes.name)))?;
        value.insert("planned".into(), planned.into());
        value.insert("reboot".into(), reboot.as_str().into());
        value.insert(
            "terraform_plan".into(),
            pv.terraform_plan.as_ref().map(|t| Dynamic::from(t.clone())).unwrap_or(Dynamic::UNIT),
        );
        sel.extra.by_vm.insert(plan.name.clone(), value.into());
        sel.run.push(plan);
    }
    Ok(sel)
}

/// Apply's results in the plan file's order: the settled ones and the runs'.
pub fn in_plan_order(order: &[String], mut results: Vec<HostResult>) -> Vec<HostResult> {
    results.sort_by_key(|r| order.iter().position(|n| *n == r.name).unwrap_or(usize::MAX));
    results
}
