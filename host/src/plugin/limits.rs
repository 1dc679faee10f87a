//! Per-instance resource limits of a plugin: linear memory and the epoch deadline.
//!
//! The deadline bounds the longest stretch of guest code between two returns to
//! the host: time spent inside host calls (a task wait, an SSH command) does not
//! count, since those have their own timeouts. A plugin that exceeds either limit
//! traps; the trap fails that one call with a message naming the limit and the
//! `cradle.toml` key that raises it, and the host keeps serving other runs.

use std::time::Duration;

use serde::Deserialize;

/// Default memory limit per instance.
pub const DEFAULT_MEMORY_MIB: u64 = 64;
/// Default longest run of guest code without a host call.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
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
}

impl LimitsConfig {
    /// Reject values that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(m) = self.memory_limit_mib
            && !(1..=4096).contains(&m)
        {
            return Err(format!("memory_limit_mib = {m} must be between 1 and 4096"));
        }
        if let Some(t) = self.timeout_ms
            && t < EPOCH_TICK.as_millis() as u64
        {
            return Err(format!("timeout_ms = {t} must be at least {} ms", EPOCH_TICK.as_millis()));
        }
        Ok(())
    }

    /// The effective limits.
    pub fn resolve(&self) -> Limits {
        Limits {
            memory_bytes: self.memory_limit_mib.unwrap_or(DEFAULT_MEMORY_MIB) * 1024 * 1024,
            timeout: Duration::from_millis(self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)),
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
}

impl Default for Limits {
    fn default() -> Self {
        LimitsConfig::default().resolve()
    }
}

impl Limits {
    /// The deadline in epoch ticks (at least one).
    pub fn ticks(&self) -> u64 {
        (self.timeout.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64
    }
}

/// The store's resource limiter: refuses memory growth past the limit with a
/// trap that says so (a plain failed grow would surface as an opaque
/// `unreachable` from the guest's allocator).
#[derive(Debug)]
pub struct MemoryLimiter {
    /// The limit in bytes.
    pub max_bytes: u64,
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired as u64 > self.max_bytes {
            return Err(wasmtime::Error::msg(format!(
                "memory limit: the plugin asked for {} MiB of linear memory, over its limit of {} MiB (raise memory_limit_mib in its [plugins.NAME] section if this is legitimate)",
                desired as u64 / (1024 * 1024),
                self.max_bytes / (1024 * 1024)
            )));
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}
