//! Running one workflow function per inventory VM (`provision`, `check` or
//! `remove_vm`, see [`Action`]) with bounded concurrency (`--forks`), each its
//! own run and journal, results gathered for the summary.
//!
//! The workflow gets `vm`, a [`WorkflowVm`] converted once ([`vm_value`]): the
//! backend's `vm-spec` under `spec`, the guest login under `ssh`, the NICs with
//! their DNS settings, the guest settings of the inventory
//! ([`crate::inventory::GuestVars`]) and optional bounds under `wait`. Every
//! VM's value is built before the first run starts. Nothing here talks to the
//! cluster but one reachability check before the first run
//! ([`Project::check_reachable`]: a refused endpoint is one error, not one per
//! VM); the rest is the workflow's job, through the capabilities.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rhai::{Dynamic, Map};

use crate::caps::policy::{ScopedVm, SshLogin};
use crate::inventory::{Inventory, VmPlan};
use crate::project::{Loaded, Progress, Project, ProjectError, RunRequest, VmFinished};

pub mod forks;
#[cfg(test)]
mod tests;
mod vm;

pub use vm::{WorkflowSsh, WorkflowVm};

/// The management user when the inventory sets no `ansible_user`.
pub const DEFAULT_USER: &str = "cradle";

/// The outcome of one VM.
#[derive(Debug, Clone)]
pub struct HostResult {
    /// Canonical VM name.
    pub name: String,
    /// VMID.
    pub vmid: Option<u32>,
    /// Node.
    pub node: String,
    /// `created`, `finalized`, `skipped`, `failed` (or, for `--check`,
    /// `create`, `finalize`, `skip`, `blocked`).
    pub result: String,
    /// Why (for `--check`) or what changed.
    pub detail: Option<String>,
    /// The error, when failed.
    pub error: Option<String>,
    /// The error as the summary table shows it: the problem first, then
    /// where in the workflow it was raised (`WorkflowError::problem_first`).
    pub problem: Option<String>,
    /// The run that did it.
    pub run_id: Option<String>,
    /// Wall time.
    pub duration: Duration,
    /// The map the workflow returned, whole (`cradle plan` reads its `planned`).
    pub value: Option<Map>,
}

impl HostResult {
    /// Whether the VM succeeded.
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
}

/// The workflow's `vm` value for `plan`, with extra host variables from the inventory.
pub fn vm_value(plan: &VmPlan, inv: &Inventory) -> Result<Dynamic, ProjectError> {
    let vm = WorkflowVm::new(plan, inv).map_err(|e| ProjectError::Environment(e.to_string()))?;
    vm.to_dynamic().map_err(|e| ProjectError::Environment(format!("the workflow value of {}: {e}", plan.name)))
}

/// What a run about `plan`'s VM may touch: the VM, and its guest over SSH.
pub fn scoped(plan: &VmPlan) -> ScopedVm {
    ScopedVm {
        name: plan.name.clone(),
        vmid: plan.vmid.unwrap_or(0),
        ssh: Some(SshLogin {
            host: plan.ssh.host.clone(),
            port: plan.ssh.port,
            user: plan.ssh.user.clone().unwrap_or_else(|| DEFAULT_USER.into()),
        }),
        owned: false,
        allow_replacement: plan.terraform_allow_replacement,
    }
}

fn field(map: &Map, key: &str) -> Option<String> {
    map.get(key).filter(|v| !v.is_unit()).map(|v| v.to_string())
}

/// What to call for each VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `provision.rhai::provision(vm)`.
    Provision,
    /// `provision.rhai::check(vm)`: changes nothing.
    Check,
    /// `remove.rhai::remove_vm(vm)`.
    Remove,
    /// `maintain.rhai::plan_vm(vm)`: reads only (`cradle plan`).
    MaintainPlan,
    /// `maintain.rhai::apply_vm(vm)` (`cradle apply`).
    MaintainApply,
}

