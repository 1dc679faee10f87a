//! The approval rules on real `terraform show -json <planfile>` output (copies in
//! `fixtures/`, see `fixtures/SOURCES.md`). The real plans use other resource types
//! (`terraform_data`, `local_file`, `null_resource`, …), so [`Expected`] is
//! parametrised with their address, type and provider.

use cradle_terraform_logic::approve::{
    Action, ActionReason, Approval, ApprovedAction, Expected, Mode, Rejection, check,
};

const BUILTIN: &str = "terraform.io/builtin/terraform";

macro_rules! fixture {
    ($path:literal) => {
        include_str!(concat!("fixtures/", $path))
    };
}

const BASIC_CREATE: &str = fixture!("basic-create_output.json");
const BASIC_DELETE: &str = fixture!("basic-delete_output.json");
const DATA_READ: &str = fixture!("data_read_plan.json");
const DRIFT_SIMPLE: &str = fixture!("drift_simple_plan.json");
const LOCAL_REPLACE: &str = fixture!("local_provider_update_plan.json");
const MULTI_RESOURCE: &str = fixture!("multi-resource-update_output.json");
const NULL_NO_OP: &str = fixture!("null_provider_update_plan.json");
const REQUIRES_REPLACE: &str = fixture!("requires-replace_output.json");
const CREATE: &str = fixture!("generated-terraform-1.11.4/01-create.json");
const NO_OP: &str = fixture!("generated-terraform-1.11.4/02-noop.json");
const UPDATE: &str = fixture!("generated-terraform-1.11.4/03-update.json");
const REPLACE_CANNOT_UPDATE: &str = fixture!("generated-terraform-1.11.4/04-replace-cannot-update.json");
const REPLACE_BY_REQUEST: &str = fixture!("generated-terraform-1.11.4/05-replace-by-request.json");
const REPLACE_TAINTED: &str = fixture!("generated-terraform-1.11.4/06-replace-tainted.json");
const DELETE: &str = fixture!("generated-terraform-1.11.4/07-delete.json");
const REPLACE_CBD: &str = fixture!("generated-terraform-1.11.4/08-replace-create-before-destroy.json");
const MOVED: &str = fixture!("generated-terraform-1.11.4/09-moved.json");
const FORGET: &str = fixture!("generated-terraform-1.11.4/10-forget.json");
const REPLACE_BY_TRIGGERS: &str = fixture!("generated-terraform-1.11.4/11-replace-by-triggers.json");
const DESTROY: &str = fixture!("generated-terraform-1.11.4/12-destroy.json");
const IMPORT: &str = fixture!("generated-terraform-1.11.4/13-import.json");
const DATA_DURING_PLAN: &str = fixture!("generated-terraform-1.11.4/14-data-source-read-during-plan.json");
const DESTROY_ONLY_WEB: &str = fixture!("derived/12-destroy-only-vm-web.json");

fn expect(address: &str, resource_type: &str, provider_name: &str, mode: Mode, allow_replacement: bool) -> Expected {
    Expected {
        address: address.to_owned(),
        resource_type: resource_type.to_owned(),
        provider_name: provider_name.to_owned(),
        allow_replacement,
        mode,
    }
}

/// `terraform_data.<address>` of the 1.11.4 plans, in Apply mode.
fn data_apply(address: &str, allow_replacement: bool) -> Expected {
    expect(address, "terraform_data", BUILTIN, Mode::Apply, allow_replacement)
}

fn data_destroy(address: &str) -> Expected {
    expect(address, "terraform_data", BUILTIN, Mode::Destroy, false)
}

fn test_instance(address: &str, mode: Mode, allow_replacement: bool) -> Expected {
    expect(address, "test_instance", "registry.terraform.io/hashicorp/test", mode, allow_replacement)
}

fn other(found: &str, action: Action, expected: &Expected) -> Result<Approval, Rejection> {
    Err(Rejection::OtherResource { address: expected.address.clone(), found: found.to_owned(), action })
}

