//! Fault injection by spec and seed: what each fault does to a client, and that the
//! same seed gives the same faults.

use crate::common;

use common::{Api, client_key, start};
use cradle_sim::FaultSpec;

fn faults(spec: &str) -> impl FnOnce(&mut cradle_sim::SimConfig) {
    let spec = FaultSpec::parse(spec).unwrap();
    move |cfg| cfg.faults = spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_faults_answer_like_pve_and_say_whether_the_action_happened() {
    let c = start(0.0, faults("api-500=1")).await;
    let api = Api::new(&c);
    let (s, b) = api.call("GET", "/version", &[]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("Can't connect to 127.0.0.1:85 (Connection refused)\n")));
    drop(c);

    let c = start(0.0, faults("no-worker=1")).await;
    let api = Api::new(&c);
    let (s, b) = api.call("POST", "/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("got no worker upid - start worker failed\n")));
    assert_eq!(api.call("GET", "/nodes/pve1/qemu/101/config", &[]).await.0, 500, "nothing was cloned");
    drop(c);

    let c = start(0.0, faults("http-596=1")).await;
    let api = Api::new(&c);
    let (s, _) = api.call("POST", "/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    assert_eq!(s, 596);
    assert_eq!(api.call("GET", "/nodes/pve1/qemu/101/config", &[]).await.0, 200, "the clone happened");
    drop(c);

    let c = start(0.0, faults("drop-after=1")).await;
    let api = Api::new(&c);
    let r = api
        .http
        .post(format!("{}/nodes/pve1/qemu/9000/clone", c.api_url()))
        .header("Authorization", format!("PVEAPIToken={}", c.token()))
        .form(&[("newid", "101")])
        .send()
        .await;
    assert!(r.is_err(), "the connection was dropped: {r:?}");
    // The client can find out through discovery and the task list.
    let tasks = api.get("/nodes/pve1/tasks?typefilter=qmclone&source=all").await;
    assert_eq!(tasks[0]["id"], "9000");
    assert_eq!(api.call("GET", "/nodes/pve1/qemu/101/config", &[]).await.0, 200);
    drop(c);

    let c = start(0.0, faults("locked=1")).await;
    let api = Api::new(&c);
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/9000/config", &[("cores", "2")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("VM is locked (backup)\n")));
    drop(c);

    let c = start(0.0, faults("lock-timeout=1")).await;
    let api = Api::new(&c);
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/9000/config", &[("cores", "2")]).await;
    assert_eq!(
        (s, b["message"].as_str()),
        (500, Some("can't lock file '/var/lock/qemu-server/lock-9000.conf' - got timeout\n"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_clone_task_reports_its_error_and_leaves_no_vm() {
    let c = start(0.0, faults("clone-fail=1")).await;
    let api = Api::new(&c);
    let exit = api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    assert!(exit.starts_with("clone failed: "), "{exit}");
    assert_eq!(api.call("GET", "/nodes/pve1/qemu/101/config", &[]).await.0, 500);
    let errors = api.get("/nodes/pve1/tasks?errors=1").await;
    assert_eq!(errors.as_array().unwrap().len(), 1);
}

async fn statuses(seed: u64) -> Vec<u16> {
    let c = start(0.0, |cfg| {
        cfg.faults = FaultSpec::parse("api-500=0.5").unwrap();
        cfg.seed = seed;
    })
    .await;
    let api = Api::new(&c);
    let mut out = Vec::new();
    for _ in 0..40 {
        out.push(api.call("GET", "/cluster/resources", &[]).await.0);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_injects_the_same_faults() {
    let a = statuses(7).await;
    let b = statuses(7).await;
    let other = statuses(8).await;
    assert_eq!(a, b);
    assert!(a.contains(&500) && a.contains(&200), "{a:?}");
    assert_ne!(a, other);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_guest_accepts_tcp_but_never_sends_a_banner() {
    let c = start(0.0, faults("ssh-silent=1")).await;
    let api = Api::new(&c);
    let (_, public) = client_key();
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    let sshkeys = common::urlencode(&public);
    api.post(
        "/nodes/pve1/qemu/101/config",
        &[("ipconfig0", "ip=127.77.1.5/8"), ("sshkeys", &sshkeys), ("ciuser", "ops")],
    )
    .await;
    api.run("/nodes/pve1/qemu/101/status/start", &[]).await;
    let addr = common::guest_addr(&c, 101).await;
    assert_eq!(addr.ip().to_string(), "127.77.1.5", "address from ipconfig0");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    // Stopping the VM ends the connection; nothing must have been sent before.
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/stop", &[]).await, "OK");
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let _ = tcp.read_to_end(&mut buf).await;
    assert!(buf.is_empty(), "got {:?}", String::from_utf8_lossy(&buf));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_reboot_makes_a_graceful_shutdown_time_out() {
    let c = start(0.0, faults("reboot-hang=1")).await;
    let api = Api::new(&c);
    let (key, public) = client_key();
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    let sshkeys = common::urlencode(&public);
    api.post(
        "/nodes/pve1/qemu/101/config",
        &[("ipconfig0", "ip=127.77.1.6/8"), ("sshkeys", &sshkeys), ("ciuser", "ops")],
    )
    .await;
    api.run("/nodes/pve1/qemu/101/status/start", &[]).await;
    let addr = common::guest_addr(&c, 101).await;
    let out = common::ssh_exec(addr, "ops", &key, "sudo systemctl reboot", b"").await.unwrap();
    assert_eq!(out.code, Some(0), "reboot exits 0, then the guest goes down");
    assert!(c.guest_ssh_addr(101).is_none());
    // The reboot itself begins a moment after the answer, as on a real guest.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(api.get("/nodes/pve1/qemu/101/status/current").await["status"], "running");
    let exit = api.run("/nodes/pve1/qemu/101/status/shutdown", &[]).await;
    assert_eq!(exit, "VM quit/powerdown failed - got timeout");
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/stop", &[]).await, "OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_reboot_that_hangs_applies_pending_changes_but_the_guest_never_answers() {
    let c = start(0.0, faults("reboot-hang=1")).await;
    let api = Api::new(&c);
    let (_key, public) = client_key();
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    let sshkeys = common::urlencode(&public);
    api.post(
        "/nodes/pve1/qemu/101/config",
        &[("ipconfig0", "ip=127.77.1.7/8"), ("sshkeys", &sshkeys), ("ciuser", "ops")],
    )
    .await;
    api.run("/nodes/pve1/qemu/101/status/start", &[]).await;
    common::guest_addr(&c, 101).await;
    api.post("/nodes/pve1/qemu/101/config", &[("delete", "ide2")]).await;
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/reboot", &[]).await, "OK");
    assert_eq!(api.get("/nodes/pve1/qemu/101/status/current").await["status"], "running");
    assert!(api.get("/nodes/pve1/qemu/101/config?current=1").await.get("ide2").is_none(), "pending applied");
    assert!(c.guest_ssh_addr(101).is_none());
    assert!(c.guest_boot_id(101).is_none());
    let exit = api.run("/nodes/pve1/qemu/101/status/shutdown", &[]).await;
    assert_eq!(exit, "VM quit/powerdown failed - got timeout");
}
