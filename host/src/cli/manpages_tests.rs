use std::collections::BTreeSet;
use std::process::Command;

use clap::Parser as _;

use super::*;

/// The page file every visible command should have, worked out from the
/// command tree itself (`cradle runs show` → `cradle-runs-show.1`), not from
/// clap_mangen's naming.
fn expected_files() -> BTreeSet<String> {
    fn walk(cmd: &clap::Command, prefix: &str, out: &mut BTreeSet<String>) {
        let name = if prefix.is_empty() { cmd.get_name().to_string() } else { format!("{prefix}-{}", cmd.get_name()) };
        out.insert(format!("{name}.1"));
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
            walk(sub, &name, out);
        }
    }
    let mut out = BTreeSet::new();
    walk(&Cli::command(), "", &mut out);
    out
}

#[test]
fn every_subcommand_nested_ones_included_has_its_page() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("share/man/man1");
    write_all(&dir).unwrap();
    let written: BTreeSet<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    let expected = expected_files();
    assert_eq!(written, expected);
    for page in ["cradle.1", "cradle-provision.1", "cradle-runs-show.1", "cradle-plugins-new.1", "cradle-sim-serve.1"] {
        assert!(expected.contains(page), "{page} missing from {expected:?}");
    }
    assert!(!written.iter().any(|f| f.contains("manpages") || f.contains("help")), "{written:?}");
}

#[test]
fn pages_are_public_files_in_a_public_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("man1");
    // A restrictive umask must not make the public docs private (nextest runs
    // each test in its own process; under `cargo test` the mask only makes
    // other tests' files more private for a moment).
    let old = umask(0o077);
    let result = write_all(&dir);
    umask(old);
    result.unwrap();
    // An existing page with another mode is rewritten 0644 too.
    std::fs::set_permissions(dir.join("cradle.1"), Permissions::from_mode(0o600)).unwrap();
    write_all(&dir).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o755);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path), 0o644, "{}", path.display());
    }
}

#[allow(unsafe_code, reason = "umask(2) has no preconditions and touches no memory")]
fn umask(mask: libc::mode_t) -> libc::mode_t {
    unsafe { libc::umask(mask) }
}

#[test]
fn subcommand_pages_see_also_cradle_and_their_parent() {
    let pages = pages();
    let page = |file: &str| {
        let p = pages.iter().find(|p| p.file == file).unwrap_or_else(|| panic!("no {file}"));
        String::from_utf8(p.roff.clone()).unwrap()
    };
    let show = page("cradle-runs-show.1");
    assert!(show.contains(".SH \"SEE ALSO\"\n.BR cradle (1),\n.BR cradle\\-runs (1)\n"), "{show}");
    assert!(show.contains("cradle runs show"), "the synopsis names the full command: {show}");
    assert!(show.contains(&format!("\"cradle {}\" \"cradle manual\"", env!("CARGO_PKG_VERSION"))), "{show}");
    let provision = page("cradle-provision.1");
    assert!(provision.ends_with(".SH \"SEE ALSO\"\n.BR cradle (1)\n"), "{provision}");
    let top = page("cradle.1");
    assert!(!top.contains("SEE ALSO"), "{top}");
    assert!(top.contains("cradle\\-provision(1)"), "cradle(1) lists its subcommands' pages: {top}");
}

#[test]
fn the_manpages_command_is_hidden_from_help() {
    let help = Cli::command().render_help().to_string();
    assert!(!help.contains("manpages"), "{help}");
    assert!(Cli::try_parse_from(["cradle", "manpages", "/tmp/x"]).is_ok());
}

/// Every page renders without a single groff warning (`-ww`: all of them),
/// as `man` renders it. Debian 12 has groff in groff-base (a dependency of
/// man-db); `man -l` is the fallback where only man is found.
#[test]
fn every_page_renders_with_groff_without_warnings() {
    let tmp = tempfile::tempdir().unwrap();
    let written = write_all(tmp.path()).unwrap();
    let groff = Command::new("groff").arg("--version").output().is_ok();
    let man = Command::new("man").arg("--version").output().is_ok();
    if !groff && !man {
        eprintln!("SKIPPED: neither groff nor man is installed (apt-get install groff-base man-db)");
        return;
    }
    for path in written {
        let output = if groff {
            Command::new("groff").args(["-man", "-Tutf8", "-ww", "-z"]).arg(&path).output().unwrap()
        } else {
            Command::new("man")
                .args(["--warnings=w", "-E", "UTF-8", "-l"])
                .arg(&path)
                .env("MANPAGER", "cat")
                .output()
                .unwrap()
        };
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success() && stderr.is_empty(), "{}: {stderr}", path.display());
    }
}
