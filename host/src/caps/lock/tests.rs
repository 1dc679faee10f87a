//! The filesystem lock store on a real directory: one winner among competing
//! runs (the losers told who holds it), reacquire and release by the same run,
//! refused foreign releases, owner-only holder files, when a stale lock may be
//! removed (dead pid, reused pid, remote holder), crash-shaped and corrupt lock
//! directories, and refused keys.

use std::fs;
use std::sync::{Arc, Barrier};
use std::time::{Duration, SystemTime};

use super::*;

const KEY: &str = "https://pve.lab:8006/api2/json|test-0";

fn store() -> (tempfile::TempDir, FsLockStore) {
    let tmp = tempfile::tempdir().unwrap();
    let store = FsLockStore::new(tmp.path().join("locks"));
    (tmp, store)
}

fn holder(run_id: &str, pid: u32) -> Holder {
    Holder {
        host: crate::state::host_name(),
        pid,
        started: "2026-11-30T08:15:00Z".into(),
        run_id: run_id.into(),
        pid_start_ticks: None,
        version: None,
    }
}

fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn lock_dir_name_is_readable_safe_and_distinct_per_key() {
    let (_t, s) = store();
    let a = s.lock_dir(KEY);
    let name = a.file_name().unwrap().to_str().unwrap().to_string();
    assert!(name.starts_with("https_pve.lab_8006_api2_json_test-0-"), "{name}");
    assert!(name.ends_with(".lock"));
    assert_ne!(a, s.lock_dir("https://pve.lab:8006/api2/json|test-1"));
    assert_eq!(s.lock_dir("../../etc").parent(), a.parent());
}

#[test]
fn competing_runs_exactly_one_wins_and_every_loser_is_told_who_holds_it() {
    let (_t, s) = store();
    let s = Arc::new(s);
    let runs: Vec<String> = (0..8).map(|i| format!("run-{i}")).collect();
    let barrier = Arc::new(Barrier::new(runs.len()));
    let handles: Vec<_> = runs
        .into_iter()
        .map(|run| {
            let (s, barrier) = (Arc::clone(&s), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let result = s.acquire(KEY, &holder(&run, std::process::id()));
                (run, result)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let winners: Vec<&String> = results.iter().filter(|(_, r)| r.is_ok()).map(|(run, _)| run).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner = winners[0];
    let pid = std::process::id().to_string();
    for (_, result) in results.iter().filter(|(_, r)| r.is_err()) {
        let err = result.as_ref().unwrap_err();
        assert!(matches!(err, LockError::Held { holder, .. } if &holder.run_id == winner), "{err}");
        let msg = err.to_string();
        assert!(msg.contains(&format!("run {winner} ")) && msg.contains(&pid), "{msg}");
        assert!(msg.contains("2026-11-30T08:15:00Z") && msg.contains("cradle unlock test-0"));
    }
}

#[test]
fn same_run_reacquires_and_releases_then_another_run_can_take_it() {
    let (_t, s) = store();
    let h = holder("run-a", 1);
    assert_eq!(s.acquire(KEY, &h).unwrap(), Acquired { reentrant: false, fence: None });
    assert_eq!(s.acquire(KEY, &h).unwrap(), Acquired { reentrant: true, fence: None });
    assert_eq!(s.holder(KEY).unwrap(), Some(h));
    s.release(KEY, "run-a").unwrap();
    assert_eq!(s.holder(KEY).unwrap(), None);
    s.release(KEY, "run-a").unwrap();
    assert!(!s.acquire(KEY, &holder("run-b", 2)).unwrap().reentrant);
}

#[test]
fn release_by_a_run_that_does_not_hold_the_lock_is_refused() {
    let (_t, s) = store();
    s.acquire(KEY, &holder("run-a", 1)).unwrap();
    let err = s.release(KEY, "run-b").unwrap_err();
    assert!(matches!(err, LockError::NotHolder { .. }), "{err}");
    assert_eq!(s.holder(KEY).unwrap().unwrap().run_id, "run-a");
}

#[test]
fn holder_file_is_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let (_t, s) = store();
    s.acquire(KEY, &holder("run-a", 1)).unwrap();
    let dir = s.lock_dir(KEY);
    let mode = |p: &std::path::Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.join("holder.json")), 0o600);
    assert_eq!(mode(&dir), 0o700);
}

#[test]
fn stale_removal_is_refused_while_the_holder_lives_even_if_the_caller_says_gone() {
    let (_t, s) = store();
    let me = Holder::current("run-live");
    s.acquire(KEY, &me).unwrap();
    let err = s.remove_stale(KEY, &|_| Liveness::Gone).unwrap_err();
    assert!(err.to_string().contains("still running on this host"), "{err}");
    assert_eq!(s.holder(KEY).unwrap(), Some(me));
}

#[test]
fn stale_removal_succeeds_for_a_dead_local_pid() {
    let (_t, s) = store();
    let dead = holder("run-dead", dead_pid());
    s.acquire(KEY, &dead).unwrap();
    let removed = s.remove_stale(KEY, &|_| Liveness::Unknown).unwrap();
    assert_eq!(removed, Removal::Removed { holder: Some(dead) });
    assert_eq!(s.holder(KEY).unwrap(), None);
    assert_eq!(s.remove_stale(KEY, &local_liveness).unwrap(), Removal::NotLocked);
}

