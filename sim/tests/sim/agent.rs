//! The QEMU guest agent of appliances booted from an image (no cloud-init drive): it
//! answers once the guest is up, names itself after the VM, has no network address,
//! and stops answering when the VM stops; without an `agent` key PVE's error stays.

use std::time::Duration;

use crate::common;

use common::{Api, start};

async fn create(api: &Api, vmid: &str, agent: Option<&str>) {
    let mut form = vec![("vmid", vmid), ("name", "haos"), ("scsi0", "local-lvm:4")];
    if let Some(a) = agent {
        form.push(("agent", a));
    }
    let st = api.wait_task(api.post("/nodes/pve1/qemu", &form).await.as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
}

async fn agent(api: &Api, vmid: &str, cmd: &str) -> (u16, serde_json::Value) {
    let path = format!("/nodes/pve1/qemu/{vmid}/agent/{cmd}");
    api.call(if cmd == "ping" { "POST" } else { "GET" }, &path, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_appliance_with_the_agent_enabled_answers_ping_info_and_host_name_without_addresses() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    create(&api, "200", Some("enabled=1,fstrim_cloned_disks=1")).await;
    let (s, b) = agent(&api, "200", "ping").await;
    assert_eq!((s, b["message"].as_str()), (500, Some("VM 200 is not running\n")));
    assert_eq!(api.run("/nodes/pve1/qemu/200/status/start", &[]).await, "OK");
    let (s, b) = agent(&api, "200", "ping").await;
    assert_eq!((s, &b["data"]), (200, &serde_json::json!({"result": {}})));
    let (_, b) = agent(&api, "200", "get-host-name").await;
    assert_eq!(b["data"]["result"]["host-name"], "haos");
    let (s, b) = agent(&api, "200", "info").await;
    assert_eq!(s, 200, "{b}");
    let (_, b) = agent(&api, "200", "network-get-interfaces").await;
    let ifs = b["data"]["result"].as_array().unwrap();
    assert_eq!(ifs.len(), 1, "{b}");
    assert_eq!(ifs[0]["name"], "lo");
    assert!(c.guest_ssh_addr(200).is_none(), "an appliance has no sshd");
    let st = api.get("/nodes/pve1/qemu/200/status/current").await;
    assert_eq!(st["agent"], 1);

    // Stop: the agent is gone with the VM; start again: it answers again; destroy works.
    assert_eq!(api.run("/nodes/pve1/qemu/200/status/stop", &[]).await, "OK");
    let (s, b) = agent(&api, "200", "ping").await;
    assert_eq!((s, b["message"].as_str()), (500, Some("VM 200 is not running\n")));
    assert_eq!(api.run("/nodes/pve1/qemu/200/status/start", &[]).await, "OK");
    assert_eq!(agent(&api, "200", "ping").await.0, 200);
    assert_eq!(api.run("/nodes/pve1/qemu/200/status/stop", &[]).await, "OK");
    let (s, b) = api.call("DELETE", "/nodes/pve1/qemu/200", &[]).await;
    assert_eq!(s, 200, "{b}");
    api.wait_task(b["data"].as_str().unwrap()).await;
    assert_eq!(api.call("GET", "/nodes/pve1/qemu/200/config", &[]).await.0, 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_appliance_agent_answers_only_after_boot_ssh_and_not_without_an_enabled_agent() {
    let c = start(0.05, |cfg| cfg.timings.boot_ssh = Duration::from_secs(20)).await;
    let api = Api::new(&c);
    create(&api, "200", Some("1")).await;
    create(&api, "201", None).await;
    create(&api, "202", Some("0")).await;
    for id in ["200", "201", "202"] {
        assert_eq!(api.run(&format!("/nodes/pve1/qemu/{id}/status/start"), &[]).await, "OK");
    }
    // boot_ssh is 1 s here: not yet.
    let (s, b) = agent(&api, "200", "ping").await;
    assert_eq!((s, b["message"].as_str()), (500, Some("QEMU guest agent is not running\n")));
    let mut up = false;
    for _ in 0..300 {
        if agent(&api, "200", "ping").await.0 == 200 {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(up, "the agent answers after boot_ssh");
    let (s, b) = agent(&api, "201", "ping").await;
    assert_eq!((s, b["message"].as_str()), (500, Some("No QEMU guest agent configured\n")));
    // `agent: 0` is configured but disabled: qemu has no agent channel, the ping fails.
    let (s, b) = agent(&api, "202", "ping").await;
    assert_eq!((s, b["message"].as_str()), (500, Some("QEMU guest agent is not running\n")));
}
