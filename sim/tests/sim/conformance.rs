//! The simulator held to PVE 9.1's API schema (`sim/fixtures/pve-api/schema.json`):
//! every route it serves exists there with that method, it records what it served
//! (owner-only, no token), and the recordings of a test run are checked
//! (`recorded_exchanges_conform_to_the_pve_schema`, run by scripts/test after the suite).

use std::os::unix::fs::PermissionsExt;

use cradle_sim::conformance::{Schema, record};

use crate::common::{self, Api};

/// A concrete path for a template: the seeded cluster's names for its parameters.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|s| match s {
            "{node}" => "pve1",
            "{vmid}" => "9000",
            "{storage}" => "local",
            "{upid}" => "UPID:pve1:00000001:00000001:00000001:qmstart:9000:root@pam:",
            "{sid}" => "vm:9000",
            "{rule}" => "r1",
            s if s.starts_with('{') => "x",
            s => s,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Every path of the whole PVE API with every method: what the simulator answers with
/// anything but 501 "not implemented" it serves, and PVE must have that method there.
/// (Found `POST agent/get-osinfo`, which PVE has only as GET: qemu-server e6352be
/// `src/PVE/API2/Qemu/Agent.pm`:106.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_the_simulator_serves_is_in_the_pve_schema_with_that_method() {
    let c = common::start(0.0, |cfg| cfg.record_dir = None).await;
    let api = Api::new(&c);
    let schema = Schema::pve();
    let mut served_elsewhere = Vec::new();
    let mut served = 0;
    for template in schema.index().keys() {
        let path = concrete(template);
        for method in ["GET", "POST", "PUT", "DELETE"] {
            let (status, body) = api.call(method, &path, &[]).await;
            if status == 501 {
                continue;
            }
            served += 1;
            if !schema.has(method, template) {
                served_elsewhere.push(format!("{method} {template} ({status} {})", body["message"]));
            }
        }
    }
    assert!(served > 60, "the sweep reached the router ({served} routes answered)");
    assert_eq!(served_elsewhere, Vec::<String>::new(), "routes PVE 9.1 does not have");
}

/// The recording: one JSONL file per simulator, 0600 in a 0700 directory, each request
/// with its parameters and answer, the token never in it, a password redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_records_each_exchange_owner_only_and_without_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec");
    let c = common::start(0.0, |cfg| cfg.record_dir = Some(rec.clone())).await;
    let api = Api::new(&c);
    api.get("/cluster/resources?type=vm").await;
    let (s, _) = api.call("PUT", "/nodes/pve1/qemu/9000/config", &[("cipassword", "hunter2"), ("cores", "2")]).await;
    assert_eq!(s, 200);
    let files: Vec<_> = std::fs::read_dir(&rec).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(std::fs::metadata(&rec).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777, 0o600);
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let secret = c.token().rsplit('=').next().unwrap().to_string();
    assert!(!text.contains(&secret), "the token secret is never recorded");
    assert!(!text.contains("hunter2"), "a password is redacted");
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["method"], "GET");
    assert_eq!(lines[0]["path"], "/cluster/resources");
    assert_eq!(lines[0]["params"]["type"], "vm");
    assert!(lines[0]["data"].as_array().is_some_and(|a| !a.is_empty()), "{}", lines[0]);
    assert_eq!(lines[1]["params"]["cipassword"], "<redacted>");
    assert_eq!(lines[1]["test"], "conformance::the_simulator_records_each_exchange_owner_only_and_without_the_token");
    let found = record::check_dir(Schema::pve(), &rec).unwrap();
    assert!(found.is_empty(), "{found:?}");
}

