//! Running a secret command: no shell, stdin closed, a deadline, and stdout kept
//! out of every error (it may hold the secret).

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{SecretError, redact};

pub(super) fn from_command(argv: &[String], timeout: Duration) -> Result<String, SecretError> {
    let command = redact(&argv.join(" ")).into_owned();
    let fail = |problem: String| SecretError::Command { command: command.clone(), problem };
    let (program, args) =
        argv.split_first().ok_or_else(|| fail("is empty; give the program and its arguments".into()))?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!("could not be started: {e}")))?;
    // Drain both pipes on threads so a chatty command cannot block on a full pipe;
    // results come back over channels so a grandchild holding a pipe open cannot
    // hang us past the deadline.
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                // Best effort: it may have exited between the check and the kill.
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(format!(
                    "did not finish within {} s; check that it does not wait for input",
                    timeout.as_secs_f32()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(fail(format!("could not be waited for: {e}"))),
        }
    };
    let remaining = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1);
    let out = stdout.recv_timeout(remaining).unwrap_or_default();
    let err = stderr.recv_timeout(remaining).unwrap_or_default();
    if !status.success() {
        let code = match (status.code(), status.signal()) {
            (Some(c), _) => format!("exited with code {c}"),
            (None, Some(s)) => format!("was killed by signal {s}"),
            (None, None) => "failed".to_string(),
        };
        let first = String::from_utf8_lossy(&err)
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(|l| format!(": {}", redact(l)))
            .unwrap_or_default();
        // stdout is deliberately never reported: it may hold the secret.
        return Err(fail(format!("{code}{first}")));
    }
    let text = String::from_utf8(out).map_err(|_| SecretError::BadValue {
        source_desc: format!("command `{command}`"),
        problem: "not valid UTF-8",
    })?;
    Ok(text.trim().to_string())
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            // A read error leaves what was read so far; the exit status decides.
            let _ = pipe.read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
    }
    rx
}
