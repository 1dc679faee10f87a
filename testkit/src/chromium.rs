//! A headless Chromium for tests that look at a page as a browser runs it,
//! driven over the DevTools protocol (CDP) on 127.0.0.1. Blocking, one page.
//!
//! Contract:
//! - [`Browser::launch`] starts `chromium` (the one on `PATH`, or the binary
//!   `CRADLE_CHROMIUM` ([`BINARY_ENV`]) names) headless with a fresh profile
//!   in a temporary directory, in a process group of its own, and connects to
//!   its `about:blank` page. Chromium picks its debugging port itself and
//!   says which in `DevToolsActivePort`, so parallel tests never race for one.
//! - Dropping the [`Browser`] SIGKILLs the whole group (zygotes, renderers,
//!   GPU and utility processes are all in it), waits until none of it is
//!   left, and removes the directory. (A test process killed outright runs
//!   no `Drop`: its chromium is then left running.)
//! - Chromium runs with `--no-sandbox` (its sandbox refuses to start as root,
//!   as tests in containers run) and with everything that would reach out on
//!   its own (updates, sync, metrics, a proxy from the environment) turned off.
//! - [`Browser::console_errors`] lists the page's uncaught exceptions,
//!   `console.error`/`console.assert` calls and error log entries (e.g. a
//!   resource that failed to load). They are read as they arrive while the
//!   driver waits for an answer, so one raised after the last call shows after
//!   the next one.
//!
//! Failure modes: every method returns `Err` saying what it was doing
//! (`chromium: Page.navigate http://...: net::ERR_CONNECTION_REFUSED`); a
//! browser that stops answering is an error after 30 s, never a hang; a
//! chromium that does not start is an error with the tail of its output.
//! [`Browser::start`] is the tests' entry: where chromium is missing it panics
//! saying what to install, unless `CRADLE_SKIP_CHROMIUM_TESTS=1`
//! ([`SKIP_ENV`]) is set: then it returns `None` and prints that the test is
//! skipped.

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

/// The variable that lets the browser tests be skipped where Chromium is not installed.
pub const SKIP_ENV: &str = "CRADLE_SKIP_CHROMIUM_TESTS";
/// The variable naming the Chromium binary to run instead of `chromium` on `PATH`.
pub const BINARY_ENV: &str = "CRADLE_CHROMIUM";

/// How long chromium may take to start and offer its page.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a command may take to be answered.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a navigation may take to fire its load event.
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Between two looks at `DevToolsActivePort`, the target list, a [`Browser::wait_for`] expression.
const POLL: Duration = Duration::from_millis(50);
/// The longest an expression is quoted in a message.
const QUOTE_MAX: usize = 200;

/// Flags besides the profile directory and the first page.
const FLAGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    // Containers' /dev/shm is small; chromium then crashes tabs on big pages.
    "--disable-dev-shm-usage",
    // Port 0: chromium binds a free one and writes it to DevToolsActivePort.
    "--remote-debugging-port=0",
    "--remote-debugging-address=127.0.0.1",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-component-extensions-with-background-pages",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-breakpad",
    "--disable-features=Translate,MediaRouter,OptimizationHints,DialMediaRouteProvider",
    "--metrics-recording-only",
    "--no-pings",
    "--password-store=basic",
    // No proxy, whatever http_proxy says: the tests' servers are on loopback.
    "--proxy-server=direct://",
    "--proxy-bypass-list=*",
    "--hide-scrollbars",
    "--mute-audio",
    "--window-size=1280,900",
];

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file())
}

/// The binary to run: `CRADLE_CHROMIUM` (a path, or a name on `PATH`), else
/// `chromium` or `chromium-browser` on `PATH`.
fn binary() -> Option<PathBuf> {
    if let Some(named) = std::env::var_os(BINARY_ENV).filter(|v| !v.is_empty()) {
        let named = PathBuf::from(named);
        return if named.components().count() > 1 {
            named.is_file().then_some(named)
        } else {
            on_path(&named.to_string_lossy())
        };
    }
    on_path("chromium").or_else(|| on_path("chromium-browser"))
}

