//! Interop with the system OpenSSH client (when installed): a pinned known_hosts entry,
//! key auth, a command on a guest and a snippet upload to a node through stdin.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

use common::{Api, client_key, guest_addr, start};
use tokio::io::AsyncWriteExt;

async fn ssh(args: &[String], stdin: &[u8]) -> std::process::Output {
    let mut child = tokio::process::Command::new("ssh")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ssh runs");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin).await.expect("stdin written");
    drop(input);
    child.wait_with_output().await.expect("ssh finishes")
}

fn base_args(dir: &std::path::Path, key: &std::path::Path, addr: std::net::SocketAddr, user: &str) -> Vec<String> {
    vec![
        "-F".into(),
        "/dev/null".into(),
        "-i".into(),
        key.display().to_string(),
        "-o".into(),
        format!("UserKnownHostsFile={}", dir.join("known_hosts").display()),
        "-o".into(),
        "StrictHostKeyChecking=yes".into(),
        "-o".into(),
        "BatchMode=yes".into(),
        "-o".into(),
        "ConnectTimeout=20".into(),
        "-p".into(),
        addr.port().to_string(),
        format!("{user}@{}", addr.ip()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openssh_client_uploads_snippets_and_runs_guest_commands_with_pinned_host_keys() {
    if std::process::Command::new("ssh").arg("-V").output().is_err() {
        println!("SKIPPED: no system ssh client installed");
        return;
    }
    let c = start(0.0, |_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = client_key();
    let key_file = dir.path().join("id_ed25519");
    std::fs::write(&key_file, key.to_openssh(russh::keys::ssh_key::LineEnding::LF).unwrap().as_bytes()).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();

    // Node: pin its host key, then upload the snippets through stdin.
    let node = c.node_ssh_addr("pve1").unwrap();
    let node_host_pub = std::fs::read_to_string(c.root().join("nodes/pve1/etc/ssh/ssh_host_ed25519_key.pub")).unwrap();
    let node_key = c.node_ssh_key_path().to_path_buf();
    std::fs::write(dir.path().join("known_hosts"), format!("[{}]:{} {}", node.ip(), node.port(), node_host_pub))
        .unwrap();
    let user = format!("#cloud-config\nhostname: openssh-0\nssh_authorized_keys:\n  - {public}\n");
    let mut args = base_args(dir.path(), &node_key, node, "root");
    args.push("sudo -n tee /var/lib/vz/snippets/os-user.yaml > /dev/null".into());
    let out = ssh(&args, user.as_bytes()).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let net = "version: 2\nethernets:\n  eth0:\n    addresses: [127.77.0.40/8]\n";
    let mut args = base_args(dir.path(), &node_key, node, "root");
    args.push("cat > /var/lib/vz/snippets/os-net.yaml".into());
    assert!(ssh(&args, net.as_bytes()).await.status.success());

    let api = Api::new(&c);
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("name", "openssh-0")]).await;
    api.post(
        "/nodes/pve1/qemu/101/config",
        &[("cicustom", "user=local:snippets/os-user.yaml,network=local:snippets/os-net.yaml")],
    )
    .await;
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/start", &[]).await, "OK");
    let guest = guest_addr(&c, 101).await;

    // An unknown host key is refused under StrictHostKeyChecking...
    let mut args = base_args(dir.path(), &key_file, guest, "debian");
    args.push("true".into());
    let out = ssh(&args, b"").await;
    assert_eq!(out.status.code(), Some(255), "unpinned guest key must be refused");
    // ...and accepted once pinned with ssh-keyscan's view of it.
    let scan = tokio::process::Command::new("ssh-keyscan")
        .args(["-p", &guest.port().to_string(), "-t", "ed25519", &guest.ip().to_string()])
        .output()
        .await;
    let Ok(scan) = scan else {
        println!("SKIPPED rest: no ssh-keyscan");
        return;
    };
    std::fs::write(dir.path().join("known_hosts"), &scan.stdout).unwrap();
    let mut args = base_args(dir.path(), &key_file, guest, "debian");
    args.push("cloud-init status --format=json && hostname".into());
    let out = ssh(&args, b"").await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("\"status\": \"done\"") && stdout.ends_with("openssh-0\n"), "{stdout}");
    let mut args = base_args(dir.path(), &key_file, guest, "debian");
    args.push("no-such-tool".into());
    assert_eq!(ssh(&args, b"").await.status.code(), Some(127));
}

/// A symlink planted among a node's directories is followed as the node would (inside
/// the node: an absolute target is a node path), `realpath -e` prints the node's view,
/// `install` + `mv -T` replace a symlink at the final name, and nothing ever reaches
/// the simulator host's files outside the node's root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_symlinks_resolve_inside_the_node_and_never_reach_the_host() {
    if std::process::Command::new("ssh").arg("-V").output().is_err() {
        println!("SKIPPED: no system ssh client installed");
        return;
    }
    let c = start(0.0, |_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let node = c.node_ssh_addr("pve1").unwrap();
    let node_host_pub = std::fs::read_to_string(c.root().join("nodes/pve1/etc/ssh/ssh_host_ed25519_key.pub")).unwrap();
    std::fs::write(dir.path().join("known_hosts"), format!("[{}]:{} {}", node.ip(), node.port(), node_host_pub))
        .unwrap();
    let key = c.node_ssh_key_path().to_path_buf();
    let root = c.root().join("nodes/pve1");
    let snippets = root.join("var/lib/vz/snippets");
    std::fs::create_dir_all(&snippets).unwrap();
    std::fs::create_dir_all(root.join("var/lib/vz/images")).unwrap();
    // An absolute target: on the node, that is the node's /var/lib/vz/images.
    std::os::unix::fs::symlink("/var/lib/vz/images", snippets.join("evil")).unwrap();
    // A target on the simulator host, outside the node's root.
    let host_dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(host_dir.path(), snippets.join("host")).unwrap();
    let run = |command: &str, stdin: &'static [u8]| {
        let mut args = base_args(dir.path(), &key, node, "root");
        args.push(command.to_string());
        async move { ssh(&args, stdin).await }
    };
    let out = run("realpath -e -- /var/lib/vz/snippets /var/lib/vz/snippets/evil", b"").await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "/var/lib/vz/snippets\n/var/lib/vz/images\n");
    let out = run("realpath -e -- /var/lib/vz/snippets/nope", b"").await;
    assert_eq!(out.status.code(), Some(1), "a missing path fails realpath -e");
    // Through the in-node symlink the write lands where the node would put it...
    let out = run("install -m 600 /dev/stdin /var/lib/vz/snippets/evil/x.tmp && mv -fT /var/lib/vz/snippets/evil/x.tmp /var/lib/vz/snippets/evil/x", b"data").await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(root.join("var/lib/vz/images/x")).unwrap(), b"data");
    // ...and a symlink to the simulator host's files resolves inside the node, where
    // that path is outside the allowed trees (denied) or, for a host temp dir under
    // /tmp, the node's own /tmp where it does not exist: nothing written on the host.
    let host_path = host_dir.path().display().to_string();
    let out = run("tee /var/lib/vz/snippets/host/y > /dev/null", b"data").await;
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Permission denied") || err.contains("No such file or directory"), "{err}");
    assert_eq!(std::fs::read_dir(host_dir.path()).unwrap().count(), 0, "nothing reached {host_path}");
    // A symlink at the final name is replaced by install + mv -T, not written through.
    std::fs::write(root.join("var/lib/vz/images/victim"), b"original").unwrap();
    std::os::unix::fs::symlink("/var/lib/vz/images/victim", snippets.join("vm-user.yaml")).unwrap();
    let out = run("install -m 600 /dev/stdin /var/lib/vz/snippets/vm-user.yaml.tmp.1 && mv -fT /var/lib/vz/snippets/vm-user.yaml.tmp.1 /var/lib/vz/snippets/vm-user.yaml", b"new").await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(root.join("var/lib/vz/images/victim")).unwrap(), b"original");
    assert!(!std::fs::symlink_metadata(snippets.join("vm-user.yaml")).unwrap().file_type().is_symlink());
}

