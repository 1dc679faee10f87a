//! The live progress display of `cradle provision` / `cradle remove`: one line
//! per VM with its current step and how long it has been running, redrawn in
//! place on a terminal. Off when stderr is not a terminal (the log lines and
//! the summary table serve there), with `-q`, and with `--output json`.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::project::{ProgressSink, StepEvent};

/// How often the display is redrawn.
const FRAME: Duration = Duration::from_millis(250);

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
        match e.finished {
            None => {
                row.step = e.step;
                row.since = now;
            }
            Some(Err(_)) => {
                row.step = format!("{} FAILED", e.step);
                row.failed = true;
            }
            Some(Ok(())) => {}
        }
    }

    /// The lines of one frame.
    pub fn frame(&self, now: Instant) -> Vec<String> {
        let rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        rows.iter()
            .map(|r| {
                let total = now.saturating_duration_since(r.started).as_secs_f64();
                let step = now.saturating_duration_since(r.since).as_secs_f64();
                if r.failed {
                    format!("{:<20} {:<28} {:>7.1}s", r.vm, r.step, total)
                } else {
                    format!("{:<20} {:<28} {:>7.1}s  (step {:.1}s)", r.vm, r.step, total, step)
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
            let mut drawn = 0usize;
            loop {
                let last = flag.load(std::sync::atomic::Ordering::Relaxed);
                drawn = draw(&me.frame(Instant::now()), drawn);
                if last {
                    break;
                }
                tokio::time::sleep(FRAME).await;
            }
        });
        Redraw { stop, task: Some(task) }
    }
}

/// Move up over the previous frame and print this one.
fn draw(lines: &[String], previous: usize) -> usize {
    let mut err = std::io::stderr().lock();
    if previous > 0 {
        let _ = write!(err, "\x1b[{previous}A");
    }
    for l in lines {
        let _ = writeln!(err, "\x1b[2K{l}");
    }
    let _ = err.flush();
    lines.len()
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

    fn ev(vm: &str, step: &str, finished: Option<Result<(), String>>) -> StepEvent {
        StepEvent { vm: Some(vm.into()), step: step.into(), finished }
    }

    #[test]
    fn each_vm_shows_its_current_step_and_failures_stay_visible() {
        let live = Arc::new(Live::default());
        assert!(live.sink().is_active());
        let emit = |e| live.record(e);
        emit(ev("test-0", "lock", None));
        emit(ev("test-1", "lock", None));
        emit(ev("test-0", "lock", Some(Ok(()))));
        emit(ev("test-0", "cloud-init", None));
        emit(ev("test-1", "preflight", None));
        emit(ev("test-1", "preflight", Some(Err("no such node".into()))));
        let frame = live.frame(Instant::now());
        assert_eq!(frame.len(), 2);
        assert!(frame[0].starts_with("test-0") && frame[0].contains("cloud-init"), "{frame:?}");
        assert!(frame[1].starts_with("test-1") && frame[1].contains("preflight FAILED"), "{frame:?}");
    }
}
