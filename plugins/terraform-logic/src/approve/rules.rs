//! The approval rules (see the module docs of [`super`] for the contract and order).

use serde_json::Value;

use super::action::{Action, ActionReason};
use super::plan::{Plan, ResourceChange, ResourceMode};
use super::summary::{changed_attributes, line};
use super::{Approval, ApprovedAction, Expected, Mode, Rejection};
use crate::{ResourceKind, format};

/// The approved change of the expected address, before plan-wide checks finish.
struct Own {
    approved: ApprovedAction,
    action: Action,
    summary: String,
}

pub(super) fn check(plan_json: &str, expected: &Expected) -> Result<Approval, Rejection> {
    let plan = parse(plan_json, expected)?;
    plan_level(&plan, expected)?;

    let mut notes = Vec::new();
    drift(&plan, expected, &mut notes)?;

    let (own, others): (Vec<&ResourceChange>, Vec<&ResourceChange>) =
        plan.resource_changes.iter().partition(|rc| rc.address == expected.address && rc.deposed.is_none());
    if own.len() > 1 {
        return Err(Rejection::Inconsistent {
            address: expected.address.clone(),
            found: expected.address.clone(),
            detail: format!("the plan lists {} changes for the same object", own.len()),
        });
    }
    let own = own.first().map(|rc| own_change(rc, expected)).transpose()?;
    for rc in others {
        other_change(rc, expected, &mut notes)?;
    }
    prior_state(&plan, expected, &mut notes)?;
    outputs(&plan, expected, &mut notes)?;

    let Some(own) = own else {
        let address = expected.address.clone();
        return Err(match expected.mode {
            Mode::Apply => Rejection::MissingFromPlan { address },
            Mode::Destroy => Rejection::NothingToDestroy { address },
        });
    };
    if plan.applyable == Some(false) && own.approved != ApprovedAction::NoOp {
        return Err(Rejection::NotApplyable { address: expected.address.clone(), action: own.action });
    }

    let mut summary = vec![own.summary];
    summary.append(&mut notes);
    Ok(Approval { action: own.approved, summary })
}

/// JSON first, then `format_version`, then the typed plan: an unsupported major
/// version is reported as such even if its shape no longer fits.
fn parse(plan_json: &str, expected: &Expected) -> Result<Plan, Rejection> {
    let unparseable = |reason: String| Rejection::Unparseable { address: expected.address.clone(), reason };
    let value: Value = serde_json::from_str(plan_json).map_err(|e| unparseable(e.to_string()))?;
    if !value.is_object() {
        return Err(unparseable("not a JSON object".to_owned()));
    }
    match value.get("format_version") {
        Some(Value::String(version)) if format::is_supported(version) => {}
        other => {
            return Err(Rejection::UnsupportedFormat {
                address: expected.address.clone(),
                format_version: other.map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)),
            });
        }
    }
    serde_json::from_value(value).map_err(|e| unparseable(e.to_string()))
}

fn plan_level(plan: &Plan, expected: &Expected) -> Result<(), Rejection> {
    let address = || expected.address.clone();
    if plan.errored == Some(true) {
        return Err(Rejection::Errored { address: address() });
    }
    if plan.complete == Some(false) {
        return Err(Rejection::Incomplete { address: address() });
    }
    if !plan.deferred_changes.is_empty() {
        let addresses = plan
            .deferred_changes
            .iter()
            .map(|d| d.pointer("/resource_change/address").and_then(Value::as_str).unwrap_or("(unknown)").to_owned())
            .collect();
        return Err(Rejection::Deferred { address: address(), count: plan.deferred_changes.len(), addresses });
    }
    let invocations = plan.action_invocations.len() + plan.deferred_action_invocations.len();
    if invocations > 0 {
        return Err(Rejection::ActionInvocations { address: address(), count: invocations });
    }
    Ok(())
}

