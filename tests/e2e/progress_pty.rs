//! The live progress display of `cradle provision`, end to end: the real
//! binary on a pseudo-terminal (util-linux `script`, which gives the command
//! a pty and copies everything it shows to our pipe), provisioning two VMs on
//! the simulated cluster, against the same binary on plain pipes.
//!
//! What the terminal shows is checked by replaying the bytes through a small
//! terminal model ([`Screen`]: text, CR/LF, cursor up, erase line, erase to
//! end of screen; colours ignored), so the tests prove what an operator sees —
//! one row per VM, redrawn in place, log lines intact, the summary below —
//! not merely that escape sequences were written. Nothing depends on timing:
//! the simulator runs at a time scale where provisioning takes seconds, far
//! longer than one redraw, but no assertion counts frames or measures time.
//!
//! Without a terminal the same binary says one line per VM, a skip says why,
//! a failure leads with its problem, and `cradle runs list` groups the runs of
//! one command under it.
//!
//! Needs `target/debug/cradle`, the direct plugin (`scripts/test` builds it;
//! see `cradle_tests::plugin_wasm`) and `script` (util-linux). Each test owns a
//! loopback subnet 127.37.<n>.0/24 (n in 45..=49; a prefix no other test uses)
//! for the simulated guests' SSH.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};

use cradle_tests::cradle_bin;
use cradle_tests::fixture::{Cluster, LabInventory, ProjectConfig, SimCluster, Wait};

const VMS: [&str; 2] = ["vm-0", "vm-1"];

/// A project with two VMs on loopback subnet 127.37.`subnet`.0/24.
fn project(subnet: u8) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.02))).write(dir.path());
    let wait = Wait { cloudinit_attempts: 400, reboot_attempts: Some(40), ..Wait::fast() };
    LabInventory::new("127.37", subnet).count(VMS.len()).vmid_base(Some(200)).wait(wait).write(dir.path());
    dir
}

/// `cradle --config … --state-dir … provision -i …` in `dir`, as words.
fn provision_args(dir: &Path) -> Vec<String> {
    let p = |rel: &str| dir.join(rel).display().to_string();
    vec![
        cradle_bin().display().to_string(),
        "--config".into(),
        p("cradle.toml"),
        "--state-dir".into(),
        p("state"),
        "provision".into(),
        "-i".into(),
        p("inventory"),
    ]
}

/// A command with the environment the defaults apply to (no log filter, colour allowed).
fn clean(mut cmd: Command, dir: &Path) -> Command {
    for var in ["RUST_BACKTRACE", "RUST_LIB_BACKTRACE", "CRADLE_LOG", "CRADLE_CONFIG", "CRADLE_STATE_DIR", "NO_COLOR"] {
        cmd.env_remove(var);
    }
    cmd.env("TERM", "xterm").current_dir(dir);
    cmd
}

fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Run `args` on a pseudo-terminal (stdin, stdout and stderr all on it);
/// everything it showed, and its exit code.
fn on_a_terminal(args: &[String], dir: &Path) -> (String, i32) {
    let line = args.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ");
    let mut cmd = Command::new("script");
    // -q: no start/done lines; -f: flush; -e: the command's exit code; -c: the command.
    cmd.args(["-qfec", &line, "/dev/null"]).stdin(Stdio::null());
    let out = clean(cmd, dir).output().expect("run script (util-linux) — install util-linux");
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.stderr.is_empty(), "script: {}", String::from_utf8_lossy(&out.stderr));
    (shown, out.status.code().unwrap_or(-1))
}

/// The step names the workflows use (`step(vm.name, "NAME", ...)`).
fn workflow_steps() -> BTreeSet<String> {
    let mut steps = BTreeSet::new();
    let mut dirs = vec![cradle_tests::workspace().join("workflows")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read workflows").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rhai") {
                let text = std::fs::read_to_string(&path).expect("read workflow");
                for call in text.split("step(").skip(1) {
                    let args = call.split(')').next().unwrap_or("");
                    if let Some(name) = args.split(',').nth(1).and_then(|a| a.trim().strip_prefix('"'))
                        && let Some(end) = name.find('"')
                    {
                        steps.insert(name[..end].to_string());
                    }
                }
            }
        }
    }
    assert!(steps.contains("cloud-init") && steps.contains("lock"), "{steps:?}");
    steps
}

