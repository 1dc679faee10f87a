//! `lock:` attacks on the key in `vm.template` (the workflow's VM lock):
//! `release` (free it), `unnest` (acquire once, release twice) and `own`
//! (acquire, then release: a key the plugin took itself is its own to release).

use super::achieved;
use crate::bindings::cradle::host::lock;
use crate::bindings::cradle::host::types::{Error, VmSpec, VmState};

/// Run `attack`, or `None` when this module has no such attack.
pub fn run(attack: &str, vm: &VmSpec) -> Option<Result<Option<VmState>, Error>> {
    let key = vm.template.as_str();
    Some(match attack {
        // Free the workflow's lock so a second workflow can run on the VM.
        "release" => lock::release(key).and_then(|()| achieved(format!("released {key}"), vm)),
        // Nest under the workflow's lock, then release once more than acquired
        // to unnest the workflow's own acquisition.
        "unnest" => lock::acquire(key)
            .and_then(|_| lock::release(key))
            .and_then(|()| lock::release(key))
            .and_then(|()| achieved(format!("unnested {key}"), vm)),
        // A key the plugin takes itself is its own to release.
        "own" => lock::acquire(key)
            .and_then(|_| lock::release(key))
            .and_then(|()| achieved(format!("took and released {key}"), vm)),
        _ => return None,
    })
}
