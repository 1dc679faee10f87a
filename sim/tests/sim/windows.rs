//! Windows installed from ISO: Setup runs unattended only when an attached ISO carries
//! `autounattend.xml` in its root, takes `timings.windows_install`, and then the guest
//! agent reports Windows — and the OpenSSH server the answer file installs answers;
//! CD-ROM media changes on a running VM.

use std::time::Duration;

use base64::Engine as _;
use serde_json::json;

use crate::common;

use common::{Api, client_key, guest_addr, ssh_exec, start};

/// Plant `win.iso` (no answer file) and, made by the real genisoimage, `answer.iso`
/// holding `Autounattend.xml`. `false` when genisoimage is missing (test skipped).
fn plant_isos(c: &cradle_sim::RunningCluster) -> bool {
    let iso_dir = c.node_path("pve1", "/var/lib/vz/template/iso");
    std::fs::write(iso_dir.join("win.iso"), vec![0u8; 64 * 1024]).unwrap();
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("Autounattend.xml"), b"<unattend/>").unwrap();
    let status = std::process::Command::new("genisoimage")
        .args(["-quiet", "-J", "-R", "-o"])
        .arg(iso_dir.join("answer.iso"))
        .arg(src.path())
        .status();
    match status {
        Ok(s) => s.success(),
        Err(e) => {
            eprintln!("skipping: genisoimage not available ({e})");
            false
        }
    }
}

/// Plant `win.iso` and `answer.iso` (genisoimage) whose `autounattend.xml` is `text`.
fn plant_answer(c: &cradle_sim::RunningCluster, text: &str) -> bool {
    let iso_dir = c.node_path("pve1", "/var/lib/vz/template/iso");
    std::fs::write(iso_dir.join("win.iso"), vec![0u8; 64 * 1024]).unwrap();
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("autounattend.xml"), text).unwrap();
    let status = std::process::Command::new("genisoimage")
        .args(["-quiet", "-J", "-R", "-o"])
        .arg(iso_dir.join("answer.iso"))
        .arg(src.path())
        .status();
    status.is_ok_and(|s| s.success())
}

