//! A project: `cradle.toml`, its state directory, the plugin host, and the
//! swappable [`Loaded`] unit (plugins + compiled workflows) that runs use.
//!
//! A run's services (cluster connection, SSH, providers, lock and checkpoint
//! stores) are made by `services.rs`'s `ServicesBuilder`, which keeps what is
//! made once per project.
//!
//! [`Project::run`] is the one way a workflow runs: it opens the journal,
//! builds the run's capability context, calls the script function on the
//! calling (blocking) thread, then — whatever happened — releases the locks
//! the run still holds and records how the run ended.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rhai::Dynamic;

use crate::builtin::catalogue::PluginKind;
use crate::caps::context::{RunHandle, Services};
use crate::caps::coordination::records::SharedRecords;
use crate::caps::lock::LockStore;
use crate::caps::policy::{RunScope, ScopedVm, SshLogin};
use crate::caps::run::{BackendGrants, PluginRoles, RunData};
use crate::cluster::ClusterError;
use crate::config::{Config, ConfigError, EnvironmentError};
use crate::journal::{JournalError, JournalWriter, LogLevel, PluginVersion, RunStart, RunStatus};
use crate::plugin::admission::AdmissionError;
use crate::plugin::backend::PluginBackend;
use crate::plugin::{LoadedPlugin, PluginError, PluginHost, PluginSource};
use crate::state::{StateDir, StateError};
use crate::workflow::{
    Backend, BackendHandle, EngineOptions, RunContext, RunObserver, WorkflowError, WorkflowLimits, WorkflowSet,
    WorkflowSource,
};

mod services;

use services::ServicesBuilder;

/// A step starting or ending, for live progress displays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepEvent {
    /// The VM the step works on, if the script named one.
    pub vm: Option<String>,
    /// The step.
    pub step: String,
    /// Started, or how it ended.
    pub state: StepState,
}

/// Where a step of a [`StepEvent`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepState {
    /// It started.
    Started,
    /// It ended without an error.
    Succeeded,
    /// It ended with this error (the script error's message).
    Failed(String),
}

/// One VM's run ended: what a live display marks its row with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmFinished {
    /// The VM.
    pub vm: String,
    /// The result word of the summary table (`created`, `skipped`, `failed`, ...).
    pub result: String,
    /// It ended without an error.
    pub ok: bool,
    /// Its wall time, the figure the summary table shows.
    pub duration: std::time::Duration,
}

/// What a live display is told, in order: the VMs, then their steps and ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// The command will run these VMs (before the first starts).
    Planned(Vec<String>),
    /// A step started or ended.
    Step(StepEvent),
    /// A VM's run ended.
    Finished(VmFinished),
}

/// Where progress events go (nowhere by default).
#[derive(Clone, Default)]
pub struct ProgressSink(Option<Arc<dyn Fn(Progress) + Send + Sync>>);

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "ProgressSink(active)" } else { "ProgressSink(none)" })
    }
}

impl ProgressSink {
    /// A sink calling `f` for every event.
    pub fn new(f: impl Fn(Progress) + Send + Sync + 'static) -> ProgressSink {
        ProgressSink(Some(Arc::new(f)))
    }

    /// Whether anything listens.
    pub fn is_active(&self) -> bool {
        self.0.is_some()
    }

    /// Tell the listener.
    pub fn send(&self, event: Progress) {
        if let Some(f) = &self.0 {
            f(event);
        }
    }

    fn emit(&self, vm: Option<&str>, step: &str, state: StepState) {
        if self.is_active() {
            self.send(Progress::Step(StepEvent { vm: vm.map(str::to_string), step: step.to_string(), state }));
        }
    }
}

