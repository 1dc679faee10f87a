//! A real NetBox 4.7.3, shared by every test of a run (docs/NETBOX.md,
//! "Testing against a real NetBox"), and a small blocking REST client for it.
//!
//! The contract:
//! - [`NetBox::shared`] finds the running instance: `CRADLE_NETBOX_URL` and
//!   `CRADLE_NETBOX_TOKEN` when both are set ([`URL_ENV`], [`TOKEN_ENV`]; a
//!   NetBox of your own, never started or stopped here), else the instance file
//!   `scripts/netbox start` writes (`target/netbox/state/instance.json`, or under
//!   `CRADLE_NETBOX_RUN_DIR`). When that NetBox does not answer, it runs
//!   `scripts/netbox start` under a file lock, so parallel test processes start
//!   it once; it keeps running after the tests (`scripts/netbox stop`).
//! - One instance serves all tests: a test isolates itself with unique names
//!   ([`unique_name`]), never with an instance of its own. Event rules it
//!   creates should carry a condition on its own objects' names, so they fire
//!   for no other test.
//! - The REST helpers send `Authorization: Bearer nbt_<key>.<token>` (a v2
//!   token). [`NetBox::get`], [`NetBox::post`], [`NetBox::patch`] and the object
//!   helpers panic on any status other than 2xx, with method, path, status and
//!   body; [`NetBox::request`] returns the status for tests of failures.
//! - The blocking calls also work inside an async test: each request runs on a
//!   runtime of this module's own and the caller waits on a channel.
//!
//! Failure modes, each a panic naming the fix: NetBox not installed (`scripts/netbox
//! install`; the log of the start attempt is printed), a start that failed (its
//! log), an instance file that cannot be read, a token NetBox refuses.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{OnceLock, mpsc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// `ring`, for tests that verify `X-Hook-Signature` (hex HMAC-SHA512 of the
/// raw body, `ring::hmac::HMAC_SHA512`) as a receiver must.
pub use ring;

/// The NetBox version `scripts/netbox` installs and the tests expect.
pub const VERSION: &str = "4.7.3";
/// The URL of a NetBox to use instead of the instance file's (with [`TOKEN_ENV`]).
pub const URL_ENV: &str = "CRADLE_NETBOX_URL";
/// The token (`nbt_<key>.<token>`) for [`URL_ENV`].
pub const TOKEN_ENV: &str = "CRADLE_NETBOX_TOKEN";
/// The run directory of `scripts/netbox` (default `<workspace>/target/netbox`).
pub const RUN_DIR_ENV: &str = "CRADLE_NETBOX_RUN_DIR";

/// The object type of VMs, as event rules, journal entries and webhooks name it.
pub const VM_OBJECT_TYPE: &str = "virtualization.virtualmachine";
/// The object type of VM interfaces (MAC and IP address assignments).
pub const VM_INTERFACE_OBJECT_TYPE: &str = "virtualization.vminterface";

/// The prefix [`NetBox::allocate_ip`] takes addresses from.
pub const TEST_PREFIX: &str = "198.18.0.0/15";

/// A NetBox and its API token.
#[derive(Clone)]
pub struct NetBox {
    /// The base URL, `http://127.0.0.1:PORT`, without a trailing slash.
    pub url: String,
    /// `nbt_<key>.<token>`: send it as `Authorization: Bearer <token>`.
    pub token: String,
    client: reqwest::Client,
}

impl std::fmt::Debug for NetBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetBox").field("url", &self.url).finish_non_exhaustive()
    }
}

/// A response: its status and its body as JSON (`Value::Null` when empty or not JSON).
#[derive(Debug, Clone)]
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// The parsed body.
    pub body: Value,
}

