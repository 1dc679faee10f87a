//! The journal's record types: one [`Event`] per JSONL line, internally tagged
//! (`{"event":"step_started",...}`), timestamps RFC 3339 UTC.
//!
//! These types are the on-disk format; adding an optional field is compatible,
//! renaming one is not (old journals would stop parsing).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::secrets::redact;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// A UTC instant, serialized as RFC 3339 with millisecond precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(OffsetDateTime);

impl Timestamp {
    /// Now, truncated to milliseconds (finer digits only add noise to a journal).
    pub fn now() -> Timestamp {
        let now = OffsetDateTime::now_utc();
        let ms = now.millisecond();
        Timestamp(now.replace_millisecond(ms).unwrap_or(now))
    }

    /// The wrapped instant.
    pub fn as_offset_date_time(&self) -> OffsetDateTime {
        self.0
    }

    /// Parses an RFC 3339 timestamp (any offset; normalized to UTC).
    pub fn parse(text: &str) -> Result<Timestamp, time::error::Parse> {
        OffsetDateTime::parse(text, &Rfc3339).map(|t| Timestamp(t.to_offset(time::UtcOffset::UTC)))
    }

    /// Milliseconds from `earlier` to `self` (0 if `earlier` is later).
    pub fn millis_since(&self, earlier: Timestamp) -> u64 {
        let ms = (self.0 - earlier.0).whole_milliseconds();
        u64::try_from(ms).unwrap_or(0)
    }
}

impl From<OffsetDateTime> for Timestamp {
    fn from(t: OffsetDateTime) -> Self {
        Timestamp(t.to_offset(time::UtcOffset::UTC))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Formatting a UTC OffsetDateTime as RFC 3339 fails only for years
        // outside 0..=9999, which `now()` cannot produce; fall back to Debug.
        match self.0.format(&Rfc3339) {
            Ok(s) => f.write_str(&s),
            Err(_) => write!(f, "{:?}", self.0),
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Timestamp::parse(&text).map_err(|e| serde::de::Error::custom(format!("bad RFC 3339 timestamp `{text}`: {e}")))
    }
}

/// A plugin loaded for the run, as it was at start (for audit: which code ran).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginVersion {
    /// The plugin's name (`direct`, `terraform`, ...).
    pub name: String,
    /// Its declared version.
    pub version: String,
    /// SHA-256 of the component bytes, hex.
    pub hash: String,
}

/// How a capability call ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum CallOutcome {
    /// It succeeded.
    Ok,
    /// The grant did not allow it; `scope` names what was outside the grant.
    Denied {
        /// e.g. `proxmox: vmid 5000 is outside 100..199`.
        scope: String,
    },
    /// It was allowed but failed.
    Failed {
        /// The error kind (`not-found`, `conflict`, `transient`, ...).
        kind: String,
        /// The error message.
        message: String,
    },
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Every step succeeded.
    Succeeded,
    /// A step failed.
    Failed,
    /// Stopped by a signal or, when no `run_finished` was written, a crash.
    Interrupted,
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        })
    }
}

/// Severity of a [`Event::Log`] (the levels of `wit/log.wit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal progress.
    Info,
    /// Something the operator should look at.
    Warn,
    /// A failure.
    Error,
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        })
    }
}

