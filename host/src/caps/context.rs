//! The per-call capability context and the guard every capability call passes.
//!
//! [`CapCtx`] is what a plugin store (or a workflow run) carries: who is calling,
//! with which grants, bound to which VMs, inside which run, and the shared
//! services (lock store, checkpoint store, cluster clients). [`CapCtx::guard`]
//! is the one path a call takes: the plugin call's budget, the permission
//! check, then the work, then one journal record of the outcome (denials
//! included). Nothing is performed for a denied call.
//!
//! Budget (plugin calls only, see [`crate::plugin::limits`]): once the call's
//! wall-clock limit, host-call count or journal bytes are exhausted, every
//! further host call fails at once with a `failed` error naming the limit and
//! its `[plugins.NAME]` key, without doing anything or writing to the journal
//! (the first refusal is journaled), and the epoch callback ends the plugin
//! call with a trap carrying the same message. Timeout arguments pass through
//! [`CapCtx::clamp_timeout`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::checkpoint::CheckpointStore;
use super::lock::{Holder, LockStore};
use super::policy::{self, RunScope};
use super::{Call, Grants};
use crate::caps::budget::Exhausted;
use crate::caps::budget::TimeoutArg;
use crate::contract::{CapError, ErrorKind};
use crate::journal::{CallOutcome, JournalWriter};

/// One run: its identity, journal and the locks it holds. Shared by every store
/// the run creates; the locks still held are released when the run ends.
#[derive(Debug)]
pub struct RunHandle {
    /// The run id (also the journal's).
    pub run_id: String,
    /// Who this run is, as a lock holder.
    pub holder: Holder,
    /// The run's journal; `None` for calls outside a recorded run (inspection).
    pub journal: Option<JournalWriter>,
    /// Lock keys this run holds, with how many nested acquisitions each
    /// caller (`workflow`, `plugins.NAME`) has open: a nested step's release
    /// must not free the outer step's lock, and a plugin must not release the
    /// workflow's.
    pub held_locks: Mutex<BTreeMap<String, BTreeMap<String, u32>>>,
    /// What this run has read from the cluster and may answer again
    /// (`proxmox::held`).
    pub held_reads: crate::caps::proxmox::held::Held,
    /// The saved terraform plans this run made (removed when the run ends).
    pub terraform_plans: crate::caps::terraform::plans::Plans,
}

impl RunHandle {
    /// A run with `run_id`, held as this process.
    pub fn new(run_id: String, journal: Option<JournalWriter>) -> RunHandle {
        let holder = Holder::current(&run_id);
        RunHandle {
            run_id,
            holder,
            journal,
            held_locks: Mutex::new(BTreeMap::new()),
            held_reads: Default::default(),
            terraform_plans: Default::default(),
        }
    }
}

