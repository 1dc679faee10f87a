//! `cradle plan` and `cradle apply`: day-two hardware changes to complete VMs
//! (issue 34).
//!
//! - `cradle plan -i INVENTORY [--limit P] [--env E] [--out PLAN]
//!   [--allow-disk-removal] [--allow-nic-replacement] [--allow-disk-move]
//!   [--forks N]`: for each
//!   selected VM, what differs between the inventory and the live config, one
//!   line per change (what, from → to, class, the flag that allows it or
//!   why), then a summary line; with `--out`, the plan file (0600). Reads
//!   only: no lock, no write to the cluster.
//! - `cradle apply PLAN [--reboot never|if-needed] [--forks N]`: applies
//!   exactly that plan, VM by VM, and prints a row per VM (applied,
//!   applied-pending, unchanged, refused, failed) with its run id.
//!
//! `--output json` prints one JSON document instead. Both exit 0 only when
//! every VM succeeded (a VM blocked, refused or failed: 1).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde_json::json;

use super::provision::{Selection, SelectionArgs, forks_value, select, select_in};
use super::{Cli, Output, outln, print_json};
use crate::caps::maintenance::{Allow, Change, Class};
use crate::maintain::{self, PlanHeader, PlanOutcome, Reboot, plan_file};
use crate::provision::{Action, HostResult};
use crate::text::printable;

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub hosts: SelectionArgs,
    /// Write the plan to this file (owner-only) for `cradle apply PLAN`.
    /// Without it, the plan is only printed.
    #[arg(long, value_name = "PLAN")]
    pub out: Option<PathBuf>,
    /// Let the plan remove data disks the inventory no longer lists (their
    /// volumes are kept as `unusedN`).
    #[arg(long)]
    pub allow_disk_removal: bool,
    /// Let the plan change a NIC's model or MAC, or remove a NIC the
    /// inventory no longer lists (the guest sees a NIC replaced).
    #[arg(long)]
    pub allow_nic_replacement: bool,
    /// Let the plan move a disk (the boot disk included) to the storage the
    /// inventory names: PVE copies it, online on a running VM, and keeps the
    /// old volume as `unusedN`.
    #[arg(long)]
    pub allow_disk_move: bool,
    /// VMs read at once.
    #[arg(long, default_value_t = 5, value_parser = forks_value)]
    pub forks: usize,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The plan file `cradle plan --out PLAN` wrote.
    #[arg(value_name = "PLAN")]
    pub plan: PathBuf,
    /// Whether to reboot a running VM whose changes PVE keeps pending until a
    /// cold start: `never` leaves them pending (reported), `if-needed` reboots
    /// it once through the API and checks the guest came back with a new boot id.
    #[arg(long, value_enum, default_value_t = RebootArg::Never)]
    pub reboot: RebootArg,
    /// VMs worked on at once.
    #[arg(long, default_value_t = 5, value_parser = forks_value)]
    pub forks: usize,
}

/// `--reboot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RebootArg {
    /// Never reboot: changes PVE keeps pending stay pending until the next boot.
    Never,
    /// Reboot a running VM once when a change is pending, verified by a new boot id.
    IfNeeded,
}

impl From<RebootArg> for Reboot {
    fn from(r: RebootArg) -> Reboot {
        match r {
            RebootArg::Never => Reboot::Never,
            RebootArg::IfNeeded => Reboot::IfNeeded,
        }
    }
}

pub async fn plan(cli: &Cli, args: &PlanArgs) -> anyhow::Result<ExitCode> {
    if args.out.as_deref().is_some_and(|p| p.as_os_str() == "-") {
        anyhow::bail!("--out -: a plan is written to a file only (owner-only, 0600), never to stdout; give a path");
    }
    let selected = select(cli, args.hosts.selection())?;
    let cluster = maintain::cluster_of(&selected.project.config, &selected.env).map_err(anyhow::Error::msg)?;
    let allow = Allow {
        disk_removal: args.allow_disk_removal,
        nic_replacement: args.allow_nic_replacement,
        disk_move: args.allow_disk_move,
    };
    let (plans, inv, env) = (selected.plans.clone(), selected.inv.clone(), selected.env.clone());
    let extra = maintain::plan_extra(allow, &plans)?;
    let results = selected.run(plans.clone(), Action::MaintainPlan, args.forks, extra).await?;
    let header = PlanHeader {
        cluster,
        environment: env,
        inventory: &args.hosts.inventory,
        limit: args.hosts.limit.clone(),
        allow,
    };
    let (mut file, outcomes) = maintain::collect_plan(header, &plans, &inv, results)?;
    if let Some(out) = &args.out {
        file.write(out)?;
    }
    print_plan(cli, &file, &outcomes, args.out.as_deref())
}

