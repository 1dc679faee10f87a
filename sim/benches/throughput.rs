//! Simulator throughput and memory (a measurement, not a test).
//!
//! Run: `cargo bench -p cradle-sim --bench throughput` (env: BENCH_REQUESTS, default
//! 20000; BENCH_CONCURRENCY, default 16; BENCH_VMS, default 1000; BENCH_RUNNING,
//! default 200). Prints requests/s for `GET /cluster/resources` and task status over
//! HTTPS keep-alive, and the resident memory of a cluster with BENCH_VMS VMs of which
//! BENCH_RUNNING are running guests with live SSH servers.

use std::time::Instant;

use cradle_sim::{Cluster, SimConfig};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

fn client(c: &cradle_sim::RunningCluster) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(c.ca_pem().as_bytes()).expect("CA"))
        .pool_max_idle_per_host(64)
        .build()
        .expect("client")
}

async fn hammer(http: &reqwest::Client, url: String, auth: String, total: usize, conc: usize) -> f64 {
    let start = Instant::now();
    let per = total / conc;
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let (http, url, auth) = (http.clone(), url.clone(), auth.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..per {
                let r = http.get(&url).header("Authorization", &auth).send().await.expect("request");
                assert!(r.status().is_success());
                let _ = r.bytes().await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("worker");
    }
    (per * conc) as f64 / start.elapsed().as_secs_f64()
}

async fn post(http: &reqwest::Client, url: String, auth: &str, form: &[(&str, &str)]) -> serde_json::Value {
    let r = http.post(url).header("Authorization", auth).form(form).send().await.expect("request");
    assert!(r.status().is_success(), "{:?}", r.status());
    r.json().await.expect("json")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let total = env("BENCH_REQUESTS", 20_000);
    let conc = env("BENCH_CONCURRENCY", 16);
    let vms = env("BENCH_VMS", 1000);
    let running = env("BENCH_RUNNING", 200).min(vms);

    let rss0 = rss_kib();
    let mut cfg = SimConfig::with_nodes(3);
    cfg.time_scale = 0.0;
    cfg.node_ssh_port = 0;
    cfg.guest_ssh_port = 0;
    let c = Cluster::start(cfg).await.expect("cluster");
    let http = client(&c);
    let auth = format!("PVEAPIToken={}", c.token());
    let base = c.api_url();

    // Requests/s on a small cluster (template only, as at the start of a run).
    let rps_res = hammer(&http, format!("{base}/cluster/resources"), auth.clone(), total, conc).await;
    let upid = post(&http, format!("{base}/nodes/pve1/qemu/9000/clone"), &auth, &[("newid", "100")]).await;
    let upid = upid["data"].as_str().expect("upid").to_string();
    let enc: String = upid
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect();
    let rps_task = hammer(&http, format!("{base}/nodes/pve1/tasks/{enc}/status"), auth.clone(), total, conc).await;

    // Memory: VMs, then running guests.
    let rss_start = rss_kib();
    for i in 1..vms {
        let id = (100 + i).to_string();
        post(
            &http,
            format!("{base}/nodes/pve1/qemu/9000/clone"),
            &auth,
            &[("newid", &id), ("name", &format!("bench-{i}"))],
        )
        .await;
    }
    let rss_vms = rss_kib();
    let key = "ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIOvV0CEuNQWMV03RDdrjNpre9K3rjG4y7g5lPdkD%2B80f%20bench";
    for i in 0..running {
        let vmid = 100 + i;
        let ip = format!("ip=127.66.{}.{}/8", i / 250, i % 250 + 1);
        post(
            &http,
            format!("{base}/nodes/pve1/qemu/{vmid}/config"),
            &auth,
            &[("ipconfig0", &ip), ("sshkeys", key), ("ciuser", "ops")],
        )
        .await;
        post(&http, format!("{base}/nodes/pve1/qemu/{vmid}/status/start"), &auth, &[]).await;
    }
    let mut up = 0;
    for _ in 0..1000 {
        up = (0..running).filter(|i| c.guest_ssh_addr(100 + *i as u32).is_some()).count();
        if up == running {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let rss_guests = rss_kib();
    let rps_res_big = hammer(&http, format!("{base}/cluster/resources?type=vm"), auth.clone(), total / 10, conc).await;

    println!("cradle-sim benchmark (requests over HTTPS keep-alive, {conc} concurrent clients in-process)");
    println!("  GET /cluster/resources (template only):  {rps_res:>9.0} req/s");
    println!("  GET /nodes/{{node}}/tasks/{{upid}}/status:    {rps_task:>9.0} req/s");
    println!("  GET /cluster/resources?type=vm ({vms} VMs): {rps_res_big:>9.0} req/s");
    println!("memory (VmRSS of the whole process, client included)");
    println!("  before cluster: {rss0} KiB; cluster started: {rss_start} KiB");
    println!(
        "  {vms} VMs (stopped):          {rss_vms} KiB  (+{} KiB, {:.1} KiB/VM)",
        rss_vms.saturating_sub(rss_start),
        rss_vms.saturating_sub(rss_start) as f64 / vms.max(1) as f64
    );
    println!(
        "  {running} running guests ({up} sshd up): {rss_guests} KiB  (+{} KiB, {:.1} KiB/guest)",
        rss_guests.saturating_sub(rss_vms),
        rss_guests.saturating_sub(rss_vms) as f64 / running.max(1) as f64
    );
    c.shutdown().await;
}