/// Services shared by every call of an environment: the providers the WIT
/// adapters and Rhai modules reach, built once per environment by
/// `Project::services` (`project.rs`).
///
/// Written by hand, not generated from the registry: the providers share
/// their inputs (one `cluster::connect` yields the Proxmox client, the SSH
/// identity and the node logins, and the SSH client pins the nodes' host keys
/// before any call), the creation records live with the checkpoints, and
/// some fields serve no single capability (`rt`, `cluster_id`, `nodes`,
/// `guest_keys`). A capability with a provider adds its field here and builds
/// it in `Project::services`.
pub struct Services {
    /// Workflow locks.
    pub locks: Arc<dyn LockStore>,
    /// Finalization checkpoints.
    pub checkpoints: CheckpointStore,
    /// The environment's Proxmox API, when it has one.
    pub proxmox: Option<Arc<super::proxmox::client::ProxmoxClient>>,
    /// Named HTTP endpoints.
    pub http: super::http::Endpoints,
    /// The environment's SSH client (cradle's known_hosts and identity), when it has one.
    pub ssh: Option<Arc<super::ssh::SshClient>>,
    /// The environment's DNS provider (`dns = "NAME"` → `[dns.NAME]`), when it has one.
    pub dns: Option<Arc<super::dns::providers::DnsProviders>>,
    /// The environment's DHCP provider (`dhcp = "NAME"` → `[dhcp.NAME]`), when it has one.
    pub dhcp: Option<Arc<super::dhcp::Unifi>>,
    /// The environment's post-provision task provider (`post = "NAME"` → `[post.NAME]`), when it has one.
    pub post: Option<Arc<super::post::Semaphore>>,
    /// How to run Ansible playbooks (`[ansible]`), for `ssh::playbook`.
    pub ansible: Option<Arc<super::ssh::playbook::Ansible>>,
    /// The environment's terraform (`[terraform]`, talking to its cluster).
    pub terraform: Option<Arc<super::terraform::Terraform>>,
    /// The tokio runtime host calls run their I/O on (host calls are made from
    /// blocking threads, so they `block_on` this handle).
    pub rt: tokio::runtime::Handle,
    /// A stable identity of the environment's cluster for lock keys: the
    /// configured API endpoint, or `sim://NAME` for a simulated cluster (whose
    /// port changes from process to process).
    pub cluster_id: String,
    /// SSH access to the cluster's nodes (for snippet uploads), by node name.
    pub nodes: std::collections::BTreeMap<String, crate::caps::ssh::NodeSsh>,
    /// Public keys to authorize for the guests' management user.
    pub guest_keys: Vec<String>,
    /// The project's directory (cradle.toml's): relative control-node paths
    /// the workflows name (a VM type's disk image) are read from here.
    pub project_dir: std::path::PathBuf,
    /// How host-side waits that model a real guest's time (the pause between
    /// two cloud-init polls) are scaled: the built-in simulated cluster's
    /// `time_scale` when its guests are simulated (their durations are scaled
    /// by it), 1 for a real cluster and for the simulator's qemu guests. See
    /// [`Services::scaled_wait`].
    pub wait_scale: f64,
}

/// The shortest pause [`Services::scaled_wait`] makes of a longer one, so a
/// time scale of 0 still polls at a pace instead of in a busy loop.
pub const MIN_SCALED_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

impl Services {
    /// `wait` as this cluster's guests experience it: multiplied by
    /// [`Services::wait_scale`], never below [`MIN_SCALED_WAIT`] (nor above
    /// `wait` for a scale of 1 or less); unchanged on a real cluster.
    pub fn scaled_wait(&self, wait: std::time::Duration) -> std::time::Duration {
        scaled_wait(wait, self.wait_scale)
    }
}

/// See [`Services::scaled_wait`]; a scale that is not a finite number ≥ 0 is 1.
pub fn scaled_wait(wait: std::time::Duration, scale: f64) -> std::time::Duration {
    if !(scale.is_finite() && scale >= 0.0) || scale == 1.0 {
        return wait;
    }
    wait.mul_f64(scale.min(100.0)).max(MIN_SCALED_WAIT.min(wait))
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services").field("proxmox", &self.proxmox.is_some()).finish_non_exhaustive()
    }
}

#[cfg(test)]
impl Services {
    /// For adapter tests: locks and checkpoints under `dir`, the runtime
    /// `rt`, no providers (set the one a test needs with struct update).
    pub(crate) fn for_tests(dir: &std::path::Path, rt: &tokio::runtime::Runtime) -> Services {
        Services {
            locks: Arc::new(crate::caps::lock::FsLockStore::new(dir.join("locks"))),
            checkpoints: CheckpointStore::new(dir.join("checkpoints")),
            proxmox: None,
            http: super::http::Endpoints::default(),
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
            project_dir: dir.to_path_buf(),
            wait_scale: 1.0,
        }
    }
}

/// The capability context of one store or workflow run.
#[derive(Debug, Clone)]
pub struct CapCtx {
    /// Plugin name, or `workflow`.
    pub caller: String,
    /// Where the grants come from in cradle.toml (`plugins.direct.grants`).
    pub origin: String,
    /// The grants.
    pub grants: Arc<Grants>,
    /// The VMs and nodes the calls are bound to.
    pub scope: Arc<RunScope>,
    /// The VM a backend call works on, for the journal.
    pub vm: Option<String>,
    /// The run.
    pub run: Arc<RunHandle>,
    /// Shared services.
    pub services: Arc<Services>,
    /// For plugin calls: the guest's deadline clock, touched when a host call
    /// returns so time spent in the host does not count against the plugin,
    /// and the call's budget (wall clock, host calls, journal bytes).
    pub clock: Option<Arc<crate::caps::budget::GuestClock>>,
}

