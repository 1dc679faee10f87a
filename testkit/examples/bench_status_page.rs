//! The status page benchmark (docs/BENCHMARKS.md), run by
//! `scripts/bench-status-page`, which provides a project whose journal
//! directory holds one real run (a `cradle provision` on the simulator):
//!
//! 1. that journal is copied to `--runs` runs (ids, VM names and times
//!    rewritten; every tenth one failed at `create`);
//! 2. `cradle serve` starts on the project, and a headless Chromium loads
//!    `/status` `--samples` times, each a fresh load: time to first render
//!    (navigation start to the run list drawn, `window.cradleStatus`) and the
//!    bytes transferred (document, code, the list; resource timing);
//! 3. with the page open, a step is appended to a journal `--samples` times;
//!    the latency is from just before the append (wall clock) to the moment
//!    the page drew the update (`Date.now()` in the page, same clock);
//! 4. the serve process's peak RSS (VmHWM).
//!
//! Usage: `bench_status_page CRADLE_BIN CONFIG RUNS_DIR RUNS SAMPLES`

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cradle_testkit::chromium::Browser;
use serde_json::Value;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, bin, config, runs_dir, runs, samples] = &args[..] else {
        eprintln!("usage: bench_status_page CRADLE_BIN CONFIG RUNS_DIR RUNS SAMPLES");
        std::process::exit(2);
    };
    let runs: usize = runs.parse().expect("RUNS is a number");
    let samples: usize = samples.parse().expect("SAMPLES is a number");
    let runs_dir = PathBuf::from(runs_dir);
    let (journal_bytes, last_id) = multiply(&runs_dir, runs);
    println!("== {runs} runs in the journal ({:.1} MB of journals)", journal_bytes as f64 / 1e6);

    let mut serve = Command::new(bin)
        .args(["--config", config, "serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cradle serve");
    let stderr = serve.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines.next().and_then(Result::ok).expect("cradle serve printed its address");
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split(' ').next().unwrap_or_default().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});

    let mut browser = Browser::launch().expect("chromium");
    let page = format!("{url}/status");
    // The first load also waits for the board's first reading of the journals.
    browser.navigate(&page).expect("page");
    browser
        .wait_for("window.cradleStatus && window.cradleStatus.firstRender !== null", Duration::from_secs(120))
        .expect("render");
    let mut render_ms = Vec::new();
    let mut bytes = Vec::new();
    for _ in 0..samples {
        browser.navigate(&page).expect("page");
        let first = browser
            .wait_for("window.cradleStatus && window.cradleStatus.firstRender", Duration::from_secs(60))
            .expect("render");
        render_ms.push(first.as_f64().expect("ms"));
        let sent = browser
            .eval(
                "performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))\
                 .filter(e => !e.name.endsWith('/status/events')).reduce((n, e) => n + e.transferSize, 0)",
            )
            .expect("bytes");
        bytes.push(sent.as_f64().expect("bytes"));
    }
    let cards = browser.eval("document.querySelectorAll('section.run').length").expect("cards");
    println!("first render (navigation start → list drawn, {cards} runs drawn): {}", stats(&mut render_ms, "ms"));
    println!("bytes transferred per load (document, code, icon, list): {}", stats(&mut bytes, "B"));

    browser.wait_for("document.getElementById('live').textContent === 'live'", Duration::from_secs(30)).expect("live");
    let journal = runs_dir.join(format!("{last_id}.jsonl"));
    let mut latency = Vec::new();
    for i in 0..samples {
        let before = browser.eval("window.cradleStatus.updates.length").expect("n").as_u64().expect("n");
        let stamp = rfc3339_now();
        let at = now_ms();
        let mut f = std::fs::OpenOptions::new().append(true).open(&journal).expect("journal");
        writeln!(
            f,
            r#"{{"event":"step_started","vm":"bench-page-{i}","step":"bench","at":"{stamp}"}}
{{"event":"step_finished","vm":"bench-page-{i}","step":"bench","at":"{stamp}","duration_ms":0,"error":null}}"#
        )
        .expect("append");
        drop(f);
        let drawn = browser
            .wait_for(
                &format!(
                    "window.cradleStatus.updates.length > {before} && \
                     window.cradleStatus.updates.slice({before}).find(u => u.id === {last_id:?} && u.what === 'card')"
                ),
                Duration::from_secs(30),
            )
            .expect("the update reached the page");
        latency.push(drawn["at"].as_f64().expect("at") - at as f64);
        std::thread::sleep(Duration::from_millis(300));
    }
    println!("step end in the journal → drawn on the page: {}", stats(&mut latency, "ms"));
    println!("cradle serve peak RSS: {}", peak_rss(serve.id()));
    let _ = Command::new("kill").args(["-TERM", &serve.id().to_string()]).status();
    let _ = serve.wait();
}

/// Copy the one journal in `dir` to `runs` journals; their total size and
/// the newest id.
fn multiply(dir: &Path, runs: usize) -> (u64, String) {
    let template = std::fs::read_dir(dir)
        .expect("runs dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .expect("one journal in the runs dir");
    let text = std::fs::read_to_string(&template).expect("template");
    let first: Value = serde_json::from_str(text.lines().next().expect("a line")).expect("run_started");
    let id = first["run_id"].as_str().expect("run_id").to_string();
    let vm = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|e| e["vm"].as_str().map(str::to_string))
        .expect("a VM");
    std::fs::remove_file(&template).expect("rm template");
    let mut total = 0;
    let mut last = String::new();
    for i in 0..runs {
        let new_id = format!("20261101T{:02}{:02}{:02}Z-{:04x}", (i / 3600) % 24, (i / 60) % 60, i % 60, i);
        let mut body = text.replace(&id, &new_id).replace(&vm, &format!("bench-{i}"));
        if i % 10 == 9 {
            // A failed run: the same journal cut after `create` started, then failed there.
            let cut = body.find(r#""step":"create""#).and_then(|at| body[at..].find('\n').map(|n| at + n + 1));
            if let Some(cut) = cut {
                body.truncate(cut);
                body.push_str(&format!(
                    "{{\"event\":\"step_finished\",\"vm\":\"bench-{i}\",\"step\":\"create\",\"at\":\"2026-11-01T00:00:05Z\",\"duration_ms\":1000,\"error\":\"clone of 9000 failed: storage local-lvm is full\"}}\n\
                     {{\"event\":\"run_finished\",\"status\":\"failed\",\"at\":\"2026-11-01T00:00:05Z\",\"error\":\"clone of 9000 failed: storage local-lvm is full\"}}\n"
                ));
            }
        }
        std::fs::write(dir.join(format!("{new_id}.jsonl")), &body).expect("journal");
        total += body.len() as u64;
        last = new_id;
    }
    (total, last)
}

fn stats(values: &mut [f64], unit: &str) -> String {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return "no samples".into();
    }
    let median = values[n / 2];
    let p95 = values[((n as f64 * 0.95).ceil() as usize).clamp(1, n) - 1];
    format!(
        "median {median:.0} {unit}, p95 {p95:.0} {unit}, min {:.0} {unit}, max {:.0} {unit} ({n} samples)",
        values[0],
        values[n - 1]
    )
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis()
}

/// Now as RFC 3339 UTC with milliseconds, from the system clock.
fn rfc3339_now() -> String {
    let out = Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%S.%3NZ"]).output().expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn peak_rss(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| l["VmHWM:".len()..].trim().to_string()))
        .unwrap_or_else(|| "unknown".into())
}
