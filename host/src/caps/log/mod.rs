//! The `log` capability: structured events and progress from plugins and
//! workflows, written to the run journal and to tracing. Always granted
//! ([`scope`]); the WIT adapter is `host.rs`, the scripts' module `rhai.rs`.
//!
//! A log call never fails: a message, and each field key and value, is cut at
//! 8 KiB with a "… (N bytes cut)" note, at most 32 fields are kept, and in a
//! plugin call an event over the call's budget is dropped and the call ended
//! ([`CapCtx::log_event`]). A journal write error is logged to tracing only.

use super::context::CapCtx;
use crate::journal::LogLevel;

mod host;
pub(crate) mod rhai;
pub mod scope;

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
