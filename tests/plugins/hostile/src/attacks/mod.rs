//! Attacks by group (`pve`, `lock`, `ssh`, `budget`, `http`, `tf`); one module per
//! capability area, so each can grow alone. An unknown `GROUP:ATTACK` is an
//! `invalid` error; [`achieved`] reports what got through in the returned
//! state's `name`.

use crate::bindings::cradle::host::types::{Error, VmSpec, VmState};

mod budget;
mod http;
mod lock;
mod pve;
mod ssh;
mod tf;

/// Run attack `attack` of `group`; an unknown one is an `invalid` error.
pub fn run(group: &str, attack: &str, vm: &VmSpec) -> Result<Option<VmState>, Error> {
    let found = match group {
        "pve" => pve::run(attack, vm),
        "lock" => lock::run(attack, vm),
        "ssh" => ssh::run(attack, vm),
        "budget" => budget::run(attack, vm),
        "http" => http::run(attack, vm),
        "tf" => tf::run(attack, vm),
        _ => None,
    };
    found.unwrap_or_else(|| Err(Error::Invalid(format!("hostile plugin: no attack `{group}:{attack}`"))))
}

/// What an attack reports when the host let it through.
pub fn achieved(what: impl Into<String>, vm: &VmSpec) -> Result<Option<VmState>, Error> {
    Ok(Some(crate::state(what.into(), vm.vmid)))
}