fn replacement_rejection(result: Result<Approval, Rejection>) -> (Action, Option<ActionReason>, Vec<String>) {
    match result {
        Err(Rejection::ReplacementNotAllowed { action, reason, replace_paths, .. }) => (action, reason, replace_paths),
        other => panic!("expected a replacement rejection, got {other:?}"),
    }
}

#[test]
fn every_real_plan_parses_with_a_supported_format() {
    let plans = [
        BASIC_CREATE,
        BASIC_DELETE,
        DATA_READ,
        DRIFT_SIMPLE,
        LOCAL_REPLACE,
        MULTI_RESOURCE,
        NULL_NO_OP,
        REQUIRES_REPLACE,
        CREATE,
        NO_OP,
        UPDATE,
        REPLACE_CANNOT_UPDATE,
        REPLACE_BY_REQUEST,
        REPLACE_TAINTED,
        DELETE,
        REPLACE_CBD,
        MOVED,
        FORGET,
        REPLACE_BY_TRIGGERS,
        DESTROY,
        IMPORT,
        DATA_DURING_PLAN,
        DESTROY_ONLY_WEB,
    ];
    for (i, plan) in plans.into_iter().enumerate() {
        let result = check(plan, &data_apply("terraform_data.not_in_any_plan", false));
        assert!(
            !matches!(result, Err(Rejection::Unparseable { .. } | Rejection::UnsupportedFormat { .. })),
            "plan #{i}: {result:?}"
        );
    }
}

#[test]
fn create_beside_a_data_source_read_while_planning_is_rejected() {
    // cradle's module reads no data source, so even the plan's own provider's is refused.
    assert_eq!(
        check(DATA_DURING_PLAN, &data_apply("terraform_data.x", false)),
        Err(Rejection::DataSource {
            address: "terraform_data.x".to_owned(),
            found: "data.terraform_remote_state.other".to_owned(),
            action: Action::Read,
        })
    );
}

/// The plan with its configuration narrowed to the one block `block` (e.g.
/// `terraform_data.vm`), as cradle's rendered module would be: the real 1.11.4 plans
/// come from a configuration with more blocks and a `dhcp` module (count 0 in some
/// rounds), which a plan for cradle's module never has and which is refused as such
/// (`a_module_call_in_the_configuration_is_rejected_even_without_instances`); this
/// isolates the rule under test.
fn configured_as_rendered(plan: &str, block: &str) -> String {
    let mut value: serde_json::Value = serde_json::from_str(plan).unwrap();
    let root = value["configuration"]["root_module"].as_object_mut().unwrap();
    root.remove("module_calls");
    if let Some(serde_json::Value::Array(resources)) = root.get_mut("resources") {
        resources.retain(|r| r["address"] == block);
    }
    value.to_string()
}

#[test]
fn a_module_call_in_the_configuration_is_rejected_even_without_instances() {
    assert_eq!(
        check(REPLACE_CBD, &data_apply("terraform_data.vm[\"web\"]", true)),
        Err(Rejection::NotRendered {
            address: "terraform_data.vm[\"web\"]".to_owned(),
            found: "module.dhcp".to_owned(),
            part: "configuration",
        })
    );
}

#[test]
fn create_next_to_other_resources_is_rejected() {
    let expected = data_apply("terraform_data.vm[\"web\"]", false);
    assert_eq!(check(CREATE, &expected), other("terraform_data.vm[\"db\"]", Action::Create, &expected));
    let expected = test_instance("test_instance.test[0]", Mode::Apply, false);
    assert_eq!(check(BASIC_CREATE, &expected), other("test_instance.test[1]", Action::Create, &expected));
}

