//! The real `cradle serve` as a child process, for the end-to-end tests of
//! the webhook service and the NetBox pipeline: started on an ephemeral
//! port, its address read from what it prints, its stderr kept.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cradle_bin;

/// A running `cradle serve`.
pub struct Served {
    /// The process.
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Everything it printed on stderr so far.
    pub log: Arc<Mutex<String>>,
}

impl Served {
    /// `cradle serve --listen 127.0.0.1:0` in `dir`, with `env`; panics with
    /// its output when it does not start within a minute.
    pub fn start(dir: &Path, env: &[(&str, &str)]) -> Served {
        Served::start_on(dir, "127.0.0.1:0", env)
    }

    /// `cradle serve --listen LISTEN` in `dir`, with `env`.
    pub fn start_on(dir: &Path, listen: &str, env: &[(&str, &str)]) -> Served {
        let mut child = Command::new(cradle_bin())
            .current_dir(dir)
            .envs(env.iter().copied())
            .args(["serve", "--listen", listen])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cradle serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                // Logged first: whoever is told the address may read the line.
                sink.lock().expect("log").push_str(&format!("{line}\n"));
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let _ = tx.send(rest.split(' ').next().unwrap_or_default().to_string());
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(url) => Served { child, url, log },
            Err(_) => {
                let _ = child.kill();
                panic!("cradle serve did not start:\n{}", log.lock().expect("log"))
            }
        }
    }

    /// `cradle serve --listen LISTEN` in `dir` that must refuse to start:
    /// panics if it exits 0 or says it listens; its stderr.
    pub fn refused(dir: &Path, listen: &str) -> String {
        let out = Command::new(cradle_bin())
            .current_dir(dir)
            .args(["serve", "--listen", listen])
            .stdin(Stdio::null())
            .output()
            .expect("cradle serve");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "cradle serve started: {err}");
        assert!(!err.contains("listening on"), "{err}");
        err
    }

    /// Its address as a socket address.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.url.trim_start_matches("http://").parse().expect("an address")
    }

    /// What it printed so far.
    pub fn log(&self) -> String {
        self.log.lock().expect("log").clone()
    }

    /// Wait (up to a minute) until it has printed `needle`; panics with its
    /// output otherwise.
    pub fn wait_for_log(&self, needle: &str) {
        let start = std::time::Instant::now();
        while !self.log().contains(needle) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "cradle serve never printed {needle:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, and its exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        self.child.wait().expect("wait")
    }
}

/// The real NetBox 4.7.3 delivery (VM 1, `probe-vm`, planned → staged).
pub const REAL_BODY: &str = include_str!("../../host/src/serve/testdata/netbox-4.7.3-vm-staged.body");

/// The real delivery, for NetBox VM `id` named `name`.
pub fn body_for(id: u64, name: &str) -> String {
    REAL_BODY
        .replace(
            "\"id\": 1, \"url\": \"/api/virtualization/virtual-machines/1/\"",
            &format!("\"id\": {id}, \"url\": \"/api/virtualization/virtual-machines/{id}/\""),
        )
        .replace("probe-vm", name)
}

/// One raw HTTP/1.1 request on its own connection: the status, the head and
/// the body of the answer. The body is sent even if the server answers (413)
/// and closes before reading it.
pub fn http_request(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    s.write_all(head.as_bytes()).expect("head");
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_string(), body.to_string())
}
