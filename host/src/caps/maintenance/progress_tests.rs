//! The rerun-after-crash rule ([`progress`]) and the after-apply checks
//! ([`outstanding`], [`needs_cold_start`]).

use std::collections::BTreeMap;

use super::change::{Allow, PendingEntry, VmChanges, Wanted};
use super::diff::diff;
use super::diff_tests::{live, want};
use super::progress::{Step, progress};
use super::verify::{needs_cold_start, outstanding};

/// A plan that bumps memory and grows scsi1, on a running VM.
fn planned() -> VmChanges {
    let mut w = Wanted { memory_mib: 4096, ..want() };
    w.disks[0].size_gib = 15;
    diff(&w, &live(true), &Allow::default()).expect("diff")
}

fn config(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, String> {
    let mut c = live(true).config;
    c.remove("digest");
    for (k, v) in pairs {
        match v {
            Some(v) => c.insert(k.to_string(), v.to_string()),
            None => c.remove(*k),
        };
    }
    c
}

#[test]
fn a_fresh_plan_has_everything_to_do() {
    let p = planned();
    let pr = progress(&p, &config(&[]), "d0");
    assert_eq!(pr.config, Step::Todo);
    assert_eq!(pr.resize, p.resize);
    assert_eq!(pr.changed, None);
}

#[test]
fn config_done_with_the_resize_still_to_do() {
    let p = planned();
    let pr = progress(&p, &config(&[("memory", Some("4096"))]), "d1");
    assert_eq!((pr.config, pr.changed.as_deref()), (Step::Done, None));
    assert_eq!(pr.resize.len(), 1);
}

#[test]
fn all_done_leaves_nothing_to_do() {
    let p = planned();
    let c = config(&[("memory", Some("current=4096")), ("scsi1", Some("local-lvm:vm-150-disk-1,size=15G"))]);
    let pr = progress(&p, &c, "d2");
    assert_eq!((pr.config, pr.changed.as_deref()), (Step::Done, None));
    assert!(pr.resize.is_empty());
}

#[test]
fn someone_else_changing_a_touched_key_is_changed() {
    let p = planned();
    let pr = progress(&p, &config(&[("memory", Some("3072"))]), "d1");
    let why = pr.changed.expect("changed");
    assert!(why.contains("memory is 3072 (plan read 2048)") && why.ends_with("plan again"), "{why}");
}

#[test]
fn someone_else_changing_an_untouched_key_is_changed() {
    let p = planned();
    let pr = progress(&p, &config(&[("memory", Some("4096")), ("cores", Some("8"))]), "d1");
    assert!(pr.changed.expect("changed").contains("the plan does not touch"));
}

#[test]
fn a_new_digest_with_nothing_different_in_effect_is_changed() {
    let p = planned();
    let pr = progress(&p, &config(&[]), "d9");
    assert!(pr.changed.expect("changed").contains("digest"));
}

#[test]
fn a_resize_to_another_size_is_changed() {
    let p = planned();
    let c = config(&[("memory", Some("4096")), ("scsi1", Some("local-lvm:vm-150-disk-1,size=12G"))]);
    assert!(progress(&p, &c, "d3").changed.expect("changed").contains("scsi1 is 12 GiB"));
}

#[test]
fn a_plan_without_config_writes_has_its_config_step_done() {
    let mut w = want();
    w.disks[0].size_gib = 15;
    let p = diff(&w, &live(true), &Allow::default()).expect("diff");
    assert_eq!(progress(&p, &config(&[]), "d0").config, Step::Done);
    let pr = progress(&p, &config(&[("scsi1", Some("local-lvm:vm-150-disk-1,size=15G"))]), "d1");
    assert_eq!((pr.config, pr.resize.len(), pr.changed), (Step::Done, 0, None));
}

#[test]
fn a_new_nic_and_disk_match_what_pve_made_of_them() {
    let mut w = want();
    w.nics.push(super::change::WantedNic { slot: "net1".into(), bridge: "vmbr1".into(), vlan: None });
    w.disks.push(super::change::WantedDisk { slot: "scsi2".into(), storage: "local-lvm".into(), size_gib: 8 });
    let p = diff(&w, &live(true), &Allow::default()).expect("diff");
    let c = config(&[
        ("net1", Some("bridge=vmbr1,virtio=BC:24:11:00:00:09")),
        ("scsi2", Some("local-lvm:vm-150-disk-2,size=8G")),
    ]);
    let pr = progress(&p, &c, "d1");
    assert_eq!((pr.config, pr.changed.as_deref()), (Step::Done, None));
    assert!(outstanding(&p, &c, &[]).is_empty());
}

#[test]
fn a_removed_disk_left_as_unused_is_done() {
    let l = {
        let mut l = live(true);
        l.config.insert("scsi2".into(), "local-lvm:vm-150-disk-2,size=4G".into());
        l
    };
    let p = diff(&want(), &l, &Allow { disk_removal: true, ..Allow::default() }).expect("diff");
    let c = config(&[("unused0", Some("local-lvm:vm-150-disk-2"))]);
    let pr = progress(&p, &c, "d1");
    assert_eq!((pr.config, pr.changed.as_deref()), (Step::Done, None));
}

#[test]
fn a_change_pve_dropped_is_outstanding_and_a_pending_one_is_not() {
    let p = planned();
    let c = config(&[("scsi1", Some("local-lvm:vm-150-disk-1,size=15G"))]);
    assert_eq!(outstanding(&p, &c, &[]), ["memory is 2048, the plan wanted 4096"]);
    let pending = [PendingEntry {
        key: "memory".into(),
        value: Some("2048".into()),
        pending: Some("4096".into()),
        delete: false,
    }];
    assert!(outstanding(&p, &c, &pending).is_empty());
    assert!(needs_cold_start(&pending));
    assert!(!needs_cold_start(&[PendingEntry {
        key: "memory".into(),
        value: Some("4096".into()),
        pending: None,
        delete: false
    }]));
}

#[test]
fn a_plan_with_no_operations_is_done_whatever_the_digest() {
    let p = diff(&want(), &live(true), &Allow::default()).expect("diff");
    let pr = progress(&p, &config(&[("cores", Some("8"))]), "d9");
    assert_eq!((pr.config, pr.resize.len(), pr.changed), (Step::Done, 0, None));
}

/// A plan that moves scsi1 from local-lvm to ceph and grows it to 15 GiB.
fn planned_move() -> VmChanges {
    let mut w = want();
    w.disks[0].storage = "ceph".into();
    w.disks[0].size_gib = 15;
    diff(&w, &live(true), &Allow { disk_move: true, ..Allow::default() }).expect("diff")
}

#[test]
fn a_move_is_to_do_while_the_drive_holds_its_plan_time_volume() {
    let p = planned_move();
    let fresh = progress(&p, &config(&[]), "d0");
    assert_eq!((fresh.config, fresh.changed.as_deref()), (Step::Done, None));
    assert_eq!((fresh.moves.len(), fresh.resize.len()), (1, 1));
    // Another digest with nothing of the plan in effect: someone else wrote.
    let other = progress(&p, &config(&[("onboot", Some("0"))]), "d1");
    assert!(other.changed.is_some(), "{other:?}");
}

#[test]
fn a_moved_drive_on_its_target_storage_is_done_whatever_volume_pve_chose() {
    // clone_disk: a new volume name, `format` dropped, the source as unused0.
    let p = planned_move();
    let moved = config(&[("scsi1", Some("ceph:vm-150-disk-3,size=10G")), ("unused0", Some("local-lvm:vm-150-disk-1"))]);
    let pr = progress(&p, &moved, "d1");
    assert_eq!((pr.changed.as_deref(), pr.moves.len(), pr.resize.len()), (None, 0, 1), "{pr:?}");
    let grown = config(&[("scsi1", Some("ceph:vm-150-disk-3,size=15G")), ("unused0", Some("local-lvm:vm-150-disk-1"))]);
    let pr = progress(&p, &grown, "d2");
    assert_eq!((pr.changed.as_deref(), pr.moves.len(), pr.resize.len()), (None, 0, 0), "{pr:?}");
    assert!(outstanding(&p, &grown, &[]).is_empty());
}

#[test]
fn a_drive_moved_elsewhere_or_replaced_is_changed_since_the_plan() {
    let p = planned_move();
    for value in ["zfs:vm-150-disk-3,size=10G", "local-lvm:vm-150-disk-7,size=10G"] {
        let pr = progress(&p, &config(&[("scsi1", Some(value))]), "d1");
        let why = pr.changed.unwrap_or_default();
        assert!(why.contains("scsi1 is") && why.ends_with("plan again"), "{value}: {why}");
    }
}

#[test]
fn a_move_not_in_effect_after_apply_is_outstanding() {
    let p = planned_move();
    let missing = outstanding(&p, &config(&[("scsi1", Some("local-lvm:vm-150-disk-1,size=15G"))]), &[]);
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(missing[0].contains("the plan moves it to ceph"), "{}", missing[0]);
}