/// Whether there is a chromium to launch: `CRADLE_CHROMIUM` names one, or
/// `chromium` (or `chromium-browser`) is on `PATH`.
pub fn available() -> bool {
    binary().is_some()
}

/// Chromium's process group and the directory it runs in. Its own value so
/// that a launch failing halfway cleans up as a dropped [`Browser`] does.
struct Process {
    child: Child,
    pgid: i32,
    /// `profile/` (the user data directory) and `chromium.log` (its output).
    dir: tempfile::TempDir,
}

impl Process {
    fn profile(&self) -> PathBuf {
        self.dir.path().join("profile")
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("chromium.log")).unwrap_or_default()
    }

    /// The end of chromium's output, for a message.
    fn log_tail(&self) -> String {
        let log = self.log();
        // Without D-Bus (containers, CI) chromium complains about it at
        // every turn, harmlessly: those lines would crowd out the real cause.
        let lines: Vec<&str> = log.lines().filter(|l| !l.contains(":ERROR:dbus/") && !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        if tail.is_empty() { "(chromium printed nothing)".to_string() } else { format!("chromium's output:\n{tail}") }
    }

    /// The debugging port from `DevToolsActivePort`, once chromium wrote it.
    fn wait_for_port(&mut self, deadline: Instant) -> Result<u16, String> {
        let file = self.profile().join("DevToolsActivePort");
        loop {
            // Both lines: the file may be seen half written.
            if let Ok(text) = fs::read_to_string(&file) {
                let mut lines = text.lines();
                if let (Some(port), Some(_)) = (lines.next(), lines.next())
                    && let Ok(port) = port.trim().parse::<u16>()
                {
                    return Ok(port);
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "chromium: launch: it exited ({status}) before it opened its DevTools port; {}",
                    self.log_tail()
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "chromium: launch: no {} within {} s; {}",
                    file.display(),
                    START_TIMEOUT.as_secs(),
                    self.log_tail()
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Whether a process of the group is still running (not yet a zombie).
    fn group_alive(&self) -> bool {
        let Ok(entries) = fs::read_dir("/proc") else { return false };
        entries.flatten().filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit())).any(|e| {
            // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
            let Ok(stat) = fs::read_to_string(e.path().join("stat")) else { return false };
            let Some((_, rest)) = stat.rsplit_once(')') else { return false };
            let fields: Vec<&str> = rest.split_whitespace().take(3).collect();
            matches!(fields.as_slice(), [state, _, pgrp] if pgrp.parse() == Ok(self.pgid) && !matches!(*state, "Z" | "X"))
        })
    }
}

fn kill_group(pgid: i32) {
    // SAFETY: killpg on the process group this process created; no memory is involved.
    #[allow(unsafe_code, reason = "a libc call without memory arguments")]
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        kill_group(self.pgid);
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The rest of the group are chromium's children, not ours: SIGKILL
        // takes effect asynchronously, so wait (briefly) until they are gone
        // before the directory they use is removed.
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.group_alive() && Instant::now() < deadline {
            kill_group(self.pgid);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A headless chromium and a DevTools connection to its one page.
pub struct Browser {
    socket: WebSocket<TcpStream>,
    port: u16,
    next_id: u64,
    /// `Page.loadEventFired` events since the last navigation started.
    loads: u64,
    errors: Vec<String>,
    /// Last: the connection closes before chromium is killed.
    process: Process,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser")
            .field("port", &self.port)
            .field("pgid", &self.process.pgid)
            .field("dir", &self.process.dir.path())
            .finish_non_exhaustive()
    }
}

impl Browser {
    /// A launched browser, or `None` (with a message) when chromium is
    /// missing and [`SKIP_ENV`] allows skipping. Panics, naming the package,
    /// otherwise, and when it does not start; `test` names the test in
    /// messages.
    pub fn start(test: &str) -> Option<Browser> {
        if !available() {
            let why = format!(
                "Chromium is not installed: the browser tests drive a headless chromium \
                 (Debian package chromium: apt-get install -y chromium; or set {BINARY_ENV} to its binary)"
            );
            if std::env::var(SKIP_ENV).as_deref() == Ok("1") {
                eprintln!("skipping {test}: {why}; {SKIP_ENV}=1 is set");
                return None;
            }
            panic!("{test}: {why}. Set {SKIP_ENV}=1 to skip these tests where Chromium cannot be installed.");
        }
        Some(Browser::launch().unwrap_or_else(|e| panic!("{test}: {e}")))
    }

    /// Start chromium and connect to its `about:blank` page (within 30 s).
    pub fn launch() -> Result<Browser, String> {
        let binary = binary().ok_or_else(|| format!("chromium: launch: not on PATH and {BINARY_ENV} names none"))?;
        let dir = tempfile::Builder::new()
            .prefix("cradle-chromium-")
            .tempdir()
            .map_err(|e| format!("chromium: launch: a temporary directory: {e}"))?;
        let profile = dir.path().join("profile");
        fs::create_dir(&profile).map_err(|e| format!("chromium: launch: create {}: {e}", profile.display()))?;
        let log_path = dir.path().join("chromium.log");
        let log =
            fs::File::create(&log_path).map_err(|e| format!("chromium: launch: create {}: {e}", log_path.display()))?;
        let log2 = log.try_clone().map_err(|e| format!("chromium: launch: {}: {e}", log_path.display()))?;
        let child = Command::new(&binary)
            .args(FLAGS)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            // Its own group: one killpg reaches every process chromium forks.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("chromium: launch {}: {e}", binary.display()))?;
        let pgid = i32::try_from(child.id()).map_err(|e| format!("chromium: launch: pid {}: {e}", child.id()))?;
        let mut process = Process { child, pgid, dir };
        let deadline = Instant::now() + START_TIMEOUT;
        let port = process.wait_for_port(deadline)?;
        let page = page_target(port, deadline).map_err(|e| format!("{e}; {}", process.log_tail()))?;
        let socket = connect(port, &page)?;
        let mut browser = Browser { socket, port, next_id: 1, loads: 0, errors: Vec::new(), process };
        // Runtime: exceptions and console calls; Log: e.g. failed resource loads.
        browser.call("Runtime.enable", "Runtime.enable", json!({}))?;
        browser.call("Log.enable", "Log.enable", json!({}))?;
        Ok(browser)
    }

    /// Chromium's output so far (stdout and stderr; D-Bus complaints included).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Load `url` and wait (up to 30 s) for its load event. A navigation
    /// chromium reports as failed (`errorText`, e.g. a refused connection) is
    /// an error; an HTTP error status is not.
    pub fn navigate(&mut self, url: &str) -> Result<(), String> {
        let what = format!("Page.navigate {url}");
        self.call(&what, "Page.enable", json!({}))?;
        self.loads = 0;
        let reply = self.call(&what, "Page.navigate", json!({ "url": url }))?;
        if let Some(error) = reply.get("errorText").and_then(Value::as_str)
            && !error.is_empty()
        {
            return Err(format!("chromium: {what}: {error}"));
        }
        // A same-document navigation (only the fragment changes) has no
        // loader and fires no load event.
        if reply.get("loaderId").is_none() {
            return Ok(());
        }
        let deadline = Instant::now() + LOAD_TIMEOUT;
        while self.loads == 0 {
            let message = self.receive(deadline).map_err(|e| {
                format!("chromium: {what}: waiting {} s for its load event: {e}", LOAD_TIMEOUT.as_secs())
            })?;
            self.dispatch(&message);
        }
        Ok(())
    }

    /// The value of the JavaScript `expression` in the page (a promise is
    /// awaited), as JSON: `undefined` is `null`; `NaN`, `Infinity`, `-0` and
    /// bigints are their text. A thrown exception is an error with its message.
    pub fn eval(&mut self, expression: &str) -> Result<Value, String> {
        self.evaluate(expression)?.map_err(|e| format!("chromium: Runtime.evaluate {}: {e}", quote(expression)))
    }

    /// [`Browser::eval`] `expression` every 50 ms until its value is truthy
    /// (as JavaScript means it), and that value; an exception counts as not
    /// yet. After `timeout`, an error naming the expression and what it last
    /// gave.
    pub fn wait_for(&mut self, expression: &str, timeout: Duration) -> Result<Value, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.evaluate(expression) {
                Ok(Ok(value)) if truthy(&value) => return Ok(value),
                Ok(Ok(value)) => format!("the value {value}"),
                Ok(Err(exception)) => format!("the exception {exception}"),
                // The page is being replaced (a form sent, a link followed):
                // its successor is what the expression waits for.
                Err(e) if e.contains("navigated or closed") || e.contains("context was destroyed") => {
                    format!("a navigation ({e})")
                }
                Err(e) => return Err(e),
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "chromium: waiting for {}: not truthy within {} ms; last it gave {last}",
                    quote(expression),
                    timeout.as_millis()
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// A PNG of the whole page (beyond the 1280×900 viewport when it is longer).
    pub fn screenshot_png(&mut self) -> Result<Vec<u8>, String> {
        const WHAT: &str = "Page.captureScreenshot";
        let reply = self.call(WHAT, WHAT, json!({ "format": "png", "captureBeyondViewport": true }))?;
        let data =
            reply.get("data").and_then(Value::as_str).ok_or_else(|| format!("chromium: {WHAT}: no data in {reply}"))?;
        base64::engine::general_purpose::STANDARD.decode(data).map_err(|e| format!("chromium: {WHAT}: its data: {e}"))
    }

    /// Send `headers` with every request the page makes from now on.
    pub fn set_extra_headers(&mut self, headers: &[(&str, &str)]) -> Result<(), String> {
        // Names only: the values may be credentials.
        let names: Vec<&str> = headers.iter().map(|(name, _)| *name).collect();
        let what = format!("Network.setExtraHTTPHeaders {}", names.join(", "));
        self.call(&what, "Network.enable", json!({}))?;
        let map: serde_json::Map<String, Value> =
            headers.iter().map(|(name, value)| (name.to_string(), Value::String(value.to_string()))).collect();
        self.call(&what, "Network.setExtraHTTPHeaders", json!({ "headers": map }))?;
        Ok(())
    }

    /// The page's errors seen so far: uncaught exceptions, `console.error`
    /// and failed `console.assert` calls, error log entries.
    pub fn console_errors(&self) -> Vec<String> {
        self.errors.clone()
    }

    /// `Runtime.evaluate`: `Err` for the connection, `Ok(Err)` for an exception.
    fn evaluate(&mut self, expression: &str) -> Result<Result<Value, String>, String> {
        let what = format!("Runtime.evaluate {}", quote(expression));
        let params = json!({ "expression": expression, "returnByValue": true, "awaitPromise": true });
        let reply = self.call(&what, "Runtime.evaluate", params)?;
        if let Some(details) = reply.get("exceptionDetails") {
            return Ok(Err(exception_text(details)));
        }
        let result = &reply["result"];
        Ok(Ok(match (result.get("value"), result.get("unserializableValue")) {
            (Some(value), _) => value.clone(),
            (None, Some(text)) => text.clone(),
            (None, None) => Value::Null,
        }))
    }

    /// Send `method` and wait (up to 30 s) for its answer's `result`, handling
    /// the events that come first; `what` says in errors what was being done.
    fn call(&mut self, what: &str, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({ "id": id, "method": method, "params": params }).to_string();
        self.socket.send(Message::text(request)).map_err(|e| format!("chromium: {what}: sending {method}: {e}"))?;
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        loop {
            let message = self.receive(deadline).map_err(|e| {
                format!("chromium: {what}: waiting {} s for the answer to {method}: {e}", COMMAND_TIMEOUT.as_secs())
            })?;
            if message.get("id").and_then(Value::as_u64) == Some(id) {
                if let Some(error) = message.get("error") {
                    let text = error.get("message").and_then(Value::as_str).unwrap_or("(no message)");
                    let data = error.get("data").and_then(Value::as_str).map(|d| format!(" ({d})")).unwrap_or_default();
                    return Err(format!("chromium: {what}: {method} failed: {text}{data}"));
                }
                return Ok(message.get("result").cloned().unwrap_or(Value::Null));
            }
            self.dispatch(&message);
        }
    }

    /// Note what an event says; answers to other ids (none are outstanding) are dropped.
    fn dispatch(&mut self, message: &Value) {
        let Some(method) = message.get("method").and_then(Value::as_str) else { return };
        let params = &message["params"];
        match method {
            "Page.loadEventFired" => self.loads += 1,
            "Runtime.exceptionThrown" => self.errors.push(exception_text(&params["exceptionDetails"])),
            "Runtime.consoleAPICalled" => {
                let kind = params["type"].as_str().unwrap_or_default();
                if matches!(kind, "error" | "assert") {
                    let args: Vec<String> =
                        params["args"].as_array().map(|a| a.iter().map(remote_text).collect()).unwrap_or_default();
                    self.errors.push(format!("console.{kind}: {}", args.join(" ")));
                }
            }
            "Log.entryAdded" => {
                let entry = &params["entry"];
                if entry["level"] == "error" {
                    let source = entry["source"].as_str().unwrap_or("log");
                    let text = entry["text"].as_str().unwrap_or_default();
                    let url = entry["url"].as_str().map(|u| format!(" ({u})")).unwrap_or_default();
                    self.errors.push(format!("{source}: {text}{url}"));
                }
            }
            _ => {}
        }
    }

    /// The next CDP message, by `deadline`.
    fn receive(&mut self, deadline: Instant) -> Result<Value, String> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("timed out: chromium sent nothing more".to_string());
            }
            // The read timeout is what keeps a hung browser from hanging the
            // test; tungstenite keeps a partly read frame across it.
            self.socket.get_mut().set_read_timeout(Some(left)).map_err(|e| format!("setting the read timeout: {e}"))?;
            match self.socket.read() {
                Ok(Message::Text(text)) => {
                    return serde_json::from_str(text.as_str()).map_err(|e| format!("a message that is not JSON: {e}"));
                }
                Ok(Message::Binary(bytes)) => {
                    return serde_json::from_slice(&bytes).map_err(|e| format!("a message that is not JSON: {e}"));
                }
                Ok(Message::Close(frame)) => {
                    return Err(format!(
                        "chromium closed the DevTools connection ({frame:?}); {}",
                        self.process.log_tail()
                    ));
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e)) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => return Err(format!("reading the DevTools connection: {e}; {}", self.process.log_tail())),
            }
        }
    }
}

