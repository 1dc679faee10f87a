//! `budget:` attacks.

use crate::bindings::cradle::host::types::{Error, VmSpec, VmState};

/// Run `attack`, or `None` when this module has no such attack.
pub fn run(attack: &str, vm: &VmSpec) -> Option<Result<Option<VmState>, Error>> {
    let _ = (attack, vm);
    None
}
