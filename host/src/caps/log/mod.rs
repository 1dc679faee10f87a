//! The `log` capability: structured events and progress from plugins and
//! workflows, written to the run journal and to tracing. Always granted.

use super::context::CapCtx;
use crate::contract::bindings::cradle::host::log::{Host, Level};
use crate::contract::bindings::cradle::host::types::Entry;
use crate::journal::LogLevel;

pub(crate) mod rhai;

/// Longest message kept; a plugin cannot flood the journal with one call.
const MAX_MESSAGE: usize = 8 * 1024;

impl CapCtx {
    /// Record an event from the caller.
    /// In a plugin call it counts against the call's budget: over budget the
    /// event is dropped (a log call cannot fail) and the call is ended.
    pub fn log_event(&self, level: LogLevel, message: &str, fields: Vec<(String, String)>) {
        if let Err(e) = self.charge_host_call() {
            let _ = self.refuse_over_budget(e, "log", "event");
            return;
        }
        let message = truncate(message);
        let fields: Vec<(String, String)> =
            fields.into_iter().take(32).map(|(k, v)| (truncate(&k), truncate(&v))).collect();
        let vm = self.vm.as_deref().unwrap_or("-");
        match level {
            LogLevel::Trace => tracing::trace!(caller = %self.caller, vm, ?fields, "{message}"),
            LogLevel::Debug => tracing::debug!(caller = %self.caller, vm, ?fields, "{message}"),
            LogLevel::Info => tracing::info!(caller = %self.caller, vm, ?fields, "{message}"),
            LogLevel::Warn => tracing::warn!(caller = %self.caller, vm, ?fields, "{message}"),
            LogLevel::Error => tracing::error!(caller = %self.caller, vm, ?fields, "{message}"),
        }
        if let Some(clock) = &self.clock {
            clock.touch();
        }
        if let Some(journal) = &self.run.journal {
            match journal.log(self.vm.as_deref(), level, &message, fields) {
                Ok(bytes) => self.charge_journal(bytes),
                Err(e) => tracing::error!(error = %e, "could not journal a log event"),
            }
        }
    }
}

fn truncate(s: &str) -> String {
    if s.len() <= MAX_MESSAGE {
        return s.to_string();
    }
    let mut end = MAX_MESSAGE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes cut)", &s[..end], s.len() - end)
}

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
