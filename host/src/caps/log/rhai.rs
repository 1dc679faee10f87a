//! `log::info(msg)` (and `trace`, `debug`, `warn`, `error`, each also with a
//! map of fields) and `log::progress(step, detail)` for workflow scripts: the
//! same journal and tracing path as a plugin's `log` calls.

use rhai::{FuncRegistration, ImmutableString, Map, Module, NativeCallContext};

use crate::caps::script_glue::Res;
use crate::caps::script_run::caps;
use crate::journal::LogLevel;

/// The `log` module.
pub fn module() -> Module {
    let mut m = Module::new();
    for (name, level) in [
        ("trace", LogLevel::Trace),
        ("debug", LogLevel::Debug),
        ("info", LogLevel::Info),
        ("warn", LogLevel::Warn),
        ("error", LogLevel::Error),
    ] {
        FuncRegistration::new(name).set_into_module(
            &mut m,
            move |ctx: NativeCallContext, msg: ImmutableString| -> Res<()> {
                caps(&ctx)?.log_event(level, &msg, Vec::new());
                Ok(())
            },
        );
        FuncRegistration::new(name).set_into_module(
            &mut m,
            move |ctx: NativeCallContext, msg: ImmutableString, fields: Map| -> Res<()> {
                let fields = fields.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
                caps(&ctx)?.log_event(level, &msg, fields);
                Ok(())
            },
        );
    }
    FuncRegistration::new("progress").set_into_module(
        &mut m,
        |ctx: NativeCallContext, step: ImmutableString, detail: ImmutableString| -> Res<()> {
            caps(&ctx)?.log_event(
                LogLevel::Info,
                &format!("progress: {step}"),
                vec![("detail".into(), detail.to_string())],
            );
            Ok(())
        },
    );
    m
}