/// Counts of the summary line.
#[derive(Default)]
struct Counts {
    planned: usize,
    unchanged: usize,
    blocked: usize,
    failed: usize,
    live: usize,
    next_boot: usize,
    refused: usize,
}

fn counts(outcomes: &[PlanOutcome]) -> Counts {
    let mut c = Counts::default();
    for o in outcomes {
        match &o.planned {
            Some(p) => {
                c.planned += 1;
                if p.changes.changes.is_empty() {
                    c.unchanged += 1;
                }
                for ch in &p.changes.changes {
                    match ch.class {
                        Class::Live => c.live += 1,
                        Class::NextBoot => c.next_boot += 1,
                        Class::Refused => c.refused += 1,
                    }
                }
            }
            None if o.host.ok() && o.host.result == "blocked" => c.blocked += 1,
            None => c.failed += 1,
        }
    }
    c
}

fn class_word(class: Class) -> &'static str {
    match class {
        Class::Live => "live",
        Class::NextBoot => "next-boot",
        Class::Refused => "refused",
    }
}

/// Column widths of one VM's change lines: what, from, to.
fn widths(changes: &[Change]) -> (usize, usize, usize) {
    let w = |f: &dyn Fn(&Change) -> usize| changes.iter().map(f).max().unwrap_or(0);
    (
        w(&|c| c.what.chars().count()),
        w(&|c| c.from.as_deref().unwrap_or(NONE).chars().count()),
        w(&|c| c.to.as_deref().unwrap_or(REMOVED).chars().count()),
    )
}

const NONE: &str = "(none)";
const REMOVED: &str = "(removed)";

/// One change as the operator reads it: what, from → to, class, why (and the
/// flag that would allow a refused one), in columns of `widths`.
fn change_line(ch: &Change, (what_w, from_w, to_w): (usize, usize, usize)) -> String {
    let from = ch.from.as_deref().unwrap_or(NONE);
    let to = ch.to.as_deref().unwrap_or(REMOVED);
    let why = match &ch.flag {
        Some(flag) => format!("needs {flag}: {}", ch.why),
        None => ch.why.clone(),
    };
    format!(
        "  {:<what_w$}  {:>from_w$} → {:<to_w$}  {:<9}  {}",
        printable(&ch.what),
        printable(from),
        printable(to),
        class_word(ch.class),
        printable(&why)
    )
}