fn drift(plan: &Plan, expected: &Expected, notes: &mut Vec<String>) -> Result<(), Rejection> {
    for rc in &plan.resource_drift {
        let address = expected.address.clone();
        let action = rc.action();
        if rc.address != expected.address || rc.deposed.is_some() || rc.module_address.is_some() {
            return Err(Rejection::OtherResourceDrift { address, found: rc.address.clone(), action });
        }
        match action {
            Action::Delete => return Err(Rejection::DeletedOutsideTerraform { address }),
            Action::Unknown(_) => return Err(Rejection::UnknownAction { address, found: rc.address.clone(), action }),
            Action::NoOp => {}
            Action::Update => notes.push(line(
                format!("{} was changed outside Terraform (the plan above already accounts for it)", rc.address),
                &changed_attributes(&rc.change),
            )),
            _ => {
                return Err(Rejection::Inconsistent {
                    address,
                    found: rc.address.clone(),
                    detail: format!("drift is reported as {action}, only update or delete are possible"),
                });
            }
        }
    }
    Ok(())
}

fn own_change(rc: &ResourceChange, expected: &Expected) -> Result<Own, Rejection> {
    let address = || expected.address.clone();
    let found = || rc.address.clone();
    let action = rc.action();
    match rc.mode() {
        ResourceMode::Managed => {}
        ResourceMode::Data => {
            return Err(Rejection::Inconsistent {
                address: address(),
                found: found(),
                detail: "it is a data source, cradle expects a managed resource".to_owned(),
            });
        }
        ResourceMode::Other(mode) => {
            return Err(Rejection::UnknownMode { address: address(), found: found(), mode, action });
        }
    }
    if rc.resource_type != expected.resource_type || rc.provider_name != expected.provider_name {
        return Err(Rejection::WrongResource {
            address: address(),
            action,
            found: Box::new(ResourceKind::new(&rc.resource_type, &rc.provider_name)),
            expected: Box::new(ResourceKind::new(&expected.resource_type, &expected.provider_name)),
        });
    }
    if rc.module_address.is_some() {
        return Err(Rejection::ChildModule { address: address(), found: found(), action });
    }
    if rc.is_import() {
        return Err(Rejection::Import { address: address(), action });
    }
    if let Some(previous_address) = &rc.previous_address {
        return Err(Rejection::Moved { address: address(), previous_address: previous_address.clone(), action });
    }

    let reason = rc.reason();
    let replace_reason = reason.as_ref().is_some_and(ActionReason::is_replace);
    let own = |approved, summary| Ok(Own { approved, action: action.clone(), summary });
    match action {
        Action::Unknown(_) => Err(Rejection::UnknownAction { address: address(), found: found(), action }),
        Action::Forget | Action::CreateThenForget => Err(Rejection::Forget { address: address(), action }),
        Action::Read => Err(Rejection::Inconsistent {
            address: address(),
            found: found(),
            detail: "a managed resource cannot have a read action".to_owned(),
        }),
        _ if replace_reason && !action.is_replace() => Err(Rejection::Inconsistent {
            address: address(),
            found: found(),
            detail: format!(
                "action_reason `{}` explains a replacement, but the action is {action}",
                rc.action_reason.as_deref().unwrap_or_default()
            ),
        }),
        Action::Delete => match expected.mode {
            Mode::Destroy => own(ApprovedAction::Delete, format!("delete {}", rc.address)),
            Mode::Apply => Err(Rejection::DeleteWhileProvisioning { address: address() }),
        },
        _ if expected.mode == Mode::Destroy => {
            Err(Rejection::UnexpectedInDestroy { address: address(), found: found(), action })
        }
        Action::Create => own(ApprovedAction::Create, format!("create {}", rc.address)),
        Action::Update => {
            own(ApprovedAction::Update, line(format!("update {}", rc.address), &changed_attributes(&rc.change)))
        }
        Action::NoOp => own(ApprovedAction::NoOp, format!("no changes to {}", rc.address)),
        Action::DeleteThenCreate | Action::CreateThenDelete => {
            let replace_paths = rc.replace_paths();
            if !expected.allow_replacement {
                return Err(Rejection::ReplacementNotAllowed { address: address(), action, reason, replace_paths });
            }
            let order = if action == Action::DeleteThenCreate {
                "the existing object is deleted first, then a new one created"
            } else {
                "a new object is created first, then the existing one deleted"
            };
            let why = match (&reason, replace_paths.is_empty()) {
                (Some(reason), true) => format!("; because {reason}"),
                (Some(reason), false) => format!("; because {reason}: {}", replace_paths.join(", ")),
                (None, false) => format!("; because of {}", replace_paths.join(", ")),
                (None, true) => String::new(),
            };
            let prefix = format!("replace {} ({order}{why})", rc.address);
            own(ApprovedAction::Replace, line(prefix, &changed_attributes(&rc.change)))
        }
    }
}