/// The check over recordings names the endpoint, parameter, problem and test; a refusal
/// the simulator itself gave as PVE's verifier would (400 `Parameter verification
/// failed.`, 501) is not a finding.
#[test]
fn the_recording_check_lists_each_violation_with_its_test() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        r#"{"test":"t::renamed","method":"POST","path":"/nodes/pve1/qemu/9000/clone","params":{"new_id":"100","node":"pve1"},"status":200,"data":"UPID:pve1:1:2:3:qmclone:9000:root@pam:"}"#,
        r#"{"test":"t::osinfo","method":"POST","path":"/nodes/pve1/qemu/100/agent/get-osinfo","params":{},"status":200,"data":{"result":{}}}"#,
        r#"{"test":"t::shape","method":"GET","path":"/nodes/pve1/tasks","params":{},"status":200,"data":{"upid":"x"}}"#,
        r#"{"test":"t::refused","method":"POST","path":"/nodes/pve1/qemu/9000/clone","params":{"newid":"x"},"status":400,"data":null,"message":"Parameter verification failed.\n"}"#,
    ];
    std::fs::write(dir.path().join("a.jsonl"), lines.join("\n")).unwrap();
    let found: Vec<String> =
        record::check_dir(Schema::pve(), dir.path()).unwrap().iter().map(ToString::to_string).collect();
    assert_eq!(
        found,
        [
            "POST /nodes/{node}/qemu/{vmid}/clone: new_id: property is not defined in schema and the schema does not allow additional properties (request, test t::renamed)",
            "POST /nodes/{node}/qemu/{vmid}/clone: newid: property is missing and it is not optional (request, test t::renamed)",
            "POST /nodes/{node}/qemu/{vmid}/agent/get-osinfo: PVE has no POST on this path (it has GET) (request, test t::osinfo)",
            "GET /nodes/{node}/tasks: data: type check ('array') failed - got an object (answer, test t::shape)",
        ]
    );
}

/// Run by scripts/test after the suite, over `$CRADLE_SIM_CONFORMANCE_DIR` (every
/// simulator of the run recorded there): fails listing each violation.
#[test]
#[ignore = "checks the recordings of a test run: scripts/test runs it after the suite"]
fn recorded_exchanges_conform_to_the_pve_schema() {
    let dir = std::env::var_os("CRADLE_SIM_CONFORMANCE_DIR").expect("CRADLE_SIM_CONFORMANCE_DIR names the recordings");
    let found = record::check_dir(Schema::pve(), std::path::Path::new(&dir)).unwrap_or_else(|e| panic!("{e}"));
    let files = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
    assert!(files > 0, "no recordings in {}", std::path::Path::new(&dir).display());
    if !found.is_empty() {
        let list: Vec<String> = found.iter().map(|f| format!("  {f}")).collect();
        panic!(
            "{} exchanges with the simulator break PVE 9.1's API schema (sim/fixtures/pve-api/schema.json):\n{}",
            found.len(),
            list.join("\n")
        );
    }
    let exchanges: usize = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|text| text.lines().filter(|l| !l.trim().is_empty()).count())
        .sum();
    println!("{exchanges} exchanges in {files} recordings conform to PVE 9.1's API schema");
}

/// `type` is the type-property of `PUT /cluster/ha/rules/{rule}` and not optional
/// (pve-docs e5010dc `api-viewer/apidata.js`; pve-ha-manager b71218f
/// `src/PVE/API2/HA/Rules.pm` builds the update schema from the rule plugins): found by
/// the recording check in the simulator's own HA tests, which left it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ha_rule_update_without_its_type_fails_parameter_verification() {
    let c = common::start(0.0, |cfg| cfg.record_dir = None).await;
    let api = Api::new(&c);
    let (s, b) = api.call("PUT", "/cluster/ha/rules/r1", &[("resources", "vm:9000")]).await;
    assert_eq!(s, 400, "{b}");
    assert_eq!(b["errors"]["type"], "property is missing and it is not optional", "{b}");
}

/// The migrate precheck answers every property its `returns` does not mark optional
/// (qemu-server e6352be `src/PVE/API2/Qemu.pm`:5471-5473 sets `mapped-resources`,
/// `mapped-resource-info` and `has-dbus-vmstate` on every answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migrate_precheck_answer_conforms_to_its_returns() {
    let c = common::start(0.0, |cfg| cfg.record_dir = None).await;
    let api = Api::new(&c);
    let data = api.get("/nodes/pve1/qemu/9000/migrate").await;
    let found = Schema::pve().check_answer("GET", "/nodes/pve1/qemu/9000/migrate", &data);
    assert_eq!(found, [], "{data}");
}