#[cfg(test)]
impl CapCtx {
    /// For adapter tests: the workflow's context with `grants` in `scope`, a
    /// run of its own (`run_id`, no journal).
    pub(crate) fn for_tests(grants: Grants, scope: RunScope, services: Services, run_id: &str) -> CapCtx {
        CapCtx {
            caller: "workflow".into(),
            origin: "workflow.grants".into(),
            grants: Arc::new(grants),
            scope: Arc::new(scope),
            vm: None,
            run: Arc::new(RunHandle::new(run_id.into(), None)),
            services: Arc::new(services),
            clock: None,
        }
    }
}

impl CapCtx {
    /// Check `call`, run `work` if allowed, and journal the outcome.
    pub fn guard<T>(
        &self,
        function: &str,
        call: Call<'_>,
        work: impl FnOnce() -> Result<T, CapError>,
    ) -> Result<T, CapError> {
        let started = Instant::now();
        let cap = call.capability();
        if let Err(e) = self.charge_host_call() {
            return Err(self.refuse_over_budget(e, cap.name(), function));
        }
        let result = match policy::check(&self.grants, &self.origin, &self.scope, &call) {
            Err(denied) => {
                tracing::warn!(caller = %self.caller, capability = %cap, function, scope = %denied.scope, "capability call denied");
                Err(CapError::from(denied))
            }
            Ok(()) => match self.lost_lock(&call) {
                Some(lost) => Err(lost),
                None => work(),
            },
        };
        if result.is_ok() {
            crate::workflow::crashpoint::at(crate::workflow::crashpoint::Edge::Call, self.vm.as_deref(), function);
        }
        let outcome = match &result {
            Ok(_) => CallOutcome::Ok,
            Err(e) if e.kind == ErrorKind::Denied => CallOutcome::Denied {
                scope: e.message.strip_prefix(&format!("{cap}: ")).unwrap_or(&e.message).to_string(),
            },
            Err(e) => CallOutcome::Failed { kind: e.kind.as_str().to_string(), message: e.message.clone() },
        };
        if let Some(clock) = &self.clock {
            clock.touch();
        }
        // The call already happened, so its line is written even if it takes
        // the journal budget over; the next call is then refused.
        self.journal_call(cap.name(), function, outcome, started.elapsed());
        result
    }

    /// The fencing token of `vm_name`'s lock when this run holds it (and the
    /// lock store has tokens): shared records of the VM are written under it.
    pub fn vm_fence(&self, vm_name: &str) -> Option<crate::caps::coordination::etcd::Fence> {
        let key = crate::caps::lock::lock_key(&self.services.cluster_id, vm_name);
        self.services.locks.fence(&key, &self.run.run_id)
    }

    /// A lock of this run that may have been taken over (an etcd lease not
    /// renewed in time): the call must not happen. Lock calls themselves are
    /// not side effects on a VM and go on (a release may still tidy up).
    fn lost_lock(&self, call: &Call<'_>) -> Option<CapError> {
        if matches!(call, Call::Lock(_)) {
            return None;
        }
        let held = self.run.held_locks.lock().unwrap_or_else(|e| e.into_inner());
        held.keys().find_map(|key| self.services.locks.check_held(key, &self.run.run_id).err()).map(CapError::from)
    }

    /// Journal one capability call, charging the plugin call's journal budget.
    fn journal_call(&self, capability: &str, function: &str, outcome: CallOutcome, took: Duration) {
        let Some(journal) = &self.run.journal else { return };
        match journal.capability_call(self.vm.as_deref(), &self.caller, capability, function, outcome, took) {
            Ok(bytes) => self.charge_journal(bytes),
            // The call already happened; failing it now would hide its effect.
            Err(e) => tracing::error!(error = %e, "could not journal a capability call"),
        }
    }

    /// Count a host call against the plugin call's budget (no budget outside
    /// plugin calls): the deadline, the host-call count, the journal bytes.
    pub fn charge_host_call(&self) -> Result<(), Exhausted> {
        match &self.clock {
            None => Ok(()),
            Some(clock) => {
                clock.charge_host_call()?;
                clock.journal_room()
            }
        }
    }

