//! The capabilities as Rhai modules for workflow scripts: [`modules`] (the
//! list comes from the registry, [`crate::caps::registry`]: `log`, `lock`,
//! `checkpoint`, `proxmox`, `ssh`, `dns`, each from its capability's
//! `rhai.rs`, and `cloudinit`, snippets and creation records, from
//! `creation/rhai.rs`) and the script-only modules: `cradle` (run helpers:
//! `cradle::backend()`, `cradle::lock_key`, `cradle::check_inputs`,
//! `cradle::check_grants`) and `guestnet` (the guest's network, verified on
//! the guest).
//!
//! Scripts are trusted operator code, but they go through the same
//! [`CapCtx::guard`](super::context::CapCtx::guard) as plugins, under
//! `[workflow.grants]`, and are journaled the same way. A failed call throws
//! `#{kind, message}` — the shape backend errors have — so
//! `try { } catch (e) { if e.kind == "conflict" { ... } }` works for both.
//! Records go to scripts through serde (`to_map`).
//!
//! The glue every module shares is in two leaves that import no module of
//! scripts: [`super::script_glue`] (`Res`, `throw`, `to_map`, `int_arg`) and
//! [`super::script_run`] (`with_run`, `caps`, `wit_throw`). Script values are
//! read into a capability's typed request by its `script_args.rs`
//! (`ssh`, `dns`, `creation`), which the `rhai.rs` modules and
//! `check_inputs` here share, so there is no import circle between this
//! folder and the capabilities.

use rhai::{Module, Shared};

pub(crate) mod cradle;
mod grants;
pub(crate) mod guestnet;
mod inputs;

/// Every host module, named as scripts use them (the registry's list).
pub fn modules() -> Vec<(String, Shared<Module>)> {
    super::registry::script_modules()
}
