//! Benchmarks of the plugin host and of workflow steps that call a plugin.
//! Figures and how to read them: docs/BENCHMARKS.md.
//!
//! Needs the sample plugin's component:
//!
//! ```sh
//! cargo build --profile plugin --target wasm32-wasip2 -p cradle-plugin-sample
//! cargo bench -p cradle --bench plugin_host
//! ```
//!
//! Nothing measured here writes a journal: runs carry `RunHandle { journal: None }`
//! and workflows report to a `NoopObserver`, and no tracing subscriber is
//! installed, so the figures are the host's own work without I/O (except the
//! `compile/*` group, whose subject is reading and writing the component cache).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cradle::caps::Grants;
use cradle::caps::budget::GuestClock;
use cradle::caps::checkpoint::CheckpointStore;
use cradle::caps::context::{CapCtx, RunHandle, Services};
use cradle::caps::http::Endpoints;
use cradle::caps::lock::{FsLockStore, LockStore};
use cradle::caps::policy::RunScope;
use cradle::caps::run::RunData;
use cradle::contract::bindings::cradle::host::types::VmSpec;
use cradle::plugin::backend::{PluginBackend, vm_binding};
use cradle::plugin::cache::CacheOutcome;
use cradle::plugin::limits::Limits;
use cradle::plugin::store::new_store;
use cradle::plugin::{LoadedPlugin, PluginHost};
use cradle::workflow::{
    Backend, BackendHandle, EngineOptions, NoopObserver, RunContext, WorkflowSet, from_val_typed, to_val,
};
use criterion::{BatchSize, Criterion, SamplingMode, criterion_group, criterion_main};
use rhai::Dynamic;
use wasmtime::component::{Type, Val};

/// The plugin's name, as it would be in cradle.toml.
const PLUGIN: &str = "sample";

/// The `vm-spec` the plugin is called with (the fields of wit/types.wit).
const VM_SPEC: &str = r#"
#{ name: "bench-0", vmid: 150, node: "pve1", template: "debian-12-cloud", storage: "local-lvm",
   cores: 2, memory_mib: 2048, disk_gib: 20, disks: [],
   nics: [#{ slot: "net0", bridge: "vmbr0", vlan: 20, address: "127.0.20.10/24", gateway: "127.0.20.1", guest_interface: "ens18" }],
   startup_order: 10, tags: ["cradle"], environment: "bench", allow_replacement: false }
"#;

/// The workflow: one step calling the plugin, and the same step doing nothing,
/// with the same arguments so the difference is the plugin call.
const WORKFLOW: &str = r#"
fn plugin_step(backend, vm) {
    step("plan", || backend.plan(vm))
}
fn empty_step(backend, vm) {
    step("plan", || 42)
}
"#;

/// The sample plugin's component, located like tests/src/lib.rs does.
fn sample_wasm() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default();
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace.join("target"));
    let path = target.join("wasm32-wasip2/plugin/cradle_plugin_sample.wasm");
    assert!(
        path.is_file(),
        "{} is missing: build the sample plugin first: \
         cargo build --profile plugin --target wasm32-wasip2 -p cradle-plugin-sample",
        path.display()
    );
    path
}

/// Everything a call needs, built once: the host, the loaded plugin, the
/// run's services (in a temporary state dir) and a run without a journal.
struct Fixture {
    _state: tempfile::TempDir,
    _rt: tokio::runtime::Runtime,
    plugin: Arc<LoadedPlugin>,
    services: Arc<Services>,
    run: Arc<RunHandle>,
    vm_map: Dynamic,
    vm_val: Val,
    /// `vm_val` as the typed record the lifecycle path binds the VM from.
    vm_spec: VmSpec,
    // Dropped last: the plugin's engine ticks on the host's epoch thread.
    host: PluginHost,
}