/// What a VM interface says about its MAC addresses (NetBox ≥ 4.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceMac {
    /// `mac_address`: the primary MAC's address (NetBox writes it upper case), if any.
    pub mac_address: Option<String>,
    /// The id of the `dcim.MACAddress` that is `primary_mac_address`, if any.
    pub primary_mac_address_id: Option<u64>,
    /// Every MAC address assigned to the interface (`mac_addresses`).
    pub mac_addresses: Vec<String>,
}

/// A name no other test (process or call) uses: `prefix-<pid>-<n>-<time>`, at
/// most 40 characters for a short prefix (NetBox names hold 64, slugs 100).
pub fn unique_name(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() % 1_000_000).unwrap_or(0);
    format!("{prefix}-{}-{n}-{t}", std::process::id())
}

/// The workspace root (this crate's parent directory).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("testkit has a parent directory").to_path_buf()
}

/// The directory `scripts/netbox` runs the instance in.
pub fn run_dir() -> PathBuf {
    std::env::var_os(RUN_DIR_ENV).map(PathBuf::from).unwrap_or_else(|| workspace().join("target/netbox"))
}

/// The instance file `scripts/netbox start` writes.
pub fn instance_file() -> PathBuf {
    run_dir().join("state/instance.json")
}

/// The runtime every request of this process runs on (never dropped, so a
/// caller inside another runtime may use the blocking helpers).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("netbox-client")
            .enable_all()
            .build()
            .expect("a tokio runtime for the NetBox client")
    })
}

/// Run `fut` on [`runtime`] and wait for it.
fn block<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> T {
    let (tx, rx) = mpsc::sync_channel(1);
    runtime().spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().expect("the NetBox client's task ended without an answer")
}

impl NetBox {
    /// The shared instance: from [`URL_ENV`]/[`TOKEN_ENV`], else the instance
    /// file; started with `scripts/netbox start` (under a lock) when it does not
    /// answer. Panics naming the fix when it cannot be had.
    pub fn shared() -> NetBox {
        static SHARED: OnceLock<(String, String)> = OnceLock::new();
        let (url, token) = SHARED.get_or_init(find_or_start).clone();
        NetBox::new(&url, &token)
    }

    /// A client of the NetBox at `url` with `token` (`nbt_<key>.<token>`).
    pub fn new(url: &str, token: &str) -> NetBox {
        let _guard = runtime().enter();
        let client =
            reqwest::Client::builder().timeout(Duration::from_secs(120)).build().expect("an HTTP client for NetBox");
        NetBox { url: url.trim_end_matches('/').to_string(), token: token.to_string(), client }
    }

    /// The value of the `Authorization` header.
    pub fn authorization(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// `method path` (path from `/api/…`, with its query) with an optional
    /// JSON body; any status is returned. Panics only when NetBox cannot be reached.
    pub fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Response {
        let method_ = reqwest::Method::from_bytes(method.as_bytes()).expect("an HTTP method");
        let mut req = self
            .client
            .request(method_, format!("{}{path}", self.url))
            .header("Authorization", self.authorization())
            .header("Accept", "application/json");
        if let Some(body) = body {
            req = req.json(body);
        }
        let outcome = block(async move {
            let resp = req.send().await?;
            let status = resp.status().as_u16();
            let bytes = resp.bytes().await?;
            Ok::<_, reqwest::Error>((status, bytes))
        });
        let (status, bytes) =
            outcome.unwrap_or_else(|e| panic!("{method} {}{path}: NetBox did not answer: {e}", self.url));
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Response { status, body }
    }

    /// `method path` that must answer 2xx; its body.
    fn expect_ok(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let resp = self.request(method, path, body);
        assert!(
            (200..300).contains(&resp.status),
            "{method} {}{path}{}: HTTP {}: {}",
            self.url,
            body.map(|b| format!(" {b}")).unwrap_or_default(),
            resp.status,
            resp.body
        );
        resp.body
    }

    /// GET `path`, which must answer 2xx.
    pub fn get(&self, path: &str) -> Value {
        self.expect_ok("GET", path, None)
    }

    /// POST `body` to `path`, which must answer 2xx; the created object.
    pub fn post(&self, path: &str, body: &Value) -> Value {
        self.expect_ok("POST", path, Some(body))
    }

    /// PATCH `path` with `body`, which must answer 2xx; the updated object.
    pub fn patch(&self, path: &str, body: &Value) -> Value {
        self.expect_ok("PATCH", path, Some(body))
    }

    /// DELETE `path`, which must answer 2xx.
    pub fn delete(&self, path: &str) {
        self.expect_ok("DELETE", path, None);
    }

    /// The `results` of a list endpoint (`path` with its filters; first 1000).
    pub fn list(&self, path: &str) -> Vec<Value> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let page = self.get(&format!("{path}{sep}limit=1000"));
        page["results"].as_array().cloned().unwrap_or_default()
    }

