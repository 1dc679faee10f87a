//! A saved plan's JSON (`terraform show -json PLANFILE`) through
//! `cradle-terraform-logic`'s approval, for every flavour and mode cradle uses and
//! for the real fixtures' `terraform_data.this` (so the seed corpus reaches deep).
//!
//! Invariants: an approved plan changes exactly the expected address: every
//! `resource_changes` entry is that address, at most once, and no data source is
//! read; Destroy mode approves only a delete, Apply mode never a delete, and a
//! replacement only when it is allowed.
#![no_main]

use cradle_terraform_logic::Flavour;
use cradle_terraform_logic::approve::{ApprovedAction, Expected, Mode, check};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn expectations() -> Vec<Expected> {
    let mut out = Vec::new();
    for mode in [Mode::Apply, Mode::Destroy] {
        for allow in [false, true] {
            for flavour in [Flavour::Telmate, Flavour::Bpg] {
                out.push(Expected::for_flavour(flavour, mode, allow));
            }
            out.push(Expected {
                address: "terraform_data.this".into(),
                resource_type: "terraform_data".into(),
                provider_name: "terraform.io/builtin/terraform".into(),
                allow_replacement: allow,
                mode,
            });
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for expected in expectations() {
        let Ok(approval) = check(text, &expected) else { continue };
        let plan: Value = serde_json::from_str(text).expect("an approved plan is JSON");
        let changes = plan.get("resource_changes").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        assert!(changes.len() <= 1, "approved a plan with {} resource changes for {expected:?}", changes.len());
        for change in changes {
            assert_eq!(
                change.get("address").and_then(Value::as_str),
                Some(expected.address.as_str()),
                "approved a change of another address for {expected:?}"
            );
            assert_ne!(change.get("mode").and_then(Value::as_str), Some("data"), "approved a data read");
        }
        match (expected.mode, approval.action) {
            (Mode::Destroy, ApprovedAction::Delete) => {}
            (Mode::Destroy, other) => panic!("Destroy mode approved {other:?}"),
            (Mode::Apply, ApprovedAction::Delete) => panic!("Apply mode approved a delete"),
            (Mode::Apply, ApprovedAction::Replace) => {
                assert!(expected.allow_replacement, "approved a replacement that is not allowed")
            }
            (Mode::Apply, _) => {}
        }
    }
});
