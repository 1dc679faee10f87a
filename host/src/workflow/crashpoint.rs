//! `CRADLE_CRASH_AT`: kill this process at a named step boundary — fault
//! injection for the crash tests, inert unless the variable is set.
//!
//! `CRADLE_CRASH_AT=before:create` sends SIGKILL to this process as the first
//! `step(.., "create", ..)` begins; `after:reconcile` as it ends successfully;
//! `before:create@vm-3` only for that VM; `call:clone-vm` right after a
//! host call of that name succeeded (mid-step: the clone task is running). It
//! is SIGKILL on purpose, not a
//! panic or an exit: no destructor runs, no lock is released, nothing is
//! flushed — exactly what `kill -9` (or the OOM killer, or a power cut for the
//! control node's own state) leaves behind, so a test can prove that a rerun
//! recovers from it. A value that does not parse is reported once on stderr
//! and ignored. Unset, it costs one `OnceLock` read per step boundary and per successful
//! host call. `CRADLE_CRASH_SIGNAL=STOP` stops the process there instead (SIGSTOP),
//! between two calls, for the tests of a holder that lost its lease while frozen.

use std::sync::OnceLock;

/// Which side of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edge {
    /// As the step begins.
    Before,
    /// As the step ends successfully.
    After,
    /// Right after a host (capability) call of this name succeeded.
    Call,
}

#[derive(Debug, PartialEq, Eq)]
struct CrashAt {
    edge: Edge,
    step: String,
    vm: Option<String>,
}

/// A `CRADLE_CRASH_AT` value that does not parse.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
enum BadCrashAt {
    #[error("`{0}` must be before:STEP[@VM], after:STEP[@VM] or call:FUNCTION[@VM]")]
    Edge(String),
    #[error("`{0}` names no step or an empty VM")]
    Empty(String),
}

fn parse(value: &str) -> Result<CrashAt, BadCrashAt> {
    let (edge, rest) = match value.split_once(':') {
        Some(("before", rest)) => (Edge::Before, rest),
        Some(("after", rest)) => (Edge::After, rest),
        Some(("call", rest)) => (Edge::Call, rest),
        _ => return Err(BadCrashAt::Edge(value.to_string())),
    };
    let (step, vm) = match rest.split_once('@') {
        Some((step, vm)) => (step, Some(vm.to_string())),
        None => (rest, None),
    };
    if step.is_empty() || vm.as_deref() == Some("") {
        return Err(BadCrashAt::Empty(value.to_string()));
    }
    Ok(CrashAt { edge, step: step.to_string(), vm })
}

fn configured() -> Option<&'static CrashAt> {
    static CRASH_AT: OnceLock<Option<CrashAt>> = OnceLock::new();
    CRASH_AT
        .get_or_init(|| {
            let value = std::env::var("CRADLE_CRASH_AT").ok()?;
            parse(&value).map_err(|e| eprintln!("cradle: ignoring CRADLE_CRASH_AT: {e}")).ok()
        })
        .as_ref()
}

/// Kill the process if `CRADLE_CRASH_AT` names this boundary (or stop it,
/// with `CRADLE_CRASH_SIGNAL=STOP`: a holder frozen between two calls, as a
/// paused VM or a stalled laptop leaves it, until someone sends SIGCONT).
pub(crate) fn at(edge: Edge, vm: Option<&str>, step: &str) {
    let Some(c) = configured() else { return };
    if c.edge == edge && c.step == step && (c.vm.is_none() || c.vm.as_deref() == vm) {
        let stop = std::env::var("CRADLE_CRASH_SIGNAL").is_ok_and(|s| s == "STOP");
        eprintln!(
            "cradle: CRADLE_CRASH_AT: {} this process at {edge:?} {step}",
            if stop { "stopping" } else { "killing" }
        );
        signal_self(if stop { libc::SIGSTOP } else { libc::SIGKILL });
    }
}

#[allow(unsafe_code, reason = "raise(3) on our own thread: no memory is touched")]
fn signal_self(signal: libc::c_int) {
    // raise, not kill(getpid()): a signal sent to the process may be taken by
    // another thread, and this one then runs on for a moment (long enough on
    // a loaded machine to send its next request, whose deadline then passes
    // while the process is stopped). Sent to this thread, it is acted on as
    // the call returns; SIGKILL and SIGSTOP still take the whole process.
    // SAFETY: raise has no preconditions; SIGKILL does not return, SIGSTOP
    // returns once the process is continued.
    unsafe {
        libc::raise(signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_parse_with_an_optional_vm_and_nonsense_is_refused() {
        assert_eq!(parse("before:create").unwrap(), CrashAt { edge: Edge::Before, step: "create".into(), vm: None });
        assert_eq!(
            parse("after:reconcile@vm-3").unwrap(),
            CrashAt { edge: Edge::After, step: "reconcile".into(), vm: Some("vm-3".into()) }
        );
        assert_eq!(parse("call:clone-vm").unwrap(), CrashAt { edge: Edge::Call, step: "clone-vm".into(), vm: None });
        for bad in ["create", "during:create", "before:", "before:x@"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