    /// The object of `endpoint` (a list path such as `/api/dcim/sites/`) whose
    /// `field` is `value`, created from `body` when there is none. Safe when
    /// several tests ensure the same object at once.
    pub fn ensure(&self, endpoint: &str, field: &str, value: &str, body: &Value) -> Value {
        let find = || self.list(&format!("{endpoint}?{field}={value}")).into_iter().next();
        if let Some(found) = find() {
            return found;
        }
        let resp = self.request("POST", endpoint, Some(body));
        if (200..300).contains(&resp.status) {
            return resp.body;
        }
        // Another test created it first: it is there now.
        find().unwrap_or_else(|| panic!("POST {}{endpoint} {body}: HTTP {}: {}", self.url, resp.status, resp.body))
    }

    /// GET `/api/status/`: `netbox-version`, `django-version`, `rq-workers-running`, …
    pub fn status(&self) -> Value {
        self.get("/api/status/")
    }

    /// The cluster type `cradle-tests` (shared by all tests).
    pub fn cluster_type(&self) -> Value {
        let body = json!({"name": "cradle-tests", "slug": "cradle-tests"});
        self.ensure("/api/virtualization/cluster-types/", "slug", "cradle-tests", &body)
    }

    /// A new cluster `name` of [`NetBox::cluster_type`], status active.
    pub fn create_cluster(&self, name: &str) -> Value {
        let kind = id(&self.cluster_type());
        self.post("/api/virtualization/clusters/", &json!({"name": name, "type": kind, "status": "active"}))
    }

    /// The site `slug` (name and slug alike), status active; created if missing.
    pub fn site(&self, slug: &str) -> Value {
        let body = json!({"name": slug, "slug": slug, "status": "active"});
        self.ensure("/api/dcim/sites/", "slug", slug, &body)
    }

    /// The custom field `name` of type `kind` (`text`, `integer`, `boolean`,
    /// `json`, …) on VMs; created if missing. Custom fields are global: give
    /// a test's own fields unique names, or share one on purpose.
    pub fn vm_custom_field(&self, name: &str, kind: &str) -> Value {
        let body = json!({"name": name, "label": name, "type": kind, "object_types": [VM_OBJECT_TYPE]});
        self.ensure("/api/extras/custom-fields/", "name", name, &body)
    }

    /// A new VM `name` in `cluster` (an object or its id) with `status`
    /// (`planned`, `staged`, `active`, `offline`, `failed`, `decommissioning`,
    /// `paused`) and `custom_fields` (an object; `{}` for none; the fields must exist).
    pub fn create_vm(&self, name: &str, cluster: &Value, status: &str, custom_fields: &Value) -> Value {
        let body = json!({"name": name, "cluster": id(cluster), "status": status, "custom_fields": custom_fields});
        self.post("/api/virtualization/virtual-machines/", &body)
    }

    /// PATCH the VM `vm` (an object or its id) with `body`; the updated VM.
    pub fn patch_vm(&self, vm: &Value, body: &Value) -> Value {
        self.patch(&format!("/api/virtualization/virtual-machines/{}/", id(vm)), body)
    }