/// Why a project could not be opened, loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// cradle.toml.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The state directory.
    #[error(transparent)]
    State(#[from] StateError),
    /// A plugin.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// The workflows.
    #[error(transparent)]
    Workflow(#[from] WorkflowError),
    /// The journal.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The engine could not be created.
    #[error("cannot create the WebAssembly engine: {0}")]
    Engine(String),
    /// An environment the configuration does not define or settle.
    #[error(transparent)]
    UnknownEnvironment(#[from] EnvironmentError),
    /// The environment's cluster cannot be reached as configured.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// Anything else about the environment.
    #[error("{0}")]
    Environment(String),
}

/// Plugins and workflows loaded together; swapped as one by hot reload, so a
/// run always sees a consistent pair.
pub struct Loaded {
    /// The compiled workflows.
    pub workflows: Arc<WorkflowSet>,
    /// Loaded plugins by their cradle.toml name.
    pub plugins: BTreeMap<String, Arc<LoadedPlugin>>,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("workflows", &self.workflows.hash())
            .field("plugins", &self.plugins.keys())
            .finish()
    }
}

impl Loaded {
    /// Plugin versions for the journal.
    pub fn plugin_versions(&self) -> Vec<PluginVersion> {
        self.plugins
            .values()
            .map(|p| PluginVersion { name: p.name.clone(), version: p.manifest.version.clone(), hash: p.hash.clone() })
            .collect()
    }
}

/// An opened project.
#[derive(Debug)]
pub struct Project {
    /// The configuration.
    pub config: Config,
    /// Where it was read from.
    pub config_path: PathBuf,
    /// The state directory.
    pub state: StateDir,
    /// The plugin host.
    pub host: PluginHost,
    /// Simulated clusters this project started (kept for the process's life).
    pub sims: crate::cluster::SimClusters,
    /// The run services' builder and the connections, lock store and shared
    /// records it made once for every run after the first.
    services: ServicesBuilder,
    /// Where every run's step events go (the CLI's live progress display).
    pub progress: ProgressSink,
}

/// One workflow call to make.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// Environment name (default: the config's).
    pub env: Option<String>,
    /// Script name (`hello` for workflows/hello.rhai).
    pub script: String,
    /// Function to call.
    pub func: String,
    /// Arguments.
    pub args: Vec<Dynamic>,
    /// The command line, for the journal (already free of secrets).
    pub argv: Vec<String>,
    /// The VMs the run is about.
    pub vms: Vec<ScopedVm>,
    /// The backend plugin the run's `cradle::backend()` is, instead of the
    /// environment's (`vms_use_terraform` picks `terraform` for a host).
    pub backend: Option<String>,
}

/// The error for a host whose inventory picks backend `name` that the project
/// does not load.
pub fn missing_backend(name: &str) -> String {
    format!(
        "the inventory sets vms_use_terraform for this host, but cradle.toml loads no `{name}` plugin: add [plugins.{name}] with its grants (docs/TERRAFORM.md; `cradle init` writes the built-in's defaults)"
    )
}

/// How a run went.
#[derive(Debug)]
pub struct RunReport {
    /// The run id.
    pub run_id: String,
    /// The journal file.
    pub journal: PathBuf,
    /// The function's value, or the error.
    pub result: Result<Dynamic, WorkflowError>,
    /// Locks that could not be released at the end (should be empty).
    pub unreleased_locks: Vec<String>,
}

