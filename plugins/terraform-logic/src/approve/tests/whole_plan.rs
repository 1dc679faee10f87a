//! Rejections of the plan as a whole: shape, format, plan-level flags, missing entry.

use serde_json::{Value, json};

use super::*;
use crate::approve::{Action, Rejection, check};

#[test]
fn text_that_is_not_a_json_object_is_rejected() {
    for text in ["", "not json", "[]", "null", "\"1.2\""] {
        let err = check(text, &apply()).unwrap_err();
        assert!(matches!(err, Rejection::Unparseable { .. }), "{text}: {err}");
    }
}

#[test]
fn plan_with_wrongly_typed_fields_is_rejected() {
    let mut p = plan(vec![create()]);
    p["resource_changes"][0]["change"]["actions"] = json!("create");
    assert!(matches!(run(&p, &apply()), Err(Rejection::Unparseable { .. })));
    let mut p = plan(vec![create()]);
    p["errored"] = json!("no");
    assert!(matches!(run(&p, &apply()), Err(Rejection::Unparseable { .. })));
}

#[test]
fn missing_or_unknown_major_format_version_is_rejected() {
    for version in [json!("2.0"), json!("0.9"), json!(1.2), Value::Null] {
        let mut p = plan(vec![create()]);
        p["format_version"] = version.clone();
        assert!(matches!(run(&p, &apply()), Err(Rejection::UnsupportedFormat { .. })), "{version}");
    }
    let mut p = plan(vec![create()]);
    p.as_object_mut().unwrap().remove("format_version");
    assert_eq!(run(&p, &apply()), Err(Rejection::UnsupportedFormat { address: VM.to_owned(), format_version: None }));
}

#[test]
fn unknown_major_format_version_is_reported_even_if_the_shape_changed() {
    let p = json!({"format_version": "2.0", "resource_changes": "a new shape"});
    let err = run(&p, &apply()).unwrap_err();
    assert_eq!(err, Rejection::UnsupportedFormat { address: VM.to_owned(), format_version: Some("2.0".to_owned()) });
}

#[test]
fn errored_plan_is_rejected() {
    let mut p = plan(vec![create()]);
    p["errored"] = json!(true);
    p["applyable"] = json!(false);
    assert_eq!(run(&p, &apply()), Err(Rejection::Errored { address: VM.to_owned() }));
}

#[test]
fn incomplete_plan_is_rejected() {
    let mut p = plan(vec![create()]);
    p["complete"] = json!(false);
    assert_eq!(run(&p, &apply()), Err(Rejection::Incomplete { address: VM.to_owned() }));
}

#[test]
fn deferred_changes_are_rejected() {
    let mut p = plan(vec![create()]);
    p["deferred_changes"] =
        json!([{"reason": "provider_config_unknown", "resource_change": vm(&["create"], Value::Null, json!({}))}]);
    assert_eq!(
        run(&p, &apply()),
        Err(Rejection::Deferred { address: VM.to_owned(), count: 1, addresses: vec![VM.to_owned()] })
    );
}

#[test]
fn action_invocations_are_rejected() {
    for key in ["action_invocations", "deferred_action_invocations"] {
        let mut p = plan(vec![create()]);
        p[key] = json!([{"address": "action.local_command.notify"}]);
        assert_eq!(run(&p, &apply()), Err(Rejection::ActionInvocations { address: VM.to_owned(), count: 1 }));
    }
}

#[test]
fn not_applyable_plan_with_a_change_is_rejected() {
    let mut p = plan(vec![create()]);
    p["applyable"] = json!(false);
    assert_eq!(run(&p, &apply()), Err(Rejection::NotApplyable { address: VM.to_owned(), action: Action::Create }));
}

#[test]
fn apply_plan_without_an_entry_for_the_vm_is_rejected() {
    let mut absent = plan(vec![]);
    absent.as_object_mut().unwrap().remove("resource_changes");
    for p in [plan(vec![]), absent] {
        assert_eq!(run(&p, &apply()), Err(Rejection::MissingFromPlan { address: VM.to_owned() }));
    }
}
