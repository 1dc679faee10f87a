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
    for rc in plan.resource_drift.iter().chain(&plan.resource_changes) {
        consistent_address(rc, expected)?;
    }

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
        other_change(rc, expected)?;
    }
    prior_state(&plan, expected)?;
    outputs(&plan, expected, &mut notes)?;
    planned_values(&plan, expected)?;
    configuration(&plan, expected)?;

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

fn other_change(rc: &ResourceChange, expected: &Expected) -> Result<(), Rejection> {
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
        // Even the VM provider's own: cradle renders none, so one here came from elsewhere.
        return Err(Rejection::DataSource { address: address(), found: found(), action });
    }
    Err(Rejection::OtherResource { address: address(), found: found(), action })
}

/// Every entry's `address` must be the one its parts make: the approval matches on
/// the address and checks type and provider on the parts, so the two must agree.
fn consistent_address(rc: &ResourceChange, expected: &Expected) -> Result<(), Rejection> {
    let Some(composed) = rc.composed_address() else {
        // An unknown mode is reported as such by the checks that follow; a bad index is not.
        if let ResourceMode::Other(_) = rc.mode() {
            return Ok(());
        }
        let detail = format!(
            "its index {} is neither a number nor a string",
            rc.index.as_ref().map_or_else(String::new, ToString::to_string)
        );
        return Err(Rejection::Inconsistent { address: expected.address.clone(), found: rc.address.clone(), detail });
    };
    if composed == rc.address {
        return Ok(());
    }
    Err(Rejection::Inconsistent {
        address: expected.address.clone(),
        found: rc.address.clone(),
        detail: format!("its mode, type, name and index make the address `{composed}`, not the address it claims"),
    })
}

/// Data sources read while planning appear only in `prior_state`; cradle's module
/// reads none, so any is refused (the VM provider's own included).
fn prior_state(plan: &Plan, expected: &Expected) -> Result<(), Rejection> {
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
        return Err(Rejection::DataSource { address, found, action });
    }
    Ok(())
}

/// `planned_values` (the state after apply) may hold only the expected resource
/// itself, exactly as rendered. It is derived from the same changes, so a mismatch
/// means the plan was not printed by Terraform from cradle's module.
fn planned_values(plan: &Plan, expected: &Expected) -> Result<(), Rejection> {
    let Some(values) = &plan.planned_values else { return Ok(()) };
    for located in values.resources() {
        let r = located.resource;
        let composed = r.name.as_deref().and_then(|name| {
            super::address::compose(located.module_address, &r.mode, &r.resource_type, name, r.index.as_ref())
        });
        let as_rendered = !located.in_child_module
            && r.mode == "managed"
            && r.address == expected.address
            && composed.as_deref() == Some(expected.address.as_str())
            && r.resource_type == expected.resource_type
            && r.provider_name == expected.provider_name
            && r.deposed_key.is_none();
        if !as_rendered {
            let found = r.address.clone();
            return Err(Rejection::NotRendered { address: expected.address.clone(), found, part: "planned_values" });
        }
    }
    Ok(())
}

/// The module as Terraform read it (`configuration`): at most the expected
/// resource block, without provisioners, and no module calls. Addresses there carry
/// no instance key.
fn configuration(plan: &Plan, expected: &Expected) -> Result<(), Rejection> {
    let Some(root) = plan.configuration.as_ref().and_then(|c| c.get("root_module")) else { return Ok(()) };
    let not_rendered =
        |found: String| Rejection::NotRendered { address: expected.address.clone(), found, part: "configuration" };
    let name = super::address::name_of(&expected.address, &expected.resource_type);
    if let Some(call) = root.get("module_calls").and_then(Value::as_object).and_then(|calls| calls.keys().next()) {
        return Err(not_rendered(format!("module.{call}")));
    }
    for resource in root.get("resources").and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
        let field = |key: &str| resource.get(key).and_then(Value::as_str);
        let address = field("address").unwrap_or("(no address)");
        let rendered = name.is_some()
            && field("mode") == Some("managed")
            && field("type") == Some(expected.resource_type.as_str())
            && field("name") == name
            && name.map(|n| format!("{}.{n}", expected.resource_type)).as_deref() == Some(address);
        if !rendered {
            return Err(not_rendered(address.to_owned()));
        }
        // A provisioner runs on the control node and shows in no resource change.
        if let Some(provisioner) = resource.get("provisioners").and_then(Value::as_array).and_then(|p| p.first()) {
            let kind = provisioner.get("type").and_then(Value::as_str).unwrap_or("(unnamed)");
            return Err(not_rendered(format!("provisioner \"{kind}\" of {address}")));
        }
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
