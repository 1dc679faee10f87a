//! The NetBox pipeline end to end, every part real but what cannot run here:
//! a real NetBox 4.7.3 fires its own signed webhook on a real PATCH to
//! Staged; the real `cradle serve` runs the built-in `workflows/netbox.rhai`
//! against a Proxmox VE cluster (the simulator, in this process so its DHCP
//! leases can be read) whose guests take their addresses from the UniFi
//! stand-in's DHCP, and writes DNS to the Technitium stand-in.
//!
//! Proves: a Staged VM goes Active with its MAC in NetBox, a UniFi
//! reservation made before the guest's first boot (the lease it got was the
//! reservation, stamped after it), the HA resource and its node-affinity
//! rule, the DNS record, a finalized guest and a success journal entry — on
//! the direct backend and on Terraform's `bpg` flavour (the VM created stopped
//! by `terraform apply`, held by its module's state); a failure at any step
//! (validate, mac, netbox-mac, dhcp, ha, os-config, dns, active) sets the VM
//! Failed with the step and the reason, and nothing after that step happens.
//! The failures are real refusals: a VM config without net0, NetBox
//! permissions (no `dcim.add_macaddress`; a VM change constrained by status),
//! UniFi's and Technitium's answers, PVE's parameter verification of an HA
//! rule ID, a failed Semaphore task.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cradle_sim::services::semaphore::{self, Semaphore, SemaphoreConfig, TaskOutcome};
use cradle_sim::services::technitium::{self, Technitium, TechnitiumConfig};
use cradle_sim::services::unifi::{self, NetworkSpec, Unifi, UnifiConfig};
use cradle_sim::services::{Listen, unifi::DhcpOffer};
use cradle_sim::{Cluster, FaultSpec, RunningCluster, SimConfig};
use cradle_testkit::netbox::{NetBox, id, unique_name};
use cradle_tests::cradle_bin;
use cradle_tests::serve_process::Served;
use serde_json::{Value, json};

const ZONE: &str = "lab.example";

/// The custom fields the pipeline reads (docs/NETBOX.md).
const CUSTOM_FIELDS: [(&str, &str); 5] = [
    ("proxmox_node", "text"),
    ("proxmox_template", "text"),
    ("proxmox_datastore", "text"),
    ("proxmox_vmid", "integer"),
    ("semaphore_template", "integer"),
];

/// The simulated cluster and the stand-ins, on a runtime of their own.
pub(crate) struct Lab {
    cluster: RunningCluster,
    unifi: Unifi,
    technitium: Technitium,
    semaphore: Semaphore,
    /// The /24 the UniFi network and the VMs' addresses are in (127.78.N.0).
    pub(crate) net: u8,
    _rt: tokio::runtime::Runtime,
}

fn write_secret(path: &Path, value: &str) {
    std::fs::write(path, value).expect("secret");
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
}

impl Lab {
    fn start(dir: &Path, faults: Option<&str>) -> Lab {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        // A /24 of its own per test run: NetBox keeps addresses across runs.
        let net = (std::process::id() % 200 + 20) as u8;
        let network = NetworkSpec {
            ip_subnet: format!("127.78.{net}.1/24"),
            dhcp_start: format!("127.78.{net}.100").parse().expect("ip"),
            dhcp_stop: format!("127.78.{net}.250").parse().expect("ip"),
            ..NetworkSpec::default()
        };
        let localhost = "127.0.0.1:0".parse().expect("addr");
        let unifi = rt
            .block_on(unifi::start(UnifiConfig {
                listen: Listen::https(localhost),
                networks: vec![network],
                ..UnifiConfig::default()
            }))
            .expect("unifi");
        let technitium = rt
            .block_on(technitium::start(TechnitiumConfig {
                listen: Listen::http(localhost),
                zones: vec![ZONE.into()],
                ..TechnitiumConfig::default()
            }))
            .expect("technitium");
        let semaphore = rt
            .block_on(semaphore::start(SemaphoreConfig {
                listen: Listen::http(localhost),
                time_scale: 0.01,
                ..SemaphoreConfig::default()
            }))
            .expect("semaphore");
        let config = SimConfig {
            nodes: vec!["pve1".into(), "pve2".into()],
            state_dir: Some(dir.join("pve")),
            time_scale: 0.0,
            listen: localhost,
            node_ssh_port: 0,
            dhcp: Some(unifi.dhcp("default")),
            faults: faults.map(|f| FaultSpec::parse(f).expect("faults")).unwrap_or_default(),
            // cradle's token holds exactly the documented role (docs/CONFIG.md), as
            // everywhere in the e2e suite: the pipeline's HA step needs what it lists.
            access: cradle::caps::proxmox::role::sim_access(&[]),
            ..SimConfig::default()
        };
        let cluster = rt.block_on(Cluster::start(config)).expect("simulated cluster");
        Lab { cluster, unifi, technitium, semaphore, net, _rt: rt }
    }

    /// What the simulator persisted (VMs, HA resources and rules).
    pub(crate) fn state(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.cluster.root().join("state.json")).expect("state"))
            .expect("json")
    }
}

/// How a test's project differs from the plain one (the direct backend,
/// nic0 on vmbr0 by DHCP).
#[derive(Default)]
struct Setup<'a> {
    /// More lines for the defaults every VM starts from.
    extra: &'a str,
    /// The defaults' NICs, the lines under `vms_config:` (`None`: nic0 on vmbr0 by DHCP).
    nics: Option<&'a str>,
    /// The environment's backend is Terraform, of this flavour (`bpg`, `telmate`).
    terraform: Option<&'static str>,
    /// The simulator's faults (`ha-race`).
    faults: Option<&'static str>,
}

const NIC0: &str = "  nic0:\n    bridge: vmbr0\n    ip: dhcp\n";

