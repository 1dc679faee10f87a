//! The `log` capability's scope: none. `log` is always granted (it has no
//! grant section; `[...grants.log]` is an unknown key) and a log event has
//! no argument a grant could refuse, so [`LogCall`] carries nothing and
//! [`crate::caps::policy::check`] allows it once it sees the capability.
//! Events are bounded by the plugin call's budget instead
//! ([`crate::caps::context::CapCtx::log_event`]).

/// A log event: nothing in it is scoped.
#[derive(Debug, Clone, Copy)]
pub struct LogCall;
