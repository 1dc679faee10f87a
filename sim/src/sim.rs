//! The running simulator's shared core: configuration, state, faults, counters, node
//! directories, the API token, and the timer that makes tasks take time.
//!
//! Contract: `state` is only locked for short, await-free sections. [`Sim::after`] runs a
//! closure after a scaled delay (inline when the delay is zero, so `time_scale = 0` is
//! fully synchronous); closures are dropped at shutdown. A mutation marks the state
//! changed ([`Sim::changed`]); `persist` writes it before the next response leaves.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use crate::config::SimConfig;
use crate::error::SimError;
use crate::faults::Faults;
use crate::fsutil;
use crate::guest::GuestRuntime;
use crate::model::{ClusterState, Task};

/// The shared core of one simulated cluster.
pub struct Sim {
    /// Configuration.
    pub cfg: SimConfig,
    /// Cluster state.
    pub state: Mutex<ClusterState>,
    /// Fault source.
    pub faults: Faults,
    /// Requests per `METHOD /pattern`.
    pub counts: Mutex<BTreeMap<String, u64>>,
    /// Real directory under which each node's filesystem lives (`<root>/nodes/<node>/...`).
    pub root: PathBuf,
    /// Whether `root` is a temporary directory to remove at shutdown.
    pub root_is_temp: bool,
    /// The token secret.
    token_secret: String,
    /// Running guests by VMID.
    pub guests: Mutex<HashMap<u32, GuestRuntime>>,
    /// The qemu processes of guest mode `qemu`.
    pub qemu: crate::guest::qemu::QemuGuests,
    /// VMs whose next boot hangs (an API reboot hit by fault `reboot-hang`).
    pub hang_next_boot: Mutex<HashSet<u32>>,
    /// Node SSH addresses as bound.
    pub node_ssh: Mutex<Vec<SocketAddr>>,
    /// Becomes true at shutdown.
    pub shutdown: watch::Sender<bool>,
    /// SHA-256 fingerprint of the API certificate (for `/nodes` `ssl_fingerprint`).
    pub fingerprint: std::sync::OnceLock<String>,
    /// What of `state` has reached `state.json` (see `persist`).
    pub persist: crate::persist::Persist,
    /// Used space of the nodes' filesystems (see `nodefs`).
    pub disk_usage: crate::nodefs::Usage,
    /// Every DHCP exchange of a guest so far, in order (`guest::dhcp`).
    pub dhcp_leases: Mutex<Vec<crate::guest::dhcp::DhcpLease>>,
    /// Every request an appliance's web UI answered, in order (`guest::http`).
    pub guest_http: Mutex<Vec<crate::guest::http::GuestHttpRequest>>,
    /// Starts a loaded state still owed (`recover`), run by `Cluster::start`.
    pub interrupted_starts: Mutex<Vec<crate::recover::PendingStart>>,
    /// Records every API exchange when `cfg.record_dir` is set (`conformance::record`).
    pub recorder: Option<crate::conformance::record::Recorder>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim").field("root", &self.root).finish_non_exhaustive()
    }
}