impl Action {
    /// The script and function for a VM of the built-in type (`None`) or of
    /// type `vm_type` (`workflows/<type>.rhai`, which defines all three).
    ///
    /// Maintenance is always `workflows/maintain.rhai`'s: it works on the
    /// built-in template type's PVE config and blocks a VM of another type.
    fn entry(self, vm_type: Option<&str>) -> (String, &'static str) {
        let (builtin, func) = match self {
            Action::Provision => ("provision", "provision"),
            Action::Check => ("provision", "check"),
            Action::Remove => ("remove", "remove_vm"),
            Action::MaintainPlan => return ("maintain".into(), "plan_vm"),
            Action::MaintainApply => return ("maintain".into(), "apply_vm"),
        };
        (vm_type.unwrap_or(builtin).to_string(), func)
    }

    /// Whether a VM's `vms_type` picks the workflow.
    fn typed(self) -> bool {
        !matches!(self, Action::MaintainPlan | Action::MaintainApply)
    }
}

/// Every VM type the plans name must be a workflow with the function
/// `action` calls, before any run starts.
fn check_types(loaded: &Loaded, plans: &[VmPlan], action: Action) -> Result<(), ProjectError> {
    for plan in plans {
        let Some(t) = plan.vm_type.as_deref().filter(|_| action.typed()) else { continue };
        let (script, func) = action.entry(Some(t));
        let has =
            loaded.workflows.functions(&script).map(|fs| fs.iter().any(|f| f.name == func && f.params.len() == 1));
        match has {
            Ok(true) => {}
            Ok(false) => {
                return Err(ProjectError::Environment(format!(
                    "{}: vms_type `{t}`: workflows/{t}.rhai has no function `{func}(vm)`; a VM type's workflow \
                     defines provision(vm), check(vm) and remove_vm(vm) (docs/VM-TYPES.md)",
                    plan.name
                )));
            }
            Err(_) => {
                return Err(ProjectError::Environment(format!(
                    "{}: vms_type `{t}` has no workflow: add workflows/{t}.rhai (docs/VM-TYPES.md) or fix vms_type in \
                     the inventory; nothing was run",
                    plan.name
                )));
            }
        }
    }
    Ok(())
}

/// The backend a host with `vms_use_terraform` runs on.
const TERRAFORM: &str = "terraform";

/// Tell the display and the log that `out`'s VM ended.
fn finished(project: &Project, out: &HostResult) {
    let result = if out.ok() { out.result.as_str() } else { "failed" };
    project.progress.send(Progress::Finished(VmFinished {
        vm: out.name.clone(),
        result: result.to_string(),
        ok: out.ok(),
        duration: out.duration,
    }));
    let secs = out.duration.as_secs_f64();
    // Plugin, guest and cluster text: control characters (a forged line, a
    // terminal escape) are made printable before they reach the terminal.
    let detail = out
        .problem
        .as_deref()
        .or(out.detail.as_deref())
        .map(|d| format!(": {}", crate::text::printable(d)))
        .unwrap_or_default();
    let name = crate::text::printable(&out.name);
    // The row of a live display says it already; without one, this is the VM's line.
    match (project.progress.is_active(), out.ok()) {
        (true, _) => tracing::debug!("{name} {result} in {secs:.1}s{detail}"),
        (false, true) => tracing::info!("{name} {result} in {secs:.1}s{detail}"),
        (false, false) => tracing::error!("{name} {result} in {secs:.1}s{detail}"),
    }
}

/// A value added to each VM's `vm` under one key (`vm.maintenance` for
/// `cradle plan` and `cradle apply`), by canonical VM name; a VM without one
/// gets no such key.
#[derive(Debug, Clone, Default)]
pub struct Extra {
    /// The key of `vm`.
    pub key: &'static str,
    /// The value of each VM, by name.
    pub by_vm: HashMap<String, Dynamic>,
}

