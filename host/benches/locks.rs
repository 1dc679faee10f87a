//! Lock acquire/release latency and throughput: the file store in a state
//! directory, and the etcd store against a real local etcd (Debian's
//! etcd-server, started by the bench on loopback). Figures: docs/BENCHMARKS.md.
//!
//! ```sh
//! cargo bench -p cradle --bench locks
//! ```
//!
//! - `locks/<store>/acquire+release`: one run takes a free lock and gives it
//!   back (etcd: lease grant, create-if-absent transaction, keep-alive task
//!   start, fenced delete, lease revoke).
//! - `locks/<store>/8-threads`: eight threads each take and release their own
//!   key 25 times (200 pairs per iteration): throughput under concurrency.

use std::sync::Arc;

use cradle::caps::coordination::{CoordinationBackend, CoordinationConfig};
use cradle::caps::lock::{EtcdLockStore, FsLockStore, Holder, LockStore};
use cradle_testkit::etcd::Etcd;
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};

fn holder(run: &str) -> Holder {
    Holder {
        host: "bench".into(),
        pid: std::process::id(),
        started: "2026-12-03T00:00:00Z".into(),
        run_id: run.into(),
        pid_start_ticks: None,
        version: None,
    }
}

fn pair(store: &dyn LockStore, key: &str, run: &Holder) {
    store.acquire(key, run).expect("acquire");
    store.release(key, &run.run_id).expect("release");
}

fn threads(store: &Arc<dyn LockStore>) {
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let run = holder(&format!("run-{t}"));
                for _ in 0..25 {
                    pair(store.as_ref(), &format!("bench|vm-{t}"), &run);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start();
    let config = CoordinationConfig {
        backend: CoordinationBackend::Etcd,
        endpoints: vec![etcd.url.clone()],
        prefix: Some("bench/".into()),
        ..CoordinationConfig::default()
    };
    let stores: Vec<(&str, Arc<dyn LockStore>)> = vec![
        ("file", Arc::new(FsLockStore::new(dir.path().join("locks")))),
        ("etcd", Arc::new(EtcdLockStore::connect(&config, std::path::Path::new("/")).expect("connect"))),
    ];
    let mut g = c.benchmark_group("locks");
    g.sampling_mode(SamplingMode::Flat).sample_size(30);
    for (name, store) in &stores {
        let run = holder("run-1");
        g.bench_function(format!("{name}/acquire+release"), |b| b.iter(|| pair(store.as_ref(), "bench|vm-0", &run)));
        g.bench_function(format!("{name}/8-threads"), |b| b.iter(|| threads(store)));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