/// The page target's WebSocket URL, from `/json/list` (which may list it
/// only a moment after the port is open).
fn page_target(port: u16, deadline: Instant) -> Result<String, String> {
    loop {
        let last = match http_get(port, "/json/list") {
            Ok(Value::Array(targets)) => {
                let pages: Vec<&Value> = targets.iter().filter(|t| t["type"] == "page").collect();
                // The page opened with about:blank; any page when it has moved on.
                let page = pages.iter().find(|t| t["url"] == "about:blank").or(pages.first());
                if let Some(url) = page.and_then(|t| t["webSocketDebuggerUrl"].as_str()) {
                    return Ok(url.to_string());
                }
                format!("no page among {} targets", targets.len())
            }
            Ok(other) => format!("not a list: {other}"),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(format!("chromium: launch: GET http://127.0.0.1:{port}/json/list: {last}"));
        }
        std::thread::sleep(POLL);
    }
}

/// GET `path` from the DevTools HTTP server, as JSON.
fn http_get(port: u16, path: &str) -> Result<Value, String> {
    let timeout = Duration::from_secs(5);
    let mut stream = TcpStream::connect_timeout(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)), timeout)
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    // Read to Content-Length rather than to the end: the server need not close.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let status = head.lines().next().unwrap_or_default();
            if status.split_whitespace().nth(1) != Some("200") {
                return Err(format!("answered {status:?}"));
            }
            let length = head.lines().find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.trim().eq_ignore_ascii_case("content-length").then(|| value.trim().parse::<usize>().ok()).flatten()
            });
            let body = &buf[end + 4..];
            if let Some(n) = length
                && body.len() >= n
            {
                return serde_json::from_slice(&body[..n]).map_err(|e| format!("not JSON: {e}"));
            }
        }
        let n = stream.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            // Closed: what came is all there is.
            let end = buf.windows(4).position(|w| w == b"\r\n\r\n").ok_or("closed before the headers ended")?;
            return serde_json::from_slice(&buf[end + 4..]).map_err(|e| format!("not JSON: {e}"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The WebSocket connection to the page at `url` (on 127.0.0.1:`port`).
fn connect(port: u16, url: &str) -> Result<WebSocket<TcpStream>, String> {
    let what = format!("chromium: launch: connect to {url}");
    let stream = TcpStream::connect_timeout(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)), Duration::from_secs(5))
        .map_err(|e| format!("{what}: {e}"))?;
    // Requests are small and awaited one at a time: no Nagle delay.
    stream.set_nodelay(true).map_err(|e| format!("{what}: {e}"))?;
    stream.set_read_timeout(Some(COMMAND_TIMEOUT)).map_err(|e| format!("{what}: {e}"))?;
    stream.set_write_timeout(Some(COMMAND_TIMEOUT)).map_err(|e| format!("{what}: {e}"))?;
    // A full-page screenshot arrives as one message, bigger than the default frame limit allows.
    let config = WebSocketConfig::default().max_message_size(Some(512 << 20)).max_frame_size(Some(512 << 20));
    let (socket, _) =
        tungstenite::client::client_with_config(url, stream, Some(config)).map_err(|e| format!("{what}: {e}"))?;
    Ok(socket)
}

