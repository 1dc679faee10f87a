//! `cradle serve` under load, measured from outside as NetBox would see it
//! (docs/BENCHMARKS.md, "cradle serve"): the real binary (`CRADLE_BIN`, else
//! target/release/cradle) on a throwaway project whose pipeline holds each
//! event for 2 s, 50 at once; 8 clients on keep-alive connections POST
//! signed deliveries for distinct VMs. Prints deliveries accepted per second
//! (202), latency percentiles of the answer, anything not accepted, the CPU
//! the service used; then the service's memory with 1,000 events queued.
//!
//! `cargo bench -p cradle --bench serve_load -- [DELIVERIES]` (default 20000).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cradle::serve::WebhookKey;

const SECRET: &str = "bench-webhook-secret-0123456789";
const BODY: &str = include_str!("../src/serve/testdata/netbox-4.7.3-vm-staged.body");

fn cradle_bin() -> PathBuf {
    std::env::var_os("CRADLE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/cradle"))
}

fn project(dir: &Path, concurrency: usize, hold_ms: u64) {
    let toml = format!(
        "default_environment = \"test\"\nstate_dir = \"state\"\n[clusters.sim]\nkind = \"sim\"\n[environments.test]\ncluster = \"sim\"\nbackend = \"direct\"\n\
         [serve]\nconcurrency = {concurrency}\nmax_requests_per_s = 1000000\nmax_queued = 1000000\nshutdown_grace_s = 0\n\
         [serve.sources.netbox]\nsecret = {{ file = \"hook.secret\" }}\n"
    );
    std::fs::write(dir.join("cradle.toml"), toml).expect("config");
    let secret = dir.join("hook.secret");
    std::fs::write(&secret, SECRET).expect("secret");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    std::fs::create_dir_all(dir.join("workflows")).expect("workflows");
    let script = format!(
        "fn host(event) {{ cradle::sleep({hold_ms}); #{{ skip: \"bench\" }} }}\nfn staged(event, vm) {{ }}\nfn failed(event, failure) {{ }}\n"
    );
    std::fs::write(dir.join("workflows/netbox.rhai"), script).expect("netbox.rhai");
}

fn start(dir: &Path) -> (Child, SocketAddr) {
    let mut child = Command::new(cradle_bin())
        .current_dir(dir)
        .args(["-q", "serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cradle serve (build it: cargo build --release -p cradle)");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.split("http://").nth(1).and_then(|a| a.split(' ').next()?.parse().ok()))
        .expect("listening");
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

/// Deliveries for NetBox VMs `ids`, on one keep-alive connection; each answer's status and time.
fn client(addr: SocketAddr, ids: Vec<u64>) -> Vec<(u16, Duration)> {
    let key = WebhookKey::new(SECRET.as_bytes());
    let mut conn = TcpStream::connect(addr).expect("connect");
    conn.set_nodelay(true).expect("nodelay");
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let body = BODY.replace("\"id\": 1, \"url\"", &format!("\"id\": {id}, \"url\""));
        let head = format!(
            "POST /hooks/netbox HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nContent-Length: {}\r\nX-Hook-Signature: {}\r\n\r\n",
            body.len(),
            key.sign(body.as_bytes())
        );
        let sent = Instant::now();
        conn.write_all(head.as_bytes()).and_then(|()| conn.write_all(body.as_bytes())).expect("send");
        let mut status = 0;
        let mut length = 0;
        let mut line = String::new();
        loop {
            line.clear();
            reader.read_line(&mut line).expect("answer");
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some(code) = l.strip_prefix("HTTP/1.1 ") {
                status = code.get(..3).and_then(|c| c.parse().ok()).unwrap_or(0);
            } else if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut rest = vec![0; length];
        reader.read_exact(&mut rest).expect("body");
        out.push((status, sent.elapsed()));
    }
    out
}

/// (VmRSS, VmHWM) in KiB and CPU seconds (user + system) of `pid`.
fn usage(pid: u32) -> (u64, u64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status.lines().find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse().ok()).unwrap_or(0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(") ").map(|(_, r)| r.split(' ').collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (11 and 12 after the command).
    (kib("VmRSS:"), kib("VmHWM:"), (ticks(11) + ticks(12)) / 100.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn main() {
    let n: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(20_000);
    let clients = 8;
    let dir = tempfile::tempdir().expect("tmp");
    project(dir.path(), 50, 2000);
    let (mut serve, addr) = start(dir.path());
    let (_, _, cpu_before) = usage(serve.id());
    let began = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let ids: Vec<u64> = (0..n).filter(|i| i % clients == c).map(|i| i + 10).collect();
            std::thread::spawn(move || client(addr, ids))
        })
        .collect();
    let mut all: Vec<(u16, Duration)> = threads.into_iter().flat_map(|t| t.join().expect("client")).collect();
    let wall = began.elapsed();
    let (_, hwm, cpu_after) = usage(serve.id());
    let _ = serve.kill();
    let _ = serve.wait();
    let accepted = all.iter().filter(|(s, _)| *s == 202).count();
    let other: Vec<u16> = all.iter().map(|(s, _)| *s).filter(|s| *s != 202).collect();
    all.sort_by_key(|(_, d)| *d);
    let times: Vec<Duration> = all.iter().map(|(_, d)| *d).collect();
    println!("cradle serve, {n} signed deliveries from {clients} keep-alive clients, pipelines of 2 s, 50 at once:");
    println!(
        "  accepted {accepted}/{n} in {:.2} s = {:.0}/s; not accepted: {} {:?}",
        wall.as_secs_f64(),
        accepted as f64 / wall.as_secs_f64(),
        other.len(),
        other.iter().take(5).collect::<Vec<_>>()
    );
    println!(
        "  answer latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; service CPU {:.2} s; peak RSS {} MiB",
        percentile(&times, 0.50).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        times.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        cpu_after - cpu_before,
        hwm / 1024
    );

    let dir = tempfile::tempdir().expect("tmp");
    project(dir.path(), 1, 60_000);
    let (mut serve, addr) = start(dir.path());
    let (idle, _, _) = usage(serve.id());
    let answers = client(addr, (10..1010).collect());
    std::thread::sleep(Duration::from_millis(500));
    let (rss, hwm, _) = usage(serve.id());
    let _ = serve.kill();
    let _ = serve.wait();
    println!(
        "  with 1,000 events queued ({} accepted): RSS {} MiB (idle before: {} MiB), peak {} MiB",
        answers.iter().filter(|(s, _)| *s == 202).count(),
        rss / 1024,
        idle / 1024,
        hwm / 1024
    );
}
