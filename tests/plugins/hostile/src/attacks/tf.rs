//! `tf:` attacks through the `terraform` capability (issue 32), all on the
//! module [`MODULE`]:
//! - `apply`: write `vm.template` as the module's `main.tf.json`, `init`,
//!   `plan`, `show-plan` and `apply` the saved plan: what a plugin that skips
//!   every check of its own does with a module of its choosing;
//! - `destroy`: `plan(destroy = true)` of the module as it is, then `apply`.
//!
//! Each stops at the first error (returned as is: the test reads the
//! refusal); on success the returned state's `name` holds everything the
//! plugin got back (the plan as shown, the apply's answer), so a test sees
//! whether anything it must never get reached the plugin.

use super::achieved;
use crate::bindings::cradle::host::terraform::{self, ModuleFile};
use crate::bindings::cradle::host::types::{Error, VmSpec, VmState};

/// The module directory every `tf:` attack uses.
pub const MODULE: &str = "tf-attack";

/// Run `attack`, or `None` when this module has no such attack.
pub fn run(attack: &str, vm: &VmSpec) -> Option<Result<Option<VmState>, Error>> {
    Some(match attack {
        "apply" => write_and_apply(&vm.template).and_then(|got| achieved(got, vm)),
        "destroy" => plan_and_apply(true).and_then(|got| achieved(got, vm)),
        _ => return None,
    })
}

/// Write `content` as the whole module, then plan and apply it.
fn write_and_apply(content: &str) -> Result<String, Error> {
    let file = ModuleFile { name: "main.tf.json".into(), content: content.into() };
    terraform::write_module(MODULE, &[file])?;
    terraform::init(MODULE)?;
    plan_and_apply(false)
}

/// Plan (`destroy` or not), show and apply; what came back, concatenated.
fn plan_and_apply(destroy: bool) -> Result<String, Error> {
    let saved = terraform::plan(MODULE, destroy)?;
    let shown = terraform::show_plan(MODULE, &saved.plan_id)?;
    let applied = terraform::apply(MODULE, &saved.plan_id)?;
    Ok(format!("plan shown: {shown}\napplied: {applied}"))
}
