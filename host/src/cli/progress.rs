//! The live progress display of `cradle provision` / `cradle remove`: one line
//! per VM with its current step and how long it has been running, redrawn in
//! place on a terminal, and a last line with the counts and an estimate of the
//! time left (`12/30 done · 1 failed · 5 running · ETA 40s`). Off when stderr
//! is not a terminal (each VM's outcome line and the summary table serve
//! there), with `-q`, and with `--output json`.
//!
//! A VM's row shows its current step while it runs; when its run ends the row
//! says how (`✓ created`, `✓ skipped`, `✗ failed at preflight`) and its time
//! stops at the figure the summary table prints. VMs waiting for a fork are
//! counted, not listed. A frame never grows past the terminal's height: rows
//! of VMs that are done are left out first (counted on a `…` line).
//!
//! The frame is always the last thing on stderr: log lines are written through
//! [`log_writer`], which lifts the frame (moves up over it and erases it),
//! prints the log line where the frame was, and draws the frame again below
//! it. Without that, the next redraw would move up over the log line instead
//! of the frame, overwriting the log and leaving a stale row behind.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::project::{Progress, ProgressSink, StepEvent, StepState, VmFinished};

/// How often the display is redrawn.
const FRAME: Duration = Duration::from_millis(250);

/// The frame currently on screen, at the bottom of stderr (empty when no
/// display runs). Drawing and log lines both go through it, so they never
/// interleave.
static SHOWN: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn shown() -> std::sync::MutexGuard<'static, Vec<String>> {
    SHOWN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where a VM is.
#[derive(Debug, Clone)]
enum State {
    /// Planned; no step has started (it waits for a fork).
    Waiting,
    /// In `step` since `since`; `failed` names a step that failed and has
    /// not been followed by another start (the failure may still be caught).
    Running { step: String, since: Instant, failed: Option<String> },
    /// Its run ended.
    Ended { result: String, ok: bool, took: Duration, failed: Option<String> },
}

#[derive(Debug, Clone)]
struct Row {
    vm: String,
    state: State,
    started: Option<Instant>,
    /// When it ended, to leave the oldest finished rows out first.
    ended: Option<Instant>,
}

#[derive(Debug, Default)]
struct Board {
    rows: Vec<Row>,
    /// When the command planned its VMs (else the first event).
    began: Option<Instant>,
}

/// The per-VM state the display shows.
#[derive(Debug, Default)]
pub struct Live {
    board: Mutex<Board>,
}

impl Live {
    /// Whether a live display should run for this invocation.
    pub fn wanted(quiet: bool, json: bool) -> bool {
        !quiet && !json && std::io::stderr().is_terminal()
    }

    /// The sink to give the project.
    pub fn sink(self: &Arc<Self>) -> ProgressSink {
        let me = self.clone();
        ProgressSink::new(move |e| me.record(e, Instant::now()))
    }

    fn record(&self, event: Progress, now: Instant) {
        let mut board = self.board.lock().unwrap_or_else(|p| p.into_inner());
        board.began.get_or_insert(now);
        match event {
            Progress::Planned(vms) => {
                for vm in vms {
                    board.row(&vm);
                }
            }
            Progress::Step(StepEvent { vm, step, state }) => {
                let row = board.row(vm.as_deref().unwrap_or("-"));
                if matches!(row.state, State::Ended { .. }) {
                    return;
                }
                row.started.get_or_insert(now);
                match (state, &mut row.state) {
                    (StepState::Started, s) => *s = State::Running { step, since: now, failed: None },
                    // The innermost failure: the steps around it fail with it.
                    (StepState::Failed(_), State::Running { failed: failed @ None, .. }) => *failed = Some(step),
                    (StepState::Failed(_), State::Waiting) => {
                        row.state = State::Running { step: step.clone(), since: now, failed: Some(step) }
                    }
                    _ => {}
                }
            }
            Progress::Finished(VmFinished { vm, result, ok, duration }) => {
                let row = board.row(&vm);
                let failed = match &row.state {
                    State::Running { failed: Some(f), .. } => Some(f.clone()),
                    State::Running { step, .. } if !ok => Some(step.clone()),
                    _ => None,
                };
                row.state = State::Ended { result, ok, took: duration, failed };
                row.ended = Some(now);
            }
        }
    }

