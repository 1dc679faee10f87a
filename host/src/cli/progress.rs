//! The live progress display of `cradle provision` / `cradle remove`: one line
//! per VM with its current step and how long it has been running, redrawn in
//! place on a terminal. Off when stderr is not a terminal (the log lines and
//! the summary table serve there), with `-q`, and with `--output json`.
//!
//! The frame is always the last thing on stderr: log lines are written through
//! [`log_writer`], which lifts the frame (moves up over it and erases it),
//! prints the log line where the frame was, and draws the frame again below
//! it. Without that, the next redraw would move up over the log line instead
//! of the frame, overwriting the log and leaving a stale row behind.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::project::{ProgressSink, StepEvent, StepState};

/// How often the display is redrawn.
const FRAME: Duration = Duration::from_millis(250);

/// The frame currently on screen, at the bottom of stderr (empty when no
/// display runs). Drawing and log lines both go through it, so they never
/// interleave.
static SHOWN: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn shown() -> std::sync::MutexGuard<'static, Vec<String>> {
    SHOWN.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Debug, Clone)]
struct Row {
    vm: String,
    step: String,
    since: Instant,
    started: Instant,
    failed: bool,
}

/// The per-VM state the display shows.
#[derive(Debug, Default)]
pub struct Live {
    rows: Mutex<Vec<Row>>,
}

impl Live {
    /// Whether a live display should run for this invocation.
    pub fn wanted(quiet: bool, json: bool) -> bool {
        !quiet && !json && std::io::stderr().is_terminal()
    }

    /// The sink to give the project.
    pub fn sink(self: &Arc<Self>) -> ProgressSink {
        let me = self.clone();
        ProgressSink::new(move |e| me.record(e))
    }

    fn record(&self, e: StepEvent) {
        let vm = e.vm.unwrap_or_else(|| "-".into());
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let row = match rows.iter_mut().find(|r| r.vm == vm) {
            Some(r) => r,
            None => {
                rows.push(Row { vm: vm.clone(), step: String::new(), since: now, started: now, failed: false });
                rows.last_mut().expect("just pushed")
            }
        };
        match e.state {
            StepState::Started => {
                row.step = e.step;
                row.since = now;
            }
            StepState::Failed(_) => {
                row.step = format!("{} FAILED", e.step);
                row.failed = true;
            }
            StepState::Succeeded => {}
        }
    }

    /// The lines of one frame.
    pub fn frame(&self, now: Instant) -> Vec<String> {
        let rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        rows.iter()
            .map(|r| {
                let total = now.saturating_duration_since(r.started).as_secs_f64();
                let step = now.saturating_duration_since(r.since).as_secs_f64();
                let (vm, step_name) = (crate::text::printable(&r.vm), crate::text::printable(&r.step));
                if r.failed {
                    format!("{:<20} {:<28} {:>7.1}s", vm, step_name, total)
                } else {
                    format!("{:<20} {:<28} {:>7.1}s  (step {:.1}s)", vm, step_name, total, step)
                }
            })
            .collect()
    }

    /// Redraw on stderr until the returned guard is dropped, which draws the last frame.
    pub fn start(self: &Arc<Self>) -> Redraw {
        let me = self.clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            loop {
                let last = flag.load(std::sync::atomic::Ordering::Relaxed);
                draw(me.frame(Instant::now()));
                if last {
                    break;
                }
                tokio::time::sleep(FRAME).await;
            }
            // The final frame stays; what is written after it goes below.
            shown().clear();
        });
        Redraw { stop, task: Some(task) }
    }
}

/// Move up over the previous frame and print this one.
fn draw(lines: Vec<String>) {
    let mut shown = shown();
    let mut out = Vec::new();
    if !shown.is_empty() {
        let _ = write!(out, "\x1b[{}A", shown.len());
    }
    put_frame(&mut out, &lines);
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(&out);
    let _ = err.flush();
    *shown = lines;
}

fn put_frame(out: &mut Vec<u8>, lines: &[String]) {
    for l in lines {
        let _ = writeln!(out, "\x1b[2K{l}");
    }
}

/// `log` written above the frame `shown`: up to the frame's first line, erase
/// to the end of the screen, the log text (ended by a newline), the frame again.
fn lift(shown: &[String], log: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(log.len() + 64 * shown.len());
    if shown.is_empty() {
        out.extend_from_slice(log);
        return out;
    }
    let _ = write!(out, "\x1b[{}A\x1b[J", shown.len());
    out.extend_from_slice(log);
    if !log.ends_with(b"\n") {
        out.push(b'\n');
    }
    put_frame(&mut out, shown);
    out
}

/// The writer for log lines on stderr (`tracing_subscriber`'s `with_writer`):
/// plain stderr while no display runs, above the frame while one does.
pub fn log_writer() -> LogWriter {
    LogWriter
}

/// See [`log_writer`]. The formatter writes each event in one `write_all`.
#[derive(Debug)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let shown = shown();
        let mut err = std::io::stderr().lock();
        err.write_all(&lift(&shown, buf))?;
        err.flush()?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Stops the redraw (after one last frame) when finished.
pub struct Redraw {
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Redraw {
    /// Draw the final frame and stop.
    pub async fn finish(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(vm: &str, step: &str, state: StepState) -> StepEvent {
        StepEvent { vm: Some(vm.into()), step: step.into(), state }
    }

    #[test]
    fn each_vm_shows_its_current_step_and_failures_stay_visible() {
        let live = Arc::new(Live::default());
        assert!(live.sink().is_active());
        let emit = |e| live.record(e);
        emit(ev("test-0", "lock", StepState::Started));
        emit(ev("test-1", "lock", StepState::Started));
        emit(ev("test-0", "lock", StepState::Succeeded));
        emit(ev("test-0", "cloud-init", StepState::Started));
        emit(ev("test-1", "preflight", StepState::Started));
        emit(ev("test-1", "preflight", StepState::Failed("no such node".into())));
        let frame = live.frame(Instant::now());
        assert_eq!(frame.len(), 2);
        assert!(frame[0].starts_with("test-0") && frame[0].contains("cloud-init"), "{frame:?}");
        assert!(frame[1].starts_with("test-1") && frame[1].contains("preflight FAILED"), "{frame:?}");
    }

    #[test]
    fn a_log_line_is_printed_where_the_frame_was_and_the_frame_is_drawn_again_below_it() {
        let frame = vec!["test-0 lock".to_string(), "test-1 create".to_string()];
        let out = String::from_utf8(lift(&frame, b"INFO cloned\n")).expect("utf-8");
        assert_eq!(out, "\x1b[2A\x1b[JINFO cloned\n\x1b[2Ktest-0 lock\n\x1b[2Ktest-1 create\n");
        assert_eq!(lift(&[], b"INFO plain\n"), b"INFO plain\n", "no display: the log line as it is");
        assert!(lift(&frame, b"no newline").starts_with(b"\x1b[2A\x1b[Jno newline\n\x1b[2K"));
    }
}