/// An exception as CDP details it: its description (message and stack),
/// else its text, and where it was thrown.
fn exception_text(details: &Value) -> String {
    let text = details["text"].as_str().unwrap_or("exception");
    let description = details["exception"]["description"]
        .as_str()
        .map(str::to_string)
        .or_else(|| details["exception"].get("value").map(|v| v.to_string()));
    let message = match description {
        Some(d) => format!("{text} {d}"),
        None => text.to_string(),
    };
    match details["url"].as_str().filter(|u| !u.is_empty()) {
        Some(url) => {
            // CDP's lines and columns are 0-based.
            let line = details["lineNumber"].as_u64().unwrap_or_default() + 1;
            let column = details["columnNumber"].as_u64().unwrap_or_default() + 1;
            format!("{message} (at {}:{line}:{column})", quote(url))
        }
        None => message,
    }
}

/// A console argument as the console would print it.
fn remote_text(arg: &Value) -> String {
    match (arg.get("value"), arg["description"].as_str(), arg["unserializableValue"].as_str()) {
        (Some(Value::String(s)), _, _) => s.clone(),
        (Some(value), _, _) => value.to_string(),
        (None, Some(description), _) => description.to_string(),
        (None, None, Some(text)) => text.to_string(),
        (None, None, None) => arg["type"].as_str().unwrap_or("undefined").to_string(),
    }
}

