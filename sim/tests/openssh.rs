//! Interop with the system OpenSSH client (when installed): a pinned known_hosts entry,
//! key auth, a command on a guest and a snippet upload to a node through stdin.

mod common;

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
