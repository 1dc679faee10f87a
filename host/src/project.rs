//! A project: `cradle.toml`, its state directory, the plugin host, and the
//! swappable [`Loaded`] unit (plugins + compiled workflows) that runs use.
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
use crate::caps::checkpoint::CheckpointStore;
use crate::caps::context::{RunHandle, Services};
use crate::caps::coordination::CoordinationBackend;
use crate::caps::coordination::etcd::EtcdConn;
use crate::caps::coordination::records::{Sealer, SharedRecords};
use crate::caps::dns::providers::{DnsProviders, Provider};
use crate::caps::dns::technitium::Technitium;
use crate::caps::dns::{DnsProviderKind, Rfc2136};
use crate::caps::http::Endpoints;
use crate::caps::lock::{EtcdLockStore, FsLockStore, LockStore};
use crate::caps::policy::{RunScope, ScopedVm, SshLogin};
use crate::caps::run::{BackendGrants, PluginRoles, RunData};
use crate::caps::ssh::{ClientKind, SshClient, SshSettings};
use crate::caps::terraform::Terraform;
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
    /// Each cluster's connection, made by the first run that needs it and
    /// shared by the runs after it: one API client (its TLS connections and
    /// its shared VM listings, `caps::proxmox::client::flights`) for a whole
    /// `cradle provision`, instead of a new client, TLS handshake and
    /// credential file per VM.
    connections: Mutex<BTreeMap<String, crate::cluster::ClusterAccess>>,
    /// The lock store of `[coordination]`, made (for etcd: connected) by the
    /// first run that needs it and shared by every run after it.
    locks: Mutex<Option<Arc<dyn LockStore>>>,
    /// The etcd connection and sealing key of `[coordination]`, made once.
    shared: Mutex<Option<SharedRecords>>,
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
            connections: Mutex::default(),
            locks: Mutex::default(),
            shared: Mutex::default(),
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

    /// The lock store `[coordination]` names: this node's state directory, or
    /// etcd (connected here, once per project).
    pub fn locks(&self) -> Result<Arc<dyn LockStore>, ProjectError> {
        let mut slot = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(store) = &*slot {
            return Ok(store.clone());
        }
        let store: Arc<dyn LockStore> = match self.shared_records()? {
            Some(shared) => Arc::new(EtcdLockStore::new(shared.conn)),
            None => Arc::new(FsLockStore::new(self.state.locks()?)),
        };
        *slot = Some(store.clone());
        Ok(store)
    }

    /// With `[coordination] backend = "etcd"`: the connection and the sealing
    /// key of the shared records (checkpoints, creation records), made once
    /// per project and shared with the lock store. `None` for the file backend.
    pub fn shared_records(&self) -> Result<Option<SharedRecords>, ProjectError> {
        let config = &self.config.coordination;
        if config.backend != CoordinationBackend::Etcd {
            return Ok(None);
        }
        let mut slot = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shared) = &*slot {
            return Ok(Some(shared.clone()));
        }
        let env = |e: String| ProjectError::Environment(format!("[coordination]: {e}"));
        let key = config.records_key.as_ref().ok_or_else(|| env("records_key is required with etcd".into()))?;
        let sealer = Arc::new(Sealer::from_ref(key).map_err(|e| env(e.to_string()))?);
        let conn = Arc::new(EtcdConn::connect(config, &self.config.base_dir).map_err(|e| env(e.to_string()))?);
        let shared = SharedRecords { conn, sealer };
        *slot = Some(shared.clone());
        Ok(Some(shared))
    }

    /// The services of environment `env` (its cluster connection is made here).
    pub fn services(&self, env: &str) -> Result<Services, ProjectError> {
        let (_, environment) = self.config.environment(Some(env))?;
        let cluster = &self.config.clusters[&environment.cluster];
        let rt = tokio::runtime::Handle::try_current().map_err(|_| {
            ProjectError::Environment("cradle runs workflows inside its tokio runtime; none is running".into())
        })?;
        let access = self.connection(&environment.cluster, &rt)?;
        let locks = self.locks()?;
        let ssh = SshClient::new(SshSettings {
            known_hosts: self.state.known_hosts(),
            identity: access.identity.clone(),
            connect_timeout: std::time::Duration::from_secs(10),
            control_dir: if self.config.ssh.multiplex && !access.ssh_builtin {
                crate::caps::ssh::control_dir(self.state.root())
            } else {
                None
            },
            client: if access.ssh_builtin {
                ClientKind::Builtin {
                    share: self.config.ssh.multiplex,
                    agent: std::env::var_os("SSH_AUTH_SOCK").filter(|s| !s.is_empty()).map(PathBuf::from),
                }
            } else {
                ClientKind::OpenSsh
            },
        })
        .map_err(|e| ProjectError::Environment(e.message))?;
        for (node, node_ssh) in &access.nodes {
            if let Some(key) = &node_ssh.host_key {
                let pinned = if access.own_nodes {
                    ssh.pin_own_server_key(&node_ssh.host, node_ssh.port, key)
                } else {
                    ssh.trust_host_key(&node_ssh.host, node_ssh.port, key)
                };
                pinned.map_err(|e| ProjectError::Environment(format!("node {node}: {}", e.message)))?;
            }
        }
        let http = Endpoints::new(&self.config.endpoints);
        let mut dns_list = Vec::new();
        for name in &environment.dns {
            let cfg = self.config.dns.get(name).ok_or_else(|| {
                ProjectError::Environment(format!("environment `{env}` names dns = \"{name}\", which is not in [dns]"))
            })?;
            let provider = match cfg.kind {
                DnsProviderKind::Rfc2136 => Rfc2136::new(name, cfg).map(|p| Provider::Rfc2136(Box::new(p))),
                DnsProviderKind::Technitium => Technitium::new(name, cfg, http.clone()).map(Provider::Technitium),
            };
            dns_list.push((name.clone(), provider.map_err(|e| ProjectError::Environment(e.message))?));
        }
        let dns = (!dns_list.is_empty()).then(|| Arc::new(DnsProviders::new(dns_list)));
        let dhcp = match &environment.dhcp {
            Some(name) => {
                let cfg = self.config.dhcp.get(name).ok_or_else(|| {
                    ProjectError::Environment(format!(
                        "environment `{env}` names dhcp = \"{name}\", which is not in [dhcp]"
                    ))
                })?;
                let provider = crate::caps::dhcp::Unifi::new(name, cfg, http.clone());
                Some(Arc::new(provider.map_err(|e| ProjectError::Environment(e.message))?))
            }
            None => None,
        };
        let terraform = Some(Arc::new(self.terraform(&environment.cluster, access.terraform)));
        Ok(Services {
            locks,
            checkpoints: CheckpointStore::new(self.state.checkpoints()?).shared(self.shared_records()?),
            proxmox: Some(Arc::new(access.proxmox)),
            http,
            ssh: Some(Arc::new(ssh)),
            dns,
            dhcp,
            ansible: Some(Arc::new(crate::caps::ssh::playbook::Ansible {
                command: self.config.ansible.resolved(&self.config.base_dir),
                log_dir: self.state.root().join("ansible"),
            })),
            terraform,
            rt,
            cluster_id: crate::cluster::cluster_id(&environment.cluster, cluster),
            nodes: access.nodes,
            guest_keys: access.guest_keys,
            project_dir: self.config.base_dir.clone(),
            // Simulated guests live on the simulator's clock; qemu guests and
            // real clusters on the wall clock.
            wait_scale: match cluster.kind {
                crate::config::ClusterKind::Sim if cluster.sim.qemu.is_none() => cluster.sim.time_scale,
                _ => 1.0,
            },
        })
    }

    /// Whether environment `env`'s cluster can be connected to at all, asked once
    /// before a command works on its VMs (`crate::cluster::check_reachable`), so
    /// an endpoint that refuses connections is one error naming the cluster and
    /// URL, not one per VM. The in-process simulator always answers: not asked.
    pub fn check_reachable(&self, env: Option<&str>) -> Result<(), ProjectError> {
        let (_, environment) = self.config.environment(env)?;
        if self.config.clusters[&environment.cluster].kind == crate::config::ClusterKind::Sim {
            return Ok(());
        }
        let rt = tokio::runtime::Handle::try_current().map_err(|_| {
            ProjectError::Environment("cradle runs workflows inside its tokio runtime; none is running".into())
        })?;
        let access = self.connection(&environment.cluster, &rt)?;
        crate::cluster::check_reachable(&environment.cluster, &access, &rt)?;
        Ok(())
    }

    /// The connection to cluster `name`, made once per project (see `connections`).
    fn connection(
        &self,
        name: &str,
        rt: &tokio::runtime::Handle,
    ) -> Result<crate::cluster::ClusterAccess, ProjectError> {
        let mut made = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(access) = made.get(name) {
            return Ok(access.clone());
        }
        let cluster = &self.config.clusters[name];
        let access = crate::cluster::connect(name, cluster, &self.config, &self.sims, &self.state, rt)?;
        made.insert(name.to_string(), access.clone());
        Ok(access)
    }

    /// The environment's terraform: `[terraform]` (its paths resolved against
    /// cradle.toml by the config loader), on the cluster `cluster` as `creds`
    /// reach it.
    fn terraform(&self, cluster: &str, creds: crate::caps::terraform::Credentials) -> Terraform {
        let cfg = &self.config.terraform;
        let cache = cfg.plugin_cache_dir.clone().unwrap_or_else(|| self.state.root().join("terraform/plugin-cache"));
        Terraform::new(cfg, creds, cluster, cache)
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
