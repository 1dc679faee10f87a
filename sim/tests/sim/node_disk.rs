//! Node filesystems over SSH: uploads stream into /var/tmp, /tmp and the storages,
//! the root filesystem and the /tmp tmpfs have a capacity that `df` reports and a full
//! one fails a write with `No space left on device`, a dropped upload leaves its
//! partial file, and the real `scp -O` uploads through the legacy SCP sink.

use crate::common;

use std::time::Duration;

use common::{ssh_connect, ssh_exec, start};
use sha2::Digest;

fn node_key(c: &cradle_sim::RunningCluster) -> russh::keys::PrivateKey {
    russh::keys::PrivateKey::from_openssh(std::fs::read_to_string(c.node_ssh_key_path()).unwrap()).unwrap()
}

async fn node_run(c: &cradle_sim::RunningCluster, cmd: &str, stdin: &[u8]) -> common::Exec {
    ssh_exec(c.node_ssh_addr("pve1").unwrap(), "root", &node_key(c), cmd, stdin).await.unwrap()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_to_var_tmp_and_tmp_are_reported_by_df_stat_findmnt_and_sha256sum() {
    let c = start(0.0, |cfg| {
        cfg.node_disk.root_bytes = 64 << 20;
        cfg.node_disk.tmp_bytes = 8 << 20;
    })
    .await;
    let data = pattern(3 << 20);
    let out = node_run(&c, "sudo -n install -m 0644 /dev/stdin /var/tmp/haos.qcow2", &data).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = node_run(&c, "tee /tmp/t.bin", b"0123456789").await;
    assert_eq!((out.code, out.stdout.as_str()), (Some(0), "0123456789"), "tee echoes without a redirection");
    let out = node_run(&c, "stat -c %s /var/tmp/haos.qcow2", b"").await;
    assert_eq!(out.stdout, format!("{}\n", 3 << 20));
    let out = node_run(&c, "sha256sum /var/tmp/haos.qcow2", b"").await;
    assert_eq!(out.stdout, format!("{}  /var/tmp/haos.qcow2\n", hex::encode(sha2::Sha256::digest(&data))));
    let out =
        node_run(&c, "findmnt -n -o FSTYPE --target /var/tmp/haos.qcow2 && findmnt -n -o FSTYPE --target /tmp", b"")
            .await;
    assert_eq!(out.stdout, "ext4\ntmpfs\n");

    // The root filesystem holds the upload and the node's host keys; /tmp its file.
    let host_keys: u64 = ["ssh_host_ed25519_key", "ssh_host_ed25519_key.pub"]
        .iter()
        .map(|f| std::fs::metadata(c.root().join("nodes/pve1/etc/ssh").join(f)).unwrap().len())
        .sum();
    let used = (3u64 << 20) + host_keys;
    let avail = (64u64 << 20) - used;
    let out = node_run(&c, "df -B1 --output=avail /var/tmp/haos.qcow2", b"").await;
    assert_eq!(out.stdout, format!("{:>w$}\n{avail}\n", "Avail", w = avail.to_string().len()));
    let out = node_run(&c, "df -P -B1 /var/lib/vz", b"").await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    assert!(lines[0].starts_with("Filesystem ") && lines[0].ends_with(" Capacity Mounted on"), "{}", lines[0]);
    let cols: Vec<&str> = lines[1].split_whitespace().collect();
    let pct = (used * 100).div_ceil(64 << 20);
    assert_eq!(
        cols,
        [
            "/dev/mapper/pve-root",
            &(64u64 << 20).to_string(),
            &used.to_string(),
            &avail.to_string(),
            &format!("{pct}%"),
            "/"
        ]
    );
    let out = node_run(&c, "df -P -B1 /tmp/t.bin", b"").await;
    let cols: Vec<String> = out.stdout.lines().nth(1).unwrap().split_whitespace().map(String::from).collect();
    assert_eq!(cols, ["tmpfs", &(8u64 << 20).to_string(), "10", &((8u64 << 20) - 10).to_string(), "1%", "/tmp"]);

    // Moving and removing frees and moves the space; test -s sees the size.
    let out = node_run(&c, "mv -f /var/tmp/haos.qcow2 /var/lib/vz/import/haos.qcow2 && test -s /var/lib/vz/import/haos.qcow2 && rm -f /tmp/t.bin && test -e /tmp/t.bin", b"").await;
    assert_eq!(out.code, Some(1), "{out:?}");
    let out = node_run(&c, "df -B1 --output=avail /tmp", b"").await;
    assert_eq!(out.stdout.lines().nth(1), Some((8u64 << 20).to_string().as_str()));
    let out = node_run(&c, "stat -c %s /var/tmp/nope", b"").await;
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (Some(1), "stat: cannot statx '/var/tmp/nope': No such file or directory\n")
    );
    let out = node_run(&c, "tee /etc/passwd", b"x").await;
    assert!(out.code == Some(1) && out.stderr.contains("Permission denied"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_past_the_capacity_fails_with_no_space_left_and_leaves_the_partial_file() {
    let c = start(0.0, |cfg| cfg.node_disk.tmp_bytes = 1 << 20).await;
    let out = node_run(&c, "cat > /tmp/big && echo never", &pattern(3 << 20)).await;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(out.stderr, "cat: write error: No space left on device\n");
    assert_eq!(out.stdout, "");
    let left = c.root().join("nodes/pve1/tmp/big");
    assert_eq!(std::fs::metadata(&left).unwrap().len(), 1 << 20, "what fitted stays, as on a full disk");
    let out = node_run(&c, "sudo -n tee /tmp/more > /dev/null", b"x").await;
    assert_eq!((out.code, out.stderr.as_str()), (Some(1), "tee: /tmp/more: No space left on device\n"));
    let out = node_run(&c, "df -B1 --output=avail /tmp", b"").await;
    assert_eq!(out.stdout, "Avail\n    0\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_upload_leaves_the_partial_file_under_its_name() {
    let c = start(0.0, |_| {}).await;
    let (session, _) = ssh_connect(c.node_ssh_addr("pve1").unwrap(), "root", &node_key(&c)).await.unwrap();
    let ch = session.channel_open_session().await.unwrap();
    ch.exec(true, "cat > /var/tmp/part.qcow2").await.unwrap();
    ch.data(&pattern(1 << 20)[..]).await.unwrap();
    // Let the data arrive, then drop the connection without EOF.
    let target = c.root().join("nodes/pve1/var/tmp/part.qcow2");
    for _ in 0..500 {
        if std::fs::metadata(&target).is_ok_and(|m| m.len() > 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(ch);
    drop(session);
    let mut len = 0;
    for _ in 0..500 {
        len = std::fs::metadata(&target).map(|m| m.len()).unwrap_or(0);
        if len == 1 << 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(len, 1 << 20, "the partial file stays under its name");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_upload_streams_to_disk() {
    let c = start(0.0, |_| {}).await;
    let data = pattern(48 << 20);
    let t = std::time::Instant::now();
    let out = node_run(&c, "cat > /var/tmp/large.raw", &data).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let secs = t.elapsed().as_secs_f64();
    let len = std::fs::metadata(c.root().join("nodes/pve1/var/tmp/large.raw")).unwrap().len();
    assert_eq!(len, 48 << 20);
    println!("48 MiB upload in {secs:.2} s ({:.0} MiB/s)", 48.0 / secs);
}