    /// Count `bytes` of journal against the plugin call's budget.
    pub fn charge_journal(&self, bytes: usize) {
        if let Some(clock) = &self.clock {
            clock.charge_journal(bytes);
        }
    }

    /// The error for a call refused over budget; the first refusal of a plugin
    /// call is journaled (later ones are not, or a loop would fill the journal).
    pub fn refuse_over_budget(&self, e: Exhausted, capability: &str, function: &str) -> CapError {
        if e.first {
            tracing::warn!(caller = %self.caller, capability, function, reason = %e.message, "plugin call over budget");
            let outcome =
                CallOutcome::Failed { kind: ErrorKind::Failed.as_str().to_string(), message: e.message.clone() };
            if let Some(journal) = &self.run.journal
                && let Err(err) = journal.capability_call(
                    self.vm.as_deref(),
                    &self.caller,
                    capability,
                    function,
                    outcome,
                    Duration::ZERO,
                )
            {
                tracing::error!(error = %err, "could not journal a capability call");
            }
        }
        CapError::failed(e.message)
    }

    /// The timeout to use for a timeout argument `requested_ms` of `what`: at
    /// most [`TimeoutArg::max`], and, in a plugin call, at most the time left
    /// on the call's wall-clock limit (so a host call cannot outlive the call).
    /// Workflow calls keep what they ask for: the operator wrote it.
    pub fn clamp_timeout(&self, requested_ms: u64, what: TimeoutArg) -> Duration {
        let clamped = what.clamp(requested_ms, self.clock.as_ref().map(|c| c.left()));
        if clamped < Duration::from_millis(requested_ms) {
            tracing::debug!(caller = %self.caller, function = what.name(), requested_ms, clamped_ms = clamped.as_millis() as u64, "timeout argument clamped");
        }
        clamped
    }

    /// Run a host call's future to completion from the blocking thread it
    /// runs on. In a plugin call the future is cut off when the call's
    /// wall-clock limit runs out, whatever timeouts of its own it has (the
    /// Proxmox client's per-request timeout and retries, an upload's, a
    /// connection's): the call fails with the budget's message and the budget
    /// is exhausted, so the plugin's next host call is refused and the epoch
    /// callback traps it. Dropping the future kills any `ssh` child it started
    /// (`kill_on_drop`); a request already sent may still take effect on the
    /// far side, exactly as if the plugin had been killed, and the next run's
    /// checks (inventory, checkpoints) see it.
    pub fn block_on<T, E: Into<CapError>>(
        &self,
        fut: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, CapError> {
        let Some(clock) = &self.clock else {
            return self.services.rt.block_on(fut).map_err(Into::into);
        };
        let left = clock.left();
        // The timer is made inside the runtime: this thread may not be one of its.
        match self.services.rt.block_on(async move { tokio::time::timeout(left, fut).await }) {
            Ok(result) => result.map_err(Into::into),
            Err(_elapsed) => Err(match clock.check_deadline() {
                Err(e) => CapError::failed(e.message),
                // Unreachable in practice: the timeout was the time left.
                Ok(()) => CapError::failed("budget: the plugin call's wall-clock limit ran out during a host call"),
            }),
        }
    }
}

#[cfg(test)]
mod wait_tests {
    use std::time::Duration;

    use super::{MIN_SCALED_WAIT, scaled_wait};

    #[test]
    fn waits_are_scaled_by_a_simulators_time_scale_with_a_floor_and_kept_on_a_real_cluster() {
        let five = Duration::from_secs(5);
        assert_eq!(scaled_wait(five, 1.0), five, "a real cluster waits as configured");
        assert_eq!(scaled_wait(five, 0.02), Duration::from_millis(100));
        assert_eq!(scaled_wait(five, 0.0), MIN_SCALED_WAIT, "time scale 0 still polls at a pace");
        assert_eq!(scaled_wait(Duration::from_millis(10), 0.0), Duration::from_millis(10), "never longer");
        assert_eq!(scaled_wait(five, 2.0), Duration::from_secs(10));
        assert_eq!(scaled_wait(five, f64::NAN), five);
    }
}
