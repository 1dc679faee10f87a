//! The budget of one plugin call, which every capability call charges: the
//! call's wall clock (host time included), its host-call count and its journal
//! bytes ([`GuestClock`]), and the maxima of the timeout arguments a plugin may
//! pass ([`TimeoutArg`]).
//!
//! It lives with the capabilities, not the plugin host, because the guard
//! ([`super::context::CapCtx::guard`]) charges it; the plugin host makes one
//! clock per call ([`crate::plugin::LoadedPlugin::invoke`]) and its store's
//! epoch callback ([`crate::plugin::store`]) traps the guest once the budget is
//! exhausted. Failure modes: an exhausted budget is an
//! [`Exhausted`] naming the limit and the `cradle.toml` key that raises it; the
//! first refusal of a call is flagged so it is journaled once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The limits a [`GuestClock`] enforces (from [`crate::plugin::limits::Limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Wall-clock limit of one call, host calls included.
    pub call_timeout: Duration,
    /// Host calls one call may make.
    pub max_host_calls: u64,
    /// Journal bytes one call may cause.
    pub max_journal_bytes: u64,
}

/// The clock and budget of one plugin call.
///
/// Two clocks: when guest code last (re)gained control (the call's start or
/// the return of its latest host call), from which the epoch deadline counts;
/// and the call's start, from which its wall-clock limit counts. It also
/// counts host calls and journal bytes. The first limit exhausted is kept
/// ([`GuestClock::exhausted`]); from then on every host call is refused and the
/// epoch callback traps the guest with that message.
#[derive(Debug)]
pub struct GuestClock {
    base: Instant,
    last_nanos: AtomicU64,
    plugin: String,
    call_timeout: Duration,
    max_host_calls: u64,
    max_journal_bytes: u64,
    host_calls: AtomicU64,
    journal_bytes: AtomicU64,
    exhausted: OnceLock<String>,
}

impl GuestClock {
    /// A clock for one call of `plugin` under `budget`, starting now.
    pub fn start(plugin: &str, budget: Budget) -> Arc<GuestClock> {
        Arc::new(GuestClock {
            base: Instant::now(),
            last_nanos: AtomicU64::new(0),
            plugin: plugin.to_string(),
            call_timeout: budget.call_timeout,
            max_host_calls: budget.max_host_calls,
            max_journal_bytes: budget.max_journal_bytes,
            host_calls: AtomicU64::new(0),
            journal_bytes: AtomicU64::new(0),
            exhausted: OnceLock::new(),
        })
    }
    /// Guest code regains control now.
    pub fn touch(&self) {
        let n = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_nanos.store(n, Ordering::Relaxed);
    }
    /// Time since guest code last regained control.
    pub fn since(&self) -> Duration {
        let now = self.base.elapsed();
        now.saturating_sub(Duration::from_nanos(self.last_nanos.load(Ordering::Relaxed)))
    }
    /// Wall-clock time left on the call (zero once it is over).
    pub fn left(&self) -> Duration {
        self.call_timeout.saturating_sub(self.base.elapsed())
    }
    /// The message of the first exhausted limit, if any.
    pub fn exhausted(&self) -> Option<&str> {
        self.exhausted.get().map(String::as_str)
    }
    /// The refusal for the limit `key` exhausted as `what` (which starts with
    /// its separator from the plugin's name): the first
    /// exhausted limit's message wins, and only its first refusal is `first`.
    fn exhausted_by(&self, what: String, key: &str) -> Exhausted {
        let message =
            format!("budget: plugin `{p}`{what} (raise {key} in [plugins.{p}] if this is legitimate)", p = self.plugin);
        let first = self.exhaust(message.clone());
        Exhausted { message: self.exhausted().unwrap_or(&message).to_string(), first }
    }
    /// Record that a limit is exhausted; the first message wins. Returns whether
    /// this was the first (so the caller journals it once).
    fn exhaust(&self, message: String) -> bool {
        self.exhausted.set(message).is_ok()
    }
    /// Check the wall-clock limit; on expiry mark the budget exhausted.
    pub fn check_deadline(&self) -> Result<(), Exhausted> {
        if let Some(m) = self.exhausted() {
            return Err(Exhausted { message: m.to_string(), first: false });
        }
        if self.left().is_zero() {
            let what = format!(
                ": the call ran for more than {} ms in all, host calls included",
                self.call_timeout.as_millis()
            );
            return Err(self.exhausted_by(what, "call_timeout_ms"));
        }
        Ok(())
    }
    /// Count one host call against the budget: refused once any limit is
    /// exhausted or this call is over `max_host_calls`.
    pub fn charge_host_call(&self) -> Result<(), Exhausted> {
        self.check_deadline()?;
        let n = self.host_calls.fetch_add(1, Ordering::Relaxed) + 1;
        if n > self.max_host_calls {
            return Err(self.exhausted_by(
                format!(" made more than {n} host calls in one call", n = self.max_host_calls),
                "max_host_calls",
            ));
        }
        Ok(())
    }
    /// Whether the journal budget still has room for another line.
    pub fn journal_room(&self) -> Result<(), Exhausted> {
        if self.journal_bytes.load(Ordering::Relaxed) >= self.max_journal_bytes {
            return Err(self.exhausted_by(
                format!(" caused more than {n} bytes of run journal in one call", n = self.max_journal_bytes),
                "max_journal_bytes",
            ));
        }
        Ok(())
    }
    /// Count `bytes` of journal written for this call.
    pub fn charge_journal(&self, bytes: usize) {
        self.journal_bytes.fetch_add(u64::try_from(bytes).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

/// A call's budget is exhausted: the message names the limit and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhausted {
    /// What ran out, and the `cradle.toml` key that raises it.
    pub message: String,
    /// Whether this is the first refusal of the call (journal it once).
    pub first: bool,
}

/// A timeout argument a plugin passes to a host call. Each is clamped to
/// [`TimeoutArg::max`] (documented in docs/PLUGINS.md) and to the time left on
/// the plugin call, so no wait a plugin asks for outlives the call's wall-clock
/// limit. Host calls without a timeout argument (a clone, an upload, a
/// trusted key) are cut off at the limit too, by
/// [`crate::caps::context::CapCtx::block_on`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutArg {
    /// `proxmox.wait-task` `timeout-ms`.
    WaitTask,
    /// `ssh.exec` `timeout-ms`.
    SshExec,
    /// `ssh.wait-for` `timeout-ms`.
    SshWaitFor,
    /// An `http.send` request (the host's own per-request timeout).
    Http,
    /// One terraform command (`[terraform] timeout_s`).
    Terraform,
    /// One `ssh::playbook` run.
    Playbook,
    /// `post.run` `timeout-ms`: one post-provision task, start to end.
    PostTask,
}

impl TimeoutArg {
    /// The largest timeout a plugin may ask for.
    pub fn max(self) -> Duration {
        match self {
            TimeoutArg::WaitTask | TimeoutArg::SshExec => Duration::from_secs(30 * 60),
            TimeoutArg::SshWaitFor => Duration::from_secs(15 * 60),
            TimeoutArg::Http => Duration::from_secs(60),
            TimeoutArg::Terraform | TimeoutArg::Playbook | TimeoutArg::PostTask => Duration::from_secs(24 * 60 * 60),
        }
    }