/// The ed25519 host key `ssh-keyscan` reads at `addr` (`None`: nothing answered).
async fn keyscan(addr: std::net::SocketAddr) -> Option<String> {
    let out = tokio::process::Command::new("ssh-keyscan")
        .args(["-T", "5", "-t", "ed25519", "-p", &addr.port().to_string(), &addr.ip().to_string()])
        .output()
        .await
        .expect("ssh-keyscan runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().find(|l| !l.starts_with('#')).and_then(|l| l.split_once(' ')).map(|(_, key)| key.trim().to_string())
}

async fn create_win(api: &Api, answer: bool) {
    let mut form = vec![
        ("vmid", "400"),
        ("name", "win1"),
        ("agent", "1"),
        ("ostype", "win11"),
        ("scsi0", "local-lvm:32"),
        ("ide2", "local:iso/win.iso,media=cdrom"),
    ];
    if answer {
        form.push(("ide0", "local:iso/answer.iso,media=cdrom"));
    }
    let st = api.wait_task(api.post("/nodes/pve1/qemu", &form).await.as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
}

async fn agent(api: &Api, cmd: &str) -> (u16, serde_json::Value) {
    let path = format!("/nodes/pve1/qemu/400/agent/{cmd}");
    api.call(if cmd == "ping" { "POST" } else { "GET" }, &path, &[]).await
}

async fn wait_agent(api: &Api) -> bool {
    for _ in 0..500 {
        if agent(api, "ping").await.0 == 200 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

const NOT_RUNNING: Option<&str> = Some("QEMU guest agent is not running\n");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_iso_installs_windows_after_windows_install_and_later_boots_need_no_iso() {
    let c = start(0.05, |cfg| {
        cfg.timings.windows_install = Duration::from_secs(20);
        cfg.timings.boot_ssh = Duration::from_secs(2);
    })
    .await;
    let api = Api::new(&c);
    if !plant_isos(&c) {
        return;
    }
    create_win(&api, true).await;
    let cfg = api.get("/nodes/pve1/qemu/400/config").await;
    assert!(cfg["ide0"].as_str().unwrap().starts_with("local:iso/answer.iso,media=cdrom,size="), "{cfg}");
    assert_eq!(api.run("/nodes/pve1/qemu/400/status/start", &[]).await, "OK");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, b) = agent(&api, "ping").await;
    assert_eq!((s, b["message"].as_str()), (500, NOT_RUNNING), "Setup has no agent");
    assert!(wait_agent(&api).await, "the agent answers once Setup finished (1 s here)");
    let (s, b) = agent(&api, "get-osinfo").await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b["data"],
        json!({"result": {"id": "mswindows", "name": "Microsoft Windows",
            "pretty-name": "Microsoft Windows Server 2022 Standard",
            "version": "Microsoft Windows Server 2022", "version-id": "2022",
            "kernel-release": "20348", "kernel-version": "10.0", "machine": "x86_64"}})
    );
    assert_eq!(agent(&api, "get-host-name").await.1["data"]["result"]["host-name"], "win1");

    // Installed: with the ISOs gone the disk boots Windows, the agent after boot_ssh.
    assert_eq!(api.run("/nodes/pve1/qemu/400/status/stop", &[]).await, "OK");
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/400/config", &[("delete", "ide0,ide2")]).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(api.run("/nodes/pve1/qemu/400/status/start", &[]).await, "OK");
    assert!(wait_agent(&api).await);
    assert_eq!(agent(&api, "get-osinfo").await.1["data"]["result"]["id"], "mswindows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_answer_iso_setup_never_finishes_and_the_agent_never_answers() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    if !plant_isos(&c) {
        return;
    }
    create_win(&api, false).await;
    assert_eq!(api.run("/nodes/pve1/qemu/400/status/start", &[]).await, "OK");
    for cmd in ["ping", "get-osinfo", "get-host-name"] {
        let (s, b) = agent(&api, cmd).await;
        assert_eq!((s, b["message"].as_str()), (500, NOT_RUNNING), "{cmd}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_setup_loses_the_install() {
    let c = start(0.05, |cfg| {
        cfg.timings.windows_install = Duration::from_secs(40);
        cfg.timings.boot_ssh = Duration::from_secs(1);
    })
    .await;
    let api = Api::new(&c);
    if !plant_isos(&c) {
        return;
    }
    create_win(&api, true).await;
    assert_eq!(api.run("/nodes/pve1/qemu/400/status/start", &[]).await, "OK");
    assert_eq!(api.run("/nodes/pve1/qemu/400/status/stop", &[]).await, "OK");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // Not installed: without the ISOs the disk is not Windows (the simulator then
    // boots it as the appliance image it assumes a non-Windows disk to hold).
    api.call("PUT", "/nodes/pve1/qemu/400/config", &[("delete", "ide0,ide2")]).await;
    assert_eq!(api.run("/nodes/pve1/qemu/400/status/start", &[]).await, "OK");
    assert!(wait_agent(&api).await);
    assert_eq!(agent(&api, "get-osinfo").await.1["data"]["result"]["id"], "debian");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ejecting_a_cdrom_applies_live_while_removing_the_drive_stays_pending() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    std::fs::write(c.node_path("pve1", "/var/lib/vz/template/iso/win.iso"), vec![0u8; 4096]).unwrap();
    let (s, b) = api
        .call("POST", "/nodes/pve1/qemu", &[("vmid", "401"), ("scsi0", "local-lvm:4"), ("ide2", "local:iso/win.iso")])
        .await;
    assert_eq!((s, b["errors"]["ide2"].as_str()), (400, Some("explicit 'media=cdrom' is required for iso images")));
    let form = [
        ("vmid", "401"),
        ("scsi0", "local-lvm:4"),
        ("ide2", "local:iso/win.iso,media=cdrom"),
        ("ide3", "none,media=cdrom"),
    ];
    api.wait_task(api.post("/nodes/pve1/qemu", &form).await.as_str().unwrap()).await;
    assert_eq!(api.run("/nodes/pve1/qemu/401/status/start", &[]).await, "OK");
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/401/config", &[("ide3", "local:iso/win.iso")]).await;
    assert_eq!((s, b["errors"]["ide3"].as_str()), (400, Some("explicit 'media=cdrom' is required for iso images")));
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/401/config", &[("ide2", "none,media=cdrom")]).await;
    assert_eq!(s, 200, "{b}");
    let current = api.call("GET", "/nodes/pve1/qemu/401/config", &[("current", "1")]).await.1;
    assert_eq!(current["data"]["ide2"], "none,media=cdrom", "ejected live");
    let (s, _) = api.call("PUT", "/nodes/pve1/qemu/401/config", &[("ide3", "local:iso/win.iso,media=cdrom")]).await;
    assert_eq!(s, 200);
    let current = api.call("GET", "/nodes/pve1/qemu/401/config", &[("current", "1")]).await.1;
    assert_eq!(current["data"]["ide3"], "local:iso/win.iso,media=cdrom,size=4K", "inserted live");
    let (s, _) = api.call("PUT", "/nodes/pve1/qemu/401/config", &[("delete", "ide2")]).await;
    assert_eq!(s, 200);
    let pending = api.get("/nodes/pve1/qemu/401/pending").await;
    let ide2 = pending.as_array().unwrap().iter().find(|e| e["key"] == "ide2").unwrap().clone();
    assert_eq!(ide2["delete"], 1, "{ide2}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linux_appliance_reports_debian_through_get_osinfo() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    let form = [("vmid", "400"), ("name", "haos"), ("scsi0", "local-lvm:4"), ("agent", "1")];
    api.wait_task(api.post("/nodes/pve1/qemu", &form).await.as_str().unwrap()).await;
    assert_eq!(api.run("/nodes/pve1/qemu/400/status/start", &[]).await, "OK");
    let (s, b) = agent(&api, "get-osinfo").await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["data"]["result"]["id"], "debian");
    assert_eq!(b["data"]["result"]["pretty-name"], "Debian GNU/Linux 12 (bookworm)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_openssh_answers_only_once_setup_finished_with_the_answer_files_address_and_host_key() {
    let c = start(0.05, |cfg| {
        cfg.timings.windows_install = Duration::from_secs(40);
        cfg.timings.boot_ssh = Duration::from_secs(1);
    })
    .await;
    let api = Api::new(&c);
    let key = russh::keys::PrivateKey::from(russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&[7; 32]));
    let private = key.to_openssh(russh::keys::ssh_key::LineEnding::LF).unwrap().to_string();
    let public = key.public_key().to_openssh().unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&private);
    let answer = format!(
        r#"<unattend xmlns="urn:schemas-microsoft-com:unattend"><settings pass="specialize">
<component name="Microsoft-Windows-TCPIP"><Interfaces><Interface><Identifier>Ethernet</Identifier>
<Ipv4Settings><DhcpEnabled>false</DhcpEnabled></Ipv4Settings>
<UnicastIpAddresses><IpAddress wcm:action="add" wcm:keyValue="1">127.54.9.11/24</IpAddress></UnicastIpAddresses>
</Interface></Interfaces></component></settings><settings pass="oobeSystem"><FirstLogonCommands>
<SynchronousCommand><CommandLine>powershell -Command "Add-WindowsCapability -Online -Name OpenSSH.Server~~~~0.0.1.0"</CommandLine></SynchronousCommand>
<SynchronousCommand><CommandLine>powershell -Command "[IO.File]::WriteAllBytes('C:\ProgramData\ssh\ssh_host_ed25519_key', [Convert]::FromBase64String('{b64}'))"</CommandLine></SynchronousCommand>
</FirstLogonCommands></settings></unattend>"#
    );
    if !plant_answer(&c, &answer) {
        eprintln!("skipping: genisoimage not available");
        return;
    }
    create_win(&api, true).await;
    assert_eq!(api.run("/nodes/pve1/qemu/400/status/start", &[]).await, "OK");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.guest_ssh_addr(400), None, "Setup runs no sshd (past boot_ssh, before windows_install)");
    let addr = guest_addr(&c, 400).await;
    assert_eq!(addr.ip().to_string(), "127.54.9.11", "the answer file's static address");
    assert!(wait_agent(&api).await, "Setup is done");
    assert_eq!(keyscan(addr).await.as_deref(), Some(public.trim()), "the answer file's host key");
    let (other, _) = client_key();
    let login = ssh_exec(addr, "Administrator", &other, "whoami", b"").await;
    assert_eq!(login.err().as_deref(), Some("authentication rejected"), "no login is simulated");

    // Installed: later boots (no ISO) run the same sshd, the key and address persisted.
    assert_eq!(api.run("/nodes/pve1/qemu/400/status/stop", &[]).await, "OK");
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/400/config", &[("delete", "ide0,ide2")]).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(api.run("/nodes/pve1/qemu/400/status/start", &[]).await, "OK");
    let addr = guest_addr(&c, 400).await;
    assert_eq!(addr.ip().to_string(), "127.54.9.11");
    assert_eq!(keyscan(addr).await.as_deref(), Some(public.trim()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_file_without_openssh_leaves_the_installed_windows_without_sshd() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    if !plant_isos(&c) {
        return;
    }
    create_win(&api, true).await;
    assert_eq!(api.run("/nodes/pve1/qemu/400/status/start", &[]).await, "OK");
    assert!(wait_agent(&api).await, "Setup is done");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(c.guest_ssh_addr(400), None);
}