fn print_plan(
    cli: &Cli,
    file: &plan_file::PlanFile,
    outcomes: &[PlanOutcome],
    out: Option<&std::path::Path>,
) -> anyhow::Result<ExitCode> {
    let ok = outcomes.iter().all(PlanOutcome::ok);
    let c = counts(outcomes);
    match cli.output {
        Output::Json => print_json(&json!({
            "ok": ok,
            "plan": out.map(|p| p.display().to_string()),
            "id": out.map(|_| file.id.clone()),
            "cluster": file.cluster,
            "environment": file.environment,
            "vms": outcomes.iter().map(|o| json!({
                "name": o.host.name,
                "host": o.planned.as_ref().map(|p| p.host.clone()),
                "vmid": o.host.vmid,
                "node": o.host.node,
                "result": if o.host.ok() { o.host.result.as_str() } else { "failed" },
                "why": o.host.detail,
                "error": o.host.error,
                "run_id": o.host.run_id,
                "running": o.planned.as_ref().map(|p| p.changes.running),
                "changes": o.planned.as_ref().map(|p| p.changes.changes.clone()).unwrap_or_default(),
                "terraform_plan": o.planned.as_ref().and_then(|p| p.terraform_plan.clone()),
            })).collect::<Vec<_>>(),
            "summary": {
                "vms": outcomes.len(), "planned": c.planned, "unchanged": c.unchanged, "blocked": c.blocked,
                "failed": c.failed, "live": c.live, "next_boot": c.next_boot, "refused": c.refused,
            },
        }))?,
        Output::Text => {
            for o in outcomes {
                let h = &o.host;
                let vmid = h.vmid.map(|v| format!("vmid {v}")).unwrap_or_else(|| "no vmid".into());
                let name = printable(&h.name);
                match &o.planned {
                    Some(p) if p.changes.changes.is_empty() => {
                        outln!("{name} ({vmid} on {}): unchanged", printable(&h.node))?;
                        pending_line(p)?;
                    }
                    Some(p) => {
                        let state = if p.changes.running { "running" } else { "stopped" };
                        let n = p.changes.changes.len();
                        outln!("{name} ({vmid} on {}, {state}): {n} change{}", printable(&h.node), plural(n))?;
                        let w = widths(&p.changes.changes);
                        for ch in &p.changes.changes {
                            outln!("{}", change_line(ch, w))?;
                        }
                        terraform_line(p, h.detail.as_deref())?;
                        pending_line(p)?;
                    }
                    None if h.ok() => {
                        let why = h.detail.as_deref().unwrap_or("");
                        outln!("{name} ({vmid}): {}: {}", printable(&h.result), printable(why))?;
                    }
                    None => {
                        let why = h.problem.as_deref().or(h.error.as_deref()).unwrap_or("");
                        outln!("{name} ({vmid}): failed: {}", printable(why))?;
                    }
                }
            }
            let written = match out {
                Some(p) => format!("plan written to {} (0600)", p.display()),
                None => "plan not written (no --out)".into(),
            };
            outln!(
                "{} VM{}: {} planned ({} unchanged), {} blocked, {} failed; changes: {} live, {} next-boot, {} \
                 refused; {written}",
                outcomes.len(),
                plural(outcomes.len()),
                c.planned,
                c.unchanged,
                c.blocked,
                c.failed,
                c.live,
                c.next_boot,
                c.refused
            )?;
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The terraform backend's saved plan and what it changes, from the VM's
/// `why` (workflows/maintain.rhai: `...; terraform plan ID: SUMMARY`).
fn terraform_line(p: &maintain::PlannedVm, why: Option<&str>) -> std::io::Result<()> {
    let Some(id) = &p.terraform_plan else { return Ok(()) };
    let summary = why.and_then(|w| w.find("terraform plan ").map(|i| &w[i..]));
    match summary {
        Some(s) => outln!("  {}", printable(s)),
        None => outln!("  terraform plan {}", printable(id)),
    }
}

/// What PVE already held pending when the plan was made.
fn pending_line(p: &maintain::PlannedVm) -> std::io::Result<()> {
    if p.changes.pending_before.is_empty() {
        return Ok(());
    }
    outln!(
        "  pending in PVE already (until the next cold start; `cradle apply --reboot if-needed` applies them): {}",
        printable(&p.changes.pending_before.join(", "))
    )
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

pub async fn apply(cli: &Cli, args: &ApplyArgs) -> anyhow::Result<ExitCode> {
    // One project: its config checks the plan file, then runs the plan's VMs.
    let project = cli.project()?;
    let file = {
        let config = &project.config;
        let cluster_of = |env: &str| maintain::cluster_of(config, env);
        let expect = plan_file::Expect {
            now: time::OffsetDateTime::now_utc(),
            max_age: config.maintenance.plan_max_age,
            cluster_of: &cluster_of,
        };
        plan_file::read(&args.plan, &expect)?
    };
    let selection =
        Selection { inventory: &file.inventory, limit: file.limit.as_deref(), env: Some(&file.environment) };
    let selected = select_in(cli, project, selection)?;
    let sel = maintain::apply_selection(&file, selected.plans.clone(), &selected.inv, args.reboot.into())?;
    let mut results = sel.settled;
    if !sel.run.is_empty() {
        results.extend(selected.run(sel.run, Action::MaintainApply, args.forks, sel.extra).await?);
    }
    let results = maintain::in_plan_order(&sel.order, results);
    print_applied(cli, &args.plan, &results)
}

fn print_applied(cli: &Cli, plan: &std::path::Path, results: &[HostResult]) -> anyhow::Result<ExitCode> {
    let ok = results.iter().all(|r| r.ok() && r.result != "refused");
    let result_of = |r: &HostResult| if r.ok() { r.result.clone() } else { "failed".to_string() };
    match cli.output {
        Output::Json => print_json(&json!({
            "ok": ok,
            "plan": plan.display().to_string(),
            "vms": results.iter().map(|r| json!({
                "name": r.name, "vmid": r.vmid, "node": r.node, "result": result_of(r),
                "why": r.detail, "error": r.error, "run_id": r.run_id, "duration_ms": r.duration.as_millis() as u64,
            })).collect::<Vec<_>>(),
        }))?,
        Output::Text => {
            outln!("{:<20} {:>6} {:<8} {:<15} {:>9}  {:<26} DETAIL", "VM", "VMID", "NODE", "RESULT", "TIME", "RUN")?;
            for r in results {
                let detail = r.problem.as_deref().or(r.error.as_deref()).or(r.detail.as_deref()).unwrap_or("");
                let vmid = r.vmid.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
                outln!(
                    "{:<20} {:>6} {:<8} {:<15} {:>8.1}s  {:<26} {}",
                    printable(&r.name),
                    vmid,
                    printable(&r.node),
                    result_of(r),
                    r.duration.as_secs_f64(),
                    r.run_id.as_deref().unwrap_or("-"),
                    printable(detail)
                )?;
            }
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
