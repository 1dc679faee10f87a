//! LXC containers as pve-container serves them: create from a template (task
//! `vzcreate`, host key lines in its log), config, status, power, destroy, the VMID
//! space shared with VMs, and the container's sshd (root, the keys given at create,
//! the host key the log named).

use std::time::Duration;

use crate::common;

use common::{Api, guest_addr, ssh_exec, start};

const TEMPLATE: &str = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";

fn plant_template(c: &cradle_sim::RunningCluster, node: &str) {
    let p = c.node_path(node, "/var/lib/vz/template/cache/debian-12-standard_12.7-1_amd64.tar.zst");
    std::fs::write(p, b"not really a tarball").unwrap();
}

async fn create(api: &Api, extra: &[(&str, &str)]) -> (u16, serde_json::Value) {
    let mut form = vec![("vmid", "300"), ("ostemplate", TEMPLATE), ("rootfs", "local-lvm:8")];
    form.extend_from_slice(extra);
    api.call("POST", "/nodes/pve1/lxc", &form).await
}

async fn task_log(api: &Api, upid: &str) -> Vec<String> {
    let node = upid.split(':').nth(1).unwrap();
    let log = api.get(&format!("/nodes/{node}/tasks/{}/log", common::urlencode(upid))).await;
    log.as_array().unwrap().iter().map(|l| l["t"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_container_logs_its_host_key_and_answers_ssh_as_root_with_exactly_the_given_keys() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    plant_template(&c, "pve1");
    let (key, public) = common::client_key();
    let (other, _) = common::client_key();
    let (s, b) = create(
        &api,
        &[
            ("hostname", "web1.example.org"),
            ("net0", "name=eth0,bridge=vmbr0,ip=127.0.55.10/8,gw=127.0.0.1"),
            ("ssh-public-keys", &format!("{public}\n")),
            ("password", "s3cret-pw"),
            ("cores", "2"),
            ("features", "nesting=1"),
            ("onboot", "1"),
        ],
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let upid = b["data"].as_str().unwrap().to_string();
    assert!(upid.contains(":vzcreate:300:"), "{upid}");
    let st = api.wait_task(&upid).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let log = task_log(&api, &upid).await;
    let i = log
        .iter()
        .position(|l| l == "Creating SSH host key 'ssh_host_ed25519_key' - this may take some time ...")
        .unwrap_or_else(|| panic!("{log:?}"));
    let done = &log[i + 1];
    assert!(done.starts_with("done: SHA256:") && done.ends_with(" root@web1"), "{done}");
    assert!(log.iter().any(|l| l.starts_with("extracting archive '/var/lib/vz/template/cache/debian-12")), "{log:?}");
    assert!(!log.iter().any(|l| l.contains("s3cret")), "the password is never logged");

    let cfg = api.get("/nodes/pve1/lxc/300/config").await;
    assert_eq!(cfg["rootfs"], "local-lvm:vm-300-disk-0,size=8G");
    let net0 = cfg["net0"].as_str().unwrap();
    assert!(net0.starts_with("name=eth0,bridge=vmbr0,gw=127.0.0.1,hwaddr=BC:24:11:"), "{net0}");
    assert!(net0.ends_with(",ip=127.0.55.10/8,type=veth"), "{net0}");
    assert_eq!(
        (cfg["unprivileged"].clone(), cfg["memory"].clone(), cfg["swap"].clone()),
        (1.into(), 512.into(), 512.into())
    );
    assert_eq!(cfg["hostname"], "web1.example.org");
    assert!(cfg.get("password").is_none() && cfg.get("lock").is_none(), "{cfg}");
    assert!(!serde_json::to_string(&cfg).unwrap().contains("s3cret"));

    assert_eq!(api.run("/nodes/pve1/lxc/300/status/start", &[]).await, "OK");
    let st = api.get("/nodes/pve1/lxc/300/status/current").await;
    assert_eq!(
        (st["status"].as_str(), st["type"].as_str(), st["name"].as_str()),
        (Some("running"), Some("lxc"), Some("web1.example.org"))
    );
    assert_eq!(st["cpus"], 2);
    let addr = guest_addr(&c, 300).await;
    assert_eq!(addr.ip().to_string(), "127.0.55.10");
    let out = ssh_exec(addr, "root", &key, "hostname && systemctl is-system-running && cat /etc/os-release", b"")
        .await
        .unwrap();
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.starts_with("web1.example.org\nrunning\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\""),
        "{out:?}"
    );
    let fp = out.host_key.unwrap().fingerprint(russh::keys::HashAlg::Sha256).to_string();
    assert_eq!(done, &format!("done: {fp} root@web1"), "the logged key is the presented key");
    let ip = ssh_exec(addr, "root", &key, "ip -j addr", b"").await.unwrap();
    assert!(ip.stdout.contains("\"ifname\":\"eth0\"") && ip.stdout.contains("127.0.55.10"), "{ip:?}");
    let ci = ssh_exec(addr, "root", &key, "cloud-init status", b"").await.unwrap();
    assert_eq!(ci.code, Some(127), "no cloud-init in a container");
    assert!(ssh_exec(addr, "root", &other, "true", b"").await.is_err(), "another key is refused");
    assert!(ssh_exec(addr, "debian", &key, "true", b"").await.is_err(), "only root");

    assert_eq!(api.run("/nodes/pve1/lxc/300/status/shutdown", &[]).await, "OK");
    assert!(c.guest_ssh_addr(300).is_none());
    assert!(ssh_exec(addr, "root", &key, "true", b"").await.is_err(), "sshd is gone with the container");
    let list = api.get("/nodes/pve1/lxc").await;
    assert_eq!(list[0]["vmid"], 300);
    assert_eq!(list[0]["status"], "stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_template_fails_the_task_not_the_call_and_removes_the_config() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    let (s, b) = create(&api, &[]).await;
    assert_eq!(s, 200, "{b}");
    let st = api.wait_task(b["data"].as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], format!("unable to create CT 300 - can't find file '{TEMPLATE}'"));
    let (s, b) = api.call("GET", "/nodes/pve1/lxc/300/config", &[]).await;
    assert_eq!(
        (s, b["message"].as_str()),
        (500, Some("Configuration file 'nodes/pve1/lxc/300.conf' does not exist\n"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_and_vms_share_the_vmid_space_and_answer_each_others_endpoints_as_missing() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    plant_template(&c, "pve1");
    let (_, b) = create(&api, &[("hostname", "ct1")]).await;
    assert_eq!(api.wait_task(b["data"].as_str().unwrap()).await["exitstatus"], "OK");
    let (s, b) = create(&api, &[]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("CT 300 already exists on node 'pve1'\n")));
    let (s, b) = api
        .call("POST", "/nodes/pve1/lxc", &[("vmid", "9000"), ("ostemplate", TEMPLATE), ("rootfs", "local-lvm:8")])
        .await;
    assert_eq!((s, b["message"].as_str()), (500, Some("VM 9000 already exists on node 'pve1'\n")));
    let (s, b) = api.call("POST", "/nodes/pve1/qemu", &[("vmid", "300")]).await;
    assert_eq!(
        (s, b["message"].as_str()),
        (500, Some("unable to create VM 300 - CT 300 already exists on node 'pve1'\n"))
    );
    let (s, b) = api.call("GET", "/nodes/pve1/qemu/300/config", &[]).await;
    assert_eq!(
        (s, b["message"].as_str()),
        (500, Some("Configuration file 'nodes/pve1/qemu-server/300.conf' does not exist\n"))
    );
    let (s, b) = api.call("GET", "/nodes/pve1/lxc/9000/status/current", &[]).await;
    assert_eq!(
        (s, b["message"].as_str()),
        (500, Some("Configuration file 'nodes/pve1/lxc/9000.conf' does not exist\n"))
    );
    let (s, _) = api.call("GET", "/cluster/nextid", &[("vmid", "300")]).await;
    assert_eq!(s, 400);
    let res = api.get("/cluster/resources?type=vm").await;
    let ct = res.as_array().unwrap().iter().find(|r| r["vmid"] == 300).unwrap().clone();
    assert_eq!(
        (ct["id"].as_str(), ct["type"].as_str(), ct["name"].as_str()),
        (Some("lxc/300"), Some("lxc"), Some("ct1"))
    );
    assert!(api.get("/nodes/pve1/qemu").await.as_array().unwrap().iter().all(|v| v["vmid"] != 300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_power_and_destroy_fail_as_pve_when_the_state_is_wrong() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    plant_template(&c, "pve1");
    let (_, b) = create(&api, &[("start", "1")]).await;
    assert_eq!(api.wait_task(b["data"].as_str().unwrap()).await["exitstatus"], "OK");
    assert_eq!(api.get("/nodes/pve1/lxc/300/status/current").await["status"], "running");
    let (s, b) = api.call("POST", "/nodes/pve1/lxc/300/status/start", &[]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("CT 300 already running\n")));
    let (s, b) = api.call("DELETE", "/nodes/pve1/lxc/300", &[]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("unable to destroy CT 300 - container is running\n")));
    let upid = api.post("/nodes/pve1/lxc/300/status/reboot", &[]).await;
    assert!(upid.as_str().unwrap().contains(":vzreboot:300:"));
    api.wait_task(upid.as_str().unwrap()).await;
    assert_eq!(api.get("/nodes/pve1/lxc/300/status/current").await["status"], "running");
    assert_eq!(api.run("/nodes/pve1/lxc/300/status/stop", &[]).await, "OK");
    for (action, msg) in
        [("stop", "CT 300 not running\n"), ("shutdown", "CT 300 not running\n"), ("reboot", "VM 300 not running\n")]
    {
        let (s, b) = api.call("POST", &format!("/nodes/pve1/lxc/300/status/{action}"), &[]).await;
        assert_eq!((s, b["message"].as_str()), (500, Some(msg)));
    }
    assert_eq!(api.run("/nodes/pve1/lxc/300/status/start", &[]).await, "OK");
    let (s, b) = api.call("DELETE", "/nodes/pve1/lxc/300", &[("force", "1"), ("purge", "1")]).await;
    assert_eq!(s, 200, "{b}");
    let upid = b["data"].as_str().unwrap();
    assert!(upid.contains(":vzdestroy:300:"));
    assert_eq!(api.wait_task(upid).await["exitstatus"], "OK");
    assert_eq!(api.call("GET", "/nodes/pve1/lxc/300/config", &[]).await.0, 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_create_refuses_bad_storage_template_and_keys_before_any_task() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    plant_template(&c, "pve1");
    let (s, b) = create(&api, &[("rootfs", "local:8")]).await;
    assert_eq!(
        (s, b["errors"]["storage"].as_str()),
        (400, Some("storage 'local' does not support container directories"))
    );
    let (s, b) = api.call("POST", "/nodes/pve1/lxc", &[("vmid", "300"), ("ostemplate", "local:iso/x.iso")]).await;
    assert_eq!(
        (s, b["message"].as_str()),
        (500, Some("unable to use volume local:iso/x.iso - content type needs to be 'vztmpl'\n"))
    );
    let (s, b) = create(&api, &[("ssh-public-keys", "ssh-ed25519 notakey")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("SSH public key validation error\n")));
    let (s, b) = create(&api, &[("net0", "bridge=vmbr0")]).await;
    assert_eq!(s, 400, "{b}");
    let (s, b) = create(&api, &[("password", "1234")]).await;
    assert_eq!((s, b["errors"]["password"].as_str()), (400, Some("value must be at least 5 characters long")));
    assert!(api.get("/nodes/pve1/lxc").await.as_array().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_is_locked_while_created_and_its_sshd_comes_up_boot_ssh_after_start() {
    let c = start(0.05, |cfg| {
        cfg.timings.create = Duration::from_secs(20);
        cfg.timings.boot_ssh = Duration::from_secs(20);
    })
    .await;
    let api = Api::new(&c);
    plant_template(&c, "pve1");
    let (_, public) = common::client_key();
    let (_, b) = create(&api, &[("net0", "name=eth0,ip=127.0.55.11/8"), ("ssh-public-keys", &public)]).await;
    let upid = b["data"].as_str().unwrap().to_string();
    let cfg = api.get("/nodes/pve1/lxc/300/config").await;
    assert_eq!(cfg["lock"], "create", "{cfg}");
    let (s, b) = api.call("PUT", "/nodes/pve1/lxc/300/config", &[("cores", "2")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("CT is locked (create)\n")));
    api.wait_task(&upid).await;
    let (s, b) = api.call("PUT", "/nodes/pve1/lxc/300/config", &[("delete", "memory")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("unable to delete required option 'memory'\n")));
    let (s, _) = api.call("PUT", "/nodes/pve1/lxc/300/config", &[("cores", "3"), ("digest", "0000")]).await;
    assert_eq!(s, 500);
    let (s, b) = api.call("PUT", "/nodes/pve1/lxc/300/config", &[("cores", "3")]).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(api.get("/nodes/pve1/lxc/300/config").await["cores"], 3);
    assert_eq!(api.run("/nodes/pve1/lxc/300/status/start", &[]).await, "OK");
    assert!(c.guest_ssh_addr(300).is_none(), "not yet: boot_ssh is 1 s here");
    let addr = guest_addr(&c, 300).await;
    assert_eq!(addr.ip().to_string(), "127.0.55.11");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_container_persists_and_boots_again_with_the_same_host_key() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("sim");
    let s = state.clone();
    let c = start(0.0, move |cfg| cfg.state_dir = Some(s)).await;
    let api = Api::new(&c);
    plant_template(&c, "pve1");
    let (key, public) = common::client_key();
    let form = [("net0", "name=eth0,ip=127.0.55.12/8"), ("ssh-public-keys", public.as_str()), ("start", "1")];
    let (_, b) = create(&api, &form).await;
    assert_eq!(api.wait_task(b["data"].as_str().unwrap()).await["exitstatus"], "OK");
    let first = ssh_exec(guest_addr(&c, 300).await, "root", &key, "true", b"").await.unwrap().host_key.unwrap();
    c.shutdown().await;

    let s = state.clone();
    let c = start(0.0, move |cfg| cfg.state_dir = Some(s)).await;
    let api = Api::new(&c);
    assert_eq!(api.get("/nodes/pve1/lxc/300/status/current").await["status"], "running");
    let again = ssh_exec(guest_addr(&c, 300).await, "root", &key, "true", b"").await.unwrap();
    assert_eq!(again.code, Some(0));
    assert_eq!(again.host_key.unwrap(), first);
}