    /// The lines of one frame, fewer than `height` (the terminal's) when it
    /// has room for at least one row, the counts line last.
    pub fn frame(&self, now: Instant, height: usize) -> Vec<String> {
        let board = self.board.lock().unwrap_or_else(|p| p.into_inner());
        // Nothing planned yet (inventory still loading): nothing to show.
        if board.rows.is_empty() {
            return Vec::new();
        }
        let listed: Vec<&Row> = board.rows.iter().filter(|r| !matches!(r.state, State::Waiting)).collect();
        // Room for the rows: the counts line and a possible `…` line aside,
        // and one line spare, since a frame that fills the screen scrolls its
        // first line out of reach of the next redraw's cursor-up.
        let room = height.saturating_sub(3).max(1);
        let mut hidden = vec![false; listed.len()];
        if listed.len() > room {
            // Done rows first, oldest first; then failed ones; then whatever is last.
            let mut order: Vec<usize> = (0..listed.len()).collect();
            order.sort_by_key(|&i| match &listed[i].state {
                State::Ended { ok: true, .. } => (0, listed[i].ended),
                State::Ended { .. } => (1, listed[i].ended),
                _ => (2, None),
            });
            for &i in order.iter().take(listed.len() - room) {
                hidden[i] = true;
            }
        }
        let mut lines: Vec<String> =
            listed.iter().zip(&hidden).filter(|(_, h)| !**h).map(|(r, _)| row_line(r, now)).collect();
        let left_out = hidden.iter().filter(|h| **h).count();
        if left_out > 0 {
            lines.push(format!("… {left_out} more (finished first) not shown"));
        }
        lines.push(board.counts(now));
        lines
    }