impl Fixture {
    fn new(wasm: &Path) -> Fixture {
        let state = tempfile::tempdir().expect("tempdir");
        let host = PluginHost::new(&state.path().join("components")).expect("plugin host");
        let plugin =
            Arc::new(host.load(PLUGIN, wasm, Grants::default(), Limits::default()).expect("load the sample plugin"));
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
        let locks: Arc<dyn LockStore> = Arc::new(FsLockStore::new(state.path().join("locks")));
        let services = Arc::new(Services {
            locks,
            checkpoints: CheckpointStore::new(state.path().join("checkpoints")),
            proxmox: None,
            http: Endpoints::default(),
            ssh: None,
            dns: None,
            dhcp: None,
            post: None,
            ansible: None,
            terraform: None,
            rt: rt.handle().clone(),
            cluster_id: "test".into(),
            nodes: Default::default(),
            guest_keys: Vec::new(),
            project_dir: state.path().to_path_buf(),
            wait_scale: 1.0,
        });
        let run = Arc::new(RunHandle::new("bench".into(), None));
        let vm_map: Dynamic =
            rhai::Engine::new().eval::<rhai::Map>(VM_SPEC).map(Dynamic::from_map).expect("vm-spec map");
        let plan = plugin.admitted.exports.iter().find(|e| e.name == "plan").expect("the sample plugin exports `plan`");
        let (param, ty) = plan.params.first().expect("`plan` takes a vm-spec");
        let vm_val = to_val(&vm_map, ty, param).expect("the map is a vm-spec");
        let canonical = cradle::workflow::from_val_typed(&vm_val, ty, param).expect("a vm-spec converts back");
        let vm_spec: VmSpec = rhai::serde::from_dynamic(&canonical).expect("the typed vm-spec");
        Fixture { _state: state, _rt: rt, plugin, services, run, vm_map, vm_val, vm_spec, host }
    }

    /// The capability context `PluginBackend::call` builds for a call about `vm_val`.
    fn caps(&self) -> CapCtx {
        let vm = vm_binding(&self.vm_spec);
        CapCtx {
            caller: PLUGIN.into(),
            origin: format!("plugins.{PLUGIN}.grants"),
            grants: self.plugin.grants.clone(),
            scope: Arc::new(RunScope { vms: vec![vm.clone()], ..RunScope::default() }),
            vm: Some(vm.name),
            run: self.run.clone(),
            services: self.services.clone(),
            clock: None,
        }
    }

    /// A workflow run context like `Project::run` builds, minus the journal.
    fn run_context(&self, backend: &BackendHandle) -> RunContext {
        let data = RunData {
            run: self.run.clone(),
            services: self.services.clone(),
            workflow_grants: Arc::new(Grants::default()),
            scope: Arc::new(RunScope::default()),
            backend: Some(backend.clone()),
            backend_grants: None,
            plugins: Default::default(),
            environment: "bench".into(),
        };
        RunContext::new(Arc::new(NoopObserver), Arc::new(data))
    }
}

fn is_ok_plan(out: &Option<Val>) -> bool {
    matches!(out, Some(Val::Result(Ok(Some(_)))))
}

fn compile(c: &mut Criterion, wasm: &Path) {
    let mut group = c.benchmark_group("compile");
    group.sample_size(10).sampling_mode(SamplingMode::Flat).measurement_time(Duration::from_secs(20));

    // A fresh host over an empty cache directory each iteration: a Cranelift
    // compile, then serialising the component into the cache (fsync'd).
    group.bench_function("first_load", |b| {
        b.iter_batched_ref(
            || {
                let dir = tempfile::tempdir().expect("tempdir");
                let host = PluginHost::new(&dir.path().join("components")).expect("plugin host");
                (dir, host)
            },
            |(_, host)| {
                let compiled = host.compile(PLUGIN, wasm).expect("compile");
                assert_eq!(compiled.cache, CacheOutcome::Miss);
                compiled
            },
            BatchSize::PerIteration,
        );
    });

    // A warm cache: read the file, hash it, read and verify the entry,
    // deserialise the component.
    let dir = tempfile::tempdir().expect("tempdir");
    let host = PluginHost::new(&dir.path().join("components")).expect("plugin host");
    host.compile(PLUGIN, wasm).expect("fill the cache");
    group.sample_size(50).sampling_mode(SamplingMode::Auto).measurement_time(Duration::from_secs(10));
    group.bench_function("cached_load", |b| {
        b.iter(|| {
            let compiled = host.compile(PLUGIN, wasm).expect("cached load");
            debug_assert_eq!(compiled.cache, CacheOutcome::Hit);
            compiled
        });
    });
    // The whole `PluginHost::load` from a warm cache: the above plus admission
    // and pre-instantiation (linking).
    group.bench_function("cached_full_load", |b| {
        b.iter(|| host.load(PLUGIN, wasm, Grants::default(), Limits::default()).expect("load"));
    });
    assert_eq!(host.compile(PLUGIN, wasm).expect("cached load").cache, CacheOutcome::Hit);
    group.finish();
}