/// `scp -O` (the legacy protocol: `scp -t` on the node) uploads a file into /var/tmp,
/// with `-p` keeping its modification time; a path outside the allowed trees fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_scp_client_uploads_through_the_legacy_scp_sink() {
    if std::process::Command::new("scp").arg("-h").output().is_err() {
        println!("SKIPPED: no system scp client installed");
        return;
    }
    let c = start(0.0, |_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let node = c.node_ssh_addr("pve1").unwrap();
    let node_host_pub = std::fs::read_to_string(c.root().join("nodes/pve1/etc/ssh/ssh_host_ed25519_key.pub")).unwrap();
    std::fs::write(dir.path().join("known_hosts"), format!("[{}]:{} {}", node.ip(), node.port(), node_host_pub))
        .unwrap();
    let src = dir.path().join("haos.qcow2");
    let data: Vec<u8> = (0..(5 << 20) + 17).map(|i| (i % 253) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    let f = std::fs::File::options().write(true).open(&src).unwrap();
    f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000)).unwrap();
    let scp = |dest: String| {
        let args = vec![
            "-O".to_string(),
            "-p".into(),
            "-F".into(),
            "/dev/null".into(),
            "-i".into(),
            c.node_ssh_key_path().display().to_string(),
            "-o".into(),
            format!("UserKnownHostsFile={}", dir.path().join("known_hosts").display()),
            "-o".into(),
            "StrictHostKeyChecking=yes".into(),
            "-o".into(),
            "BatchMode=yes".into(),
            "-P".into(),
            node.port().to_string(),
            src.display().to_string(),
            format!("root@{}:{dest}", node.ip()),
        ];
        async move { tokio::process::Command::new("scp").args(args).output().await.expect("scp runs") }
    };
    let out = scp("/var/tmp/x.qcow2".into()).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written = c.root().join("nodes/pve1/var/tmp/x.qcow2");
    assert_eq!(std::fs::read(&written).unwrap(), data);
    let mtime = std::fs::metadata(&written).unwrap().modified().unwrap();
    assert_eq!(mtime, std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000), "-p keeps the mtime");
    // Into a directory: the file keeps its name.
    let out = scp("/var/lib/vz/import/".into()).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(c.root().join("nodes/pve1/var/lib/vz/import/haos.qcow2")).unwrap(), data);
    let out = scp("/etc/x".into()).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