/// Text without CSI sequences (`ESC [ digits letter`: colours, cursor moves, erases).
fn without_escapes(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("\x1b[") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after.find(|c: char| !(c.is_ascii_digit() || c == ';')).unwrap_or(after.len());
        rest = after.get(end + 1..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

/// A terminal as far as cradle drives one: printable text, CR, LF, and the
/// CSI sequences `n A` (cursor up), `2 K` (erase the line), `J` (erase to the
/// end of the screen) and `m` (colours, ignored). Anything else is a failure:
/// the display must not rely on more than this.
#[derive(Debug, Default)]
struct Screen {
    lines: Vec<Vec<char>>,
    row: usize,
    col: usize,
}

impl Screen {
    fn replay(bytes: &str) -> Screen {
        let mut s = Screen::default();
        let mut chars = bytes.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\r' => s.col = 0,
                '\n' => {
                    s.row += 1;
                    s.col = 0; // the pty's onlcr turns LF into CR LF anyway
                }
                '\x1b' => {
                    assert_eq!(chars.next(), Some('['), "only CSI sequences are expected");
                    let mut param = String::new();
                    let fin = loop {
                        match chars.next() {
                            Some(d) if d.is_ascii_digit() || d == ';' => param.push(d),
                            Some(f) => break f,
                            None => panic!("a cut escape sequence at the end of the output"),
                        }
                    };
                    match (fin, param.as_str()) {
                        ('A', n) => s.row = s.row.saturating_sub(n.parse().unwrap_or(1)),
                        ('K', "2") => s.line().clear(),
                        ('J', "" | "0") => {
                            let (row, col) = (s.row, s.col);
                            s.line().truncate(col);
                            s.lines.truncate(row + 1);
                        }
                        ('m', _) => {}
                        other => panic!("unexpected escape sequence {other:?}"),
                    }
                }
                c => {
                    let col = s.col;
                    let line = s.line();
                    if line.len() <= col {
                        line.resize(col + 1, ' ');
                    }
                    line[col] = c;
                    s.col += 1;
                }
            }
        }
        s
    }

    fn line(&mut self) -> &mut Vec<char> {
        if self.lines.len() <= self.row {
            self.lines.resize(self.row + 1, Vec::new());
        }
        &mut self.lines[self.row]
    }

    fn text(&self) -> Vec<String> {
        self.lines.iter().map(|l| l.iter().collect::<String>().trim_end().to_string()).collect()
    }
}

/// The rows of the live display in the raw output: what follows each "erase
/// line" up to the end of its line, without escape sequences.
fn display_rows(shown: &str) -> Vec<String> {
    shown.split("\x1b[2K").skip(1).map(|r| without_escapes(r.split(['\r', '\n']).next().unwrap_or(""))).collect()
}

/// `cradle ARGS` in `dir` on plain pipes: (exit code, stdout, stderr).
fn on_pipes(args: &[String], dir: &Path) -> (i32, String, String) {
    let mut cmd = Command::new(&args[0]);
    cmd.args(&args[1..]).stdin(Stdio::null());
    let out = clean(cmd, dir).output().expect("run cradle");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), stdout.into_owned(), stderr.into_owned())
}

/// `cradle --config … --state-dir … ARGS` in `dir`.
fn cradle_args(dir: &Path, args: &[&str]) -> Vec<String> {
    let mut words = provision_args(dir)[..5].to_vec();
    words.extend(args.iter().map(|a| a.to_string()));
    words
}

/// The summary table's row of `vm`.
fn summary_row<'a>(lines: &'a [String], vm: &str) -> &'a str {
    let header = lines.iter().position(|l| l.starts_with("VM ") && l.contains("RESULT")).expect("summary header");
    lines[header..].iter().find(|l| l.starts_with(vm)).unwrap_or_else(|| panic!("{vm} in the summary: {lines:#?}"))
}

