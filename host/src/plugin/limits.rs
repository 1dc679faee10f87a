//! Per-call resource limits of a plugin: linear memory, the epoch deadline, and
//! the call's budget.
//!
//! - The epoch deadline (`timeout_ms`) bounds the longest stretch of guest code
//!   between two returns to the host: time inside host calls does not count.
//! - The call budget bounds the whole call, host time included:
//!   `call_timeout_ms` of wall-clock time, `max_host_calls` host calls and
//!   `max_journal_bytes` of journal lines. Every timeout argument a plugin
//!   passes is clamped to its documented maximum
//!   ([`crate::caps::budget::TimeoutArg::max`]) and to the time left on the call
//!   ([`crate::caps::context::CapCtx::clamp_timeout`]), and every host call's work is cut off when the call's time runs out
//!   ([`crate::caps::context::CapCtx::block_on`]).
//!
//! A plugin that exceeds a limit traps; the trap fails that one call with a
//! message naming the limit and the `cradle.toml` key that raises it, the run
//! fails and releases its locks, and the host keeps serving other runs.
//! A configured limit that cannot work is a [`LimitsError`] at load.

use std::time::Duration;

use serde::Deserialize;

use crate::caps::budget::Budget;

/// Default memory limit per instance.
pub const DEFAULT_MEMORY_MIB: u64 = 64;
/// Default longest run of guest code without a host call.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// Default wall-clock limit of one plugin call, host calls included. It must
/// exceed the longest legitimate backend call: the direct backend's `create`
/// waits up to 15 min for a clone task, then for its follow-up tasks.
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 30 * 60 * 1000;
/// Default number of host calls one plugin call may make (a VM's creation by
/// the direct backend makes a few dozen).
pub const DEFAULT_MAX_HOST_CALLS: u64 = 10_000;
/// Default journal bytes one plugin call may cause (its capability-call and
/// log lines).
pub const DEFAULT_MAX_JOURNAL_BYTES: u64 = 8 * 1024 * 1024;
/// How often the engine's epoch advances.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The limits as written in `[plugins.NAME]`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct LimitsConfig {
    /// Linear memory per instance, in MiB (default 64).
    #[serde(default)]
    pub memory_limit_mib: Option<u64>,
    /// Longest run of guest code without returning to the host, in ms (default 10000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Wall-clock limit of one call, host calls included, in ms (default 30 min).
    #[serde(default)]
    pub call_timeout_ms: Option<u64>,
    /// Host calls one call may make (default 10000).
    #[serde(default)]
    pub max_host_calls: Option<u64>,
    /// Journal bytes one call may cause (default 8 MiB).
    #[serde(default)]
    pub max_journal_bytes: Option<u64>,
}

/// A `[plugins.NAME]` limit that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    /// `memory_limit_mib` outside 1..=4096.
    #[error("memory_limit_mib = {0} must be between 1 and 4096")]
    Memory(u64),
    /// A timeout (`timeout_ms`, `call_timeout_ms`) shorter than one epoch tick.
    #[error("{key} = {value} must be at least {tick_ms} ms")]
    Timeout {
        /// The key.
        key: &'static str,
        /// Its value.
        value: u64,
        /// The epoch tick in ms.
        tick_ms: u128,
    },
    /// A count (`max_host_calls`, `max_journal_bytes`) of 0.
    #[error("{0} = 0 must be at least 1")]
    Zero(&'static str),
}

impl LimitsConfig {
    /// Reject values that cannot work.
    pub fn validate(&self) -> Result<(), LimitsError> {
        if let Some(m) = self.memory_limit_mib
            && !(1..=4096).contains(&m)
        {
            return Err(LimitsError::Memory(m));
        }
        let tick_ms = EPOCH_TICK.as_millis();
        for (key, value) in [("timeout_ms", self.timeout_ms), ("call_timeout_ms", self.call_timeout_ms)] {
            if let Some(value) = value
                && value < tick_ms as u64
            {
                return Err(LimitsError::Timeout { key, value, tick_ms });
            }
        }
        for (key, value) in [("max_host_calls", self.max_host_calls), ("max_journal_bytes", self.max_journal_bytes)] {
            if value == Some(0) {
                return Err(LimitsError::Zero(key));
            }
        }
        Ok(())
    }

    /// The effective limits.
    pub fn resolve(&self) -> Limits {
        Limits {
            memory_bytes: self.memory_limit_mib.unwrap_or(DEFAULT_MEMORY_MIB) * 1024 * 1024,
            timeout: Duration::from_millis(self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)),
            call_timeout: Duration::from_millis(self.call_timeout_ms.unwrap_or(DEFAULT_CALL_TIMEOUT_MS)),
            max_host_calls: self.max_host_calls.unwrap_or(DEFAULT_MAX_HOST_CALLS),
            max_journal_bytes: self.max_journal_bytes.unwrap_or(DEFAULT_MAX_JOURNAL_BYTES),
        }
    }
}

/// Effective limits of one plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Maximum linear memory of one instance, in bytes.
    pub memory_bytes: u64,
    /// Longest run of guest code without a host call.
    pub timeout: Duration,
    /// Wall-clock limit of one call, host calls included.
    pub call_timeout: Duration,
    /// Host calls one call may make.
    pub max_host_calls: u64,
    /// Journal bytes one call may cause.
    pub max_journal_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        LimitsConfig::default().resolve()
    }
}

impl Limits {
    /// The call budget part of the limits.
    pub fn budget(&self) -> Budget {
        Budget {
            call_timeout: self.call_timeout,
            max_host_calls: self.max_host_calls,
            max_journal_bytes: self.max_journal_bytes,
        }
    }

    /// The deadline in epoch ticks (at least one).
    pub fn ticks(&self) -> u64 {
        (self.timeout.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_keys_default_and_reject_zero() {
        let l = LimitsConfig::default().resolve();
        assert_eq!(l.call_timeout, Duration::from_millis(DEFAULT_CALL_TIMEOUT_MS));
        assert_eq!((l.max_host_calls, l.max_journal_bytes), (DEFAULT_MAX_HOST_CALLS, DEFAULT_MAX_JOURNAL_BYTES));
        let zero = LimitsConfig { max_host_calls: Some(0), ..Default::default() };
        assert!(zero.validate().unwrap_err().to_string().contains("max_host_calls"));
        let short = LimitsConfig { call_timeout_ms: Some(1), ..Default::default() };
        assert!(short.validate().unwrap_err().to_string().contains("call_timeout_ms"));
    }
}
