//! Resource limits for workflow scripts, and how a limit hit is reported.
//!
//! Workflows are trusted operator code, but a typo (`loop {}` without a `break`,
//! unbounded recursion, a string doubled in a loop) must stop the run with an error
//! that says which limit was hit and which `[workflow]` key in `cradle.toml` raises
//! it (`max_operations`, `max_call_depth`, `max_string_size`, `max_array_size`,
//! which also bounds maps), instead of hanging the host or exhausting its memory.
//! The expression depth is fixed (64, no key): too deep an expression fails the
//! load as a compile error.

use rhai::{Engine, EvalAltResult};
use serde::Deserialize;

/// The `[workflow]` section of `cradle.toml`. Every field has a default, so an
/// absent section means the defaults below.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkflowLimits {
    /// Rhai operations per call (`max_operations`, default 50 000 000 — minutes of
    /// pure computation; workflows spend their time waiting in host calls).
    pub max_operations: u64,
    /// Nested function calls (`max_call_depth`, default 64).
    pub max_call_depth: usize,
    /// Expression nesting at compile time, global and inside functions
    /// (default 64; not a `[workflow]` key).
    pub max_expr_depth: usize,
    /// Bytes in one string (`max_string_size`, default 1 MiB).
    pub max_string_size: usize,
    /// Elements in one array or blob (`max_array_size`, default 100 000).
    pub max_array_size: usize,
    /// Entries in one object map (default 100 000; `[workflow] max_array_size`
    /// sets it with the array limit).
    pub max_map_size: usize,
}

impl Default for WorkflowLimits {
    fn default() -> Self {
        Self {
            max_operations: 50_000_000,
            max_call_depth: 64,
            max_expr_depth: 64,
            max_string_size: 1024 * 1024,
            max_array_size: 100_000,
            max_map_size: 100_000,
        }
    }
}

impl WorkflowLimits {
    /// Applies the limits to `engine`. A zero would mean "unlimited" to Rhai, so
    /// zeros are raised to 1: a limit set to 0 by mistake fails loudly rather than
    /// silently removing the guard.
    pub(crate) fn apply(&self, engine: &mut Engine) {
        engine
            .set_max_operations(self.max_operations.max(1))
            .set_max_call_levels(self.max_call_depth.max(1))
            .set_max_expr_depths(self.max_expr_depth.max(1), self.max_expr_depth.max(1))
            .set_max_string_size(self.max_string_size.max(1))
            .set_max_array_size(self.max_array_size.max(1))
            .set_max_map_size(self.max_map_size.max(1));
    }

    /// Which configured limit `err` is, if it is one: (description, value, config key).
    pub(crate) fn hit(&self, err: &EvalAltResult) -> Option<(&'static str, u64, &'static str)> {
        let as_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        match err {
            EvalAltResult::ErrorTooManyOperations(..) => Some(("operations", self.max_operations, "max_operations")),
            EvalAltResult::ErrorStackOverflow(..) => {
                Some(("call depth", as_u64(self.max_call_depth), "max_call_depth"))
            }
            EvalAltResult::ErrorDataTooLarge(what, ..) if what.contains("string") => {
                Some(("string size (bytes)", as_u64(self.max_string_size), "max_string_size"))
            }
            EvalAltResult::ErrorDataTooLarge(what, ..) if what.contains("array") => {
                Some(("array size", as_u64(self.max_array_size), "max_array_size"))
            }
            EvalAltResult::ErrorDataTooLarge(what, ..) if what.contains("map") => {
                // One key bounds arrays and maps in cradle.toml.
                Some(("map size", as_u64(self.max_map_size), "max_array_size"))
            }
            _ => None,
        }
    }
}