/// A project for `cradle serve`: the cluster, the four endpoints, the
/// source, the defaults every VM starts from, as `setup` says.
fn project_with(dir: &Path, lab: &Lab, netbox: &NetBox, secret: &str, setup: &Setup) -> PathBuf {
    let cluster_toml = dir.join("cluster.toml");
    cradle::cluster::write_client_config(&lab.cluster, "pve", &cluster_toml).expect("cluster config");
    let mut cluster = std::fs::read_to_string(&cluster_toml).expect("cluster toml");
    let mut backend = ("direct", String::new());
    if let Some(flavour) = setup.terraform {
        // Terraform's providers check the certificate against a CA, never a
        // pinned fingerprint (docs/TERRAFORM.md): trust the simulator's CA.
        let ca = dir.join("pve-root-ca.pem");
        std::fs::write(&ca, lab.cluster.ca_pem()).expect("pve ca");
        let pinned = cluster.lines().filter(|l| l.starts_with("fingerprint = ")).count();
        assert_eq!(pinned, 1, "the written config pins one fingerprint:\n{cluster}");
        cluster = cluster
            .lines()
            .map(|l| if l.starts_with("fingerprint = ") { format!("ca_file = \"{}\"", ca.display()) } else { l.into() })
            .collect::<Vec<_>>()
            .join("\n");
        let cli_config = cradle_tests::terraform_cli_config(dir);
        backend = ("terraform", cradle_tests::fixture::terraform_toml(flavour, &cli_config));
    }
    write_secret(&dir.join("netbox.token"), netbox.authorization().trim_start_matches("Bearer "));
    write_secret(&dir.join("unifi.key"), lab.unifi.api_key().expect("api key").expose());
    std::fs::write(dir.join("unifi-ca.pem"), lab.unifi.ca_pem().expect("ca")).expect("ca");
    write_secret(&dir.join("technitium.token"), lab.technitium.api_token().expose());
    write_secret(&dir.join("semaphore.token"), lab.semaphore.api_token().expose());
    write_secret(&dir.join("webhook.secret"), secret);
    std::fs::write(
        dir.join("netbox-defaults.yml"),
        format!(
            "vms_config:\n  cores: 1\n  memory: 512\n{nics}ansible_user: cradle\ndns_zone: {ZONE}\nunifi_site: default\n{extra}",
            nics = setup.nics.unwrap_or(NIC0),
            extra = setup.extra,
        ),
    )
    .expect("defaults");
    let toml = format!(
        r#"default_environment = "lab"
state_dir = "state"

[environments.lab]
cluster = "pve"
backend = "{backend}"
dhcp = "unifi"
dns = "technitium"
post = "semaphore"

[workflow.grants.lock]
prefixes = ["*"]
[workflow.grants.checkpoint]
[workflow.grants.proxmox]
nodes = ["*"]
vmids = "100-999"
storages = ["*"]
[workflow.grants.ssh]
hosts = ["guests", "nodes"]
upload_dirs = ["/var/lib/vz/snippets"]
# The OS configuration's Semaphore template: the host's [post.semaphore]
# provider holds the token; the workflow may run template 1 of project 1.
[workflow.grants.post]
projects = [1]
templates = [1]
# The pipeline's integration steps are the built-in netbox plugin's: NetBox,
# DHCP, DNS and the HA calls are its grants, not the workflow's.
[plugins.netbox.grants.netbox]
endpoint = "netbox"
statuses = ["active", "failed"]
[plugins.netbox.grants.dhcp]
networks = ["127.78.0.0/16"]
# not-served.example: a zone the operator listed that the server lacks
# (a_dns_record_technitium_refuses_...).
[plugins.netbox.grants.dns]
zones = ["{ZONE}", "not-served.example"]
[plugins.netbox.grants.proxmox]
nodes = ["*"]
vmids = "100-999"

[dns.technitium]
kind = "technitium"
endpoint = "technitium"
zones = ["{ZONE}", "not-served.example"]

[post.semaphore]
kind = "semaphore"
endpoint = "semaphore"
poll_ms = 100

[dhcp.unifi]
kind = "unifi"
endpoint = "unifi"
site = "default"

[endpoints.netbox]
url = "{netbox_url}"
token = {{ file = "netbox.token" }}
auth = "bearer"
[endpoints.unifi]
url = "{unifi_url}"
token = {{ file = "unifi.key" }}
auth = "api-key"
ca_file = "unifi-ca.pem"
[endpoints.technitium]
url = "{technitium_url}"
token = {{ file = "technitium.token" }}
auth = "bearer"
[endpoints.semaphore]
url = "{semaphore_url}"
token = {{ file = "semaphore.token" }}
auth = "bearer"

[serve]
concurrency = 2
[serve.sources.netbox]
secret = {{ file = "webhook.secret" }}
defaults = "netbox-defaults.yml"

{cluster}
{backend_toml}"#,
        backend = backend.0,
        backend_toml = backend.1,
        netbox_url = netbox.url,
        unifi_url = lab.unifi.api_url().trim_end_matches("/api"),
        technitium_url = lab.technitium.url(),
        semaphore_url = lab.semaphore.url(),
    );
    std::fs::write(dir.join("cradle.toml"), toml).expect("cradle.toml");
    dir.to_path_buf()
}

/// `cradle serve` on an ephemeral port with `env`; its process, URL and log.
fn serve_env(dir: &Path, env: &[(&str, &str)]) -> (Child, String, Arc<Mutex<String>>) {
    let served = Served::start(dir, env);
    (served.child, served.url, served.log)
}

/// The NetBox side of one test: custom fields, a cluster, the webhook and an
/// event rule that fires for this test's VMs only.
pub(crate) struct NetBoxSide {
    pub(crate) netbox: NetBox,
    cluster: Value,
    pub(crate) prefix: String,
}

impl NetBoxSide {
    /// The custom fields and a cluster, but no webhook: nothing is delivered.
    fn without_webhook() -> NetBoxSide {
        let netbox = NetBox::shared();
        for (name, kind) in CUSTOM_FIELDS {
            netbox.vm_custom_field(name, kind);
        }
        let prefix = unique_name("p12");
        let cluster = netbox.create_cluster(&prefix);
        NetBoxSide { netbox, cluster, prefix }
    }

    /// The webhook to `serve_url` and an event rule for this test's VMs.
    fn hook(&self, serve_url: &str, secret: &str) {
        let hook = self.netbox.create_webhook(&self.prefix, &format!("{serve_url}/hooks/netbox"), secret);
        let rule = json!({ "attr": "name", "value": format!("^{}-", self.prefix), "op": "regex" });
        self.netbox.create_vm_update_rule(&self.prefix, &hook, &rule);
    }

