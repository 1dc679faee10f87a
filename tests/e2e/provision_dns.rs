//! DNS within provisioning, end to end: the real workflows (the creation
//! step, workflows/lib/create.rhai, calls `dns::upsert` for each of the VM's
//! records before creating it; workflows/remove.rhai calls `dns::delete` for
//! each once the VM is gone), the direct backend, the simulated cluster, and
//! a real BIND 9 on loopback updated through RFC 2136 + TSIG (`[dns.lab]`,
//! `dns = "lab"` on the environment, `[workflow.grants.dns]`).
//!
//! A VM's records are its inventory variable `vms_dns_record`: one
//! `{zone, name, kind, value, ttl}` map or a list of them (here from
//! `host_vars/<vm>.yml`).
//! What happened is read from BIND (dig over TCP, the zone's SOA serial,
//! which moves with every applied update and only then), from the simulator
//! (persisted state, request counters) and from the run journals, never from
//! timing. Each test owns a loopback subnet 127.32.<n>.0/24 (n in 40..=44; a
//! prefix no other test uses) and its own named.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cradle::provision::{Action, HostResult};
use cradle_tests::bind::{self, Bind};
use cradle_tests::fixture::{
    Backend, Cluster, DnsProvider, LabInventory, ProjectConfig, SimCluster, SimSession, assert_ok, error_of, writes,
};
use serde_json::Value;

/// The zones named serves and cradle may update.
const ZONES: [&str; 2] = ["lab.example", "32.127.in-addr.arpa"];
const LAB: &str = "lab.example.";
const REV: &str = "32.127.in-addr.arpa.";
/// The guests' addresses are `<NET>.<subnet>.<host>` (the reverse zone is `REV`).
const NET: &str = "127.32";
const VMID_BASE: u32 = 200;

fn name(i: usize) -> String {
    format!("vm-{i}")
}

/// One fixture project with its own loopback subnet and its own named.
struct Lab {
    dir: tempfile::TempDir,
    hosts: LabInventory,
    bind: Bind,
}

/// A project opened on the lab, with the runtime its simulator lives on.
struct Session(SimSession);

impl Lab {
    /// A lab of `count` VMs, each with the record `record(i, subnet)` (YAML
    /// of `vms_dns_record`, or `None` for no record). `None` when BIND is not
    /// installed and the BIND tests may be skipped.
    fn new(test: &str, subnet: u8, count: usize, record: impl Fn(usize, u8) -> Option<String>) -> Option<Lab> {
        let bind = bind::start(test, &ZONES)?;
        let mut hosts = LabInventory::new(NET, subnet).count(count).vmid_base(Some(VMID_BASE));
        for i in 0..count {
            if let Some(rec) = record(i, subnet) {
                hosts = hosts.host_vars(&name(i), &format!("vms_dns_record:\n{rec}"));
            }
        }
        let lab = Lab { dir: tempfile::tempdir().expect("tempdir"), hosts, bind };
        lab.hosts.write(lab.dir.path());
        lab.set_secret(lab.bind.secret(bind::KEY));
        Some(lab)
    }

    fn address(&self, i: usize) -> String {
        self.hosts.address(i)
    }