fn other_change(rc: &ResourceChange, expected: &Expected, notes: &mut Vec<String>) -> Result<(), Rejection> {
    let address = || expected.address.clone();
    let found = || rc.address.clone();
    let action = rc.action();
    if let Some(deposed) = rc.deposed.as_ref().filter(|_| rc.address == expected.address) {
        return Err(Rejection::DeposedObject { address: address(), deposed: deposed.clone(), action });
    }
    if let Action::Unknown(_) = action {
        return Err(Rejection::UnknownAction { address: address(), found: found(), action });
    }
    if rc.module_address.is_some() || rc.address.starts_with("module.") {
        return Err(Rejection::ChildModule { address: address(), found: found(), action });
    }
    let mode = rc.mode();
    if let ResourceMode::Other(mode) = mode {
        return Err(Rejection::UnknownMode { address: address(), found: found(), mode, action });
    }
    if mode == ResourceMode::Data || action == Action::Read {
        if rc.provider_name != expected.provider_name {
            let provider = rc.provider_name.clone();
            return Err(Rejection::ForeignDataSource { address: address(), found: found(), provider, action });
        }
        if mode != ResourceMode::Data || action != Action::Read {
            let detail = format!("a {} change with action {action}", rc.mode);
            return Err(Rejection::Inconsistent { address: address(), found: found(), detail });
        }
        if expected.mode == Mode::Destroy {
            return Err(Rejection::UnexpectedInDestroy { address: address(), found: found(), action });
        }
        notes.push(format!("read data source {} during apply", rc.address));
        return Ok(());
    }
    Err(Rejection::OtherResource { address: address(), found: found(), action })
}

/// Data sources read while planning appear only in `prior_state`.
fn prior_state(plan: &Plan, expected: &Expected, notes: &mut Vec<String>) -> Result<(), Rejection> {
    let Some(state) = &plan.prior_state else { return Ok(()) };
    for located in state.resources() {
        let r = located.resource;
        let (address, found, action) = (expected.address.clone(), r.address.clone(), Action::Read);
        match ResourceMode::parse(&r.mode) {
            ResourceMode::Managed => continue,
            ResourceMode::Other(mode) => return Err(Rejection::UnknownMode { address, found, mode, action }),
            ResourceMode::Data => {}
        }
        if located.in_child_module {
            return Err(Rejection::ChildModule { address, found, action });
        }
        if r.provider_name != expected.provider_name {
            return Err(Rejection::ForeignDataSource { address, found, provider: r.provider_name.clone(), action });
        }
        notes.push(format!("data source {found} was read while planning"));
    }
    Ok(())
}

fn outputs(plan: &Plan, expected: &Expected, notes: &mut Vec<String>) -> Result<(), Rejection> {
    for (name, change) in &plan.output_changes {
        match Action::from_strings(&change.actions) {
            Action::NoOp => {}
            action @ Action::Unknown(_) => {
                let found = format!("output.{name}");
                return Err(Rejection::UnknownAction { address: expected.address.clone(), found, action });
            }
            action => notes.push(format!("output {name}: {action} (no infrastructure change)")),
        }
    }
    Ok(())
}