/// Lock a mutex, recovering from poisoning (a panicked holder leaves plain data behind).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Sim {
    /// Build the core: load or create state, token and node directories.
    pub fn new(mut cfg: SimConfig) -> Result<Arc<Sim>, SimError> {
        cfg.validate()?;
        if !cfg.has_import_content() {
            // Before PVE 8.3 no dir storage knows the `import` content type.
            for s in &mut cfg.storages {
                s.content = s.content.split(',').filter(|c| *c != "import").collect::<Vec<_>>().join(",");
            }
        }
        let (root, root_is_temp) = match &cfg.state_dir {
            Some(d) => (d.clone(), false),
            None => {
                let r: [u8; 8] = crate::model::ids::random_bytes();
                (std::env::temp_dir().join(format!("cradle-sim-{}", hex::encode(r))), true)
            }
        };
        fsutil::ensure_dir(&root)?;
        let token_secret = match &cfg.state_dir {
            Some(d) => {
                let p = d.join("token");
                match fsutil::read_optional(&p)? {
                    Some(s) => String::from_utf8_lossy(&s).trim().to_string(),
                    None => {
                        let s = random_secret();
                        fsutil::write_private(&p, s.as_bytes())?;
                        s
                    }
                }
            }
            None => random_secret(),
        };
        let mut state = match &cfg.state_dir {
            Some(d) => {
                let p = d.join("state.json");
                match fsutil::read_optional(&p)? {
                    Some(bytes) => serde_json::from_slice::<ClusterState>(&bytes)
                        .map_err(|e| SimError::CorruptState { path: p.clone(), reason: e.to_string() })?,
                    None => ClusterState::default(),
                }
            }
            None => ClusterState::default(),
        };
        // Workers of a previous process are gone, but PVE's would have run
        // on: end them as PVE would have (`recover`).
        let interrupted_starts = crate::recover::finish_interrupted(&mut state, &cfg.access.api_token);
        let fresh = state.vms.is_empty() && state.tasks.is_empty();
        let (tx, _) = watch::channel(false);
        let recorder = match &cfg.record_dir {
            Some(dir) => Some(
                crate::conformance::record::Recorder::create(dir)
                    .map_err(|e| SimError::io("create the conformance recording in", dir, e))?,
            ),
            None => None,
        };
        let sim = Arc::new(Sim {
            recorder,
            faults: Faults::new(cfg.faults.clone(), cfg.seed),
            state: Mutex::new(state),
            counts: Mutex::new(BTreeMap::new()),
            root,
            root_is_temp,
            token_secret,
            guests: Mutex::new(HashMap::new()),
            qemu: Default::default(),
            hang_next_boot: Mutex::new(HashSet::new()),
            node_ssh: Mutex::new(Vec::new()),
            shutdown: tx,
            fingerprint: std::sync::OnceLock::new(),
            persist: crate::persist::Persist::default(),
            disk_usage: crate::nodefs::Usage::default(),
            dhcp_leases: Mutex::new(Vec::new()),
            guest_http: Mutex::new(Vec::new()),
            interrupted_starts: Mutex::new(interrupted_starts),
            cfg,
        });
        for node in &sim.cfg.nodes {
            for d in ["/var/tmp", "/tmp"] {
                fsutil::ensure_dir(&sim.node_path(node, d))?;
            }
            for s in &sim.cfg.storages {
                if let Some(dir) = sim.storage_dir(node, &s.id) {
                    for sub in ["snippets", "template/iso", "template/cache", "dump", "import"] {
                        fsutil::ensure_dir(&dir.join(sub))?;
                    }
                }
            }
        }
        if fresh {
            crate::seed::seed(&sim);
            sim.flush();
        }
        Ok(sim)
    }

    /// The full token string `USER@REALM!TOKENID=SECRET` (the token is
    /// `cfg.access.api_token`, `root@pam!cradle` by default).
    pub fn token(&self) -> String {
        format!("{}={}", self.cfg.access.api_token, self.token_secret)
    }

    /// Check an `Authorization` header value; the error is PVE's 401 message.
    pub fn check_auth(&self, header: Option<&str>) -> Result<(), &'static str> {
        let Some(h) = header else { return Err("No ticket") };
        let Some(rest) = h.strip_prefix("PVEAPIToken=") else {
            return Err("No ticket");
        };
        let Some((id, secret)) = rest.split_once('=') else {
            return Err("invalid token value!");
        };
        if id != self.cfg.access.api_token {
            return Err("invalid token value!");
        }
        // Constant-time comparison: the secret must not leak through timing.
        let a = secret.as_bytes();
        let b = self.token_secret.as_bytes();
        let diff = a.len() ^ b.len();
        let acc = a.iter().zip(b.iter().cycle()).fold(0u8, |acc, (x, y)| acc | (x ^ y));
        if diff == 0 && acc == 0 && !b.is_empty() { Ok(()) } else { Err("invalid token value!") }
    }

    /// Real directory of a `dir` storage on a node (`None` for non-dir storages).
    pub fn storage_dir(&self, node: &str, storage: &str) -> Option<PathBuf> {
        let s = self.cfg.storages.iter().find(|s| s.id == storage)?;
        let path = s.path.as_deref()?;
        Some(self.node_path(node, path))
    }

    /// Map an absolute path on a simulated node to the real filesystem.
    pub fn node_path(&self, node: &str, abs: &str) -> PathBuf {
        self.root.join("nodes").join(node).join(abs.trim_start_matches('/'))
    }

    /// Whether `node` exists.
    pub fn has_node(&self, node: &str) -> bool {
        self.cfg.nodes.iter().any(|n| n == node)
    }

    /// Scale a duration by the time scale.
    pub fn scaled(&self, d: Duration) -> Duration {
        self.cfg.scaled(d)
    }

    /// Run `f` after `delay` (inline when zero); dropped at shutdown.
    pub fn after(self: &Arc<Self>, delay: Duration, f: impl FnOnce(&Arc<Sim>) + Send + 'static) {
        if delay.is_zero() {
            f(self);
            return;
        }
        let sim = self.clone();
        let mut down = self.shutdown.subscribe();
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(delay) => f(&sim),
                _ = crate::guest::fired(&mut down) => {}
            }
        });
    }

    /// Create a running task (marking the state changed); returns its UPID.
    pub fn new_task(&self, st: &mut ClusterState, node: &str, kind: &str, id: &str, vmid: Option<u32>) -> String {
        let pid = st.pid();
        let t = Task::new(node, pid, kind, id, &self.cfg.access.api_token, vmid);
        let upid = t.upid.clone();
        st.tasks.push(t);
        // Keep the task list bounded like PVE's index rotation does.
        if st.tasks.len() > 20_000 {
            st.tasks.drop_oldest(5_000);
        }
        // A task the client is told of is in `state.json` before the UPID
        // leaves (a start or reboot marked nothing else), so a simulator
        // killed now finds it at its next load (`recover`).
        self.changed();
        upid
    }

    /// Finish a task (state must not be locked by the caller).
    pub fn finish_task(&self, upid: &str, result: Result<(), String>) {
        let mut st = lock(&self.state);
        Self::finish_task_in(&mut st, upid, result);
        self.changed();
    }

    /// Finish a task inside a locked section.
    pub fn finish_task_in(st: &mut ClusterState, upid: &str, result: Result<(), String>) {
        if let Some(t) = st.task_mut(upid) {
            t.finish(result);
        }
    }

    /// Record what a task's worker needs to finish (`Task::args`, for `recover`).
    pub fn task_arg(st: &mut ClusterState, upid: &str, key: &str, value: impl Into<String>) {
        if let Some(t) = st.task_mut(upid) {
            t.args.insert(key.to_string(), value.into());
        }
    }

    /// Append a log line to a task.
    pub fn task_log(st: &mut ClusterState, upid: &str, line: impl Into<String>) {
        if let Some(t) = st.task_mut(upid) {
            t.log.push(line.into());
        }
    }

    /// Writes the requests this process served, per `METHOD /pattern`, and
    /// how often it wrote `state.json`, to `requests.json` in the state dir
    /// (`{"requests": {...}, "state_writes": N}`, replaced by each process;
    /// what `scripts/bench-provision` reports).
    pub fn write_request_counts(&self) {
        let Some(dir) = &self.cfg.state_dir else { return };
        let counts = lock(&self.counts).clone();
        let doc = serde_json::json!({ "requests": counts, "state_writes": self.persist.writes() });
        let bytes = serde_json::to_vec_pretty(&doc).unwrap_or_default();
        if let Err(e) = fsutil::write_private_nosync(&dir.join("requests.json"), &bytes) {
            tracing::warn!(error = %e, "cannot write the request counts");
        }
    }

    /// Count one request.
    pub fn count(&self, key: String) {
        *lock(&self.counts).entry(key).or_insert(0) += 1;
    }

    /// The state dir or temp root.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

fn random_secret() -> String {
    let b: [u8; 16] = crate::model::ids::random_bytes();
    let h = hex::encode(b);
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}
