//! The ownership rules on real `terraform show -json` state output (copies in
//! `fixtures/`, see `fixtures/SOURCES.md`). None of the real states holds a Proxmox VM,
//! so they exercise the shape handling and the fail-closed paths; matching VMs are
//! covered by the hand-written states in the crate's unit tests.

use cradle_terraform_logic::ownership::{Owner, Ownership, OwnershipError, check};
use cradle_terraform_logic::{Flavour, ResourceKind};

const EMPTY: &str = include_str!("fixtures/empty-state-terraform-1.11.4.json");
const AFTER_CREATE: &str = include_str!("fixtures/generated-terraform-1.11.4/state-after-create.json");
const FINAL: &str = include_str!("fixtures/generated-terraform-1.11.4/state-final.json");
const BASIC: &str = include_str!("fixtures/state-example.json");
const MODULES: &str = include_str!("fixtures/state-examples/show-json-state-modules_output.json");
const DRIFT: &str = include_str!("fixtures/state-examples/drift_relevant_attributes_state.json");
const ONLY_REVISION: &str = include_str!("fixtures/derived/state-final-only-revision.json");
const PLAN: &str = include_str!("fixtures/generated-terraform-1.11.4/01-create.json");

fn web1() -> Owner {
    Owner::for_flavour(Flavour::Telmate, "web-1", 120)
}

fn other_resources(result: Result<Ownership, OwnershipError>) -> Vec<String> {
    match result {
        Err(OwnershipError::OtherResources { found, .. }) => found,
        other => panic!("expected OtherResources, got {other:?}"),
    }
}

#[test]
fn terraforms_empty_state_output_means_new_when_the_vm_is_missing() {
    assert_eq!(EMPTY.trim(), r#"{"format_version":"1.0"}"#);
    assert_eq!(check(Some(EMPTY), &web1(), false), Ok(Ownership::New));
}

#[test]
fn terraforms_empty_state_output_with_an_existing_vm_is_rejected() {
    assert!(matches!(check(Some(EMPTY), &web1(), true), Err(OwnershipError::NotInState { .. })));
}

#[test]
fn real_state_with_several_resources_and_a_child_module_is_rejected() {
    assert_eq!(
        other_resources(check(Some(AFTER_CREATE), &web1(), true)),
        ["terraform_data.vm[\"db\"]", "terraform_data.vm[\"web\"]", "module.dhcp[0].terraform_data.reservation",]
    );
}

#[test]
fn real_states_holding_other_resources_are_rejected_whether_or_not_the_vm_exists() {
    for (state, count) in [(FINAL, 3), (BASIC, 2), (MODULES, 2), (DRIFT, 2)] {
        for vm_exists in [true, false] {
            assert_eq!(other_resources(check(Some(state), &web1(), vm_exists)).len(), count);
        }
    }
}

#[test]
fn other_resources_are_rejected_even_at_the_expected_address() {
    // The expected address is present, but the rest of the state is not cradle's.
    let owner = Owner { address: "terraform_data.revision".to_owned(), ..web1() };
    assert_eq!(
        other_resources(check(Some(FINAL), &owner, true)),
        ["terraform_data.dhcp_reservation", "terraform_data.vm[\"web\"]"]
    );
}

#[test]
fn single_resource_of_another_type_is_rejected() {
    let owner = Owner { address: "terraform_data.revision".to_owned(), ..web1() };
    assert_eq!(
        check(Some(ONLY_REVISION), &owner, true),
        Err(OwnershipError::WrongResource {
            address: "terraform_data.revision".to_owned(),
            found: Box::new(ResourceKind::new("terraform_data", "terraform.io/builtin/terraform")),
            expected: Box::new(Flavour::Telmate.kind()),
        })
    );
}

#[test]
fn real_plan_passed_as_a_state_is_rejected() {
    assert!(matches!(check(Some(PLAN), &web1(), false), Err(OwnershipError::Unparseable { .. })));
}