    fn inventory(&self) -> PathBuf {
        self.dir.path().join("inventory")
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn secret_file(&self) -> PathBuf {
        self.dir.path().join("tsig.secret")
    }

    /// What `[dns.lab].secret` holds (the file it names).
    fn set_secret(&self, secret: &str) {
        bind::write_secret(&self.secret_file(), secret);
    }

    /// Write cradle.toml and open the project; `destructive` is the backend's
    /// `destructive` grant (removal needs it).
    fn open(&self, destructive: bool) -> Session {
        let dns = DnsProvider {
            server: self.bind.server().to_string(),
            key_name: bind::KEY.into(),
            secret_file: self.secret_file(),
            zones: vec![LAB.into(), REV.into()],
        };
        let config = ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0)))
            .backend(Backend::Plugin { destructive })
            .dns(dns)
            .write(self.dir.path());
        Session(SimSession::open(&config))
    }

    /// The VMs (not templates) the simulator holds, from its persisted state.
    fn guests(&self) -> Vec<Value> {
        cradle_tests::fixture::sim_vms(&self.state()).into_values().filter(|v| v["config"]["template"] != "1").collect()
    }

    fn vms_named(&self, vm: &str) -> Vec<Value> {
        self.guests().into_iter().filter(|v| v["config"]["name"] == vm).collect()
    }

    /// The events of run `run_id`'s journal.
    fn journal(&self, run_id: &str) -> Vec<Value> {
        let path = self.state().join("runs").join(format!("{run_id}.jsonl"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        text.lines().map(|l| serde_json::from_str(l).expect("journal line is JSON")).collect()
    }

    /// Every run journal's text, concatenated.
    fn all_journals(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(self.state().join("runs")).expect("runs dir").flatten() {
            if entry.path().extension().is_some_and(|e| e == "jsonl") {
                out.push_str(&std::fs::read_to_string(entry.path()).expect("read journal"));
            }
        }
        out
    }

    /// Lock files left in the state dir.
    fn held_locks(&self) -> Vec<String> {
        cradle_tests::fixture::held_locks(&self.state())
    }
}

impl Session {
    /// `action` for every VM of the lab (`cradle provision` / `cradle remove --yes`).
    fn run(&self, lab: &Lab, action: Action) -> Vec<HostResult> {
        let mut results = self.0.run(&lab.inventory(), None, action, 2);
        results.sort_by(|a, b| a.name.cmp(&b.name));
        results
    }

    /// Requests the simulator served so far (empty when no run started it).
    fn counts(&self) -> BTreeMap<String, u64> {
        self.0.counts().unwrap_or_default()
    }

    /// The snippets on `node` (none when no run started the simulator).
    fn snippets_on(&self, node: &str) -> Vec<String> {
        self.0.snippets_on(node).unwrap_or_default()
    }
}

/// Where in `journal` the first event matching `pred` is.
fn position(journal: &[Value], what: &str, pred: impl Fn(&Value) -> bool) -> usize {
    journal.iter().position(pred).unwrap_or_else(|| panic!("no {what} in the journal: {journal:#?}"))
}

fn call(capability: &'static str, function: &'static str) -> impl Fn(&Value) -> bool {
    move |e| e["event"] == "capability_call" && e["capability"] == capability && e["function"] == function
}

fn step(event: &'static str, name: &'static str) -> impl Fn(&Value) -> bool {
    move |e| e["event"] == event && e["step"] == name
}

/// An A record for `vm-<i>.lab.example.` with the provider's TTL.
fn a_record(i: usize, subnet: u8) -> Option<String> {
    Some(format!("  zone: {LAB}\n  name: {}.{LAB}\n  kind: A\n  value: {NET}.{subnet}.{}\n", name(i), 10 + i))
}

fn ptr_name(subnet: u8, i: usize) -> String {
    format!("{}.{subnet}.{REV}", 10 + i)
}

#[test]
fn provisioning_publishes_each_vms_record_before_cloning_it_and_a_rerun_sends_no_update() {
    // vm-0 gets an A record (provider TTL), vm-1 a PTR record with its own TTL.
    let Some(lab) = Lab::new("provision_dns", 40, 2, |i, n| match i {
        0 => a_record(i, n),
        _ => Some(format!(
            "  zone: {REV}\n  name: {}\n  kind: ptr\n  value: {}.{LAB}\n  ttl: 600\n",
            ptr_name(n, i),
            name(i)
        )),
    }) else {
        return;
    };
    let (a_name, ptr) = (format!("{}.{LAB}", name(0)), ptr_name(40, 1));
    assert!(lab.bind.dig(&a_name, "A").is_empty() && lab.bind.dig(&ptr, "PTR").is_empty(), "a fresh zone");
    let s = lab.open(false);
    let results = s.run(&lab, Action::Provision);
    for r in &results {
        assert_ok(r, "created");
    }
    assert_eq!(lab.bind.dig(&a_name, "A"), vec![(300, lab.address(0))], "the A record, with the provider's TTL");
    assert_eq!(lab.bind.dig(&ptr, "PTR"), vec![(600, format!("{}.{LAB}", name(1)))], "the PTR record");
    for r in &results {
        assert_eq!(lab.vms_named(&r.name).len(), 1, "{} exists once", r.name);
        let journal = lab.journal(r.run_id.as_deref().expect("run id"));
        let upsert = position(&journal, "dns upsert", call("dns", "upsert"));
        assert_eq!(journal[upsert]["outcome"]["result"], "ok", "{:#}", journal[upsert]);
        let dns_step = position(&journal, "dns step", step("step_started", "dns"));
        let clone = position(&journal, "clone", call("proxmox", "clone-vm"));
        assert!(dns_step < upsert && upsert < clone, "{}: the record is set before the clone", r.name);
    }

    // A rerun finds both VMs and leaves DNS alone: no update reaches named.
    let serials = (lab.bind.serial(LAB), lab.bind.serial(REV));
    let again = s.run(&lab, Action::Provision);
    for r in &again {
        assert_ok(r, "skipped");
        let journal = lab.journal(r.run_id.as_deref().expect("run id"));
        assert!(!journal.iter().any(|e| e["capability"] == "dns"), "{}: no DNS call on a rerun", r.name);
    }
    assert_eq!((lab.bind.serial(LAB), lab.bind.serial(REV)), serials, "no update was applied");
    assert_eq!(lab.bind.dig(&a_name, "A"), vec![(300, lab.address(0))]);
    assert_eq!(lab.bind.dig(&ptr, "PTR"), vec![(600, format!("{}.{LAB}", name(1)))]);
    assert_eq!(lab.guests().len(), 2, "no VM was added");

    // Canary: the TSIG secret never reaches a journal.
    let journals = lab.all_journals();
    assert!(journals.contains("\"capability\":\"dns\""), "the DNS calls are journaled");
    assert!(!journals.contains(lab.bind.secret(bind::KEY)), "the TSIG secret is in a run journal");
}

#[test]
fn provisioning_replaces_a_stale_record_and_leaves_a_matching_one_untouched() {
    let Some(lab) = Lab::new("provision_dns_stale", 41, 2, a_record) else { return };
    // vm-0's name points at an old address; vm-1's record is already right.
    let nsupdate = |name: &str, value: &str| {
        let script = format!("server 127.0.0.1 {}\nzone {LAB}\nupdate add {name} 300 A {value}\nsend\n", lab.bind.port);
        let key = format!("hmac-sha256:{}:{}", bind::KEY, lab.bind.secret(bind::KEY));
        let mut child = std::process::Command::new("nsupdate")
            .args(["-v", "-y", &key])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("run nsupdate (bind9-dnsutils)");
        std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), script.as_bytes()).expect("write");
        assert!(child.wait().expect("nsupdate").success(), "nsupdate failed:\n{}", lab.bind.log());
    };
    let (stale, current) = (format!("{}.{LAB}", name(0)), format!("{}.{LAB}", name(1)));
    nsupdate(&stale, "192.0.2.99");
    nsupdate(&current, &lab.address(1));
    let serial = lab.bind.serial(LAB);
    let s = lab.open(false);
    for r in s.run(&lab, Action::Provision) {
        assert_ok(&r, "created");
        let journal = lab.journal(r.run_id.as_deref().expect("run id"));
        let upsert = &journal[position(&journal, "dns upsert", call("dns", "upsert"))];
        assert_eq!(upsert["outcome"]["result"], "ok", "{upsert:#}");
    }
    assert_eq!(lab.bind.dig(&stale, "A"), vec![(300, lab.address(0))], "the old address is gone");
    assert_eq!(lab.bind.dig(&current, "A"), vec![(300, lab.address(1))]);
    assert_eq!(lab.bind.serial(LAB), serial + 1, "one update (the stale record); the matching one was left alone");
}

