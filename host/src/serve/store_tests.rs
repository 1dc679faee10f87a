use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::serve::event::Trigger;

fn vm(id: u64) -> StagedVm {
    StagedVm {
        vm_id: id,
        name: format!("vm-{id}"),
        timestamp: "2026-12-01T19:13:52.876454+00:00".into(),
        request_id: Some(format!("req-{id}")),
        user: Some("admin".into()),
        trigger: Trigger::Staged,
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

fn accepted(a: Admission) -> Event {
    match a {
        Admission::Accepted(e) => *e,
        other => panic!("accepted expected, got {other:?}"),
    }
}

#[test]
fn accepted_events_survive_a_restart_and_resume_in_the_order_they_came() {
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = dir.path().join("serve");
    rt().block_on(async {
        let (store, resume) = EventStore::open(&serve, 100).expect("open");
        assert!(resume.is_empty());
        for id in [3, 1, 2] {
            accepted(store.admit("netbox", &vm(id), format!("digest-{id}")).await.expect("admit"));
        }
        store.started(0).await.expect("started");
        store.finished(2, true, Some("run-2".into()), "created".into()).await.expect("finished");
    });
    let (store, resume) = EventStore::open(&serve, 100).expect("reopen");
    let order: Vec<(u64, u64, EventState)> = resume.iter().map(|e| (e.seq, e.vm_id, e.state)).collect();
    assert_eq!(order, vec![(0, 3, EventState::Running), (1, 1, EventState::Accepted)], "the unfinished, oldest first");
    assert_eq!(resume[0].attempts, 1);
    let done = store.events().into_iter().find(|e| e.seq == 2).expect("kept");
    assert_eq!((done.state, done.run_id.as_deref()), (EventState::Done, Some("run-2")));
    let meta = std::fs::metadata(serve.join(FILE)).expect("file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(&serve).expect("dir").permissions().mode() & 0o777, 0o700);
}

#[test]
fn a_vm_in_flight_or_a_body_seen_before_gets_no_second_event() {
    let dir = tempfile::tempdir().expect("tempdir");
    rt().block_on(async {
        let (store, _) = EventStore::open(&dir.path().join("serve"), 100).expect("open");
        let first = accepted(store.admit("netbox", &vm(7), "d1".into()).await.expect("admit"));
        assert_eq!(
            store.admit("netbox", &vm(7), "d2".into()).await.expect("admit"),
            Admission::InFlight { seq: first.seq }
        );
        assert_eq!(
            store.admit("netbox", &vm(8), "d1".into()).await.expect("admit"),
            Admission::Duplicate { seq: first.seq }
        );
        // Another source is another NetBox: its VM 7 is another VM.
        accepted(store.admit("netbox-b", &vm(7), "d3".into()).await.expect("admit"));
        store.finished(first.seq, false, None, "failed at `create`".into()).await.expect("finished");
        // The operator sets it to Staged again: a new change, a new run.
        accepted(store.admit("netbox", &vm(7), "d4".into()).await.expect("admit"));
        // The old body replayed is still known.
        assert!(matches!(store.admit("netbox", &vm(7), "d1".into()).await, Ok(Admission::Duplicate { .. })));
    });
}

#[test]
fn a_full_queue_refuses_new_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    rt().block_on(async {
        let (store, _) = EventStore::open(&dir.path().join("serve"), 2).expect("open");
        accepted(store.admit("netbox", &vm(1), "a".into()).await.expect("admit"));
        accepted(store.admit("netbox", &vm(2), "b".into()).await.expect("admit"));
        assert_eq!(store.admit("netbox", &vm(3), "c".into()).await.expect("admit"), Admission::Full { queued: 2 });
        store.finished(0, true, None, "ok".into()).await.expect("finished");
        accepted(store.admit("netbox", &vm(3), "c".into()).await.expect("admit"));
    });
}

#[test]
fn an_event_interrupted_too_often_is_given_up_instead_of_crashing_the_service_in_a_loop() {
    let dir = tempfile::tempdir().expect("tempdir");
    rt().block_on(async {
        let (store, _) = EventStore::open(&dir.path().join("serve"), 10).expect("open");
        accepted(store.admit("netbox", &vm(1), "a".into()).await.expect("admit"));
    });
    for attempt in 1..=MAX_ATTEMPTS {
        let (store, resume) = EventStore::open(&dir.path().join("serve"), 10).expect("reopen");
        assert_eq!(resume.len(), 1, "attempt {attempt} resumes it");
        rt().block_on(store.started(0)).expect("started");
    }
    let (store, resume) = EventStore::open(&dir.path().join("serve"), 10).expect("reopen");
    assert!(resume.is_empty(), "given up");
    let e = &store.events()[0];
    assert_eq!(e.state, EventState::Failed);
    assert!(e.detail.as_deref().unwrap_or_default().contains("interrupted 3 times"), "{e:?}");
    // No longer in flight: a new change to Staged is accepted.
    accepted(rt().block_on(store.admit("netbox", &vm(1), "b".into())).expect("admit"));
}

#[test]
fn a_torn_last_line_is_dropped_and_a_damaged_earlier_line_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    rt().block_on(async {
        let (store, _) = EventStore::open(&dir.path().join("serve"), 10).expect("open");
        accepted(store.admit("netbox", &vm(1), "a".into()).await.expect("admit"));
    });
    let path = dir.path().join("serve").join(FILE);
    let mut text = std::fs::read_to_string(&path).expect("read");
    text.push_str("{\"op\":\"accepted\",\"event\":{\"seq\":1,");
    std::fs::write(&path, &text).expect("write");
    let (_, resume) = EventStore::open(&dir.path().join("serve"), 10).expect("a torn tail is not an error");
    assert_eq!(resume.len(), 1);
    let text = std::fs::read_to_string(&path).expect("read");
    std::fs::write(&path, format!("garbage\n{text}")).expect("write");
    let err = EventStore::open(&dir.path().join("serve"), 10).err().expect("corrupt").to_string();
    assert!(err.contains(&format!("{}:1:", path.display())) && err.contains("damaged"), "{err}");
}

#[test]
fn many_concurrent_admissions_are_all_durable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
    rt.block_on(async {
        let (store, _) = EventStore::open(&dir.path().join("serve"), 10_000).expect("open");
        let store = std::sync::Arc::new(store);
        let tasks: Vec<_> = (0..500)
            .map(|id| {
                let store = store.clone();
                tokio::spawn(
                    async move { accepted(store.admit("netbox", &vm(id), format!("d{id}")).await.expect("admit")) },
                )
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
    });
    let (_, resume) = EventStore::open(&dir.path().join("serve"), 10_000).expect("reopen");
    assert_eq!(resume.len(), 500);
    let mut seqs: Vec<u64> = resume.iter().map(|e| e.seq).collect();
    seqs.dedup();
    assert_eq!(seqs, (0..500).collect::<Vec<_>>(), "every number once, in order");
}
