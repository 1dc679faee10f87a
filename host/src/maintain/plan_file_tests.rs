//! Every refusal of `plan_file::read`, each naming the file and the field,
//! and the file's mode.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::*;
use crate::caps::maintenance::{Change, Class, Resize};

fn changes() -> VmChanges {
    VmChanges {
        name: "web-0".into(),
        vmid: 301,
        node: "pve1".into(),
        running: true,
        hotplug: "network,disk,usb".into(),
        digest: "a".repeat(40),
        changes: vec![Change {
            what: "memory".into(),
            key: "memory".into(),
            from: Some("2048".into()),
            to: Some("3072".into()),
            class: Class::NextBoot,
            flag: None,
            why: "memory hotplug is off: PVE keeps it pending until the next cold start".into(),
        }],
        set: BTreeMap::from([("memory".into(), "3072".into())]),
        delete: vec![],
        moves: vec![],
        resize: vec![Resize { disk: "scsi0".into(), from: "10G".into(), to: "12G".into() }],
        before: BTreeMap::from([("memory".into(), Some("2048".into()))]),
        expect: BTreeMap::from([("memory".into(), Some("3072".into()))]),
        rest: "b".repeat(64),
        pending_before: vec![],
    }
}

fn plan(created: OffsetDateTime) -> PlanFile {
    PlanFile {
        format: FORMAT.into(),
        id: String::new(),
        created: created.format(&Rfc3339).unwrap(),
        cluster: "sim://lab".into(),
        environment: "test".into(),
        inventory: "/srv/inventory.ini".into(),
        limit: Some("web".into()),
        allow: Allow::default(),
        vms: vec![PlannedVm {
            host: "web-0".into(),
            backend: "direct".into(),
            spec_digest: "c".repeat(64),
            changes: changes(),
            terraform_plan: None,
        }],
    }
}

fn cluster_of(env: &str) -> Result<String, String> {
    match env {
        "test" => Ok("sim://lab".into()),
        "other" => Ok("https://pve.example:8006".into()),
        _ => Err(format!("`{env}` is not an environment of cradle.toml (known: other, test)")),
    }
}

fn expect(now: OffsetDateTime) -> Expect<'static> {
    Expect { now, max_age: Duration::from_secs(24 * 3600), cluster_of: &cluster_of }
}

fn written(p: &mut PlanFile) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan.json");
    p.write(&path).expect("write");
    (dir, path)
}

fn refusal(path: &Path, now: OffsetDateTime) -> PlanFileError {
    let e = read(path, &expect(now)).expect_err("refused");
    assert_eq!(e.file, path);
    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    e
}

#[test]
fn a_written_plan_is_owner_only_and_reads_back_equal() {
    let now = OffsetDateTime::now_utc();
    let mut p = plan(now);
    let (_dir, path) = written(&mut p);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the plan file is the owner's only");
    assert_eq!(read(&path, &expect(now)).expect("reads"), p);
    assert_eq!(p.id.len(), 64);
}

#[test]
fn rewriting_a_plan_over_a_readable_file_leaves_it_owner_only() {
    let now = OffsetDateTime::now_utc();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan.json");
    std::fs::write(&path, "old").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    plan(now).write(&path).expect("write");
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn another_format_is_refused_naming_the_field() {
    let now = OffsetDateTime::now_utc();
    let (_dir, path) = written(&mut plan(now));
    let text = std::fs::read_to_string(&path).unwrap().replace(FORMAT, "cradle-maintenance-plan/9");
    std::fs::write(&path, text).unwrap();
    let e = refusal(&path, now);
    assert_eq!(e.field, "format");
    assert!(e.problem.contains("cradle-maintenance-plan/9"), "{e}");
}

#[test]
fn an_edited_plan_is_refused_by_its_id() {
    let now = OffsetDateTime::now_utc();
    let (_dir, path) = written(&mut plan(now));
    let text = std::fs::read_to_string(&path).unwrap().replace("\"3072\"", "\"65536\"");
    std::fs::write(&path, text).unwrap();
    let e = refusal(&path, now);
    assert_eq!(e.field, "id");
    assert!(e.problem.contains("edited"), "{e}");
}

#[test]
fn a_truncated_plan_is_refused() {
    let now = OffsetDateTime::now_utc();
    let (_dir, path) = written(&mut plan(now));
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, &text[..text.len() / 2]).unwrap();
    let e = refusal(&path, now);
    assert_eq!(e.field, "file");
    assert!(e.problem.contains("cut short"), "{e}");
}

#[test]
fn an_unknown_field_is_refused() {
    let now = OffsetDateTime::now_utc();
    let (_dir, path) = written(&mut plan(now));
    let text = std::fs::read_to_string(&path).unwrap().replacen("\"cluster\"", "\"extra\": 1, \"cluster\"", 1);
    std::fs::write(&path, text).unwrap();
    let e = refusal(&path, now);
    assert_eq!(e.field, "file");
    assert!(e.problem.contains("extra"), "{e}");
}

#[test]
fn a_plan_older_than_the_limit_is_refused_saying_its_age_and_the_limit() {
    let now = OffsetDateTime::now_utc();
    let (_dir, path) = written(&mut plan(now - time::Duration::hours(26)));
    let e = refusal(&path, now);
    assert_eq!(e.field, "created");
    assert!(e.problem.contains("26 h ago") && e.problem.contains("24 h ([maintenance] plan_max_age)"), "{e}");
    // Within the limit it reads.
    let (_dir, path) = written(&mut plan(now - time::Duration::hours(23)));
    read(&path, &expect(now)).expect("a day-old plan within the limit");
}

#[test]
fn a_plan_from_the_future_is_refused() {
    let now = OffsetDateTime::now_utc();
    let (_dir, path) = written(&mut plan(now + time::Duration::hours(3)));
    let e = refusal(&path, now);
    assert_eq!(e.field, "created");
    assert!(e.problem.contains("ahead"), "{e}");
}

#[test]
fn a_plan_for_another_cluster_is_refused_naming_both() {
    let now = OffsetDateTime::now_utc();
    let mut p = plan(now);
    p.environment = "other".into();
    let (_dir, path) = written(&mut p);
    let e = refusal(&path, now);
    assert_eq!(e.field, "cluster");
    assert!(e.problem.contains("sim://lab") && e.problem.contains("https://pve.example:8006"), "{e}");
}

#[test]
fn a_plan_for_an_unknown_environment_is_refused() {
    let now = OffsetDateTime::now_utc();
    let mut p = plan(now);
    p.environment = "gone".into();
    let (_dir, path) = written(&mut p);
    let e = refusal(&path, now);
    assert_eq!(e.field, "environment");
    assert!(e.problem.contains("gone"), "{e}");
}

#[test]
fn a_file_that_is_not_there_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.json");
    let e = refusal(&path, OffsetDateTime::now_utc());
    assert_eq!(e.field, "file");
}

#[test]
fn a_plan_without_moves_is_written_as_before_moves_existed() {
    // Plans written by an older cradle have no `moves`; their `id` hashes the
    // content as written, so an empty list must not appear either.
    let json = serde_json::to_value(changes()).expect("json");
    assert!(json.get("moves").is_none(), "{json}");
    let back: VmChanges = serde_json::from_value(json).expect("reads without moves");
    assert!(back.moves.is_empty());
}
