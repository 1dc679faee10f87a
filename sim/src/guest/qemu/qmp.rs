//! The few QMP commands the simulator sends a guest's qemu: the ACPI power button
//! (`system_powerdown`, what PVE's shutdown and reboot press) and `system_reset`.
//!
//! Protocol (QEMU's QMP spec): the server greets with `{"QMP": ...}`, the client must
//! send `qmp_capabilities` first, every command gets `{"return": ...}` or
//! `{"error": ...}`, and asynchronous `{"event": ...}` lines may come in between.
//! Failure modes: no socket (qemu gone), an `error` answer, or no answer within 5 s;
//! each comes back as text for the task log.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

const ANSWER: Duration = Duration::from_secs(5);

/// Run one command on the QMP socket at `path`.
pub async fn execute(path: &Path, command: &str) -> Result<(), String> {
    tokio::time::timeout(ANSWER, exchange(path, command))
        .await
        .map_err(|_| format!("QMP {command}: no answer within {} s", ANSWER.as_secs()))?
}

async fn exchange(path: &Path, command: &str) -> Result<(), String> {
    let stream = UnixStream::connect(path).await.map_err(|e| format!("QMP socket {}: {e}", path.display()))?;
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    let greeting = next(&mut lines).await?;
    if greeting.get("QMP").is_none() {
        return Err(format!("QMP: unexpected greeting {greeting}"));
    }
    for cmd in ["qmp_capabilities", command] {
        w.write_all(format!("{{\"execute\": \"{cmd}\"}}\n").as_bytes()).await.map_err(|e| e.to_string())?;
        loop {
            let v = next(&mut lines).await?;
            if v.get("event").is_some() {
                continue;
            }
            if let Some(e) = v.get("error") {
                return Err(format!("QMP {cmd}: {e}"));
            }
            break;
        }
    }
    Ok(())
}

async fn next(
    lines: &mut tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
) -> Result<serde_json::Value, String> {
    let line =
        lines.next_line().await.map_err(|e| e.to_string())?.ok_or_else(|| "QMP: connection closed".to_string())?;
    serde_json::from_str(&line).map_err(|e| format!("QMP: unreadable answer ({e})"))
}
