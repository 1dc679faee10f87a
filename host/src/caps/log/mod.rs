//! The `log` capability: structured events and progress from plugins and
//! workflows, written to the run journal and to tracing. Always granted
//! ([`scope`]); the WIT adapter is `host.rs`, the scripts' module `rhai.rs`.
//!
//! A log call never fails: a message, and each field key and value, is cut at
//! 8 KiB with a "… (N bytes cut)" note, at most 32 fields are kept, and in a
//! plugin call an event over the call's budget is dropped and the call ended
//! ([`CapCtx::log_event`]). A journal write error is logged to tracing only.
//!
//! On the terminal (tracing, target [`TARGET`]) an event reads `message
//! key=value ...` ([`render`]): the fields in the caller's order, a value with
//! spaces or quotes quoted, a `vm` field that repeats the call's VM left out.
//! The journal keeps the fields as they were given.

use super::context::CapCtx;
use crate::journal::LogLevel;

mod host;
pub(crate) mod rhai;
pub mod scope;

/// Longest message kept; a plugin cannot flood the journal with one call.
const MAX_MESSAGE: usize = 8 * 1024;

/// The tracing target of plugin and workflow log events, so a command can
/// show or hide them as a group (`cradle provision` shows them with `-v`).
pub const TARGET: &str = "cradle::log";

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
        let line = render(&message, self.vm.as_deref(), &fields);
        match level {
            LogLevel::Trace => tracing::trace!(target: TARGET, caller = %self.caller, vm, "{line}"),
            LogLevel::Debug => tracing::debug!(target: TARGET, caller = %self.caller, vm, "{line}"),
            LogLevel::Info => tracing::info!(target: TARGET, caller = %self.caller, vm, "{line}"),
            LogLevel::Warn => tracing::warn!(target: TARGET, caller = %self.caller, vm, "{line}"),
            LogLevel::Error => tracing::error!(target: TARGET, caller = %self.caller, vm, "{line}"),
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

/// `message key=value ...` for the terminal: the fields in order, a value that
/// is empty or holds a space, `=` or a quote written as a quoted string, a
/// `vm` field equal to the call's own VM (`vm`) left out: it is on the line
/// already. Terminal escapes are left to the formatter (tracing-subscriber
/// escapes them in messages), as for the message itself.
pub(crate) fn render(message: &str, vm: Option<&str>, fields: &[(String, String)]) -> String {
    let mut line = message.to_string();
    for (key, value) in fields {
        if key == "vm" && vm == Some(value.as_str()) {
            continue;
        }
        line.push(' ');
        line.push_str(key);
        line.push('=');
        if value.is_empty() || value.contains(|c: char| c.is_whitespace() || c == '"' || c == '=') {
            line.push_str(&format!("{value:?}"));
        } else {
            line.push_str(value);
        }
    }
    line
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

#[cfg(test)]
mod tests {
    use super::render;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn fields_render_as_key_value_pairs_in_order_without_the_calls_own_vm() {
        let f = fields(&[("vm", "vm-0"), ("changes", "2"), ("node", "pve1")]);
        assert_eq!(render("cloned and configured", Some("vm-0"), &f), "cloned and configured changes=2 node=pve1");
        // Another VM than the call's is worth saying.
        assert_eq!(render("x", Some("vm-1"), &fields(&[("vm", "vm-0")])), "x vm=vm-0");
        assert_eq!(render("x", None, &fields(&[("vm", "vm-0")])), "x vm=vm-0");
    }

    #[test]
    fn a_value_with_spaces_quotes_or_nothing_is_quoted() {
        let f = fields(&[("detail", "set onboot = 1"), ("empty", ""), ("q", "a\"b"), ("plain", "ok")]);
        assert_eq!(render("m", None, &f), r#"m detail="set onboot = 1" empty="" q="a\"b" plain=ok"#);
    }
}