/// JavaScript's truthiness of a value as JSON brought it back.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        // Unserializable values come back as text; "NaN" and "-0" are falsy.
        Value::String(s) => !s.is_empty() && s != "NaN" && s != "-0",
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// `text` for a message, cut short when long (data: URLs, scripts).
fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_MAX) {
        Some((cut, _)) => format!("`{}…`", &text[..cut]),
        None => format!("`{text}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `html` as a `data:` URL.
    fn page(html: &str) -> String {
        let mut url = String::from("data:text/html,");
        for b in html.bytes() {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                url.push(b as char);
            } else {
                url.push_str(&format!("%{b:02X}"));
            }
        }
        url
    }

    /// The processes whose command line mentions `needle`.
    fn processes_mentioning(needle: &str) -> Vec<String> {
        let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
        entries
            .flatten()
            .filter_map(|e| fs::read(e.path().join("cmdline")).ok().map(|c| (e.file_name(), c)))
            .map(|(pid, c)| (pid, String::from_utf8_lossy(&c).replace('\0', " ")))
            .filter(|(_, c)| c.contains(needle))
            .map(|(pid, c)| format!("{}: {c}", pid.to_string_lossy()))
            .collect()
    }

    #[test]
    fn truthiness_is_javascripts() {
        for falsy in [json!(null), json!(false), json!(0), json!(0.0), json!(""), json!("NaN"), json!("-0")] {
            assert!(!truthy(&falsy), "{falsy} is falsy");
        }
        for truthy_ in [json!(true), json!(1), json!(-0.5), json!("0"), json!([]), json!({}), json!("Infinity")] {
            assert!(truthy(&truthy_), "{truthy_} is truthy");
        }
    }

    #[test]
    fn chromium_loads_a_page_runs_its_script_and_leaves_no_process_behind() {
        let Some(mut browser) = Browser::start("chromium_loads_a_page_runs_its_script_and_leaves_no_process_behind")
        else {
            return;
        };
        let profile = browser.process.profile().display().to_string();
        assert!(!processes_mentioning(&profile).is_empty(), "chromium runs with --user-data-dir={profile}");
        let html = "<!doctype html><title>before</title><body><script>\
                    document.title = 'cradle';\
                    document.body.insertAdjacentHTML('beforeend', '<p id=x>hello</p>');\
                    setTimeout(() => { window.later = 'done'; }, 200);\
                    </script></body>";
        browser.navigate(&page(html)).expect("navigate");
        assert_eq!(browser.eval("document.getElementById('x').textContent").expect("eval"), json!("hello"));
        assert_eq!(browser.eval("document.title").expect("eval"), json!("cradle"));
        assert_eq!(browser.eval("Promise.resolve(6 * 7)").expect("a promise is awaited"), json!(42));
        assert_eq!(browser.eval("undefined").expect("eval"), Value::Null);
        assert_eq!(browser.wait_for("window.later", Duration::from_secs(5)).expect("wait_for"), json!("done"));
        let err = browser.wait_for("window.never", Duration::from_millis(200)).expect_err("never truthy");
        assert!(err.contains("window.never") && err.contains("null"), "{err}");
        let png = browser.screenshot_png().expect("screenshot");
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG: {:?}", &png[..png.len().min(8)]);
        browser.set_extra_headers(&[("X-Cradle-Test", "1")]).expect("extra headers");
        assert_eq!(browser.console_errors(), Vec::<String>::new());
        let dir = browser.process.dir.path().to_path_buf();
        drop(browser);
        assert_eq!(processes_mentioning(&profile), Vec::<String>::new(), "no chromium left behind");
        assert!(!dir.exists(), "{} removed", dir.display());
    }

    #[test]
    fn exceptions_are_errors_and_the_pages_errors_are_collected() {
        let Some(mut browser) = Browser::start("exceptions_are_errors_and_the_pages_errors_are_collected") else {
            return;
        };
        let err = browser.eval("throw new Error('boom')").expect_err("a thrown exception is an error");
        assert!(err.contains("boom") && err.contains("Runtime.evaluate"), "{err}");
        let err = browser.eval("Promise.reject(new Error('later boom'))").expect_err("a rejection is an error");
        assert!(err.contains("later boom"), "{err}");
        assert_eq!(browser.eval("1 + 1").expect("usable after an exception"), json!(2));
        let html = "<script>console.error('logged', 7); throw new Error('page boom');</script>";
        browser.navigate(&page(html)).expect("navigate");
        let errors = browser.console_errors();
        assert!(errors.iter().any(|e| e.contains("page boom")), "{errors:?}");
        assert!(errors.iter().any(|e| e == "console.error: logged 7"), "{errors:?}");
        let evaluated = |e: &String| e.contains("Error: boom") || e.contains("later boom");
        assert!(!errors.iter().any(evaluated), "eval's own exceptions are not the page's: {errors:?}");
        let err = browser.navigate("http://127.0.0.1:9/").expect_err("nothing listens on the discard port");
        assert!(err.starts_with("chromium: Page.navigate http://127.0.0.1:9/: net::ERR_"), "{err}");
    }
}
