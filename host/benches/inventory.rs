//! Inventory loading at scale (issue 30): what `cradle provision -i INV
//! --limit test-0 --check` does before it touches a cluster, on an INI
//! inventory of N hosts in one group with `vms_vmid_base` (each host's VMID is
//! the base plus its position in the group), `group_vars/all.yml` as
//! `cradle init` writes it. Figures: docs/BENCHMARKS.md ("Inventory loading").
//!
//! ```sh
//! cargo bench -p cradle --bench inventory
//! ```
//!
//! - `inventory/load+limit-one/N`: read and reconcile the files, select
//!   `test-0`, resolve it and check every other host's VMID and name for
//!   collisions (invariant 6, so `--limit` cannot hide a duplicate).
//! - `inventory/load+all/N`: the same selecting every host (`provision`
//!   without `--limit`, before the runs start).

use std::path::Path;

use cradle::inventory::{Inventory, ResolveOptions, resolve_selected};
use criterion::{BenchmarkId, Criterion, SamplingMode, criterion_group, criterion_main};

const ALL_YML: &str = "global_os:\n  debian12:\n    template: debian-12-cloud\n    storage: local-lvm\n    cores: 2\n    \
                       memory: 2048\nvms_os: debian12\nvms_config:\n  disk: 12\n  network:\n    nic0:\n      bridge: vmbr0\n      \
                       ip: \"{{ ansible_host }}/16\"\n      gateway: 10.20.0.1\n";

/// `dir/hosts.ini` with `n` hosts in group `test`, and `group_vars/all.yml`.
fn write_inventory(dir: &Path, n: usize) {
    let mut ini = String::from("[test]\n");
    for i in 0..n {
        ini.push_str(&format!("test-{i} ansible_host=10.20.{}.{}\n", i / 250, i % 250 + 2));
    }
    ini.push_str("[test:vars]\nvms_vmid_base=100000\ntarget_node=pve1\nansible_user=cradle\n");
    std::fs::write(dir.join("hosts.ini"), ini).expect("hosts.ini");
    std::fs::create_dir_all(dir.join("group_vars")).expect("group_vars");
    std::fs::write(dir.join("group_vars/all.yml"), ALL_YML).expect("all.yml");
}

fn load_and_resolve(dir: &Path, limit: Option<&str>) -> usize {
    let inv = Inventory::load(&dir.join("hosts.ini")).expect("inventory");
    let hosts = inv.select(limit).expect("select");
    let opts = ResolveOptions { environment: "test".into(), ..ResolveOptions::default() };
    resolve_selected(&inv, &hosts, &opts).expect("resolve").len()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("inventory");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    for n in [3_000, 10_000] {
        let dir = tempfile::tempdir().expect("tmp");
        write_inventory(dir.path(), n);
        assert_eq!(load_and_resolve(dir.path(), Some("test-0")), 1);
        assert_eq!(load_and_resolve(dir.path(), None), n);
        group.bench_with_input(BenchmarkId::new("load+limit-one", n), &n, |b, _| {
            b.iter(|| load_and_resolve(dir.path(), Some("test-0")));
        });
        group.bench_with_input(BenchmarkId::new("load+all", n), &n, |b, _| {
            b.iter(|| load_and_resolve(dir.path(), None));
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
