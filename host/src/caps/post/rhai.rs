//! `post_task::*` for workflow scripts, through the same adapter as a
//! plugin's call (checked against `[workflow.grants.post]`, journaled). The
//! module is `post_task`, not `post`: workflows import `lib/post.rhai` as
//! `post`, which would shadow it.
//!
//! - `post_task::run(project, template, vars, timeout_ms)` runs the task
//!   template `template` of project `project` with `vars` (a map: the task's
//!   extra vars) and waits at most `timeout_ms` for it to end →
//!   `#{id, status, template_name}` of a task that ended `success`.
//!
//! Failures throw `#{kind, message}` like every host module.

use rhai::{Dynamic, FuncRegistration, Map, Module, NativeCallContext};

use crate::caps::script_glue::{Res, throw};
use crate::caps::script_run::{caps, wit_throw};
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::post::{Host, TemplateRef};

/// An id argument: a whole number from 1 to `u32::MAX`.
fn id(what: &str, v: i64) -> Res<u32> {
    u32::try_from(v).ok().filter(|n| *n > 0).ok_or_else(|| {
        throw(CapError::invalid(format!(
            "post_task::run: {what} must be a Semaphore id (a whole number from 1), got {v}"
        )))
    })
}

/// The `post_task` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("run").set_into_module(
        &mut m,
        |ctx: NativeCallContext, project: i64, template: i64, vars: Map, timeout_ms: i64| -> Res<Map> {
            let template = TemplateRef { project: id("project", project)?, template: id("template", template)? };
            let json = crate::workflow::values::to_json(&Dynamic::from_map(vars)).to_string();
            let limit = u64::try_from(timeout_ms).map_err(|_| {
                throw(CapError::invalid(format!("post_task::run: timeout_ms must not be negative, got {timeout_ms}")))
            })?;
            let done = Host::run(&mut caps(&ctx)?, template, json, limit).map_err(wit_throw)?;
            let mut out = Map::new();
            out.insert("id".into(), i64::from(done.id).into());
            out.insert("status".into(), done.status.into());
            out.insert("template_name".into(), done.template_name.into());
            Ok(out)
        },
    );
    m
}
