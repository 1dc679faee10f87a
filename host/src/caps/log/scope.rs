//! The `log` capability's scope: none. `log` is always granted (it has no
//! grant section; `[...grants.log]` is an unknown key) and a log event has
//! no argument a grant could refuse, so [`LogCall`] carries nothing and
//! [`crate::caps::policy::check`] would allow it once it sees the capability.
//! The adapter therefore does not go through the guard at all: events are
//! bounded by the plugin call's budget instead
//! ([`crate::caps::context::CapCtx::log_event`]), and the type exists so the
//! registry has one shape for every capability.

/// A log event: nothing in it is scoped.
#[derive(Debug, Clone, Copy)]
pub struct LogCall;