#[test]
fn removal_deletes_the_record_only_once_the_vm_is_gone() {
    let Some(lab) = Lab::new("remove_dns", 42, 1, a_record) else { return };
    let a_name = format!("{}.{LAB}", name(0));
    {
        let s = lab.open(false);
        assert_ok(&s.run(&lab, Action::Provision).remove(0), "created");
    }
    assert_eq!(lab.bind.dig(&a_name, "A"), vec![(300, lab.address(0))]);

    // Without the `destructive` grant the destroy is denied: the VM stays, and so does its record.
    {
        let s = lab.open(false);
        let r = s.run(&lab, Action::Remove).remove(0);
        let err = error_of(&r);
        assert!(err.contains(&name(0)) && err.contains("destroy"), "{err}");
        assert_eq!(lab.vms_named(&name(0)).len(), 1, "the VM still exists");
        assert_eq!(lab.bind.dig(&a_name, "A"), vec![(300, lab.address(0))], "DNS was left alone");
        let journal = lab.journal(r.run_id.as_deref().expect("run id"));
        assert!(!journal.iter().any(|e| e["capability"] == "dns"), "no DNS call: {journal:#?}");
        assert_eq!(lab.held_locks(), Vec::<String>::new());
    }

    // With it: destroyed, confirmed gone, then the record is deleted.
    let s = lab.open(true);
    let r = s.run(&lab, Action::Remove).remove(0);
    assert_ok(&r, "removed");
    assert!(lab.vms_named(&name(0)).is_empty(), "the VM is gone");
    assert!(lab.bind.dig(&a_name, "A").is_empty(), "the A record was deleted");
    let journal = lab.journal(r.run_id.as_deref().expect("run id"));
    let destroyed = position(&journal, "destroy", step("step_finished", "destroy"));
    assert_eq!(journal[destroyed]["error"], Value::Null, "{:#}", journal[destroyed]);
    let delete = position(&journal, "dns delete", call("dns", "delete"));
    assert_eq!(journal[delete]["outcome"]["result"], "ok", "{:#}", journal[delete]);
    let recheck =
        destroyed + position(&journal[destroyed..], "a discover after the destroy", call("proxmox", "list-vms"));
    assert!(recheck < delete, "destroy, then the VM is looked for again, then DNS: {journal:#?}");
    assert_eq!(lab.held_locks(), Vec::<String>::new());

    // Removing again: nothing to remove (`absent`, a success), and DNS is not touched.
    let serial = lab.bind.serial(LAB);
    let again = s.run(&lab, Action::Remove).remove(0);
    assert_ok(&again, "absent");
    assert_eq!(lab.bind.serial(LAB), serial);
}