    /// A Planned VM `name` with an interface `ens18` and `address` as its
    /// primary IPv4 (any address NetBox held from an earlier run removed).
    pub(crate) fn planned_vm(&self, name: &str, address: &str, fields: Value) -> (Value, Value) {
        for old in self.netbox.list(&format!("/api/ipam/ip-addresses/?address={address}")) {
            self.netbox.delete(&format!("/api/ipam/ip-addresses/{}/", id(&old)));
        }
        let vm = self.netbox.create_vm(name, &self.cluster, "planned", &fields);
        let iface = self.netbox.create_vm_interface(&vm, "ens18");
        let ip = self.netbox.create_ip(&iface, &format!("{address}/24"), "");
        self.netbox.patch_vm(&vm, &json!({ "primary_ip4": id(&ip) }));
        (vm, iface)
    }

    /// PATCH it to Staged, then wait until NetBox says Active or Failed.
    fn stage_and_wait(&self, vm: &Value, log: &Mutex<String>) -> Value {
        self.netbox.patch_vm(vm, &json!({ "status": "staged" }));
        self.wait(vm, log)
    }

    /// Wait until NetBox says Active or Failed.
    fn wait(&self, vm: &Value, log: &Mutex<String>) -> Value {
        let staged = Instant::now();
        let deadline = staged + Duration::from_secs(300);
        loop {
            let now = self.netbox.vm(vm);
            let status = now["status"]["value"].as_str().unwrap_or_default().to_string();
            if status == "active" || status == "failed" {
                // A figure for docs/BENCHMARKS.md, not an assertion.
                eprintln!("PATCH to Staged → {status} in NetBox: {:.1} s", staged.elapsed().as_secs_f64());
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "VM still {status} after 300 s; cradle serve said:\n{}",
                log.lock().expect("log")
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

pub(crate) fn fields(node: &str, template: Option<&str>) -> Value {
    json!({ "proxmox_node": node, "proxmox_template": template, "proxmox_datastore": "local-lvm" })
}

/// One test's world: the lab, its project, a NetBox side of its own.
pub(crate) struct World {
    pub(crate) lab: Lab,
    netbox: NetBox,
    pub(crate) dir: PathBuf,
    secret: String,
    pub(crate) side: NetBoxSide,
    _tmp: tempfile::TempDir,
}

impl World {
    /// With `extra` lines in the defaults every VM starts from.
    pub(crate) fn new(extra: &str) -> World {
        World::with(&Setup { extra, ..Setup::default() })
    }

    /// The project as `setup` says.
    fn with(setup: &Setup) -> World {
        let tmp = tempfile::tempdir().expect("tmp");
        let lab = Lab::start(tmp.path(), setup.faults);
        let secret = format!("CANARY-HOOK-{}", std::process::id());
        let netbox = NetBox::shared();
        let dir = project_with(tmp.path(), &lab, &netbox, &secret, setup);
        let side = NetBoxSide::without_webhook();
        World { lab, netbox, dir, secret, side, _tmp: tmp }
    }

    /// `cradle serve` with `env`, and NetBox's webhook pointed at it.
    fn serve(&self, env: &[(&str, &str)]) -> (Child, String, Arc<Mutex<String>>) {
        let served = serve_env(&self.dir, env);
        self.side.hook(&served.1, &self.secret);
        served
    }

    /// `cradle serve` talks to NetBox as a user of this test's own, not a
    /// superuser, holding only `grants` (NetBox object permissions: object
    /// types, actions, constraints): its v2 token replaces the project's.
    fn netbox_user(&self, grants: &[(&[&str], &[&str], Option<Value>)]) {
        let name = unique_name("p12-user");
        let password = format!("Pw-{}-{:x}", name, std::process::id());
        let user = self.netbox.post("/api/users/users/", &json!({ "username": name, "password": password }));
        for (i, (types, actions, constraints)) in grants.iter().enumerate() {
            self.netbox.post(
                "/api/users/permissions/",
                &json!({
                    "name": format!("{name}-{i}"),
                    "object_types": types,
                    "actions": actions,
                    "constraints": constraints,
                    "users": [id(&user)],
                }),
            );
        }
        // A v2 token made by the admin: its plaintext is only in this answer.
        let made = self.netbox.post("/api/users/tokens/", &json!({ "user": id(&user) }));
        let token = format!("nbt_{}.{}", made["key"].as_str().expect("key"), made["token"].as_str().expect("token"));
        write_secret(&self.dir.join("netbox.token"), &token);
    }

    /// A call to the simulated Proxmox VE API, as an operator would make it (`curl`).
    fn pve(&self, method: &str, path: &str, form: &[&str]) {
        let c = &self.lab.cluster;
        cradle_tests::fixture::pve_api(&c.api_url(), &c.token(), &c.ca_pem(), &self.dir, method, path, form);
    }

    /// The VMs Proxmox has under `name`.
    pub(crate) fn vms_named(&self, name: &str) -> Vec<Value> {
        let state = self.lab.state();
        state["vms"].as_object().expect("vms").values().filter(|v| v["config"]["name"] == name).cloned().collect()
    }
}

/// The journal entries' comments, one a line.
fn journal_text(journal: &[Value]) -> String {
    journal.iter().map(|e| e["comments"].as_str().unwrap_or_default().to_string()).collect::<Vec<_>>().join("\n")
}

/// SIGTERM to `cradle serve`, and wait for it.
fn stop(mut child: Child) {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

#[test]
fn a_staged_vm_goes_active_with_its_mac_in_netbox_a_reservation_before_first_boot_ha_and_dns() {
    let w = World::new("");
    let (lab, side, netbox, secret, dir) = (&w.lab, &w.side, &w.netbox, &w.secret, &w.dir);
    let (mut child, _, log) = w.serve(&[]);
    let name = format!("{}-web", side.prefix);
    let address = format!("127.78.{}.20", lab.net);
    let mut with_os_config = fields("pve1", Some("debian-12-cloud"));
    with_os_config["semaphore_template"] = json!(1);
    let (vm, iface) = side.planned_vm(&name, &address, with_os_config);
    let done = side.stage_and_wait(&vm, &log);
    let journal = side.netbox.vm_journal(&vm);
    let said = format!("{journal:#?}\ncradle serve:\n{}", log.lock().expect("log"));
    assert_eq!(done["status"]["value"], "active", "{said}");

    // The VM in Proxmox: one, on pve1, finalized (no cloud-init drive left).
    let state = lab.state();
    let made: Vec<&Value> =
        state["vms"].as_object().expect("vms").values().filter(|v| v["config"]["name"] == name.as_str()).collect();
    assert_eq!(made.len(), 1, "one VM: {said}");
    let vmid = made[0]["vmid"].as_u64().expect("vmid") as u32;
    let net0 = made[0]["config"]["net0"].as_str().expect("net0").to_string();
    let mac = net0.split(',').next().and_then(|m| m.split('=').nth(1)).expect("mac").to_uppercase();
    assert!(made[0]["config"].get("ide2").is_none(), "finalized: {}", made[0]["config"]);

    // NetBox has the MAC on the interface.
    assert_eq!(side.netbox.interface_mac(&iface).mac_address.as_deref(), Some(mac.as_str()));

    // UniFi has the reservation, made before the guest's first DHCP request.
    let reservation = lab.unifi.client("default", &mac).expect("UniFi knows the MAC");
    assert!(reservation.use_fixedip && reservation.fixed_ip == Some(address.parse().expect("ip")), "{reservation:?}");
    let leases = lab.cluster.dhcp_leases_of(vmid);
    let first = leases.first().expect("the guest asked for an address");
    match &first.offer {
        DhcpOffer::Reserved { ip, reserved_at, .. } => {
            assert_eq!(ip.to_string(), address);
            assert!(reserved_at.before(&first.at), "the reservation came before the first boot");
        }
        other => panic!("the first boot got {other:?}, not the reservation"),
    }

    // HA: managed, in pve1's node-affinity rule.
    let sid = format!("vm:{vmid}");
    assert!(state["ha_resources"].get(&sid).is_some(), "HA resource: {}", state["ha_resources"]);
    let rule = &state["ha_rules"]["cradle-pve1"];
    assert!(rule.to_string().contains(&sid), "node-affinity rule: {}", state["ha_rules"]);

    // OS configuration: the Semaphore template ran with the VM's variables.
    let tasks = lab.semaphore.tasks();
    let task = tasks.iter().find(|t| t.template_id == 1).expect("a Semaphore task");
    assert_eq!(task.status, "success");
    let vars = task.extra_vars.clone().unwrap_or_default();
    assert_eq!((vars["vm_name"].as_str(), vars["vm_address"].as_str()), (Some(name.as_str()), Some(address.as_str())));

    // DNS, and the journal entry.
    let fqdn = format!("{name}.{ZONE}");
    let records = lab.technitium.records_at(&fqdn);
    assert!(records.iter().any(|r| r.record_type == "A" && r.value == address), "{records:?}");
    assert!(
        journal
            .iter()
            .any(|e| e["kind"]["value"] == "success" && e["comments"].as_str().unwrap_or_default().contains(&mac)),
        "{said}"
    );
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
    // No credential reaches the log, a journal or the event log: the webhook
    // secret, the NetBox token, the UniFi key, the Technitium and Semaphore tokens.
    let mut written = log.lock().expect("log").clone();
    for dir in [dir.join("state/runs"), dir.join("state/serve")] {
        for entry in std::fs::read_dir(&dir).expect("state").flatten() {
            written.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    let token = netbox.authorization();
    let secrets = [
        secret.as_str(),
        token.trim_start_matches("Bearer "),
        lab.unifi.api_key().expect("key").expose(),
        lab.technitium.api_token().expose(),
        lab.semaphore.api_token().expose(),
    ];
    for (i, s) in secrets.iter().enumerate() {
        assert!(!written.contains(s), "credential {i} was written to a log or journal");
    }
}

#[test]
fn a_vm_netbox_cannot_describe_goes_failed_with_the_step_and_the_reason_and_nothing_is_made() {
    let w = World::new("");
    let (lab, side) = (&w.lab, &w.side);
    let (mut child, _, log) = w.serve(&[]);
    let name = format!("{}-bad", side.prefix);
    let (vm, _) = side.planned_vm(&name, &format!("127.78.{}.21", lab.net), fields("pve1", None));
    let done = side.stage_and_wait(&vm, &log);
    let journal = side.netbox.vm_journal(&vm);
    assert_eq!(done["status"]["value"], "failed", "{journal:#?}");
    let entry = journal.iter().find(|e| e["kind"]["value"] == "danger").expect("a journal entry");
    let text = entry["comments"].as_str().unwrap_or_default();
    assert!(text.contains("failed at step validate") && text.contains("proxmox_template"), "{text}");
    // Written for a NetBox user: a sentence, no workflow path, no array literal.
    assert!(text.contains(&format!("{name} cannot be built: NetBox has no custom field proxmox_template. Fix that, then set the VM to Staged again.")), "{text}");
    assert!(!text.contains(".rhai") && !text.contains('['), "{text}");
    let vms = lab.state()["vms"].clone();
    assert!(!vms.to_string().contains(&name), "nothing made in Proxmox");
    assert!(lab.unifi.reservations().is_empty(), "no reservation");
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

/// docs/SERVE.md's *Object created* rule: a VM created as Staged has no
/// primary IPv4 (its address must sit on one of its interfaces, made after
/// it), so the created event waits; the update that sets `primary_ip4`
/// (NetBox's own webhook, snapshots `primary_ip4` null → the id) starts it.
#[test]
fn a_vm_created_as_staged_waits_for_its_primary_ipv4_and_setting_it_makes_the_vm_active() {
    let w = World::new("");
    let (lab, side) = (&w.lab, &w.side);
    let (mut child, _, log) = w.serve(&[]);
    let hook = side.netbox.list(&format!("/api/extras/webhooks/?name={}", side.prefix));
    let rule = json!({ "attr": "name", "value": format!("^{}-", side.prefix), "op": "regex" });
    side.netbox.post(
        "/api/extras/event-rules/",
        &json!({
            "name": format!("{}-created", side.prefix),
            "object_types": ["virtualization.virtualmachine"],
            "event_types": ["object_created"],
            "enabled": true,
            "conditions": rule,
            "action_type": "webhook",
            "action_object_type": "extras.webhook",
            "action_object_id": id(&hook[0]),
        }),
    );
    let name = format!("{}-late", side.prefix);
    let address = format!("127.78.{}.22", lab.net);
    let vm = side.netbox.create_vm(&name, &side.cluster, "staged", &fields("pve1", Some("debian-12-cloud")));
    // The created event ran and waited: skipped, nothing written to NetBox.
    let deadline = Instant::now() + Duration::from_secs(120);
    let events = w.dir.join("state/serve/events.jsonl");
    while !std::fs::read_to_string(&events).unwrap_or_default().contains("has no primary IPv4 yet") {
        assert!(
            Instant::now() < deadline,
            "no skipped created event; cradle serve said:\n{}",
            log.lock().expect("log")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(side.netbox.vm(&vm)["status"]["value"], "staged", "{:#?}", side.netbox.vm_journal(&vm));
    let iface = side.netbox.create_vm_interface(&vm, "ens18");
    let ip = side.netbox.create_ip(&iface, &format!("{address}/24"), "");
    side.netbox.patch_vm(&vm, &json!({ "primary_ip4": id(&ip) }));
    let done = side.wait(&vm, &log);
    let journal = side.netbox.vm_journal(&vm);
    assert_eq!(done["status"]["value"], "active", "{journal:#?}\ncradle serve:\n{}", log.lock().expect("log"));
    assert_eq!(w.vms_named(&name).len(), 1, "one VM");
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

#[test]
fn netbox_sync_builds_every_staged_vm_no_webhook_reached_and_a_second_sync_finds_none() {
    let w = World::new("");
    let (lab, side, dir) = (&w.lab, &w.side, &w.dir);
    let mut vms = Vec::new();
    for i in 0..2 {
        let name = format!("{}-s{i}", side.prefix);
        let (vm, _) =
            side.planned_vm(&name, &format!("127.78.{}.{}", lab.net, 30 + i), fields("pve2", Some("debian-12-cloud")));
        side.netbox.patch_vm(&vm, &json!({ "status": "staged" }));
        vms.push(vm);
    }
    let query = format!("name__isw={}-", side.prefix);
    let sync = || netbox_sync(dir, &query);
    let out = sync();
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["vms"].as_array().map(Vec::len), Some(2), "{text}");
    for vm in &vms {
        assert_eq!(side.netbox.vm(vm)["status"]["value"], "active", "{text}");
    }
    let again = sync();
    let doc: Value = serde_json::from_slice(&again.stdout).expect("json");
    assert_eq!(doc["vms"].as_array().map(Vec::len), Some(0), "nothing is Staged any more");
    let state = lab.state();
    for i in 0..2 {
        let name = format!("{}-s{i}", side.prefix);
        let n =
            state["vms"].as_object().expect("vms").values().filter(|v| v["config"]["name"] == name.as_str()).count();
        assert_eq!(n, 1, "one VM {name}");
    }
}

/// `cradle --output json netbox sync --query QUERY` in the project at `dir`.
fn netbox_sync(dir: &Path, query: &str) -> std::process::Output {
    Command::new(cradle_bin())
        .current_dir(dir)
        .args(["--output", "json", "netbox", "sync", "--query", query])
        .output()
        .expect("cradle netbox sync")
}

/// The node's HA rule is shared by every VM on the node and written
/// optimistically: another writer changing it between cradle's read and its
/// write (the simulator's `ha-race`: the same change lands first, so a create
/// finds the rule already defined and an update finds the file changed) makes
/// the write a conflict, and the `ha` step reads the rule again and goes on.
#[test]
fn a_concurrent_write_to_the_nodes_ha_rule_is_read_again_and_the_vms_go_active() {
    let w = World::with(&Setup { faults: Some("ha-race"), ..Setup::default() });
    let (lab, side, dir) = (&w.lab, &w.side, &w.dir);
    let query = format!("name__isw={}-", side.prefix);
    let mut sids = Vec::new();
    // One at a time: the first VM creates the rule, the second updates it.
    for i in 0..2 {
        let name = format!("{}-r{i}", side.prefix);
        let (vm, _) =
            side.planned_vm(&name, &format!("127.78.{}.{}", lab.net, 40 + i), fields("pve2", Some("debian-12-cloud")));
        side.netbox.patch_vm(&vm, &json!({ "status": "staged" }));
        let out = netbox_sync(dir, &query);
        let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{text}");
        assert_eq!(side.netbox.vm(&vm)["status"]["value"], "active", "{text}");
        let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
        let vmid = doc["vms"][0]["detail"]
            .as_str()
            .and_then(|d| serde_json::from_str::<Value>(d).ok())
            .and_then(|d| d["vmid"].as_u64())
            .expect("the created VM's vmid");
        sids.push(format!("vm:{vmid}"));
    }
    let state = lab.state();
    let rule = state["ha_rules"]["cradle-pve2"].to_string();
    for sid in &sids {
        assert!(rule.contains(sid.as_str()), "{sid} in the node's rule: {}", state["ha_rules"]);
    }
}

#[test]
fn a_failed_os_configuration_stops_the_pipeline_and_sets_failed_at_that_step() {
    let w = World::new("");
    let (lab, side) = (&w.lab, &w.side);
    assert!(lab.semaphore.set_template_outcome(1, 1, TaskOutcome::Fail));
    let (mut child, _, log) = w.serve(&[]);
    let name = format!("{}-os", side.prefix);
    let mut f = fields("pve1", Some("debian-12-cloud"));
    f["semaphore_template"] = json!(1);
    let (vm, _) = side.planned_vm(&name, &format!("127.78.{}.22", lab.net), f);
    let done = side.stage_and_wait(&vm, &log);
    let journal = side.netbox.vm_journal(&vm);
    assert_eq!(done["status"]["value"], "failed", "{journal:#?}");
    let text =
        journal.iter().map(|e| e["comments"].as_str().unwrap_or_default().to_string()).collect::<Vec<_>>().join("\n");
    assert!(text.contains("failed at step os-config") && text.contains("ended error"), "{text}");
    // It stopped there: no DNS record, no success entry.
    assert!(lab.technitium.records_at(&format!("{name}.{ZONE}")).is_empty(), "no DNS after a failed step");
    assert!(!journal.iter().any(|e| e["kind"]["value"] == "success"), "{text}");
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

/// A failure after the lock (here the OS configuration's Semaphore task)
/// is reported by the sequence's `on_failure` hook, in the staged run
/// itself (its journal has the hook's step): NetBox gets one Failed journal
/// entry with the step and the reason — the host's `failed` finds the VM
/// Failed and writes nothing more — and no lock is left.
#[test]
fn a_failure_after_the_lock_is_reported_once_by_the_sequences_on_failure_hook_and_no_lock_is_left() {
    let w = World::new("");
    let (lab, side, dir) = (&w.lab, &w.side, &w.dir);
    assert!(lab.semaphore.set_template_outcome(1, 1, TaskOutcome::Fail));
    let name = format!("{}-hook", side.prefix);
    let mut f = fields("pve1", Some("debian-12-cloud"));
    f["semaphore_template"] = json!(1);
    let (vm, _) = side.planned_vm(&name, &format!("127.78.{}.52", lab.net), f);
    side.netbox.patch_vm(&vm, &json!({ "status": "staged" }));
    let out = netbox_sync(dir, &format!("name={name}"));
    let said = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let journal = side.netbox.vm_journal(&vm);
    let text = journal_text(&journal);
    assert_eq!(side.netbox.vm(&vm)["status"]["value"], "failed", "{text}\n{said}");
    let danger: Vec<&Value> = journal.iter().filter(|e| e["kind"]["value"] == "danger").collect();
    assert_eq!(danger.len(), 1, "reported once: {text}\n{said}");
    assert!(danger[0]["comments"].as_str().unwrap_or_default().contains("failed at step os-config:"), "{text}");
    let runs: String = std::fs::read_dir(dir.join("state/runs"))
        .expect("state/runs")
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .collect();
    assert!(runs.contains("report-failure"), "the staged run's hook reported it:\n{said}");
    assert!(cradle_tests::fixture::held_locks(&dir.join("state")).is_empty(), "no lock left");
}

#[test]
fn kill_9_of_cradle_serve_mid_pipeline_and_a_restart_make_the_vm_exactly_once() {
    let w = World::new("");
    let (lab, side, dir) = (&w.lab, &w.side, &w.dir);
    // Killed as the pipeline is about to reserve the address: the VM exists
    // (stopped), its MAC is in NetBox, nothing else is done.
    let name = format!("{}-k9", side.prefix);
    let at = format!("before:dhcp@{name}");
    let (mut child, _, _) = w.serve(&[("CRADLE_CRASH_AT", &at)]);
    let (vm, _) = side.planned_vm(&name, &format!("127.78.{}.23", lab.net), fields("pve2", Some("debian-12-cloud")));
    side.netbox.patch_vm(&vm, &json!({ "status": "staged" }));
    let status = child.wait().expect("wait");
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "killed mid-pipeline");
    assert!(lab.unifi.reservations().is_empty(), "killed before the reservation");
    assert_eq!(side.netbox.vm(&vm)["status"]["value"], "staged");
    // The restarted service resumes the event from its log: the webhook
    // pointed at the old port, and NetBox does not send it again.
    let (mut child, _, log) = serve_env(dir, &[]);
    let deadline = Instant::now() + Duration::from_secs(300);
    while side.netbox.vm(&vm)["status"]["value"] != "active" {
        assert!(Instant::now() < deadline, "not active:\n{}", log.lock().expect("log"));
        std::thread::sleep(Duration::from_millis(500));
    }
    let state = lab.state();
    let n = state["vms"].as_object().expect("vms").values().filter(|v| v["config"]["name"] == name.as_str()).count();
    assert_eq!(n, 1, "one VM, not a second clone");
    assert_eq!(lab.unifi.reservations().len(), 1, "one reservation");
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

#[test]
fn a_mac_unifi_knows_without_the_reservation_stops_at_dhcp_and_the_4_2_mac_objects_path_is_used() {
    // The MACAddress object + primary_mac_address path of NetBox 4.2–4.6.
    let w = World::new("netbox_mac_write: objects\n");
    let (lab, side) = (&w.lab, &w.side);
    let name = format!("{}-mac", side.prefix);
    // The service freezes itself just before the reservation, so the test can
    // make UniFi know the VM's MAC first (a client seen with a pool address).
    let at = format!("before:dhcp@{name}");
    let (mut child, _, log) = w.serve(&[("CRADLE_CRASH_AT", &at), ("CRADLE_CRASH_SIGNAL", "STOP")]);
    let (vm, iface) =
        side.planned_vm(&name, &format!("127.78.{}.24", lab.net), fields("pve1", Some("debian-12-cloud")));
    side.netbox.patch_vm(&vm, &json!({ "status": "staged" }));
    let deadline = Instant::now() + Duration::from_secs(120);
    while !stopped(&child) {
        assert!(Instant::now() < deadline, "never reached dhcp:\n{}", log.lock().expect("log"));
        std::thread::sleep(Duration::from_millis(20));
    }
    let mac =
        side.netbox.interface_mac(&iface).mac_address.expect("the MAC reached NetBox through the MACAddress object");
    assert!(side.netbox.interface_mac(&iface).primary_mac_address_id.is_some());
    squat(lab, &mac);
    let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
    let done = side.wait(&vm, &log);
    let journal = side.netbox.vm_journal(&vm);
    let text =
        journal.iter().map(|e| e["comments"].as_str().unwrap_or_default().to_string()).collect::<Vec<_>>().join("\n");
    assert_eq!(done["status"]["value"], "failed", "{text}");
    assert!(text.contains("failed at step dhcp") && text.contains("already knows"), "{text}");
    // It stopped there: never started, no DNS.
    assert!(lab.cluster.dhcp_leases().iter().all(|l| !l.mac.eq_ignore_ascii_case(&mac)), "never booted");
    assert!(lab.technitium.records_at(&format!("{name}.{ZONE}")).is_empty());
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

/// Whether `child` is stopped (SIGSTOP).
fn stopped(child: &Child) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap_or_default();
    stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T'))
}

/// Make UniFi know `mac` as a client with no reservation, through its API.
fn squat(lab: &Lab, mac: &str) {
    let ca = tempfile::NamedTempFile::new().expect("ca");
    std::fs::write(ca.path(), lab.unifi.ca_pem().expect("ca")).expect("write ca");
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
        .arg(ca.path())
        .arg("-H")
        .arg(format!("X-API-KEY: {}", lab.unifi.api_key().expect("key").expose()))
        .args(["-H", "Content-Type: application/json", "-d"])
        .arg(json!({ "mac": mac.to_lowercase(), "name": "someone-else" }).to_string())
        .arg(format!("{}/s/default/rest/user", lab.unifi.api_url()))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200", "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_dns_record_technitium_refuses_stops_the_pipeline_at_dns_with_technitiums_reason() {
    // A zone the DNS server does not have: Technitium answers HTTP 200 with
    // `status: error`, which must not pass for success.
    let w = World::new("dns_zone: not-served.example\n");
    let (lab, side) = (&w.lab, &w.side);
    let (mut child, _, log) = w.serve(&[]);
    let name = format!("{}-dns", side.prefix);
    let (vm, _) = side.planned_vm(&name, &format!("127.78.{}.25", lab.net), fields("pve2", Some("debian-12-cloud")));
    let done = side.stage_and_wait(&vm, &log);
    let journal = side.netbox.vm_journal(&vm);
    let text =
        journal.iter().map(|e| e["comments"].as_str().unwrap_or_default().to_string()).collect::<Vec<_>>().join("\n");
    assert_eq!(done["status"]["value"], "failed", "{text}");
    assert!(text.contains("failed at step dns") && text.contains("Technitium"), "{text}");
    assert!(!journal.iter().any(|e| e["kind"]["value"] == "success"), "{text}");
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

/// The VM failed at `step`: NetBox says Failed, and the last journal entry is
/// the danger entry naming the step and containing `reason`. Its journal.
fn failed_at(side: &NetBoxSide, vm: &Value, done: &Value, step: &str, reason: &str) -> Vec<Value> {
    let journal = side.netbox.vm_journal(vm);
    let text = journal_text(&journal);
    assert_eq!(done["status"]["value"], "failed", "{text}");
    let last = journal.iter().max_by_key(|e| id(e)).expect("a journal entry");
    let said = last["comments"].as_str().unwrap_or_default();
    assert_eq!(last["kind"]["value"], "danger", "{text}");
    assert!(said.contains(&format!("failed at step {step}:")) && said.contains(reason), "{text}");
    journal
}

/// What the pipeline's NetBox account needs besides the VM itself: its
/// interface (the MAC), its IP, journal entries, MAC addresses.
const NETBOX_TYPES: [&str; 4] =
    ["virtualization.vminterface", "ipam.ipaddress", "extras.journalentry", "dcim.macaddress"];

#[test]
fn a_vm_whose_config_has_no_net0_stops_at_mac_and_nothing_after_it_is_done() {
    // The defaults put the VM's only NIC in slot net1, and the template has no
    // network device: the clone has net1 and no net0, whose MAC the pipeline
    // writes to the NetBox interface that holds the primary IP.
    let nics = "  nic1:\n    bridge: vmbr0\n    ip: dhcp\n    interface: ens19\n";
    let w = World::with(&Setup { nics: Some(nics), ..Setup::default() });
    w.pve("PUT", "/nodes/pve1/qemu/9000/config", &["delete=net0"]);
    let (lab, side) = (&w.lab, &w.side);
    let (child, _, log) = w.serve(&[]);
    let name = format!("{}-nonet0", side.prefix);
    let (vm, iface) =
        side.planned_vm(&name, &format!("127.78.{}.26", lab.net), fields("pve1", Some("debian-12-cloud")));
    let done = side.stage_and_wait(&vm, &log);
    let journal = failed_at(side, &vm, &done, "mac", "has no net0 with a MAC");
    // The VM was made, stopped, with net1 only; nothing after `mac` happened.
    let made = w.vms_named(&name);
    assert_eq!(made.len(), 1, "{made:?}");
    let config = &made[0]["config"];
    assert!(config.get("net0").is_none() && config.get("net1").is_some(), "{config}");
    assert_eq!(made[0]["power"], "stopped", "never started");
    let vmid = made[0]["vmid"].as_u64().expect("vmid") as u32;
    assert!(lab.cluster.dhcp_leases_of(vmid).is_empty(), "never booted");
    assert_eq!(side.netbox.interface_mac(&iface).mac_address, None, "no MAC in NetBox");
    assert!(lab.unifi.reservations().is_empty(), "no reservation");
    assert_eq!(lab.state()["ha_resources"].as_object().map(|m| m.len()).unwrap_or(0), 0, "no HA resource");
    assert!(lab.technitium.records_at(&format!("{name}.{ZONE}")).is_empty(), "no DNS");
    assert!(!journal.iter().any(|e| e["kind"]["value"] == "success"), "{}", journal_text(&journal));
    stop(child);
}

#[test]
fn netbox_refusing_the_mac_stops_at_netbox_mac_with_its_reason_and_no_reservation_is_made() {
    // cradle's NetBox account may change interfaces but not create MAC
    // addresses (dcim.add_macaddress), which NetBox 4.7 requires for a new
    // `mac_address` on an interface: it answers 403.
    let w = World::new("");
    let (lab, side) = (&w.lab, &w.side);
    let without_macs: [&str; 3] = ["virtualization.vminterface", "ipam.ipaddress", "extras.journalentry"];
    w.netbox_user(&[
        (&without_macs, &["view", "add", "change"], None),
        (&["virtualization.virtualmachine"], &["view", "change"], None),
    ]);
    let (child, _, log) = w.serve(&[]);
    let name = format!("{}-nbmac", side.prefix);
    let (vm, iface) =
        side.planned_vm(&name, &format!("127.78.{}.27", lab.net), fields("pve2", Some("debian-12-cloud")));
    let done = side.stage_and_wait(&vm, &log);
    let journal = failed_at(side, &vm, &done, "netbox-mac", "You do not have permission to create MAC addresses");
    assert_eq!(side.netbox.interface_mac(&iface).mac_address, None, "NetBox kept no MAC");
    // It stopped there: no reservation, no HA, never started, no DNS.
    let made = w.vms_named(&name);
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0]["power"], "stopped", "never started");
    assert!(lab.unifi.reservations().is_empty(), "no DHCP reservation after a failed netbox-mac");
    assert_eq!(lab.state()["ha_resources"].as_object().map(|m| m.len()).unwrap_or(0), 0, "no HA resource");
    assert!(lab.cluster.dhcp_leases().is_empty(), "never booted");
    assert!(lab.technitium.records_at(&format!("{name}.{ZONE}")).is_empty(), "no DNS");
    assert!(!journal.iter().any(|e| e["kind"]["value"] == "success"), "{}", journal_text(&journal));
    stop(child);
}

#[test]
fn pve_refusing_the_ha_rule_stops_at_ha_with_its_reason_and_the_vm_is_never_started() {
    // A rule prefix whose IDs PVE refuses: HA rule IDs are `pve-configid`s
    // (a letter, then letters, digits, `_` or `-`), so `lab.cradle-pve1` fails
    // PVE's parameter verification.
    let w = World::new("ha_rule_prefix: lab.cradle-\n");
    let (lab, side) = (&w.lab, &w.side);
    let (child, _, log) = w.serve(&[]);
    let name = format!("{}-ha", side.prefix);
    let address = format!("127.78.{}.28", lab.net);
    let (vm, _) = side.planned_vm(&name, &address, fields("pve1", Some("debian-12-cloud")));
    let done = side.stage_and_wait(&vm, &log);
    let journal = failed_at(side, &vm, &done, "ha", "invalid configuration ID 'lab.cradle-pve1'");
    // What came before it is there: the MAC, the reservation.
    let made = w.vms_named(&name);
    assert_eq!(made.len(), 1, "{made:?}");
    let vmid = made[0]["vmid"].as_u64().expect("vmid") as u32;
    let reservation = lab.unifi.reservations();
    assert_eq!(reservation.len(), 1, "{reservation:?}");
    // It stopped there: no rule, never started (no boot, no lease), no DNS.
    let state = lab.state();
    assert_eq!(state["ha_rules"].as_object().map(|m| m.len()).unwrap_or(0), 0, "{}", state["ha_rules"]);
    assert_eq!(made[0]["power"], "stopped", "never started");
    assert!(lab.cluster.dhcp_leases_of(vmid).is_empty(), "never booted");
    assert!(lab.technitium.records_at(&format!("{name}.{ZONE}")).is_empty(), "no DNS");
    assert!(!journal.iter().any(|e| e["kind"]["value"] == "success"), "{}", journal_text(&journal));
    stop(child);
}

#[test]
fn netbox_refusing_active_stops_at_active_with_its_reason_and_the_vm_stays_failed() {
    // cradle's NetBox account may change a VM only while it is not Active
    // (an object permission constrained by status, as when people approve
    // Active themselves): NetBox refuses the PATCH to Active with 403, and
    // allows Failed.
    let w = World::new("");
    let (lab, side) = (&w.lab, &w.side);
    w.netbox_user(&[
        (&NETBOX_TYPES, &["view", "add", "change"], None),
        (&["virtualization.virtualmachine"], &["view"], None),
        (
            &["virtualization.virtualmachine"],
            &["change"],
            Some(json!({ "status__in": ["planned", "staged", "failed", "offline"] })),
        ),
    ]);
    let (child, _, log) = w.serve(&[]);
    let name = format!("{}-act", side.prefix);
    let address = format!("127.78.{}.29", lab.net);
    let (vm, _) = side.planned_vm(&name, &address, fields("pve2", Some("debian-12-cloud")));
    let done = side.stage_and_wait(&vm, &log);
    let journal = failed_at(
        side,
        &vm,
        &done,
        "active",
        "HTTP 403: {\"detail\":\"You do not have permission to perform this action.\"}",
    );
    // Everything before it was done: the VM runs, its DNS record is there.
    let made = w.vms_named(&name);
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0]["power"], "running");
    let records = lab.technitium.records_at(&format!("{name}.{ZONE}"));
    assert!(records.iter().any(|r| r.record_type == "A" && r.value == address), "{records:?}");
    assert_eq!(side.netbox.vm(&vm)["status"]["value"], "failed", "{}", journal_text(&journal));
    stop(child);
}

#[test]
fn a_staged_vm_goes_active_through_the_terraform_bpg_backend_created_stopped_with_its_state_and_reservation() {
    let w = World::with(&Setup { terraform: Some("bpg"), ..Setup::default() });
    let (lab, side) = (&w.lab, &w.side);
    let (child, _, log) = w.serve(&[]);
    let name = format!("{}-tf", side.prefix);
    let address = format!("127.78.{}.30", lab.net);
    // pve2: the clone is made on the template's node (pve1), then migrated.
    let (vm, iface) = side.planned_vm(&name, &address, fields("pve2", Some("debian-12-cloud")));
    let done = side.stage_and_wait(&vm, &log);
    let journal = side.netbox.vm_journal(&vm);
    let said = format!("{}\ncradle serve:\n{}", journal_text(&journal), log.lock().expect("log"));
    assert_eq!(done["status"]["value"], "active", "{said}");

    // One VM, on pve2, running, finalized.
    let made = w.vms_named(&name);
    assert_eq!(made.len(), 1, "{said}");
    assert_eq!((made[0]["node"].as_str(), made[0]["power"].as_str()), (Some("pve2"), Some("running")));
    assert!(made[0]["config"].get("ide2").is_none(), "finalized: {}", made[0]["config"]);
    let vmid = made[0]["vmid"].as_u64().expect("vmid");
    let net0 = made[0]["config"]["net0"].as_str().expect("net0");
    let mac = net0.split(',').next().and_then(|m| m.split('=').nth(1)).expect("mac").to_uppercase();

    // Terraform made it: the module's state holds it under its name and VMID,
    // created stopped (`started = false`, never refreshed since).
    let tfstate = w.dir.join("terraform").join(&name).join("terraform.tfstate");
    let text = std::fs::read_to_string(&tfstate).unwrap_or_else(|e| panic!("{}: {e}\n{said}", tfstate.display()));
    let state: Value = serde_json::from_str(&text).expect("state JSON");
    let resource = &state["resources"][0];
    assert_eq!(resource["type"], "proxmox_virtual_environment_vm", "{state}");
    let attrs = &resource["instances"][0]["attributes"];
    assert_eq!((attrs["name"].as_str(), attrs["vm_id"].as_u64()), (Some(name.as_str()), Some(vmid)), "{attrs}");
    assert_eq!(attrs["started"], false, "created stopped: {attrs}");

    // The MAC in NetBox; the reservation before the guest's first DHCP request.
    assert_eq!(side.netbox.interface_mac(&iface).mac_address.as_deref(), Some(mac.as_str()));
    let leases = lab.cluster.dhcp_leases_of(vmid as u32);
    match &leases.first().expect("the guest asked for an address").offer {
        DhcpOffer::Reserved { ip, reserved_at, .. } => {
            assert_eq!(ip.to_string(), address);
            assert!(reserved_at.before(&leases[0].at), "the reservation came before the first boot");
        }
        other => panic!("the first boot got {other:?}, not the reservation"),
    }
    // HA and DNS, as on the direct backend.
    let sim = lab.state();
    assert!(sim["ha_rules"]["cradle-pve2"].to_string().contains(&format!("vm:{vmid}")), "{}", sim["ha_rules"]);
    let records = lab.technitium.records_at(&format!("{name}.{ZONE}"));
    assert!(records.iter().any(|r| r.record_type == "A" && r.value == address), "{records:?}");
    stop(child);
}

mod clients;
