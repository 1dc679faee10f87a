//! The per-instance store: WASI context (no environment, no preopens, no
//! network, captured stdio), the memory limiter, the capability context and the
//! call's clock and budget ([`GuestClock`], from [`crate::caps::budget`]),
//! enforced by the epoch callback.
//!
//! A fresh store is built for every backend call, so nothing a plugin does in
//! one call (memory, globals, WASI state) leaks into the next.

use std::sync::Arc;

use wasmtime::component::{HasData, ResourceTable};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::limits::Limits;
use crate::caps::budget::GuestClock;
use crate::caps::context::CapCtx;

/// How much of a plugin's stdout/stderr is kept (for error messages and debug logs).
const STDIO_CAPTURE: usize = 64 * 1024;

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