/// One line of a run journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The first line of every journal.
    RunStarted {
        /// The run id (also the file name).
        run_id: String,
        /// The workflow file or built-in name.
        workflow: String,
        /// The workflow function the run called (`provision`, `check`,
        /// `apply_vm`, ...); absent in journals written before it was recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        function: Option<String>,
        /// SHA-256 of the workflow source, hex.
        workflow_hash: String,
        /// The plugins loaded for the run.
        plugins: Vec<PluginVersion>,
        /// The control node's host name.
        host: String,
        /// cradle's process id.
        pid: u32,
        /// The command line (redacted by the caller, redacted again on write).
        argv: Vec<String>,
        /// The environment the run is in (absent in journals written before it
        /// was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        environment: Option<String>,
        /// The environment's backend plugin, when it has one loaded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        backend: Option<String>,
        /// When the run started.
        at: Timestamp,
    },
    /// A workflow step began.
    StepStarted {
        /// The VM the step works on, if any.
        vm: Option<String>,
        /// The step's name.
        step: String,
        /// When.
        at: Timestamp,
    },
    /// A workflow step ended.
    StepFinished {
        /// The VM the step worked on, if any.
        vm: Option<String>,
        /// The step's name.
        step: String,
        /// When.
        at: Timestamp,
        /// How long it took.
        duration_ms: u64,
        /// The failure, if it failed.
        error: Option<String>,
    },
    /// A plugin or the workflow called a host capability.
    CapabilityCall {
        /// The VM whose store made the call, if any.
        vm: Option<String>,
        /// The plugin name, or `workflow`.
        caller: String,
        /// The capability (`proxmox`, `lock`, ...).
        capability: String,
        /// The function (`clone`, `acquire`, ...).
        function: String,
        /// How it ended.
        outcome: CallOutcome,
        /// How long it took, in microseconds.
        duration_us: u64,
        /// When it ended.
        at: Timestamp,
    },
    /// A structured log event.
    Log {
        /// The VM it concerns, if any.
        vm: Option<String>,
        /// Its severity.
        level: LogLevel,
        /// The message.
        message: String,
        /// Structured fields, in order.
        fields: Vec<(String, String)>,
        /// When.
        at: Timestamp,
    },
    /// The last line of a journal whose run ended (normally or by a signal).
    RunFinished {
        /// How it ended.
        status: RunStatus,
        /// When.
        at: Timestamp,
        /// The run-level error, if any.
        error: Option<String>,
    },
}

fn scrub(s: &mut String) {
    if let std::borrow::Cow::Owned(r) = redact(s) {
        *s = r;
    }
}

fn scrub_opt(s: &mut Option<String>) {
    if let Some(s) = s {
        scrub(s);
    }
}

impl Event {
    /// Replaces registered secrets in every string of the event. Each variant is
    /// destructured without `..`, so a field added later fails to compile here
    /// until it is redacted too.
    pub fn redact_strings(&mut self) {
        match self {
            Event::RunStarted {
                run_id,
                workflow,
                function,
                workflow_hash,
                plugins,
                host,
                pid: _,
                argv,
                environment,
                backend,
                at: _,
            } => {
                for s in [run_id, workflow, workflow_hash, host] {
                    scrub(s);
                }
                scrub_opt(function);
                scrub_opt(environment);
                scrub_opt(backend);
                for p in plugins {
                    let PluginVersion { name, version, hash } = p;
                    for s in [name, version, hash] {
                        scrub(s);
                    }
                }
                argv.iter_mut().for_each(scrub);
            }
            Event::StepStarted { vm, step, at: _ } => {
                scrub_opt(vm);
                scrub(step);
            }
            Event::StepFinished { vm, step, at: _, duration_ms: _, error } => {
                scrub_opt(vm);
                scrub(step);
                scrub_opt(error);
            }
            Event::CapabilityCall { vm, caller, capability, function, outcome, duration_us: _, at: _ } => {
                scrub_opt(vm);
                for s in [caller, capability, function] {
                    scrub(s);
                }
                match outcome {
                    CallOutcome::Ok => {}
                    CallOutcome::Denied { scope } => scrub(scope),
                    CallOutcome::Failed { kind, message } => {
                        scrub(kind);
                        scrub(message);
                    }
                }
            }
            Event::Log { vm, level: _, message, fields, at: _ } => {
                scrub_opt(vm);
                scrub(message);
                for (k, v) in fields {
                    scrub(k);
                    scrub(v);
                }
            }
            Event::RunFinished { status: _, at: _, error } => scrub_opt(error),
        }
    }
}