#[test]
fn data_source_read_of_the_providers_own_is_rejected_before_child_modules() {
    let expected = expect(
        "tfcoremock_simple_resource.create",
        "tfcoremock_simple_resource",
        "registry.terraform.io/hashicorp/tfcoremock",
        Mode::Apply,
        false,
    );
    assert_eq!(
        check(DATA_READ, &expected),
        Err(Rejection::DataSource {
            address: expected.address.clone(),
            found: "data.tfcoremock_simple_resource.read".to_owned(),
            action: Action::Read,
        })
    );
}

#[test]
fn data_source_read_of_another_provider_is_rejected() {
    let expected = expect("local_file.vm", "local_file", "registry.terraform.io/hashicorp/local", Mode::Apply, false);
    assert_eq!(
        check(DATA_READ, &expected),
        Err(Rejection::ForeignDataSource {
            address: expected.address.clone(),
            found: "data.tfcoremock_simple_resource.read".to_owned(),
            provider: "registry.terraform.io/hashicorp/tfcoremock".to_owned(),
            action: Action::Read,
        })
    );
}

#[test]
fn update_is_approved_and_drift_is_summarised() {
    let expected = expect(
        "tfcoremock_simple_resource.drift",
        "tfcoremock_simple_resource",
        "registry.terraform.io/hashicorp/tfcoremock",
        Mode::Apply,
        false,
    );
    let approval = check(DRIFT_SIMPLE, &expected).unwrap();
    assert_eq!(approval.action, ApprovedAction::Update);
    assert_eq!(
        approval.summary,
        [
            "update tfcoremock_simple_resource.drift: string \"Hello, drift!\" → \"Hello, world!\"",
            "tfcoremock_simple_resource.drift was changed outside Terraform (the plan above already accounts for it): \
             string \"Hello, world!\" → \"Hello, drift!\"",
        ]
    );
}

#[test]
fn update_next_to_unchanged_resources_is_rejected() {
    let expected = data_apply("terraform_data.vm[\"web\"]", false);
    assert_eq!(check(UPDATE, &expected), other("terraform_data.vm[\"db\"]", Action::NoOp, &expected));
}

#[test]
fn no_op_plan_is_approved_although_terraform_marks_it_not_applyable() {
    let expected = expect(
        "null_resource.null_resource",
        "null_resource",
        "registry.terraform.io/hashicorp/null",
        Mode::Apply,
        false,
    );
    let approval = check(NULL_NO_OP, &expected).unwrap();
    assert_eq!(approval.action, ApprovedAction::NoOp);
    assert_eq!(approval.summary, ["no changes to null_resource.null_resource"]);
}

#[test]
fn no_op_plan_with_other_resources_is_rejected() {
    let expected = data_apply("terraform_data.vm[\"web\"]", false);
    assert_eq!(check(NO_OP, &expected), other("terraform_data.vm[\"db\"]", Action::NoOp, &expected));
}

#[test]
fn replacement_is_rejected_unless_allowed() {
    let local = |allow| {
        expect("local_file.local_file", "local_file", "registry.terraform.io/hashicorp/local", Mode::Apply, allow)
    };
    assert_eq!(
        replacement_rejection(check(LOCAL_REPLACE, &local(false))),
        (Action::DeleteThenCreate, Some(ActionReason::ReplaceBecauseCannotUpdate), vec!["content".to_owned()])
    );
    let approval = check(LOCAL_REPLACE, &local(true)).unwrap();
    assert_eq!(approval.action, ApprovedAction::Replace);
    assert_eq!(
        approval.summary,
        ["replace local_file.local_file (the existing object is deleted first, then a new one created; because an \
          attribute cannot be updated in place: content): content \"{\\\"hello\\\":\\\"world\\\"}\" → \
          \"{\\\"goodbye\\\":\\\"world\\\"}\", id \"2248ee2fa0aaaad99178531f924bf00b4b0a8f4e\" → (known after apply)"]
    );

    let test = |allow| test_instance("test_instance.test", Mode::Apply, allow);
    assert_eq!(replacement_rejection(check(REQUIRES_REPLACE, &test(false))).2, ["ami"]);
    assert_eq!(check(REQUIRES_REPLACE, &test(true)).unwrap().action, ApprovedAction::Replace);
}