/// `path` made absolute against the current directory (lexically: no
/// symlink is resolved and the path need not exist yet). An empty path is
/// the current directory. Should the current directory be unreadable, the
/// path is kept as given and the failure shows where it is used.
fn absolute(path: &Path) -> PathBuf {
    let path = if path.as_os_str().is_empty() { Path::new(".") } else { path };
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

impl Project {
    /// Read `config_path` and open the state directory (`state_dir` overrides the config's).
    ///
    /// Both paths are made absolute here, once, against the current directory:
    /// everything derived from them (the workflow directory the watcher
    /// watches, the SSH control directory, plugin paths) must stay valid
    /// whatever directory a later call runs in, and OpenSSH needs an absolute
    /// control path. `cradle.toml` alone (the default `--config`) has the
    /// parent `""`, which would otherwise leave every derived path relative.
    pub fn open(config_path: &Path, state_dir: Option<&Path>) -> Result<Project, ProjectError> {
        let config_path = &absolute(config_path);
        let state_dir = state_dir.map(absolute);
        let config = Config::load(config_path)?;
        let explicit = config.state_dir_override(state_dir.as_deref()).map(|p| absolute(&p));
        let state = StateDir::resolve(explicit.as_deref())?;
        let host =
            PluginHost::new(&state.cache()?.join("components")).map_err(|e| ProjectError::Engine(format!("{e:#}")))?;
        Ok(Project {
            config,
            config_path: config_path.to_path_buf(),
            state,
            host,
            sims: Default::default(),
            services: ServicesBuilder::default(),
            progress: ProgressSink::default(),
        })
    }

    /// The project's workflow directory (`[workflow] dir`, default
    /// `workflows/`), whether or not it exists; see [`Project::workflow_source`].
    pub fn workflow_dir(&self) -> PathBuf {
        self.config.workflow_dir()
    }

    /// Where the workflows come from. The project's directory replaces the
    /// built-in workflows as a whole: when `[workflow] dir` is set, that
    /// directory (it must exist); otherwise `workflows/` next to cradle.toml if
    /// it exists, else the workflows built into cradle.
    pub fn workflow_source(&self) -> Result<WorkflowSource, ProjectError> {
        let dir = self.workflow_dir();
        if dir.is_dir() {
            return Ok(WorkflowSource::Dir(dir));
        }
        match &self.config.workflow.dir {
            Some(configured) => Err(ProjectError::Environment(format!(
                "{}: [workflow] dir = \"{}\" is not a directory ({}); create it (`cradle init` writes the built-in workflows out), or remove the setting to use the built-in workflows",
                self.config_path.display(),
                configured.display(),
                dir.display()
            ))),
            None => Ok(WorkflowSource::Builtin),
        }
    }

    /// The `.wasm` files of every configured plugin (built-ins have none).
    pub fn plugin_paths(&self) -> Vec<PathBuf> {
        self.config.plugins.values().filter_map(|p| p.path.as_ref().map(|path| self.config.resolve(path))).collect()
    }

    /// `[plugins.NAME]`, or an error naming the known plugins.
    fn plugin_config(&self, name: &str) -> Result<&crate::config::PluginConfig, ProjectError> {
        self.config.plugins.get(name).ok_or_else(|| {
            ProjectError::Environment(format!(
                "no plugin `{name}` in [plugins] of {} (known: {})",
                self.config_path.display(),
                self.config.plugins.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })
    }

    /// Where plugin `name`'s component comes from.
    pub fn plugin_source(&self, name: &str) -> Result<PluginSource, ProjectError> {
        let pc = self.plugin_config(name)?;
        Ok(match &pc.path {
            Some(path) => PluginSource::File(self.config.resolve(path)),
            None => PluginSource::Builtin(
                crate::builtin::plugin(name)
                    .map(|b| b.name)
                    .ok_or_else(|| ProjectError::Environment(format!("plugins.{name}: path is required")))?,
            ),
        })
    }

    /// Load one configured plugin.
    pub fn load_plugin(&self, name: &str) -> Result<LoadedPlugin, ProjectError> {
        let pc = self.plugin_config(name)?;
        let source = self.plugin_source(name)?;
        let kind = pc.kind(name);
        self.host.load_kind(name, &source, kind, pc.grants.clone(), pc.limits.resolve()).map_err(|e| match e {
            // A component that is not what [plugins.NAME] declares: name the
            // file and the field to change.
            PluginError::Admission(
                e @ (AdmissionError::NoLifecycle { .. }
                | AdmissionError::LifecycleInIntegration { .. }
                | AdmissionError::NoIntegrationExport { .. }),
            ) => ProjectError::Environment(format!(
                "{}: plugins.{name}.kind (\"{kind}\"{}): {e}",
                self.config_path.display(),
                if pc.kind.is_none() { ", the default" } else { "" }
            )),
            other => other.into(),
        })
    }

    /// Load every plugin and compile the workflows against them.
    pub fn load(&self) -> Result<Loaded, ProjectError> {
        let mut plugins = BTreeMap::new();
        for name in self.config.plugins.keys() {
            plugins.insert(name.clone(), Arc::new(self.load_plugin(name)?));
        }
        let workflows = self.compile_workflows(&plugins)?;
        Ok(Loaded { workflows: Arc::new(workflows), plugins })
    }

    /// Compile the workflows with `plugins` as the known backends.
    pub fn compile_workflows(
        &self,
        plugins: &BTreeMap<String, Arc<LoadedPlugin>>,
    ) -> Result<WorkflowSet, ProjectError> {
        let w = &self.config.workflow;
        let limits = WorkflowLimits {
            max_operations: w.max_operations,
            max_call_depth: w.max_call_depth,
            max_string_size: w.max_string_size,
            max_array_size: w.max_array_size,
            max_map_size: w.max_array_size,
            ..WorkflowLimits::default()
        };
        let backends: Vec<Arc<dyn Backend>> =
            plugins.values().map(|p| Arc::new(PluginBackend::new(p.clone())) as Arc<dyn Backend>).collect();
        let opts = EngineOptions { limits, host_modules: crate::caps::script::modules(), backends };
        Ok(WorkflowSet::load_from(&self.workflow_source()?, &opts)?)
    }

    /// The builder's view of this project: what every service is made from.
    fn service_inputs(&self) -> services::Inputs<'_> {
        services::Inputs { config: &self.config, state: &self.state, sims: &self.sims }
    }

    /// The lock store `[coordination]` names: this node's state directory, or
    /// etcd (connected once per project; `project/services.rs`).
    pub fn locks(&self) -> Result<Arc<dyn LockStore>, ProjectError> {
        self.services.locks(self.service_inputs())
    }

    /// With `[coordination] backend = "etcd"`: the connection and the sealing
    /// key of the shared records (checkpoints, creation records), made once per
    /// project and shared with the lock store. `None` for the file backend.
    pub fn shared_records(&self) -> Result<Option<SharedRecords>, ProjectError> {
        self.services.shared_records(self.service_inputs())
    }

    /// The services of environment `env` (its cluster connection is made by the
    /// first call and shared after; `project/services.rs`).
    pub fn services(&self, env: &str) -> Result<Services, ProjectError> {
        self.services.services(self.service_inputs(), env)
    }

    /// Whether environment `env`'s cluster can be connected to at all, asked once
    /// before a command works on its VMs, so an endpoint that refuses connections
    /// is one error naming the cluster and URL, not one per VM. The in-process
    /// simulator always answers: not asked.
    pub fn check_reachable(&self, env: Option<&str>) -> Result<(), ProjectError> {
        self.services.check_reachable(self.service_inputs(), env)
    }

    /// Run `req` against `loaded`, on the calling thread (which must be a
    /// blocking thread of a tokio runtime: host calls `block_on` it).
    pub fn run(&self, loaded: &Loaded, req: RunRequest) -> Result<RunReport, ProjectError> {
        let (env_name, env) = self.config.environment(req.env.as_deref())?;
        let env_name = env_name.to_string();
        let services = Arc::new(self.services(&env_name)?);
        let script_hash = loaded
            .workflows
            .scripts()
            .into_iter()
            .find(|s| s.name == req.script)
            .map(|s| s.hash)
            .unwrap_or_else(|| loaded.workflows.hash().to_string());
        let journal = JournalWriter::start(
            &self.state,
            RunStart {
                workflow: req.script.clone(),
                function: Some(req.func.clone()),
                workflow_hash: script_hash,
                plugins: loaded.plugin_versions(),
                argv: req.argv.clone(),
                environment: Some(env_name.clone()),
                backend: Some(req.backend.as_deref().unwrap_or(&env.backend).to_string())
                    .filter(|b| loaded.plugins.contains_key(b)),
            },
        )?;
        let run = Arc::new(RunHandle::new(journal.run_id().to_string(), Some(journal.clone())));
        let backend_name = req.backend.as_deref().unwrap_or(&env.backend);
        let plugin = match (loaded.plugins.get(backend_name), &req.backend) {
            (Some(p), _) if p.admitted.kind != PluginKind::Backend => {
                return Err(ProjectError::Environment(format!(
                    "plugin `{backend_name}` is an integration plugin ([plugins.{backend_name}] kind = \"integration\" in {}), not a backend: workflows reach it with cradle::plugin(\"ROLE\")",
                    self.config_path.display()
                )));
            }
            (Some(p), _) => Some(p),
            (None, Some(name)) => return Err(ProjectError::Environment(missing_backend(name))),
            (None, None) => None,
        };
        let backend = plugin.map(|p| BackendHandle::new(Arc::new(PluginBackend::new(p.clone())) as Arc<dyn Backend>));
        let backend_grants = plugin.map(|p| BackendGrants { name: p.name.clone(), grants: p.grants.clone() });
        let plugins = Arc::new(PluginRoles {
            roles: self
                .config
                .roles(&env_name)
                .into_iter()
                .filter_map(|(role, name)| {
                    let p = loaded.plugins.get(&name)?;
                    Some((role, BackendHandle::new(Arc::new(PluginBackend::new(p.clone())) as Arc<dyn Backend>)))
                })
                .collect(),
            config: self.config_path.display().to_string(),
        });
        let data = RunData {
            run: run.clone(),
            services: services.clone(),
            workflow_grants: Arc::new(self.config.workflow.grants.clone()),
            scope: Arc::new(RunScope {
                vms: req.vms.clone(),
                nodes: services
                    .nodes
                    .values()
                    .map(|n| SshLogin { host: n.host.clone(), port: n.port, user: n.user.clone() })
                    .collect(),
                // The workflow's own calls; backend calls get a plugin scope.
                operator: true,
            }),
            backend,
            backend_grants,
            plugins,
            environment: env_name,
        };
        let observer = Arc::new(JournalObserver {
            journal: journal.clone(),
            open: Mutex::new(Vec::new()),
            progress: self.progress.clone(),
        });
        let ctx = RunContext::new(observer, Arc::new(data));
        let result = loaded.workflows.call(&req.script, &req.func, req.args, ctx);
        // Every path: free what the run still holds, then record the end.
        let unreleased_locks = run.release_all(services.locks.as_ref());
        if let Ok(value) = &result {
            journal_outcome(&journal, &req.vms, value);
        }
        let (status, error) = match &result {
            Ok(_) => (RunStatus::Succeeded, None),
            Err(e) => (RunStatus::Failed, Some(e.to_string())),
        };
        if let Err(e) = journal.run_finished(status, error.as_deref()) {
            tracing::error!(error = %e, "could not record the end of the run");
        }
        Ok(RunReport {
            run_id: journal.run_id().to_string(),
            journal: journal.path().to_path_buf(),
            result,
            unreleased_locks,
        })
    }
}

/// A workflow that returns `#{ result, why }` (provision, check, remove) gets
/// that outcome in its journal as a log event `outcome result=... why=...`,
/// so `cradle runs show` says what the run did and why (a skip: complete,
/// no checkpoint, nothing to change), not only that it succeeded.
fn journal_outcome(journal: &JournalWriter, vms: &[ScopedVm], value: &Dynamic) {
    let Some(map) = value.read_lock::<rhai::Map>() else { return };
    let text = |key: &str| map.get(key).filter(|v| !v.is_unit()).map(|v| v.to_string());
    let Some(result) = text("result") else { return };
    let mut fields = vec![("result".to_string(), result)];
    if let Some(why) = text("why") {
        fields.push(("why".to_string(), why));
    }
    let vm = match vms {
        [one] => Some(one.name.as_str()),
        _ => None,
    };
    if let Err(e) = journal.log(vm, LogLevel::Info, "outcome", fields) {
        tracing::error!(error = %e, "could not journal the run's outcome");
    }
}

/// Writes a run's steps and script output to its journal.
struct JournalObserver {
    journal: JournalWriter,
    open: Mutex<Vec<(Option<String>, String, Instant)>>,
    progress: ProgressSink,
}

impl RunObserver for JournalObserver {
    fn step_started(&self, vm: Option<&str>, step: &str) {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).push((
            vm.map(str::to_string),
            step.to_string(),
            Instant::now(),
        ));
        if let Err(e) = self.journal.step_started(vm, step) {
            tracing::error!(error = %e, "could not journal a step start");
        }
        self.progress.emit(vm, step, StepState::Started);
        // Steps are detail (`-v`): a display shows them, and without one each
        // VM's outcome gets one line (`provision::run_all`).
        tracing::debug!(vm = vm.unwrap_or("-"), step, "step started");
    }

    fn step_finished(&self, vm: Option<&str>, step: &str, error: Option<&str>) {
        let started = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            let pos = open.iter().rposition(|(v, s, _)| v.as_deref() == vm && s == step);
            pos.map(|i| open.remove(i).2)
        };
        let elapsed = started.map(|s| s.elapsed()).unwrap_or_default();
        if let Err(e) = self.journal.step_finished(vm, step, elapsed, error) {
            tracing::error!(error = %e, "could not journal a step end");
        }
        self.progress.emit(vm, step, error.map_or(StepState::Succeeded, |e| StepState::Failed(e.to_string())));
        // A failure is detail too: a failed step fails every step around it,
        // and the VM's outcome line and the summary table carry the error once.
        match error {
            None => tracing::debug!(vm = vm.unwrap_or("-"), step, ms = elapsed.as_millis() as u64, "step done"),
            Some(err) => tracing::debug!(vm = vm.unwrap_or("-"), step, error = err, "step failed"),
        }
    }

    fn log(&self, level: tracing::Level, message: &str) {
        let lvl = if level == tracing::Level::DEBUG { LogLevel::Debug } else { LogLevel::Info };
        if let Err(e) = self.journal.log(None, lvl, message, Vec::new()) {
            tracing::error!(error = %e, "could not journal script output");
        }
        if level == tracing::Level::DEBUG {
            tracing::debug!(target: crate::caps::log::TARGET, "{message}");
        } else {
            tracing::info!(target: crate::caps::log::TARGET, "{message}");
        }
    }
}