#[test]
fn on_a_terminal_each_vm_has_one_row_redrawn_in_place_marked_when_it_ends_with_the_summarys_time() {
    let dir = project(45);
    // -v: the steps' and the plugin's log lines go above the display.
    let mut args = provision_args(dir.path());
    args.insert(1, "-v".into());
    let (shown, code) = on_a_terminal(&args, dir.path());
    assert_eq!(code, 0, "provisioning succeeded:\n{shown}");

    // Redrawn in place: the cursor goes back up over the rows and each row is erased before it is written.
    assert!(shown.contains("\x1b[3A"), "no redraw over the two rows and the counts:\n{shown:?}");
    let rows = display_rows(&shown);
    let steps = workflow_steps();
    let mut seen: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for row in &rows {
        if row.contains(" done") {
            assert!(
                row.starts_with("0/2 done") || row.starts_with("1/2 done") || row.starts_with("2/2 done"),
                "{row:?}"
            );
            continue;
        }
        let words: Vec<&str> = row.split_whitespace().collect();
        let vm = VMS.iter().find(|vm| words.first() == Some(*vm)).unwrap_or_else(|| panic!("a row of no VM: {row:?}"));
        let step = words.get(1).copied().unwrap_or_default();
        if step == "✓" {
            assert_eq!(words.get(2), Some(&"created"), "{row:?}");
            continue;
        }
        assert!(steps.contains(step), "{row:?}: `{step}` is not a step of the workflows ({steps:?})");
        assert!(!row.contains("FAILED"), "{row:?}");
        let elapsed = words.get(2).copied().unwrap_or_default();
        assert!(
            elapsed.strip_suffix('s').is_some_and(|t| t.parse::<f64>().is_ok()),
            "{row:?}: the elapsed time follows the step"
        );
        seen.entry(vm).or_default().insert(step.to_string());
    }
    assert_eq!(seen.keys().copied().collect::<Vec<_>>(), VMS.to_vec(), "both VMs have rows: {rows:?}");

    // What the operator is left with: the log lines intact, one row per VM, then the summary.
    let screen = Screen::replay(&shown).text();
    let plain = without_escapes(&shown);
    let logs: Vec<&str> = plain.split(['\r', '\n']).filter(|l| l.contains(" DEBUG ") || l.contains(" INFO ")).collect();
    assert!(!logs.is_empty(), "log lines were written during provisioning:\n{plain}");
    for log in &logs {
        assert!(screen.iter().any(|l| l == log.trim_end()), "the log line {log:?} is not on the screen:\n{screen:#?}");
    }
    // The final frame: each VM marked created, its timer stopped at the summary's figure.
    let header = screen.iter().position(|l| l.starts_with("VM ") && l.contains("RESULT")).expect("summary header");
    for vm in VMS {
        let vm_rows: Vec<&String> = screen[..header].iter().filter(|l| l.starts_with(vm) && l.contains("✓ ")).collect();
        assert_eq!(vm_rows.len(), 1, "{vm} has exactly one display row, marked done:\n{screen:#?}");
        assert!(vm_rows[0].contains("✓ created") && !vm_rows[0].contains("(step "), "{vm_rows:?}");
        let shown_time = vm_rows[0].split_whitespace().last().unwrap_or_default();
        let row = summary_row(&screen, vm);
        assert!(row.contains("created"), "{row}");
        assert!(row.split_whitespace().any(|w| w == shown_time), "the display says {shown_time}, the summary: {row}");
    }
    assert!(!screen.iter().any(|l| l.contains("(step ")), "no running row left behind:\n{screen:#?}");
    let counts = screen[..header].iter().rev().find(|l| !l.is_empty()).expect("the counts line");
    assert!(counts.starts_with("2/2 done · took "), "{counts}\n{screen:#?}");
    // Plugin log fields in key=value form, not Rust's debug form.
    assert!(plain.contains("cloned and configured"), "the plugin's log line with -v:\n{plain}");
    assert!(!plain.contains("fields=["), "a log line in debug form:\n{plain}");
}