    /// `requested_ms` clamped to [`TimeoutArg::max`] and to `left` on the call
    /// (`None` outside a plugin call: no clamp).
    pub fn clamp(self, requested_ms: u64, left: Option<Duration>) -> Duration {
        let requested = Duration::from_millis(requested_ms);
        match left {
            None => requested,
            Some(left) => requested.min(self.max()).min(left),
        }
    }

    /// The WIT function (for messages).
    pub fn name(self) -> &'static str {
        match self {
            TimeoutArg::WaitTask => "proxmox.wait-task",
            TimeoutArg::SshExec => "ssh.exec",
            TimeoutArg::SshWaitFor => "ssh.wait-for",
            TimeoutArg::Http => "http.send",
            TimeoutArg::Terraform => "terraform",
            TimeoutArg::Playbook => "ssh::playbook",
            TimeoutArg::PostTask => "post.run",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(tweak: impl FnOnce(&mut Budget)) -> Arc<GuestClock> {
        let mut budget =
            Budget { call_timeout: Duration::from_secs(60), max_host_calls: 10_000, max_journal_bytes: 1 << 20 };
        tweak(&mut budget);
        GuestClock::start("p", budget)
    }

    #[test]
    fn host_calls_past_the_budget_are_refused_naming_the_key_and_the_first_refusal_is_flagged() {
        let c = clock(|b| b.max_host_calls = 2);
        assert!(c.charge_host_call().is_ok() && c.charge_host_call().is_ok());
        let first = c.charge_host_call().unwrap_err();
        assert!(first.first && first.message.contains("max_host_calls in [plugins.p]"), "{first:?}");
        let again = c.charge_host_call().unwrap_err();
        assert!(!again.first && again.message == first.message);
        assert_eq!(c.exhausted(), Some(first.message.as_str()));
    }

    #[test]
    fn journal_bytes_past_the_budget_leave_no_room() {
        let c = clock(|b| b.max_journal_bytes = 100);
        assert!(c.journal_room().is_ok());
        c.charge_journal(100);
        let e = c.journal_room().unwrap_err();
        assert!(e.message.contains("max_journal_bytes in [plugins.p]"), "{e:?}");
        assert!(c.check_deadline().is_err(), "an exhausted budget refuses every later call");
    }

    #[test]
    fn the_wall_clock_limit_counts_host_time_too() {
        let c = clock(|b| b.call_timeout = Duration::from_millis(20));
        c.touch();
        std::thread::sleep(Duration::from_millis(40));
        c.touch(); // a host call returned: guest time is reset, wall time is not
        assert_eq!(c.left(), Duration::ZERO);
        let e = c.check_deadline().unwrap_err();
        assert!(e.message.contains("call_timeout_ms in [plugins.p]") && e.message.contains("20 ms"), "{e:?}");
    }

    #[test]
    fn an_endless_timeout_argument_is_clamped_to_its_maximum() {
        let far = Some(Duration::from_secs(24 * 3600));
        assert_eq!(TimeoutArg::SshWaitFor.clamp(u64::MAX, far), Duration::from_secs(15 * 60));
        assert_eq!(TimeoutArg::WaitTask.clamp(u64::MAX, far), Duration::from_secs(30 * 60));
        assert_eq!(TimeoutArg::Http.clamp(u64::MAX, far), Duration::from_secs(60));
    }

    #[test]
    fn a_timeout_argument_is_clamped_to_the_time_left_on_the_call() {
        assert_eq!(TimeoutArg::SshExec.clamp(60_000, Some(Duration::from_millis(1500))), Duration::from_millis(1500));
        assert_eq!(TimeoutArg::SshExec.clamp(500, Some(Duration::from_secs(10))), Duration::from_millis(500));
    }

    #[test]
    fn workflow_timeouts_are_not_clamped() {
        assert_eq!(TimeoutArg::WaitTask.clamp(u64::MAX, None), Duration::from_millis(u64::MAX));
    }
}