/// Run `action` for every plan, at most `forks` at a time, `extra` added to
/// each VM's `vm` value (`Extra::default()`: nothing added).
#[allow(clippy::too_many_arguments, reason = "one run's inputs, each used once")]
pub async fn run_all(
    project: Arc<Project>,
    loaded: Arc<Loaded>,
    inv: Arc<Inventory>,
    plans: Vec<VmPlan>,
    env: Option<String>,
    action: Action,
    forks: usize,
    extra: Extra,
) -> Result<Vec<HostResult>, ProjectError> {
    check_types(&loaded, &plans, action)?;
    let permits = Arc::new(tokio::sync::Semaphore::new(forks.max(1)));
    // Every VM's value first: a bad one stops the command before any run starts.
    let vms = plans
        .iter()
        .map(|plan| {
            let mut vm = vm_value(plan, &inv)?;
            if let (Some(value), Some(mut map)) = (extra.by_vm.get(&plan.name), vm.clone().try_cast::<Map>()) {
                map.insert(extra.key.into(), value.clone());
                vm = map.into();
            }
            Ok(vm)
        })
        .collect::<Result<Vec<_>, ProjectError>>()?;
    if let Some(plan) = plans.iter().find(|p| p.use_terraform && !loaded.plugins.contains_key(TERRAFORM)) {
        return Err(ProjectError::Environment(format!(
            "{}: {}",
            plan.name,
            crate::project::missing_backend(TERRAFORM)
        )));
    }
    if !plans.is_empty() {
        let (p, env) = (project.clone(), env.clone());
        tokio::task::spawn_blocking(move || p.check_reachable(env.as_deref()))
            .await
            .map_err(|e| ProjectError::Environment(format!("the cluster reachability check did not finish: {e}")))??;
    }
    project.progress.send(Progress::Planned(plans.iter().map(|p| p.name.clone()).collect()));
    let mut tasks = Vec::new();
    for (plan, vm) in plans.into_iter().zip(vms) {
        let (project, loaded, permits, env) = (project.clone(), loaded.clone(), permits.clone(), env.clone());
        let (script, func) = action.entry(plan.vm_type.as_deref());
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
            let started = Instant::now();
            let req = RunRequest {
                env,
                script,
                func: func.into(),
                args: vec![vm],
                argv: std::env::args().collect(),
                vms: vec![scoped(&plan)],
                backend: plan.use_terraform.then(|| TERRAFORM.to_string()),
            };
            let runner = project.clone();
            let report = tokio::task::spawn_blocking(move || runner.run(&loaded, req)).await;
            let mut out = HostResult {
                name: plan.name.clone(),
                vmid: plan.vmid,
                node: plan.node.clone(),
                result: "failed".into(),
                detail: None,
                error: None,
                problem: None,
                run_id: None,
                duration: started.elapsed(),
                value: None,
            };
            match report {
                Err(e) => out.error = Some(format!("the run of {} did not finish: {e}", plan.name)),
                Ok(Err(e)) => out.error = Some(e.to_string()),
                Ok(Ok(report)) => {
                    out.run_id = Some(report.run_id.clone());
                    match report.result {
                        Err(e) => {
                            out.error = Some(e.to_string());
                            out.problem = Some(e.problem_first());
                        }
                        Ok(v) => match v.try_cast::<Map>() {
                            Some(m) => {
                                out.result = field(&m, "result").unwrap_or_else(|| "unknown".into());
                                out.detail = field(&m, "why");
                                if let Some(node) = field(&m, "node") {
                                    out.node = node;
                                }
                                if let Some(vmid) = field(&m, "vmid").and_then(|v| v.parse().ok()) {
                                    out.vmid = Some(vmid);
                                }
                                out.value = Some(m);
                            }
                            None => out.error = Some("the workflow returned no result map".into()),
                        },
                    }
                }
            }
            if out.error.is_some() && out.problem.is_none() {
                out.problem.clone_from(&out.error);
            }
            finished(&project, &out);
            out
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        match t.await {
            Ok(r) => results.push(r),
            Err(e) => return Err(ProjectError::Environment(format!("a provisioning task failed: {e}"))),
        }
    }
    Ok(results)
}