#[test]
fn without_a_terminal_each_vm_gets_one_line_a_skip_says_why_and_runs_list_groups_the_command() {
    let dir = project(46);
    let (code, stdout, stderr) = on_pipes(&provision_args(dir.path()), dir.path());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        !stdout.contains('\x1b') && !stderr.contains('\x1b'),
        "escape sequences on a pipe:\n{stdout:?}\n{stderr:?}"
    );
    // One line per VM outcome: no step lines, no plugin log lines, no progress rows.
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), VMS.len(), "one line per VM:\n{stderr}");
    for vm in VMS {
        assert!(lines.iter().any(|l| l.contains(&format!(" INFO {vm} created in "))), "{vm}:\n{stderr}");
    }
    let table: Vec<String> = stdout.lines().map(str::to_string).collect();
    assert!(table[0].starts_with("VM ") && table[0].contains("RESULT"), "{stdout}");
    for vm in VMS {
        assert!(summary_row(&table, vm).contains("created"), "{stdout}");
    }

    // The rerun skips both, and says why, in the table and in the journal.
    let (code, stdout, stderr) = on_pipes(&provision_args(dir.path()), dir.path());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let table: Vec<String> = stdout.lines().map(str::to_string).collect();
    for vm in VMS {
        let row = summary_row(&table, vm);
        assert!(
            row.contains("skipped") && row.contains("complete: no cloud-init drive, checkpoint or creation record"),
            "{row}"
        );
        assert!(row.ends_with("settings unchanged"), "{row}");
    }
    let (code, runs, _) = on_pipes(&cradle_args(dir.path(), &["--output", "json", "runs", "list"]), dir.path());
    assert_eq!(code, 0, "{runs}");
    let newest: serde_json::Value = serde_json::from_str(&runs).expect("json");
    let id = newest[0]["id"].as_str().expect("run id").to_string();
    let (_, show, _) = on_pipes(&cradle_args(dir.path(), &["runs", "show", &id]), dir.path());
    assert!(show.contains("outcome result=skipped why=complete: no cloud-init drive"), "{show}");

    // A check run, then the list: each command once, over its VMs' rows.
    let (code, stdout, stderr) =
        on_pipes(&cradle_args(dir.path(), &["provision", "-i", "inventory", "--check"]), dir.path());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let (_, list, _) = on_pipes(&cradle_args(dir.path(), &["runs", "list"]), dir.path());
    let headings: Vec<&str> = list.lines().filter(|l| l.starts_with("$ ")).collect();
    assert_eq!(headings.len(), 3, "three commands, each with a heading:\n{list}");
    assert!(headings[0].contains("--check (check: changed nothing) - 2 runs: 2 succeeded"), "{list}");
    assert!(
        headings[1].contains(" provision -i ") && headings[1].ends_with("/inventory - 2 runs: 2 succeeded"),
        "{list}"
    );
    let rows: Vec<&str> = list.lines().filter(|l| l.starts_with("20")).collect();
    assert_eq!(rows.len(), 6, "{list}");
    for vm in VMS {
        assert_eq!(rows.iter().filter(|r| r.contains(&format!(" {vm} "))).count(), 3, "{vm} in each command:\n{list}");
    }
    assert_eq!(rows.iter().filter(|r| r.ends_with("provision:check")).count(), 2, "{list}");
}

#[test]
fn a_failed_vms_row_leads_with_the_problem_and_ends_with_where_the_workflow_raised_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.02))).write(dir.path());
    LabInventory::new("127.37", 47).template("no-such-template").vmid_base(Some(200)).write(dir.path());
    let (code, stdout, stderr) = on_pipes(&provision_args(dir.path()), dir.path());
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    let table: Vec<String> = stdout.lines().map(str::to_string).collect();
    let row = summary_row(&table, "vm-0");
    let detail = row.split_once("s  ").map(|(_, d)| d).unwrap_or_else(|| panic!("{row}"));
    assert!(detail.starts_with("preflight: "), "the step and the problem first: {row}");
    assert!(detail.contains("no-such-template"), "{row}");
    assert!(detail.ends_with(')') && detail.rsplit('(').next().is_some_and(|l| l.contains(".rhai:")), "{row}");
    // Without a terminal: one error line for the VM, the same text.
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].contains("vm-0 failed in ") && errors[0].ends_with(detail), "{stderr}");
}

#[test]
fn the_screen_model_follows_cursor_up_and_erase() {
    let s = Screen::replay("a\r\nb\r\n\x1b[2A\x1b[2Kc\r\n\x1b[Jlog\r\n\x1b[31mred\x1b[0m\r\n");
    assert_eq!(s.text(), vec!["c", "log", "red"]);
    assert_eq!(display_rows("x\x1b[2Kvm-0 lock\r\n\x1b[2Kvm-1 dns\r\n"), vec!["vm-0 lock", "vm-1 dns"]);
    assert_eq!(without_escapes("\x1b[2A\x1b[J\x1b[2mtime\x1b[0m \x1b[32m INFO\x1b[0m x"), "time  INFO x");
}