fn call(c: &mut Criterion, fx: &Fixture) {
    let caps = fx.caps();
    assert!(is_ok_plan(&fx.plugin.invoke(caps.clone(), "plan", std::slice::from_ref(&fx.vm_val)).expect("plan")));
    let mut group = c.benchmark_group("call");
    // A fresh store (WASI context, limiter, deadline), instantiation from the
    // InstancePre, the `plan` export with one `log.event` host call, and the
    // result lifted back into a `Val`.
    group.bench_function("instantiate_plus_one_host_call", |b| {
        b.iter(|| fx.plugin.invoke(caps.clone(), "plan", std::slice::from_ref(&fx.vm_val)).expect("plan"));
    });
    // The first part of the above alone: a store with its WASI context (captured
    // stdio, no environment), limiter and epoch deadline.
    group.bench_function("new_store_only", |b| {
        b.iter(|| {
            new_store(
                fx.host.engine(),
                PLUGIN,
                caps.clone(),
                fx.plugin.limits,
                GuestClock::start(PLUGIN, fx.plugin.limits.budget()),
            )
        });
    });
    group.finish();
}

fn workflow(c: &mut Criterion, fx: &Fixture) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bench.rhai"), WORKFLOW).expect("write the workflow");
    let backend: Arc<dyn Backend> = Arc::new(PluginBackend::new(fx.plugin.clone()));
    let opts = EngineOptions {
        host_modules: cradle::caps::script::modules(),
        backends: vec![backend.clone()],
        ..EngineOptions::default()
    };
    let set = WorkflowSet::load(dir.path(), &opts).expect("compile the workflow");
    let handle = BackendHandle::new(backend);
    let ctx = fx.run_context(&handle);
    let args = || vec![Dynamic::from(handle.clone()), fx.vm_map.clone()];
    let out = set.call("bench", "plugin_step", args(), ctx.clone()).expect("plugin step");
    assert!(out.is_map(), "plan returns a plan-outcome map, got {out:?}");
    assert_eq!(set.call("bench", "empty_step", args(), ctx.clone()).expect("empty step").as_int(), Ok(42));

    let mut group = c.benchmark_group("workflow");
    // `WorkflowSet::call` of a function doing one `step` whose closure calls the
    // plugin: argument conversion, `PluginBackend::call` (the call above) and
    // the result converted back to a Rhai map.
    group.bench_function("step_calling_plugin", |b| {
        b.iter_batched(
            args,
            |a| set.call("bench", "plugin_step", a, ctx.clone()).expect("plugin step"),
            BatchSize::SmallInput,
        );
    });
    // The same call with a step whose closure returns a constant.
    group.bench_function("empty_step", |b| {
        b.iter_batched(
            args,
            |a| set.call("bench", "empty_step", a, ctx.clone()).expect("empty step"),
            BatchSize::SmallInput,
        );
    });
    // Where a plugin step spends time outside the plugin: the `vm-spec` map
    // converted to a component value, and the `plan-outcome` converted back.
    let plan = fx.plugin.admitted.exports.iter().find(|e| e.name == "plan").expect("plan");
    let (param, param_ty) = plan.params.first().expect("a vm-spec parameter");
    group.bench_function("to_val_vm_spec", |b| {
        b.iter(|| to_val(&fx.vm_map, param_ty, param).expect("to_val"));
    });
    let Some(Val::Result(Ok(Some(outcome)))) =
        fx.plugin.invoke(fx.caps(), "plan", std::slice::from_ref(&fx.vm_val)).expect("plan")
    else {
        panic!("plan did not return ok(plan-outcome)");
    };
    let Some(Type::Result(result_ty)) = &plan.result else { panic!("plan returns a result") };
    let outcome_ty = result_ty.ok().expect("result<plan-outcome, _>");
    group.bench_function("from_val_plan_outcome", |b| {
        b.iter(|| from_val_typed(&outcome, &outcome_ty, "ok").expect("from_val"));
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let wasm = sample_wasm();
    compile(c, &wasm);
    let fx = Fixture::new(&wasm);
    call(c, &fx);
    workflow(c, &fx);
}

criterion_group!(plugin_host, benches);
criterion_main!(plugin_host);