    /// Redraw on stderr until the returned guard is dropped, which draws the last frame.
    pub fn start(self: &Arc<Self>) -> Redraw {
        let me = self.clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            loop {
                let last = flag.load(std::sync::atomic::Ordering::Relaxed);
                draw(me.frame(Instant::now(), terminal_rows()));
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

impl Board {
    fn row(&mut self, vm: &str) -> &mut Row {
        match self.rows.iter().position(|r| r.vm == vm) {
            Some(i) => &mut self.rows[i],
            None => {
                self.rows.push(Row { vm: vm.to_string(), state: State::Waiting, started: None, ended: None });
                self.rows.last_mut().expect("just pushed")
            }
        }
    }

    /// `12/30 done · 1 failed · 5 running · 12 waiting · ETA 40s`.
    fn counts(&self, now: Instant) -> String {
        let total = self.rows.len();
        let (mut done, mut failed, mut running, mut waiting) = (0, 0, 0, 0);
        for r in &self.rows {
            match r.state {
                State::Ended { ok: true, .. } => done += 1,
                State::Ended { ok: false, .. } => failed += 1,
                State::Running { .. } => running += 1,
                State::Waiting => waiting += 1,
            }
        }
        let mut parts = vec![format!("{done}/{total} done")];
        for (n, word) in [(failed, "failed"), (running, "running"), (waiting, "waiting")] {
            if n > 0 {
                parts.push(format!("{n} {word}"));
            }
        }
        let elapsed = self.began.map(|b| now.saturating_duration_since(b)).unwrap_or_default();
        let ended = done + failed;
        if ended == total {
            parts.push(format!("took {}", clock(elapsed)));
        } else if ended > 0 {
            // VMs end at the rate they have so far, whatever the forks.
            let left = elapsed.mul_f64((total - ended) as f64 / ended as f64);
            parts.push(format!("ETA {}", clock(left)));
        }
        parts.join(" · ")
    }
}

/// One VM's row.
fn row_line(r: &Row, now: Instant) -> String {
    let vm = crate::text::printable(&r.vm);
    let total = |end: Instant| r.started.map(|s| end.saturating_duration_since(s)).unwrap_or_default();
    match &r.state {
        State::Running { step, since, failed } => {
            let step_name = match failed {
                Some(f) => format!("{} FAILED", crate::text::printable(f)),
                None => crate::text::printable(step).into_owned(),
            };
            let in_step = now.saturating_duration_since(*since).as_secs_f64();
            format!("{vm:<20} {step_name:<28} {:>7.1}s  (step {in_step:.1}s)", total(now).as_secs_f64())
        }
        State::Ended { result, ok, took, failed } => {
            let what = match (ok, failed) {
                (true, _) => format!("✓ {}", crate::text::printable(result)),
                (false, Some(step)) => format!("✗ failed at {}", crate::text::printable(step)),
                (false, None) => "✗ failed".to_string(),
            };
            format!("{vm:<20} {what:<28} {:>7.1}s", took.as_secs_f64())
        }
        State::Waiting => format!("{vm:<20} waiting"),
    }
}

/// `40s`, `2m05s`, `1h02m`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{:.1}s", d.as_secs_f64()),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The terminal's height on stderr; 24 when it cannot be read.
fn terminal_rows() -> usize {
    let mut size = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    #[allow(unsafe_code, reason = "TIOCGWINSZ writes one winsize into the struct it is given")]
    // SAFETY: `size` is a valid, exclusively borrowed winsize for the call.
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    if ok && size.ws_row > 0 { usize::from(size.ws_row) } else { 24 }
}

/// Move up over the previous frame, erase it (the new one may be shorter)
/// and print this one.
fn draw(lines: Vec<String>) {
    let mut shown = shown();
    let mut out = Vec::new();
    if !shown.is_empty() {
        let _ = write!(out, "\x1b[{}A\x1b[J", shown.len());
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

    fn ev(vm: &str, step: &str, state: StepState) -> Progress {
        Progress::Step(StepEvent { vm: Some(vm.into()), step: step.into(), state })
    }

    fn end(vm: &str, result: &str, ok: bool, secs: u64) -> Progress {
        Progress::Finished(VmFinished { vm: vm.into(), result: result.into(), ok, duration: Duration::from_secs(secs) })
    }

    #[test]
    fn each_vm_shows_its_current_step_and_failures_stay_visible() {
        let live = Arc::new(Live::default());
        assert!(live.sink().is_active());
        let t0 = Instant::now();
        assert!(live.frame(t0, 24).is_empty(), "nothing to draw before the VMs are known");
        let emit = |e| live.record(e, t0);
        emit(ev("test-0", "lock", StepState::Started));
        emit(ev("test-1", "lock", StepState::Started));
        emit(ev("test-0", "lock", StepState::Succeeded));
        emit(ev("test-0", "cloud-init", StepState::Started));
        emit(ev("test-1", "preflight", StepState::Started));
        emit(ev("test-1", "preflight", StepState::Failed("no such node".into())));
        emit(ev("test-1", "create", StepState::Failed("no such node".into())));
        let frame = live.frame(t0, 24);
        assert_eq!(frame.len(), 3, "{frame:?}");
        assert!(frame[0].starts_with("test-0") && frame[0].contains("cloud-init"), "{frame:?}");
        assert!(frame[1].starts_with("test-1") && frame[1].contains("preflight FAILED"), "the innermost: {frame:?}");
        assert_eq!(frame[2], "0/2 done · 2 running");
    }

    #[test]
    fn a_finished_vm_is_marked_with_its_result_and_its_timer_stops_at_the_summary_figure() {
        let live = Live::default();
        let t0 = Instant::now();
        live.record(Progress::Planned(vec!["a".into(), "b".into(), "c".into(), "d".into()]), t0);
        live.record(ev("a", "reconcile", StepState::Started), t0);
        live.record(ev("b", "preflight", StepState::Started), t0);
        live.record(ev("b", "preflight", StepState::Failed("template 9000 does not exist".into())), t0);
        live.record(ev("c", "lock", StepState::Started), t0);
        live.record(end("a", "created", true, 7), t0 + Duration::from_secs(10));
        live.record(end("b", "failed", false, 2), t0 + Duration::from_secs(10));
        // Whenever it is drawn later, a finished row says the same.
        for later in [20, 300] {
            let frame = live.frame(t0 + Duration::from_secs(later), 24);
            assert_eq!(frame.len(), 4, "a, b, c; d waits and is only counted: {frame:?}");
            assert!(
                frame[0].starts_with("a ") && frame[0].contains("✓ created") && frame[0].ends_with(" 7.0s"),
                "{frame:?}"
            );
            assert!(!frame[0].contains("step"), "no step timer once done: {frame:?}");
            assert!(frame[1].contains("✗ failed at preflight") && frame[1].ends_with(" 2.0s"), "{frame:?}");
            assert!(frame[2].starts_with("c ") && frame[2].contains("lock"), "{frame:?}");
        }
        // Two of four ended in 10 s: the other two take about as long again.
        let counts = live.frame(t0 + Duration::from_secs(10), 24).pop().unwrap_or_default();
        assert_eq!(counts, "1/4 done · 1 failed · 1 running · 1 waiting · ETA 10.0s");
        live.record(end("c", "skipped", true, 1), t0 + Duration::from_secs(11));
        live.record(end("d", "created", true, 1), t0 + Duration::from_secs(12));
        let counts = live.frame(t0 + Duration::from_secs(12), 24).pop().unwrap_or_default();
        assert_eq!(counts, "3/4 done · 1 failed · took 12.0s");
    }

    #[test]
    fn a_frame_taller_than_the_terminal_leaves_out_the_oldest_finished_rows_first() {
        let live = Live::default();
        let t0 = Instant::now();
        let names: Vec<String> = (0..10).map(|i| format!("vm-{i}")).collect();
        live.record(Progress::Planned(names.clone()), t0);
        for (i, vm) in names.iter().enumerate() {
            live.record(ev(vm, "lock", StepState::Started), t0);
            if i < 6 {
                live.record(end(vm, "created", i != 5, 1), t0 + Duration::from_secs(i as u64));
            }
        }
        let frame = live.frame(t0 + Duration::from_secs(9), 8);
        assert_eq!(frame.len(), 7, "one line short of the terminal: {frame:#?}");
        let shown: Vec<&str> = frame.iter().filter_map(|l| l.split_whitespace().next()).collect();
        assert_eq!(shown[..6], ["vm-5", "vm-6", "vm-7", "vm-8", "vm-9", "…"], "{frame:#?}");
        assert_eq!(frame[5], "… 5 more (finished first) not shown");
        assert_eq!(frame[6], "5/10 done · 1 failed · 4 running · ETA 6.0s", "{frame:#?}");
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
