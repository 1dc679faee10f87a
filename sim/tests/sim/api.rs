//! The HTTPS API against a live simulator: auth, envelopes, errors, clone/lock/tasks,
//! nextid, config formatting and validation, pending changes, power, destroy, HA,
//! migrate, resize, counters.

use crate::common;

use common::{Api, start, urlencode};
use rustls::pki_types::pem::PemObject;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_wrong_token_is_401_and_unknown_paths_are_501_or_404() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    let url = format!("{}/version", c.api_url());
    let r = api.http.get(&url).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = api.http.get(&url).header("Authorization", "PVEAPIToken=root@pam!cradle=wrong").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let v = api.get("/version").await;
    assert_eq!(v["release"], "9.0");
    let (s, b) = api.call("GET", "/nodes/pve1/bogus", &[]).await;
    assert_eq!(s, 501, "{b}");
    assert_eq!(b["message"], "Method 'GET /api2/json/nodes/pve1/bogus' not implemented\n");
    let r = api.http.get(c.api_url().replace("/api2/json", "/nothing")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nextid_never_reserves_and_reports_taken_ids_as_400() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    let a = api.get("/cluster/nextid").await;
    let b = api.get("/cluster/nextid").await;
    assert_eq!(a, b);
    assert_eq!(a, "100");
    let (s, body) = api.call("GET", "/nodes/pve1/qemu/abc/config", &[]).await;
    assert_eq!(s, 400);
    assert_eq!(body["errors"]["vmid"], "type check ('integer') failed - got 'abc'");
    let (s, body) = api.call("GET", "/nodes/pve1/qemu/99/config", &[]).await;
    assert_eq!((s, body["errors"]["vmid"].as_str()), (400, Some("value must have a minimum value of 100")));
    let (s, body) = api.call("GET", "/cluster/nextid", &[("vmid", "9000")]).await;
    assert_eq!(s, 400);
    assert_eq!(body["errors"]["vmid"], "VM 9000 already exists");
    assert_eq!(api.get("/cluster/nextid?vmid=123").await, "123");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_clone_keeps_lock_clone_and_config_calls_fail_with_vm_is_locked() {
    // Clones take an hour here, so the lock is observable without racing the clock.
    let c = start(1.0, |cfg| cfg.timings.clone = std::time::Duration::from_secs(3600)).await;
    let api = Api::new(&c);
    let upid = api.post("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("name", "test-0")]).await;
    let upid = upid.as_str().unwrap().to_string();
    assert!(upid.starts_with("UPID:pve1:") && upid.contains(":qmclone:9000:root@pam!cradle:"), "{upid}");
    assert!(upid.ends_with(':'));
    let cfg = api.get("/nodes/pve1/qemu/101/config").await;
    assert_eq!(cfg["lock"], "clone");
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/101/config", &[("cores", "4")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("VM is locked (clone)\n")));
    let st = api.get(&format!("/nodes/pve1/tasks/{}/status", urlencode(&upid))).await;
    assert_eq!(st["status"], "running");
    assert!(st.get("exitstatus").is_none());
    // The clone task is listed under the template's VMID (the UPID's id), as on PVE.
    let active = api.get("/nodes/pve1/tasks?source=active&vmid=9000").await;
    assert_eq!(active.as_array().unwrap().len(), 1);
    let res = api.get("/cluster/resources?type=vm").await;
    let vm = res.as_array().unwrap().iter().find(|v| v["vmid"] == 101).unwrap().clone();
    assert_eq!((vm["lock"].as_str(), vm["status"].as_str()), (Some("clone"), Some("stopped")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_reason_phrase_is_the_first_line_of_the_message() {
    let c = start(1.0, |cfg| cfg.timings.clone = std::time::Duration::from_secs(3600)).await;
    let api = Api::new(&c);
    api.post("/nodes/pve1/qemu/9000/clone", &[("newid", "150")]).await;
    // reqwest hides the reason phrase: speak HTTP/1.1 over rustls by hand.
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(c.ca_pem().as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(c.api_addr()).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = "cores=2";
    let req = format!(
        "PUT /api2/json/nodes/pve1/qemu/150/config HTTP/1.1\r\nHost: localhost\r\nAuthorization: PVEAPIToken={}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        c.token(),
        body.len()
    );
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut resp = Vec::new();
    let _ = tls.read_to_end(&mut resp).await;
    let text = String::from_utf8_lossy(&resp);
    assert!(text.starts_with("HTTP/1.1 500 VM is locked (clone)\r\n"), "{text}");
    // The fingerprint printed for pinning is the SHA-256 of the certificate served.
    use sha2::Digest;
    let served = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    let fp: Vec<String> = sha2::Sha256::digest(served.as_ref()).iter().map(|b| format!("{b:02X}")).collect();
    assert_eq!(fp.join(":"), c.fingerprint_sha256());
    assert!(text.contains(r#""message":"VM is locked (clone)\n""#), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_regenerates_macs_and_net0_is_stored_in_pve_format() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    let exit = api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("name", "a")]).await;
    assert_eq!(exit, "OK");
    let tpl = api.get("/nodes/pve1/qemu/9000/config").await;
    let cfg = api.get("/nodes/pve1/qemu/101/config").await;
    assert!(cfg.get("lock").is_none(), "{cfg}");
    assert!(cfg.get("template").is_none());
    assert_ne!(tpl["net0"], cfg["net0"]);
    assert_ne!(tpl["smbios1"], cfg["smbios1"]);
    assert_eq!(cfg["ide2"], "local-lvm:vm-101-cloudinit,media=cdrom");
    assert_eq!(cfg["scsi0"], "local-lvm:base-9000-disk-0/vm-101-disk-0,size=3G");
    let (s, _) = api.call("PUT", "/nodes/pve1/qemu/101/config", &[("net0", "virtio,bridge=vmbr0,tag=20")]).await;
    assert_eq!(s, 200);
    let net0 = api.get("/nodes/pve1/qemu/101/config").await["net0"].as_str().unwrap().to_string();
    assert!(net0.starts_with("virtio=BC:24:11:") && net0.ends_with(",bridge=vmbr0,tag=20"), "{net0}");
    let (s, b) = api
        .call("PUT", "/nodes/pve1/qemu/101/config", &[("net0", "bridge=vmbr0"), ("ipconfig0", "ip=10.0.0.300/24")])
        .await;
    assert_eq!(s, 400);
    assert!(b["errors"]["net0"].as_str().unwrap().contains("model: property is missing"), "{b}");
    assert!(b["errors"]["ipconfig0"].is_string(), "{b}");
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/101/config", &[("bogus", "1")]).await;
    assert_eq!(s, 400);
    assert!(b["errors"]["bogus"].as_str().unwrap().contains("not defined in schema"));
    let (s, b) = api.call("POST", "/nodes/pve1/qemu/101/clone", &[("newid", "101")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("unable to create VM 101: config file already exists\n")));
    let (s, b) = api.call("GET", "/nodes/pve1/qemu/555/config", &[]).await;
    assert_eq!(
        (s, b["message"].as_str()),
        (500, Some("Configuration file 'nodes/pve1/qemu-server/555.conf' does not exist\n"))
    );
    let (s, b) = api.call("POST", "/nodes/pve1/qemu/9000/clone", &[("newid", "102"), ("target", "pve2")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("can't clone VM to node 'pve2' (VM uses local storage)\n")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_fails_like_pve_for_templates_and_missing_snippets() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    assert_eq!(api.run("/nodes/pve1/qemu/9000/status/start", &[]).await, "you can't start a vm if it's a template");
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    api.post("/nodes/pve1/qemu/101/config", &[("cicustom", "user=local:snippets/test-0-user.yaml")]).await;
    let exit = api.run("/nodes/pve1/qemu/101/status/start", &[]).await;
    assert_eq!(exit, "unable to open file '/var/lib/vz/snippets/test-0-user.yaml' - No such file or directory");
    let cur = api.get("/nodes/pve1/qemu/101/status/current").await;
    assert_eq!(cur["status"], "stopped");
    // Oversize snippets fail too.
    let dir = c.snippet_dir("pve1", "local").unwrap();
    std::fs::write(dir.join("test-0-user.yaml"), vec![b'#'; 1024 * 1024 + 1]).unwrap();
    let exit = api.run("/nodes/pve1/qemu/101/status/start", &[]).await;
    assert!(exit.contains("too long"), "{exit}");
    std::fs::write(dir.join("test-0-user.yaml"), "#cloud-config\n").unwrap();
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/start", &[]).await, "OK");
    assert_eq!(api.get("/nodes/pve1/qemu/101/status/current").await["status"], "running");
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/start", &[]).await, "VM 101 already running");
    let (s, b) = api.call("DELETE", "/nodes/pve1/qemu/101", &[]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("VM 101 is running - destroy failed\n")));
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/stop", &[]).await, "OK");
    let (s, b) = api.call("DELETE", "/nodes/pve1/qemu/101?purge=1&destroy-unreferenced-disks=1", &[]).await;
    assert_eq!(s, 200, "{b}");
    api.wait_task(b["data"].as_str().unwrap()).await;
    let (s, _) = api.call("GET", "/nodes/pve1/qemu/101/config", &[]).await;
    assert_eq!(s, 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_ide2_on_a_running_vm_stays_pending_until_an_api_reboot() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/start", &[]).await, "OK");
    let (s, _) = api.call("PUT", "/nodes/pve1/qemu/101/config", &[("delete", "ide2")]).await;
    assert_eq!(s, 200);
    let pending = api.get("/nodes/pve1/qemu/101/pending").await;
    let ide2 = pending.as_array().unwrap().iter().find(|e| e["key"] == "ide2").unwrap().clone();
    assert_eq!(ide2["delete"], 1, "{ide2}");
    let current = api.get("/nodes/pve1/qemu/101/config?current=1").await;
    assert!(current.get("ide2").is_some());
    let shown = api.get("/nodes/pve1/qemu/101/config").await;
    assert!(shown.get("ide2").is_none(), "GET config shows pending values");
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/reboot", &[]).await, "OK");
    // qmreboot ends when the VM stopped; with time_scale 0 the restart is immediate.
    let current = api.get("/nodes/pve1/qemu/101/config?current=1").await;
    assert!(current.get("ide2").is_none(), "{current}");
    assert_eq!(api.get("/nodes/pve1/qemu/101/status/current").await["status"], "running");
    let tasks = api.get("/nodes/pve1/tasks?vmid=101&typefilter=qmstart").await;
    assert_eq!(tasks.as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_run_over_time_and_report_running_then_ok_with_a_log() {
    let c = start(0.02, |_| {}).await;
    let api = Api::new(&c);
    let upid = api.post("/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    let upid = upid.as_str().unwrap();
    let st = api.wait_task(upid).await;
    assert_eq!(st["exitstatus"], "OK");
    let log = api.get(&format!("/nodes/pve1/tasks/{}/log", urlencode(upid))).await;
    let lines: Vec<&str> = log.as_array().unwrap().iter().map(|l| l["t"].as_str().unwrap()).collect();
    assert_eq!(lines.last(), Some(&"TASK OK"));
    assert_eq!(log[0]["n"], 1);
    let list = api.get("/nodes/pve1/tasks?typefilter=qmclone").await;
    assert_eq!(list[0]["upid"], upid);
    assert_eq!(list[0]["status"], "OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ha_resources_start_their_guest_and_rules_enforce_pve9_semantics() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "102")]).await;
    let (s, b) = api
        .call(
            "POST",
            "/cluster/ha/rules",
            &[("type", "node-affinity"), ("rule", "r1"), ("resources", "vm:101"), ("nodes", "pve1")],
        )
        .await;
    assert_eq!(
        (s, b["message"].as_str()),
        (500, Some("create ha rule failed: cannot use unmanaged resource(s) vm:101.\n"))
    );
    api.post("/cluster/ha/resources", &[("sid", "vm:101")]).await;
    assert_eq!(api.get("/nodes/pve1/qemu/101/status/current").await["status"], "running");
    let (s, b) = api.call("POST", "/cluster/ha/resources", &[("sid", "vm:101")]).await;
    assert_eq!(
        (s, b["message"].as_str()),
        (500, Some("create resource failed: resource ID 'vm:101' already defined\n"))
    );
    let (s, b) = api.call("POST", "/cluster/ha/resources", &[("sid", "vm:102"), ("group", "g1")]).await;
    assert_eq!(
        (s, b["message"].as_str()),
        (500, Some("invalid parameter 'group': ha groups have been migrated to rules\n"))
    );
    api.post("/cluster/ha/resources", &[("sid", "vm:102"), ("state", "stopped")]).await;
    assert_eq!(api.get("/nodes/pve1/qemu/102/status/current").await["status"], "stopped");
    api.post(
        "/cluster/ha/rules",
        &[("type", "node-affinity"), ("rule", "r1"), ("resources", "vm:101"), ("nodes", "pve1:2,pve2")],
    )
    .await;
    let (s, b) = api
        .call(
            "POST",
            "/cluster/ha/rules",
            &[("type", "node-affinity"), ("rule", "r2"), ("resources", "vm:101,vm:102"), ("nodes", "pve2")],
        )
        .await;
    assert_eq!(
        (s, b["message"].as_str()),
        (
            500,
            Some(
                "create ha rule failed: 400 Rule 'r2' is invalid.\nresources: resource 'vm:101' is already used in another node affinity rule\n"
            )
        )
    );
    let rule = api.get("/cluster/ha/rules/r1").await;
    let digest = rule["digest"].as_str().unwrap().to_string();
    let (s, _) = api
        .call(
            "PUT",
            "/cluster/ha/rules/r1",
            &[("type", "node-affinity"), ("resources", "vm:101,vm:102"), ("digest", &digest)],
        )
        .await;
    assert_eq!(s, 200);
    let (s, _) = api
        .call("PUT", "/cluster/ha/rules/r1", &[("type", "node-affinity"), ("resources", "vm:101"), ("digest", &digest)])
        .await;
    assert_eq!(s, 500, "a stale digest is refused");
    assert_eq!(api.get("/cluster/ha/rules/r1").await["resources"], "vm:101,vm:102");
    let cur = api.get("/nodes/pve1/qemu/101/status/current").await;
    assert_eq!(cur["ha"]["managed"], 1);
    let upid = api.post("/nodes/pve1/qemu/101/status/stop", &[]).await;
    assert!(upid.as_str().unwrap().contains(":hastop:"), "{upid}");
    let (s, _) = api.call("GET", "/cluster/ha/groups", &[]).await;
    assert_eq!(s, 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_moves_the_vm_without_checking_snippets_and_resize_never_shrinks() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101"), ("full", "1")]).await;
    api.post("/nodes/pve1/qemu/101/config", &[("cicustom", "user=local:snippets/only-on-pve1.yaml")]).await;
    std::fs::write(c.snippet_dir("pve1", "local").unwrap().join("only-on-pve1.yaml"), "#cloud-config\n").unwrap();
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/start", &[]).await, "OK");
    let (s, b) = api.call("POST", "/nodes/pve1/qemu/101/migrate", &[("target", "pve2")]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("can't migrate running VM without --online\n")));
    let pre = api.get("/nodes/pve1/qemu/101/migrate?target=pve2").await;
    assert_eq!(pre["allowed_nodes"], serde_json::json!(["pve2"]));
    assert_eq!(pre["running"], 1);
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/stop", &[]).await, "OK");
    assert_eq!(api.run("/nodes/pve1/qemu/101/migrate", &[("target", "pve2")]).await, "OK");
    assert_eq!(api.get("/nodes/pve2/qemu/101/status/current").await["status"], "stopped");
    // The snippet is not on pve2: starting there fails, as on real PVE.
    let exit = api.run("/nodes/pve2/qemu/101/status/start", &[]).await;
    assert!(exit.contains("No such file or directory"), "{exit}");
    let upid = api
        .http
        .put(format!("{}/nodes/pve2/qemu/101/resize", c.api_url()))
        .header("Authorization", format!("PVEAPIToken={}", c.token()))
        .form(&[("disk", "scsi0"), ("size", "+5G")])
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    api.wait_task(upid["data"].as_str().unwrap()).await;
    let cfg = api.get("/nodes/pve2/qemu/101/config").await;
    assert!(cfg["scsi0"].as_str().unwrap().ends_with("size=8G"), "{cfg}");
    // Shrinking is refused inside the resize worker (qemu-server e6352be, Qemu.pm:6048).
    let (s, b) = api.call("PUT", "/nodes/pve2/qemu/101/resize", &[("disk", "scsi0"), ("size", "4G")]).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(api.wait_task(b["data"].as_str().unwrap()).await["exitstatus"], "shrinking disks is not supported");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_counted_per_endpoint_and_method() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    for _ in 0..3 {
        api.get("/cluster/resources").await;
    }
    api.get("/nodes/pve1/qemu/9000/config").await;
    let counts = c.request_counts();
    assert_eq!(counts.get("GET /cluster/resources"), Some(&3));
    assert_eq!(counts.get("GET /nodes/{node}/qemu/{vmid}/config"), Some(&1));
    let url = c.api_url().replace("/api2/json", "/sim/requests");
    let over_http: Value = api
        .http
        .get(url)
        .header("Authorization", format!("PVEAPIToken={}", c.token()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(over_http["data"]["GET /cluster/resources"], 3);
}

// As in PVE: `PUT .../unlink` with `idlist` and
// optional `force` deletes the listed config entries and returns `null`, not a UPID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlink_deletes_the_listed_drives_and_returns_null_like_pve() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/101/unlink", &[("idlist", "ide2"), ("force", "1")]).await;
    assert_eq!((s, &b["data"]), (200, &Value::Null), "{b}");
    let cfg = api.get("/nodes/pve1/qemu/101/config?current=1").await;
    assert!(cfg.get("ide2").is_none(), "{cfg}");
    assert!(cfg.get("scsi0").is_some(), "only the listed id goes: {cfg}");
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/101/unlink", &[]).await;
    assert_eq!(s, 400, "{b}");
    assert_eq!(b["errors"]["idlist"], "property is missing and it is not optional");
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/101/unlink", &[("idlist", "bogus0")]).await;
    assert_eq!(s, 400, "{b}");
    // On a running VM the cloud-init drive's deletion is pending, as with `PUT config delete=`.
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "102")]).await;
    assert_eq!(api.run("/nodes/pve1/qemu/102/status/start", &[]).await, "OK");
    let (s, _) = api.call("PUT", "/nodes/pve1/qemu/102/unlink", &[("idlist", "ide2")]).await;
    assert_eq!(s, 200);
    let pending = api.get("/nodes/pve1/qemu/102/pending").await;
    let ide2 = pending.as_array().unwrap().iter().find(|e| e["key"] == "ide2").unwrap().clone();
    assert_eq!(ide2["delete"], 1, "{ide2}");
}

// As in PVE: a config write that sets a key to the value it already
// has on a running VM does not leave a pending change (vmconfig_cleanup_pending).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_a_key_with_its_current_value_to_a_running_vm_leaves_nothing_pending() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    api.run("/nodes/pve1/qemu/9000/clone", &[("newid", "101")]).await;
    assert_eq!(api.run("/nodes/pve1/qemu/101/status/start", &[]).await, "OK");
    let cfg = api.get("/nodes/pve1/qemu/101/config?current=1").await;
    let cores = cfg["cores"].to_string();
    let (s, b) = api.call("PUT", "/nodes/pve1/qemu/101/config", &[("cores", cores.as_str())]).await;
    assert_eq!(s, 200, "{b}");
    let pending = api.get("/nodes/pve1/qemu/101/pending").await;
    let has_pending = |p: &Value, key: &str| {
        p.as_array()
            .unwrap()
            .iter()
            .any(|e| e["key"] == key && (e.get("pending").is_some() || e.get("delete").is_some()))
    };
    assert!(!has_pending(&pending, "cores"), "a no-op write left a pending change: {pending}");
    // A real change is pending, and writing the current value back clears it.
    api.call("PUT", "/nodes/pve1/qemu/101/config", &[("cores", "7")]).await;
    assert!(has_pending(&api.get("/nodes/pve1/qemu/101/pending").await, "cores"));
    api.call("PUT", "/nodes/pve1/qemu/101/config", &[("cores", cores.as_str())]).await;
    let pending = api.get("/nodes/pve1/qemu/101/pending").await;
    assert!(!has_pending(&pending, "cores"), "{pending}");
    // The same for the cloud-init drive (a drive key, deferred on a running VM).
    let ide2 = cfg["ide2"].as_str().unwrap().to_string();
    api.call("PUT", "/nodes/pve1/qemu/101/config", &[("ide2", ide2.as_str())]).await;
    let pending = api.get("/nodes/pve1/qemu/101/pending").await;
    assert!(!has_pending(&pending, "ide2"), "{pending}");
}
