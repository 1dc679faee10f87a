//! Recording what a simulator served, and checking recordings against the schema.
//!
//! Contract: a [`Recorder`] (one per simulator, when `SimConfig::record_dir` is set)
//! appends one JSON line per API request to `<dir>/<test>-<pid>-<n>.jsonl` (file 0600,
//! directory created 0700): `{"test", "method", "path", "params", "status", "data"}`.
//! `path` is below `/api2/json`, percent-decoded; `params` the merged query and body
//! parameters (`null` for a streamed upload, whose multipart body is not kept), with
//! `password`/`cipassword` values replaced by `<redacted>` (a string still); no header is
//! ever written (the token travels only in `Authorization`); an answer whose `data` is
//! over 64 KiB is kept as `"data": null, "truncated": true` (its request is still
//! checked, the answer not). `test` names the test that
//! started the simulator (see [`test_name`]). [`check_dir`] reads every `*.jsonl` of a
//! directory and returns the violations of the requests the simulator accepted and of
//! its successful answers: a request the simulator itself refused with 400 `Parameter
//! verification failed.` or 501 `not implemented`, or one that failed authentication,
//! is a test of those refusals, not a conformance failure.
//!
//! Failure modes: a recorder that cannot write logs one warning and stops recording;
//! [`check_dir`] fails on an unreadable directory or file, naming it.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::{Schema, Violation};

/// Answers larger than this (serialized) are recorded without their `data`.
const MAX_DATA: usize = 64 << 10;

/// Parameters whose values are secrets even in a test recording.
const REDACTED: &[&str] = &["password", "cipassword"];

/// Appends the exchanges of one simulator to its JSONL file.
#[derive(Debug)]
pub struct Recorder {
    test: String,
    file: Mutex<Option<std::fs::File>>,
    path: PathBuf,
}

impl Recorder {
    /// A recorder writing a new file under `dir`.
    pub fn create(dir: &Path) -> std::io::Result<Recorder> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        crate::fsutil::ensure_dir(dir).map_err(std::io::Error::other)?;
        let test = test_name();
        let stem: String =
            test.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' }).take(120).collect();
        let path = dir.join(format!("{stem}-{}-{}.jsonl", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
        let file = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&path)?;
        Ok(Recorder { test, file: Mutex::new(Some(file)), path })
    }

    /// Record one exchange. `params` is `None` for a body not kept (uploads).
    pub fn record(
        &self,
        method: &str,
        path: &str,
        params: Option<&BTreeMap<String, String>>,
        status: u16,
        body: &Value,
    ) {
        let params = params.map(|p| {
            p.iter()
                .map(|(k, v)| {
                    let v = if REDACTED.contains(&k.as_str()) { "<redacted>" } else { v.as_str() };
                    (k.clone(), Value::String(v.to_string()))
                })
                .collect::<serde_json::Map<_, _>>()
        });
        let mut data = body.get("data").cloned().unwrap_or(Value::Null);
        // A cluster of thousands of VMs answers listings of megabytes, many times: the
        // request is kept, such an answer is not (and not checked).
        let truncated = serde_json::to_vec(&data).map_or(0, |v| v.len()) > MAX_DATA;
        if truncated {
            data = Value::Null;
        }
        let line = json!({
            "test": self.test, "method": method, "path": path, "params": params, "status": status,
            "data": data, "truncated": truncated,
            "message": body.get("message").cloned().unwrap_or(Value::Null),
        });
        let mut guard = crate::sim::lock(&self.file);
        if let Some(f) = guard.as_mut()
            && let Err(e) = writeln!(f, "{line}")
        {
            tracing::warn!(path = %self.path.display(), error = %e, "conformance recording stopped");
            *guard = None;
        }
    }
}

/// The test that runs this process: the name after nextest's/libtest's `--exact` in this
/// process's arguments, else in its parent's (a `cradle` process a test started), else
/// the program's arguments.
pub fn test_name() -> String {
    fn exact(args: &[String]) -> Option<String> {
        let i = args.iter().position(|a| a == "--exact")?;
        args.get(i + 1).cloned()
    }
    let own: Vec<String> = std::env::args().collect();
    if let Some(t) = exact(&own) {
        return t;
    }
    let parent = std::fs::read(format!("/proc/{}/cmdline", std::os::unix::process::parent_id())).unwrap_or_default();
    let parent: Vec<String> = parent.split(|b| *b == 0).map(|s| String::from_utf8_lossy(s).into_owned()).collect();
    exact(&parent).unwrap_or_else(|| own.join(" "))
}

/// One violation found in a recording, with the test whose simulator saw it.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The test that started the simulator.
    pub test: String,
    /// The recording file.
    pub file: PathBuf,
    /// What was wrong.
    pub violation: Violation,
    /// `request` or `answer`.
    pub side: &'static str,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}, test {})", self.violation, self.side, self.test)
    }
}

/// Whether the simulator refused the request itself as PVE's verifier would (the test
/// was about that refusal), or never let it through authentication.
fn refused(status: u64, message: &str) -> bool {
    status == 401 || status == 501 || (status == 400 && message.starts_with("Parameter verification failed."))
}

/// Check one recorded line; `None` when it is not an exchange.
pub fn check_line(schema: &Schema, line: &Value) -> Option<(Vec<Violation>, Vec<Violation>)> {
    let method = line["method"].as_str()?;
    let path = line["path"].as_str()?;
    let status = line["status"].as_u64().unwrap_or(0);
    if refused(status, line["message"].as_str().unwrap_or("")) {
        return Some((Vec::new(), Vec::new()));
    }
    let request = match line["params"].as_object() {
        Some(p) => {
            let params: BTreeMap<String, String> =
                p.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect();
            schema.check_request(method, path, &params)
        }
        // A streamed upload: only the endpoint is checked.
        None => {
            schema.check_request(method, path, &BTreeMap::new()).into_iter().filter(|v| v.param.is_empty()).collect()
        }
    };
    let truncated = line["truncated"].as_bool().unwrap_or(false);
    let answer =
        if status == 200 && !truncated { schema.check_answer(method, path, &line["data"]) } else { Vec::new() };
    Some((request, answer))
}

/// Every violation in the recordings under `dir`, each distinct (endpoint, parameter,
/// problem, test) once.
pub fn check_dir(schema: &Schema, dir: &Path) -> Result<Vec<Finding>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            // A line cut short by a killed process is not an exchange.
            let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
            let Some((request, answer)) = check_line(schema, &v) else { continue };
            let test = v["test"].as_str().unwrap_or("?").to_string();
            for (side, list) in [("request", request), ("answer", answer)] {
                for violation in list {
                    let key =
                        (violation.endpoint.clone(), violation.param.clone(), violation.problem.clone(), test.clone());
                    if seen.insert(key) {
                        out.push(Finding { test: test.clone(), file: file.clone(), violation, side });
                    }
                }
            }
        }
    }
    Ok(out)
}
