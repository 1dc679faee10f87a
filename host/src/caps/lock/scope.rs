//! The `lock` capability's scope: its grant section (`[...grants.lock]`:
//! [`LockGrant`], the key prefixes), what of a call the grant looks at
//! ([`LockCall`]: the key and what is done with it), and the rules that
//! compare the two: the key must start with a granted prefix, and a plugin
//! may release only a key it acquired itself in this run (the operator's
//! workflow may release any key the run holds). Checked through
//! [`crate::caps::policy::check`] like every call.

use serde::Deserialize;

use crate::caps::policy::{Caller, Grant, OutOfScope};

/// `[...grants.lock]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockGrant {
    /// Key prefixes that may be locked (`["*"]` for any key).
    #[serde(default)]
    pub prefixes: Vec<String>,
}

/// The scope-relevant arguments of a lock call.
#[derive(Debug, Clone, Copy)]
pub struct LockCall<'a> {
    /// The key.
    pub key: &'a str,
    /// What is done with it.
    pub op: LockOp,
}

/// What a lock call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockOp {
    /// Take the key.
    Acquire,
    /// Release the key; `acquired_by_caller`: this caller (the workflow, or
    /// this plugin) holds an acquisition of it in this run.
    Release {
        /// Whether the caller itself acquired the key in this run.
        acquired_by_caller: bool,
    },
    /// Read who holds the key.
    Holder,
    /// Remove the key when its holder is a process shown to be gone (what
    /// `cradle unlock` does); workflows only.
    Reclaim,
}

impl Grant for LockGrant {
    type Call<'a> = LockCall<'a>;

    fn check(&self, caller: &Caller<'_>, call: &LockCall<'_>) -> Result<(), OutOfScope> {
        let LockCall { key, op } = *call;
        if !self.prefixes.iter().any(|p| p == "*" || key.starts_with(p.as_str())) {
            return Err(format!("key `{key}` does not start with a prefix in {}.lock.prefixes", caller.origin).into());
        }
        if op == (LockOp::Release { acquired_by_caller: false }) && !caller.scope.operator {
            return Err(format!(
                "release of `{key}`: this plugin did not acquire it in this run (a plugin may release only \
                 locks it acquired; the workflow's lock belongs to the workflow)"
            )
            .into());
        }
        if op == LockOp::Reclaim && !caller.scope.operator {
            return Err(format!(
                "reclaim of `{key}`: only a workflow may take back a lock whose holder is gone (`cradle unlock`)"
            )
            .into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::Call;
    use crate::caps::policy::fixture::{allowed, denied, grants, scope};
    use crate::caps::policy::{RunScope, check};

    fn release(key: &str, acquired_by_caller: bool) -> Call<'_> {
        Call::Lock(LockCall { key, op: LockOp::Release { acquired_by_caller } })
    }

    #[test]
    fn lock_keys_outside_the_prefixes_are_denied() {
        assert!(denied(Call::Lock(LockCall { key: "other|x", op: LockOp::Acquire })).contains("key `other|x`"));
        allowed(Call::Lock(LockCall { key: "https://pve:8006|test-0", op: LockOp::Acquire }));
    }

    #[test]
    fn a_plugin_releasing_a_lock_it_did_not_acquire_is_denied() {
        let m = denied(release("https://pve:8006|test-0", false));
        assert!(m.contains("release of `https://pve:8006|test-0`: this plugin did not acquire it in this run"), "{m}");
        allowed(release("https://pve:8006|test-0", true));
    }

    #[test]
    fn a_plugin_reclaiming_a_lock_is_denied_and_a_workflow_may() {
        let reclaim = || Call::Lock(LockCall { key: "https://pve:8006|test-0", op: LockOp::Reclaim });
        assert!(denied(reclaim()).contains("only a workflow may take back"));
        let s = RunScope { operator: true, ..scope() };
        check(&grants(), "workflow.grants", &s, &reclaim()).expect("operator");
    }

    #[test]
    fn the_operator_workflow_may_release_a_lock_it_did_not_acquire() {
        let s = RunScope { operator: true, ..scope() };
        check(&grants(), "workflow.grants", &s, &release("https://pve:8006|test-0", false)).expect("operator");
    }
}
