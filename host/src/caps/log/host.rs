//! The `log` WIT adapter: a plugin's events and progress through
//! [`CapCtx::log_event`], the path workflow scripts' `log::*` take too.

use crate::caps::context::CapCtx;
use crate::contract::bindings::cradle::host::log::{Host, Level};
use crate::contract::bindings::cradle::host::types::Entry;
use crate::journal::LogLevel;

impl Host for CapCtx {
    fn event(&mut self, level: Level, message: String, fields: Vec<Entry>) {
        let level = match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        };
        self.log_event(level, &message, fields.into_iter().map(|e| (e.key, e.value)).collect());
    }

    fn progress(&mut self, step: String, detail: String) {
        self.log_event(LogLevel::Info, &format!("progress: {step}"), vec![("detail".into(), detail)]);
    }
}
