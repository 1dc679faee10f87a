//! The real `cradle serve` as a child process, for the end-to-end tests of
//! the webhook service and the NetBox pipeline: started on an ephemeral
//! port, its address read from what it prints, its stderr kept.

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
        let mut child = Command::new(cradle_bin())
            .current_dir(dir)
            .envs(env.iter().copied())
            .args(["serve", "--listen", "127.0.0.1:0"])
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
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let _ = tx.send(rest.split(' ').next().unwrap_or_default().to_string());
                }
                sink.lock().expect("log").push_str(&format!("{line}\n"));
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

    /// Its address as a socket address.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.url.trim_start_matches("http://").parse().expect("an address")
    }

    /// What it printed so far.
    pub fn log(&self) -> String {
        self.log.lock().expect("log").clone()
    }

    /// SIGTERM, and its exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        self.child.wait().expect("wait")
    }
}