    /// GET the VM `vm` (an object or its id).
    pub fn vm(&self, vm: &Value) -> Value {
        self.get(&format!("/api/virtualization/virtual-machines/{}/", id(vm)))
    }

    /// A new interface `name` on the VM `vm` (an object or its id).
    pub fn create_vm_interface(&self, vm: &Value, name: &str) -> Value {
        self.post("/api/virtualization/interfaces/", &json!({"virtual_machine": id(vm), "name": name}))
    }

    /// A new IP address `address` (CIDR, e.g. `192.0.2.10/24`), status active,
    /// assigned to the VM interface `interface` (an object or its id). NetBox
    /// refuses an address its global table already has.
    pub fn create_ip(&self, interface: &Value, address: &str, dns_name: &str) -> Value {
        let body = json!({
            "address": address,
            "status": "active",
            "assigned_object_type": VM_INTERFACE_OBJECT_TYPE,
            "assigned_object_id": id(interface),
            "dns_name": dns_name,
        });
        self.post("/api/ipam/ip-addresses/", &body)
    }

    /// The next free address of the shared prefix `198.18.0.0/15` (RFC 2544,
    /// never routed), allocated by NetBox (`available-ips`, safe when tests
    /// allocate at once), status active, assigned to the VM interface
    /// `interface` (an object or its id), with `dns_name`. Addresses must be
    /// unique in NetBox's global table: prefer this over [`NetBox::create_ip`]
    /// when the address does not matter.
    pub fn allocate_ip(&self, interface: &Value, dns_name: &str) -> Value {
        let body = json!({"prefix": TEST_PREFIX, "status": "active", "description": "cradle tests"});
        let prefix = self.ensure("/api/ipam/prefixes/", "prefix", TEST_PREFIX, &body);
        let body = json!({
            "status": "active",
            "assigned_object_type": VM_INTERFACE_OBJECT_TYPE,
            "assigned_object_id": id(interface),
            "dns_name": dns_name,
        });
        self.post(&format!("/api/ipam/prefixes/{}/available-ips/", id(&prefix)), &body)
    }

    /// A new webhook `name` POSTing JSON to `payload_url`, signed with `secret`
    /// (`X-Hook-Signature`: hex HMAC-SHA512 of the raw body).
    pub fn create_webhook(&self, name: &str, payload_url: &str, secret: &str) -> Value {
        let body = json!({
            "name": name,
            "payload_url": payload_url,
            "http_method": "POST",
            "http_content_type": "application/json",
            "secret": secret,
            "ssl_verification": false,
        });
        self.post("/api/extras/webhooks/", &body)
    }

    /// A new event rule `name`: on `object_updated` of a VM, run `webhook` (an
    /// object or its id), when `conditions` hold (NetBox's condition set over
    /// the serialized VM, e.g. `{"attr": "name", "value": "vm-1"}`; `Value::Null`
    /// for every VM, which reaches other tests' VMs too).
    pub fn create_vm_update_rule(&self, name: &str, webhook: &Value, conditions: &Value) -> Value {
        let body = json!({
            "name": name,
            "object_types": [VM_OBJECT_TYPE],
            "event_types": ["object_updated"],
            "enabled": true,
            "conditions": conditions,
            "action_type": "webhook",
            "action_object_type": "extras.webhook",
            "action_object_id": id(webhook),
        });
        self.post("/api/extras/event-rules/", &body)
    }

    /// The journal entries of the VM `vm` (an object or its id), oldest first.
    pub fn vm_journal(&self, vm: &Value) -> Vec<Value> {
        let mut entries = self.list(&format!(
            "/api/extras/journal-entries/?assigned_object_type={VM_OBJECT_TYPE}&assigned_object_id={}",
            id(vm)
        ));
        entries.sort_by_key(|e| e["id"].as_u64());
        entries
    }

