//! The per-instance store: WASI context (no environment, no preopens, no
//! network, captured stdio), the memory limiter, the capability context and the
//! call's clock and budget ([`GuestClock`]), enforced by the epoch callback.
//!
//! A fresh store is built for every backend call, so nothing a plugin does in
//! one call (memory, globals, WASI state) leaks into the next.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use wasmtime::component::{HasData, ResourceTable};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::limits::{Limits, MemoryLimiter};
use crate::caps::context::CapCtx;

/// How much of a plugin's stdout/stderr is kept (for error messages and debug logs).
const STDIO_CAPTURE: usize = 64 * 1024;

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
    /// A clock for one call of `plugin` under `limits`, starting now.
    pub fn start(plugin: &str, limits: &Limits) -> Arc<GuestClock> {
        Arc::new(GuestClock {
            base: Instant::now(),
            last_nanos: AtomicU64::new(0),
            plugin: plugin.to_string(),
            call_timeout: limits.call_timeout,
            max_host_calls: limits.max_host_calls,
            max_journal_bytes: limits.max_journal_bytes,
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
            let message = format!(
                "budget: plugin `{p}`: the call ran for more than {} ms in all, host calls included (raise call_timeout_ms in [plugins.{p}] if this is legitimate)",
                self.call_timeout.as_millis(),
                p = self.plugin
            );
            let first = self.exhaust(message.clone());
            return Err(Exhausted { message: self.exhausted().unwrap_or(&message).to_string(), first });
        }
        Ok(())
    }
    /// Count one host call against the budget: refused once any limit is
    /// exhausted or this call is over `max_host_calls`.
    pub fn charge_host_call(&self) -> Result<(), Exhausted> {
        self.check_deadline()?;
        let n = self.host_calls.fetch_add(1, Ordering::Relaxed) + 1;
        if n > self.max_host_calls {
            let message = format!(
                "budget: plugin `{p}` made more than {} host calls in one call (raise max_host_calls in [plugins.{p}] if this is legitimate)",
                self.max_host_calls,
                p = self.plugin
            );
            let first = self.exhaust(message.clone());
            return Err(Exhausted { message: self.exhausted().unwrap_or(&message).to_string(), first });
        }
        Ok(())
    }
    /// Whether the journal budget still has room for another line.
    pub fn journal_room(&self) -> Result<(), Exhausted> {
        if self.journal_bytes.load(Ordering::Relaxed) >= self.max_journal_bytes {
            let message = format!(
                "budget: plugin `{p}` caused more than {} bytes of run journal in one call (raise max_journal_bytes in [plugins.{p}] if this is legitimate)",
                self.max_journal_bytes,
                p = self.plugin
            );
            let first = self.exhaust(message.clone());
            return Err(Exhausted { message: self.exhausted().unwrap_or(&message).to_string(), first });
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

/// The data of one plugin store.
pub struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    /// The capability context the plugin's imports run in.
    pub caps: CapCtx,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// Projects a store onto its capability context for `bindgen!`'s linker glue.
pub struct Caps;

impl HasData for Caps {
    type Data<'a> = &'a mut CapCtx;
}

impl StoreState {
    /// What the plugin wrote to stderr (lossy UTF-8, capped), e.g. a panic message.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.contents()).trim_end().to_string()
    }
    /// What the plugin wrote to stdout (lossy UTF-8, capped).
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.contents()).trim_end().to_string()
    }
}

/// Build a store for one call of `plugin` with `caps`, under `limits`.
pub fn new_store(
    engine: &Engine,
    plugin: &str,
    caps: CapCtx,
    limits: Limits,
    clock: Arc<GuestClock>,
) -> Store<StoreState> {
    let stdout = MemoryOutputPipe::new(STDIO_CAPTURE);
    let stderr = MemoryOutputPipe::new(STDIO_CAPTURE);
    // No inherited environment, arguments or directories; no sockets at all.
    let wasi = WasiCtxBuilder::new()
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build();
    let state = StoreState {
        wasi,
        table: ResourceTable::new(),
        limiter: MemoryLimiter { max_bytes: limits.memory_bytes },
        caps,
        stdout,
        stderr,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limiter);
    clock.touch();
    let timeout = limits.timeout;
    let plugin = plugin.to_string();
    store.set_epoch_deadline(1);
    // The callback runs every tick while guest code runs (and at once when it
    // resumes after a host call that outlasted a tick): cheap, and it ends the
    // call within a tick of any limit being exhausted, host calls included.
    store.epoch_deadline_callback(move |_ctx| {
        if let Err(e) = clock.check_deadline() {
            return Err(wasmtime::Error::msg(e.message));
        }
        if clock.since() >= timeout {
            return Err(wasmtime::Error::msg(format!(
                "timeout: plugin `{plugin}` ran for more than {} ms without returning to the host (raise timeout_ms in [plugins.{plugin}] if this is legitimate)",
                timeout.as_millis()
            )));
        }
        Ok(UpdateDeadline::Continue(1))
    });
    store
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::limits::LimitsConfig;

    fn clock(config: LimitsConfig) -> Arc<GuestClock> {
        GuestClock::start("p", &config.resolve())
    }

    #[test]
    fn host_calls_past_the_budget_are_refused_naming_the_key_and_the_first_refusal_is_flagged() {
        let c = clock(LimitsConfig { max_host_calls: Some(2), ..Default::default() });
        assert!(c.charge_host_call().is_ok() && c.charge_host_call().is_ok());
        let first = c.charge_host_call().unwrap_err();
        assert!(first.first && first.message.contains("max_host_calls in [plugins.p]"), "{first:?}");
        let again = c.charge_host_call().unwrap_err();
        assert!(!again.first && again.message == first.message);
        assert_eq!(c.exhausted(), Some(first.message.as_str()));
    }

    #[test]
    fn journal_bytes_past_the_budget_leave_no_room() {
        let c = clock(LimitsConfig { max_journal_bytes: Some(100), ..Default::default() });
        assert!(c.journal_room().is_ok());
        c.charge_journal(100);
        let e = c.journal_room().unwrap_err();
        assert!(e.message.contains("max_journal_bytes in [plugins.p]"), "{e:?}");
        assert!(c.check_deadline().is_err(), "an exhausted budget refuses every later call");
    }

    #[test]
    fn the_wall_clock_limit_counts_host_time_too() {
        let c = clock(LimitsConfig { call_timeout_ms: Some(20), ..Default::default() });
        c.touch();
        std::thread::sleep(Duration::from_millis(40));
        c.touch(); // a host call returned: guest time is reset, wall time is not
        assert_eq!(c.left(), Duration::ZERO);
        let e = c.check_deadline().unwrap_err();
        assert!(e.message.contains("call_timeout_ms in [plugins.p]") && e.message.contains("20 ms"), "{e:?}");
    }
}