#[test]
fn create_before_destroy_replacement_is_rejected_unless_allowed() {
    let (action, reason, paths) =
        replacement_rejection(check(REPLACE_CBD, &data_apply("terraform_data.vm[\"web\"]", false)));
    assert_eq!(action, Action::CreateThenDelete);
    assert_eq!(reason, Some(ActionReason::ReplaceBecauseCannotUpdate));
    assert_eq!(paths, ["triggers_replace"]);
    let approval = check(
        &configured_as_rendered(REPLACE_CBD, "terraform_data.vm"),
        &data_apply("terraform_data.vm[\"web\"]", true),
    )
    .unwrap();
    assert_eq!(approval.action, ApprovedAction::Replace);
    assert!(approval.summary[0].contains("a new object is created first, then the existing one deleted"));
    assert_eq!(approval.summary[1], "output vm_ids: update in place (no infrastructure change)");
}

#[test]
fn replacement_with_other_resources_is_rejected_even_when_allowed() {
    let expected = data_apply("terraform_data.vm[\"db\"]", false);
    let (_, reason, paths) = replacement_rejection(check(REPLACE_CANNOT_UPDATE, &expected));
    assert_eq!((reason, paths), (Some(ActionReason::ReplaceBecauseCannotUpdate), vec!["triggers_replace".to_owned()]));
    let expected = data_apply("terraform_data.vm[\"db\"]", true);
    assert_eq!(check(REPLACE_CANNOT_UPDATE, &expected), other("terraform_data.vm[\"web\"]", Action::NoOp, &expected));
}

#[test]
fn replacement_by_request_tainted_or_triggers_is_rejected_unless_allowed() {
    let cases = [
        (
            REPLACE_BY_REQUEST,
            "terraform_data.vm[\"web\"]",
            ActionReason::ReplaceByRequest,
            "terraform_data.vm[\"db\"]",
            Action::NoOp,
        ),
        (
            REPLACE_TAINTED,
            "terraform_data.vm[\"web\"]",
            ActionReason::ReplaceBecauseTainted,
            "terraform_data.vm[\"db\"]",
            Action::NoOp,
        ),
        (
            REPLACE_BY_TRIGGERS,
            "terraform_data.dhcp_reservation",
            ActionReason::ReplaceByTriggers,
            "terraform_data.revision",
            Action::Update,
        ),
    ];
    for (plan, address, reason, next, next_action) in cases {
        let (action, got, paths) = replacement_rejection(check(plan, &data_apply(address, false)));
        assert_eq!((action, got, paths), (Action::DeleteThenCreate, Some(reason), vec![]));
        // Allowed, the replacement passes and the plan's other resources are what is refused.
        let expected = data_apply(address, true);
        assert_eq!(check(plan, &expected), other(next, next_action, &expected));
    }
}

#[test]
fn delete_only_is_rejected_in_apply_mode() {
    for (plan, address) in [
        (DELETE, "terraform_data.vm[\"db\"]"),
        (DESTROY, "terraform_data.vm[\"web\"]"),
        (DESTROY_ONLY_WEB, "terraform_data.vm[\"web\"]"),
    ] {
        assert_eq!(
            check(plan, &data_apply(address, true)),
            Err(Rejection::DeleteWhileProvisioning { address: address.to_owned() })
        );
    }
    let expected = test_instance("test_instance.test-delete", Mode::Apply, false);
    assert_eq!(
        check(BASIC_DELETE, &expected),
        Err(Rejection::DeleteWhileProvisioning { address: "test_instance.test-delete".to_owned() })
    );
}