    /// The MAC addresses of the VM interface `interface` (an object or its id).
    pub fn interface_mac(&self, interface: &Value) -> InterfaceMac {
        let iface = self.get(&format!("/api/virtualization/interfaces/{}/", id(interface)));
        InterfaceMac {
            mac_address: iface["mac_address"].as_str().map(str::to_string),
            primary_mac_address_id: iface["primary_mac_address"]["id"].as_u64(),
            mac_addresses: iface["mac_addresses"]
                .as_array()
                .map(|all| all.iter().filter_map(|m| m["mac_address"].as_str().map(str::to_string)).collect())
                .unwrap_or_default(),
        }
    }
}

/// The id of an object (`{"id": N, …}`) or of a bare id.
pub fn id(object: &Value) -> u64 {
    object.as_u64().or_else(|| object["id"].as_u64()).unwrap_or_else(|| panic!("not a NetBox object or id: {object}"))
}

/// Whether the NetBox at `url` answers `/api/status/` with 200 for `token`.
fn answers(url: &str, token: &str) -> bool {
    NetBox::new(url, token).request("GET", "/api/status/", None).status == 200
}

/// Whether a NetBox listens at `url` at all (a refused connection is `false`).
fn reachable(url: &str) -> bool {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build();
    let Ok(client) = client else { return false };
    let url = format!("{url}/api/status/");
    block(async move { client.get(url).send().await.is_ok() })
}

/// The url and token of the instance file, if it is there and readable.
fn read_instance(path: &Path) -> Option<(String, String)> {
    let text = fs::read_to_string(path).ok()?;
    let instance: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{}: not the JSON scripts/netbox writes: {e}", path.display()));
    Some((instance["url"].as_str()?.to_string(), instance["token"].as_str()?.to_string()))
}

/// The instance file's NetBox when it answers with its token.
fn running_instance(path: &Path) -> Option<(String, String)> {
    let (url, token) = read_instance(path)?;
    (reachable(&url) && answers(&url, &token)).then_some((url, token))
}

fn find_or_start() -> (String, String) {
    if let (Ok(url), Ok(token)) = (std::env::var(URL_ENV), std::env::var(TOKEN_ENV)) {
        assert!(
            answers(&url, &token),
            "{URL_ENV}={url}: NetBox does not answer /api/status/ with 200 for {TOKEN_ENV} \
             (a v2 token nbt_<key>.<token>)"
        );
        return (url.trim_end_matches('/').to_string(), token);
    }
    let path = instance_file();
    if let Some(found) = running_instance(&path) {
        return found;
    }
    let run = run_dir();
    fs::create_dir_all(&run).unwrap_or_else(|e| panic!("create {}: {e}", run.display()));
    let lock = fs::File::create(run.join("testkit.lock"))
        .unwrap_or_else(|e| panic!("create {}: {e}", run.join("testkit.lock").display()));
    lock.lock().unwrap_or_else(|e| panic!("lock {}: {e}", run.join("testkit.lock").display()));
    // Another test process may have started it while this one waited.
    if let Some(found) = running_instance(&path) {
        return found;
    }
    let script = workspace().join("scripts/netbox");
    let log_path = run.join("testkit-start.log");
    let log = fs::File::create(&log_path).unwrap_or_else(|e| panic!("create {}: {e}", log_path.display()));
    eprintln!("netbox: no NetBox answers; running {} start (log {})", script.display(), log_path.display());
    // The daemons it starts keep no pipe of this process: all output goes to the log.
    let status = Command::new(&script)
        .arg("start")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log file"))
        .stderr(log)
        .status()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    let output = fs::read_to_string(&log_path).unwrap_or_default();
    assert!(
        status.success(),
        "{} start failed ({status}); install NetBox first with `scripts/netbox install` if it says so \
         (docs/NETBOX.md). Its output:\n{output}",
        script.display()
    );
    running_instance(&path).unwrap_or_else(|| {
        panic!(
            "{} start succeeded but {} names no answering NetBox; its output:\n{output}",
            script.display(),
            path.display()
        )
    })
}