#[test]
fn a_vm_with_an_a_and_a_ptr_record_gets_both_and_removal_deletes_both() {
    let Some(lab) = Lab::new("a_and_ptr", 44, 1, |i, n| {
        Some(format!(
            "  - {{ zone: {LAB}, name: {vm}.{LAB}, kind: A, value: {NET}.{n}.{host} }}\n  - {{ zone: {REV}, name: {ptr}, kind: PTR, value: {vm}.{LAB} }}\n",
            vm = name(i),
            host = 10 + i,
            ptr = ptr_name(n, i)
        ))
    }) else {
        return;
    };
    let (a_name, ptr) = (format!("{}.{LAB}", name(0)), ptr_name(44, 0));
    let s = lab.open(true);
    assert_ok(&s.run(&lab, Action::Provision).remove(0), "created");
    assert_eq!(lab.bind.dig(&a_name, "A"), vec![(300, lab.address(0))], "the A record");
    assert_eq!(lab.bind.dig(&ptr, "PTR"), vec![(300, format!("{}.{LAB}", name(0)))], "and its PTR record");
    assert_ok(&s.run(&lab, Action::Remove).remove(0), "removed");
    assert!(lab.bind.dig(&a_name, "A").is_empty() && lab.bind.dig(&ptr, "PTR").is_empty(), "both deleted");
}

#[test]
fn a_rejected_tsig_key_fails_at_the_dns_step_before_anything_is_created_and_never_shows_the_secret() {
    let Some(lab) = Lab::new("provision_dns_badsig", 43, 1, a_record) else { return };
    let canary = bind::random_secret(32);
    assert_ne!(canary, lab.bind.secret(bind::KEY));
    lab.set_secret(&canary);
    let s = lab.open(false);
    let r = s.run(&lab, Action::Provision).remove(0);
    let err = error_of(&r);
    for part in [format!("'{}'", name(0)), "'dns'".into(), "BADSIG".into(), bind::KEY.into(), "dns.lab.secret".into()] {
        assert!(err.contains(&part), "the error names {part}: {err}");
    }
    assert!(!err.contains(&canary) && !err.contains(lab.bind.secret(bind::KEY)), "the error shows the secret: {err}");

    let counts = s.counts();
    assert_eq!(writes(&counts), BTreeMap::new(), "no API writes (no clone): {counts:?}");
    assert!(lab.guests().is_empty(), "no VM was created");
    for node in ["pve1", "pve2", "pve3"] {
        assert_eq!(s.snippets_on(node), Vec::<String>::new(), "no snippets uploaded to {node}");
    }
    assert_eq!(lab.held_locks(), Vec::<String>::new(), "the lock was released");
    assert!(lab.bind.dig(&format!("{}.{LAB}", name(0)), "A").is_empty(), "no record");

    let journal = lab.journal(r.run_id.as_deref().expect("run id"));
    let failed = position(&journal, "the failed dns step", step("step_finished", "dns"));
    assert_ne!(journal[failed]["error"], Value::Null, "{:#}", journal[failed]);
    assert!(!journal.iter().any(call("proxmox", "clone-vm")), "no clone was attempted");
    let journals = lab.all_journals();
    assert!(!journals.contains(&canary), "the TSIG secret is in the run journal");
    assert!(!journals.contains(lab.bind.secret(bind::KEY)));
}