#[test]
fn delete_of_another_resource_is_rejected_in_apply_mode() {
    let expected = test_instance("test_instance.test", Mode::Apply, false);
    assert_eq!(check(BASIC_DELETE, &expected), other("test_instance.test-delete", Action::Delete, &expected));
}

#[test]
fn forget_is_rejected() {
    assert_eq!(
        check(FORGET, &data_apply("terraform_data.renamed2", true)),
        Err(Rejection::Forget { address: "terraform_data.renamed2".to_owned(), action: Action::Forget })
    );
    let expected = data_apply("terraform_data.vm[\"web\"]", false);
    assert_eq!(check(FORGET, &expected), other("terraform_data.renamed2", Action::Forget, &expected));
}

#[test]
fn import_is_rejected() {
    assert_eq!(
        check(IMPORT, &data_apply("terraform_data.imported", false)),
        Err(Rejection::Import { address: "terraform_data.imported".to_owned(), action: Action::Update })
    );
}

#[test]
fn moved_state_is_rejected() {
    assert_eq!(
        check(MOVED, &data_apply("terraform_data.renamed2", false)),
        Err(Rejection::Moved {
            address: "terraform_data.renamed2".to_owned(),
            previous_address: "terraform_data.renamed".to_owned(),
            action: Action::NoOp,
        })
    );
    assert!(matches!(
        check(MULTI_RESOURCE, &test_instance("test_instance.test[0]", Mode::Apply, false)),
        Err(Rejection::Moved { .. })
    ));
}

#[test]
fn destroy_plan_is_approved_in_destroy_mode_only() {
    let approval = check(
        &configured_as_rendered(DESTROY_ONLY_WEB, "terraform_data.vm"),
        &data_destroy("terraform_data.vm[\"web\"]"),
    )
    .unwrap();
    assert_eq!(approval.action, ApprovedAction::Delete);
    assert_eq!(
        approval.summary,
        ["delete terraform_data.vm[\"web\"]", "output vm_ids: delete (no infrastructure change)"]
    );
    assert!(matches!(
        check(DESTROY_ONLY_WEB, &data_apply("terraform_data.vm[\"web\"]", true)),
        Err(Rejection::DeleteWhileProvisioning { .. })
    ));
}

#[test]
fn destroy_plan_deleting_other_resources_is_rejected() {
    let expected = data_destroy("terraform_data.vm[\"web\"]");
    assert_eq!(check(DESTROY, &expected), other("terraform_data.dhcp_reservation", Action::Delete, &expected));
    // 07-delete deletes vm["db"] but also lists vm["web"] (no-op) and a child-module delete.
    let expected = data_destroy("terraform_data.vm[\"db\"]");
    assert_eq!(check(DELETE, &expected), other("terraform_data.vm[\"web\"]", Action::NoOp, &expected));
    let expected = test_instance("test_instance.test-delete", Mode::Destroy, false);
    assert_eq!(check(BASIC_DELETE, &expected), other("test_instance.test", Action::Update, &expected));
}

#[test]
fn destroy_mode_rejects_plans_that_do_not_delete() {
    for (plan, expected) in [
        (DATA_DURING_PLAN, data_destroy("terraform_data.x")),
        (REPLACE_CBD, data_destroy("terraform_data.vm[\"web\"]")),
        (
            NULL_NO_OP,
            expect(
                "null_resource.null_resource",
                "null_resource",
                "registry.terraform.io/hashicorp/null",
                Mode::Destroy,
                false,
            ),
        ),
    ] {
        assert!(matches!(check(plan, &expected), Err(Rejection::UnexpectedInDestroy { .. })), "{expected:?}");
    }
}

#[test]
fn destroy_plan_for_an_address_it_does_not_delete_is_rejected() {
    let expected = data_destroy("terraform_data.gone");
    assert_eq!(check(DESTROY, &expected), other("terraform_data.dhcp_reservation", Action::Delete, &expected));
}