#[test]
fn a_reused_pid_does_not_keep_a_stale_lock() {
    let (_t, s) = store();
    let mut reused = Holder::current("run-old");
    reused.pid_start_ticks = reused.pid_start_ticks.map(|t| t + 1);
    s.acquire(KEY, &reused).unwrap();
    assert!(s.remove_stale(KEY, &local_liveness).is_ok());
}

#[test]
fn remote_holder_is_removed_only_when_the_caller_confirms_it_is_gone() {
    let (_t, s) = store();
    let mut remote = holder("run-remote", 4242);
    remote.host = "other-node.invalid".into();
    s.acquire(KEY, &remote).unwrap();
    let err = s.remove_stale(KEY, &local_liveness).unwrap_err();
    assert!(err.to_string().contains("check on other-node.invalid that pid 4242"), "{err}");
    assert!(s.holder(KEY).unwrap().is_some());
    s.remove_stale(KEY, &|_| Liveness::Gone).unwrap();
    assert_eq!(s.holder(KEY).unwrap(), None);
}

#[test]
fn crash_shaped_lock_dir_is_held_by_an_unknown_holder_never_taken() {
    let (_t, s) = store();
    let dir = s.lock_dir(KEY);
    crate::state::create_private_dir(&dir).unwrap();
    // Older than acquire's wait for a racing winner, younger than the removal grace.
    let recent = SystemTime::now() - Duration::from_secs(10);
    fs::File::open(&dir).unwrap().set_modified(recent).unwrap();
    let err = s.acquire(KEY, &holder("run-a", 1)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, LockError::UnknownHolder { .. }), "{err}");
    assert!(msg.contains("no holder.json") && msg.contains("cradle unlock test-0"), "{msg}");
    assert!(matches!(s.holder(KEY), Err(LockError::UnknownHolder { .. })));
    assert!(matches!(s.release(KEY, "run-a"), Err(LockError::UnknownHolder { .. })));
    // Young: it may be a run between mkdir and writing holder.json.
    assert!(matches!(s.remove_stale(KEY, &|_| Liveness::Gone), Err(LockError::NotStale { .. })));
    let old = SystemTime::now() - Duration::from_secs(3600);
    fs::File::open(&dir).unwrap().set_modified(old).unwrap();
    let removed = s.remove_stale(KEY, &|_| Liveness::Unknown).unwrap();
    assert_eq!(removed, Removal::Removed { holder: None });
    assert!(s.acquire(KEY, &holder("run-a", 1)).is_ok());
}

#[test]
fn corrupt_holder_file_is_an_error_naming_it_not_a_free_lock() {
    let (_t, s) = store();
    let dir = s.lock_dir(KEY);
    crate::state::create_private_dir(&dir).unwrap();
    fs::write(dir.join("holder.json"), "{not json").unwrap();
    let err = s.acquire(KEY, &holder("run-a", 1)).unwrap_err().to_string();
    assert!(err.contains("holder.json is corrupt"), "{err}");
}

#[test]
fn bad_keys_are_refused() {
    let (_t, s) = store();
    assert!(matches!(s.acquire("", &holder("r", 1)), Err(LockError::InvalidKey { .. })));
    assert!(matches!(s.holder("a\nb"), Err(LockError::InvalidKey { .. })));
}

#[test]
fn acquire_takes_back_a_lock_whose_local_holder_is_dead_and_names_it() {
    let (_t, s) = store();
    let dead = holder("run-dead", dead_pid());
    s.acquire(KEY, &dead).unwrap();
    let me = Holder::current("run-new");
    let taken = acquire_taking_back(&s, KEY, &me).unwrap();
    assert_eq!(taken.took_back, Some(dead), "the caller is told whose lock it took");
    assert!(!taken.acquired.reentrant);
    assert_eq!(s.holder(KEY).unwrap().map(|h| h.run_id), Some("run-new".into()));
    // Held now by a live run: nobody takes it back.
    let err = acquire_taking_back(&s, KEY, &Holder::current("run-other")).unwrap_err();
    assert!(matches!(err, LockError::Held { .. }), "{err}");
    assert!(err.to_string().contains("run run-new"), "the message names the holder: {err}");
}

#[test]
fn acquire_takes_back_a_reused_pids_lock_but_never_a_remote_holders() {
    let (_t, s) = store();
    // A pid that now belongs to another process (start time differs) is gone.
    let mut reused = Holder::current("run-old");
    reused.pid_start_ticks = reused.pid_start_ticks.map(|t| t + 1);
    s.acquire(KEY, &reused).unwrap();
    let taken = acquire_taking_back(&s, KEY, &holder("run-a", std::process::id())).unwrap();
    assert_eq!(taken.took_back.map(|h| h.run_id), Some("run-old".into()));
    s.release(KEY, "run-a").unwrap();
    // Another host's holder cannot be told from here: it keeps the lock and
    // the message still points to `cradle unlock`.
    let mut remote = holder("run-remote", dead_pid());
    remote.host = "other-node.invalid".into();
    s.acquire(KEY, &remote).unwrap();
    let err = acquire_taking_back(&s, KEY, &holder("run-b", std::process::id())).unwrap_err();
    assert!(err.to_string().contains("cradle unlock test-0"), "{err}");
    assert_eq!(s.holder(KEY).unwrap().map(|h| h.run_id), Some("run-remote".into()));
}
