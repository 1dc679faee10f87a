//! Shell completions, end to end: `cradle completions bash|zsh|fish` prints a
//! script the real shells load without a word on stderr, and pressing TAB
//! after `--limit` and `--env` offers the inventory's host and group names and
//! the project's environment names. The dynamic tests drive the real bash
//! completion function (COMP_WORDS, COMP_CWORD, then COMPREPLY), which calls
//! the binary exactly as it does at the terminal; zsh's side is driven through
//! the protocol its script speaks (`COMPLETE=zsh cradle -- WORDS`). A broken
//! project gives no candidates and prints nothing.
//!
//! Needs `target/debug/cradle` (`scripts/build`), bash and zsh (apt
//! `zsh`; `scripts/test` installs it). fish is checked with `fish
//! --no-execute` when it is installed.

use std::path::{Path, PathBuf};
use std::process::Command;

use cradle_tests::{Out, cradle_bin, workspace};

/// Two environments; `test` is the default.
const CONFIG: &str = r#"
default_environment = "test"
[clusters.sim]
kind = "sim"
[environments.test]
cluster = "sim"
backend = "direct"
[environments.demo]
cluster = "sim"
backend = "sample"
"#;

/// The inventory `cradle init` would put next to cradle.toml.
const INVENTORY: &str = "[guests]\nlocal-a\nlocal-b\n";

/// A project directory: cradle.toml and `inventory/hosts.ini`.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("cradle.toml"), CONFIG).expect("write cradle.toml");
    std::fs::create_dir_all(dir.path().join("inventory")).expect("mkdir inventory");
    std::fs::write(dir.path().join("inventory/hosts.ini"), INVENTORY).expect("write the inventory");
    dir
}

/// The homelab fixture inventory: hosts pve1-3, test-0..3, web-1, web-2, db-1.
fn homelab() -> PathBuf {
    workspace().join("tests/fixtures/inventory/homelab/hosts.ini")
}

/// `cmd` without anything from the caller's environment that changes completion.
fn clean(mut cmd: Command) -> Command {
    for var in ["COMPLETE", "CRADLE_CONFIG", "CRADLE_STATE_DIR", "CRADLE_LOG", "RUST_BACKTRACE"] {
        cmd.env_remove(var);
    }
    cmd
}

/// `cradle completions SHELL`, written to `dir/cradle.SHELL`.
fn script(shell: &str, dir: &Path) -> PathBuf {
    let out = Out::from(clean(Command::new(cradle_bin())).args(["completions", shell]).output().expect("run cradle"));
    assert!(out.code == 0 && out.stderr.is_empty(), "cradle completions {shell}:\n{out:#?}");
    assert!(!out.stdout.trim().is_empty() && out.stdout.contains("cradle"), "{shell} script:\n{}", out.stdout);
    let path = dir.join(format!("cradle.{shell}"));
    std::fs::write(&path, &out.stdout).expect("write the script");
    path
}

/// Run `bash --norc --noprofile -c CODE bash ARGS...` in `cwd` with `envs`.
fn bash(code: &str, args: &[&str], cwd: &Path, envs: &[(&str, &str)]) -> Out {
    let mut cmd = clean(Command::new("bash"));
    cmd.args(["--norc", "--noprofile", "-c", code, "bash"]).args(args).current_dir(cwd).envs(envs.iter().copied());
    Out::from(cmd.output().expect("run bash"))
}

/// Press TAB in bash after `words` (the last is the word being completed):
/// the registration script is sourced, COMP_WORDS/COMP_CWORD/COMP_LINE are
/// set as bash sets them, the registered function runs, COMPREPLY is read.
fn bash_tab(words: &[&str], cwd: &Path, envs: &[(&str, &str)]) -> Vec<String> {
    let script = script("bash", cwd);
    let code = r#"
        source "$1" || exit 1
        shift
        COMP_WORDS=("$@")
        COMP_CWORD=$(( $# - 1 ))
        COMP_LINE="$*"
        COMP_POINT=${#COMP_LINE}
        COMP_TYPE=9
        func=$(complete -p cradle | sed -n 's/.* -F \([^ ]*\) .*/\1/p')
        "$func" cradle "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
        for w in "${COMPREPLY[@]}"; do printf '%s\n' "$w"; done
    "#;
    let mut args = vec![script.to_str().expect("utf-8 path")];
    args.extend_from_slice(words);
    let out = bash(code, &args, cwd, envs);
    assert!(out.code == 0 && out.stderr.is_empty(), "TAB after {words:?} printed to the terminal:\n{out:#?}");
    out.stdout.lines().map(str::to_string).collect()
}

#[test]
fn completions_bash_script_loads_in_bash_without_errors_and_registers_cradle() {
    let dir = project();
    let script = script("bash", dir.path());
    let out = bash(r#"source "$1" && complete -p cradle"#, &[script.to_str().expect("utf-8 path")], dir.path(), &[]);
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(out.stderr.is_empty(), "sourcing the bash script printed errors:\n{}", out.stderr);
    assert!(out.stdout.contains("-F _clap_complete_cradle cradle"), "no registration for cradle:\n{}", out.stdout);
}

#[test]
fn completions_zsh_script_loads_in_zsh_after_compinit_without_errors() {
    let found = Command::new("zsh").args(["-f", "-c", "true"]).output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "this test loads the script in the real zsh, which is not on PATH: apt-get install zsh"
    );
    let dir = project();
    let script = script("zsh", dir.path());
    let code = r#"autoload -U compinit && compinit -u -D && source "$1" && print -r -- "$_comps[cradle]""#;
    let mut cmd = clean(Command::new("zsh"));
    cmd.args(["-f", "-c", code, "zsh", script.to_str().expect("utf-8 path")]).current_dir(dir.path());
    // compinit must not touch the real home.
    cmd.env("HOME", dir.path());
    let out = Out::from(cmd.output().expect("run zsh"));
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(out.stderr.is_empty(), "loading the zsh script printed errors:\n{}", out.stderr);
    assert_eq!(out.stdout.trim(), "_clap_dynamic_completer_cradle", "cradle is not bound to the completer:\n{out:#?}");
}

#[test]
fn completions_fish_script_is_generated_and_parses_where_fish_is_installed() {
    let dir = project();
    let script = script("fish", dir.path());
    let text = std::fs::read_to_string(&script).expect("read the script");
    assert!(text.contains("complete") && text.contains("--command cradle"), "fish script:\n{text}");
    if Command::new("fish").arg("--version").output().is_ok_and(|o| o.status.success()) {
        let out = Out::from(Command::new("fish").arg("--no-execute").arg(&script).output().expect("run fish"));
        assert!(out.code == 0 && out.stderr.is_empty(), "fish --no-execute:\n{out:#?}");
    }
}

#[test]
fn completions_command_prints_what_the_shell_gets_from_complete_env() {
    for shell in ["bash", "zsh", "fish"] {
        let run = |complete: bool| {
            let mut cmd = clean(Command::new(cradle_bin()));
            if complete {
                cmd.env("COMPLETE", shell);
            } else {
                cmd.args(["completions", shell]);
            }
            Out::from(cmd.output().expect("run cradle"))
        };
        let (from_env, from_command) = (run(true), run(false));
        assert_eq!(from_env.ok(), from_command.ok(), "{shell}");
    }
}

#[test]
fn completion_of_limit_offers_the_inventory_hosts_and_groups() {
    let dir = project();
    let inv = homelab();
    let inv = inv.to_str().expect("utf-8 path");
    let all = bash_tab(&["cradle", "provision", "-i", inv, "--limit", ""], dir.path(), &[]);
    for name in ["pve1", "pve3", "test-0", "test-3", "web-1", "web-2", "db-1", "proxmox", "prod_web", "vms", "all"] {
        assert!(all.contains(&name.to_string()), "{name} missing from {all:?}");
    }
    assert_eq!(bash_tab(&["cradle", "provision", "-i", inv, "--limit", "web"], dir.path(), &[]), ["web-1", "web-2"]);
    // A list: the last term is completed, the rest kept, listed names not offered again.
    assert_eq!(
        bash_tab(&["cradle", "remove", "--inventory", inv, "--limit", "web-1,!we"], dir.path(), &[]),
        ["web-1,!web-2"]
    );
}

#[test]
fn completion_of_limit_without_i_reads_the_inventory_next_to_cradle_toml() {
    let dir = project();
    assert_eq!(bash_tab(&["cradle", "provision", "--limit", "local"], dir.path(), &[]), ["local-a", "local-b"]);
}

#[test]
fn completion_of_env_offers_the_environment_names_of_cradle_toml() {
    let dir = project();
    let mut envs = bash_tab(&["cradle", "provision", "--env", ""], dir.path(), &[]);
    envs.sort();
    assert_eq!(envs, ["demo", "test"]);
    assert_eq!(bash_tab(&["cradle", "run", "hello", "--env", "d"], dir.path(), &[]), ["demo"]);
    // From elsewhere: CRADLE_CONFIG, or --config on the command line.
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("cradle.toml");
    let config = config.to_str().expect("utf-8 path");
    assert_eq!(
        bash_tab(&["cradle", "unlock", "vm", "--env", "t"], elsewhere.path(), &[("CRADLE_CONFIG", config)]),
        ["test"]
    );
    assert_eq!(bash_tab(&["cradle", "--config", config, "remove", "--env", "t"], elsewhere.path(), &[]), ["test"]);
    assert!(bash_tab(&["cradle", "provision", "--env", ""], elsewhere.path(), &[]).is_empty());
}

#[test]
fn completion_through_the_zsh_protocol_offers_names_with_their_kind() {
    let dir = project();
    let inv = homelab();
    let mut cmd = clean(Command::new(cradle_bin()));
    // What the zsh script runs on TAB after `cradle provision -i INV --limit db`.
    cmd.args(["--", "cradle", "provision", "-i", inv.to_str().expect("utf-8 path"), "--limit", "db"])
        .envs([("COMPLETE", "zsh"), ("_CLAP_IFS", "\n"), ("_CLAP_COMPLETE_INDEX", "5")])
        .current_dir(dir.path());
    let out = Out::from(cmd.output().expect("run cradle"));
    assert!(out.stderr.is_empty(), "{out:#?}");
    assert_eq!(out.ok().lines().collect::<Vec<_>>(), ["db-1:host"]);
}

#[test]
fn completion_with_a_broken_project_offers_nothing_and_prints_nothing() {
    let dir = project();
    std::fs::write(dir.path().join("cradle.toml"), "default_environment = [unclosed\n").expect("break cradle.toml");
    std::fs::write(dir.path().join("inventory/hosts.ini"), "[guests]\nweb[01:x]\n").expect("break the inventory");
    // bash_tab asserts that nothing reached stderr and the shell exited cleanly.
    assert!(bash_tab(&["cradle", "provision", "--env", ""], dir.path(), &[]).is_empty());
    assert!(bash_tab(&["cradle", "provision", "--limit", ""], dir.path(), &[]).is_empty());
    let missing = dir.path().join("no-such-inventory");
    let missing = missing.to_str().expect("utf-8 path");
    assert!(bash_tab(&["cradle", "provision", "-i", missing, "--limit", ""], dir.path(), &[]).is_empty());
    let config = ("CRADLE_CONFIG", "/nonexistent/cradle.toml");
    assert!(bash_tab(&["cradle", "run", "x", "--env", ""], dir.path(), &[config]).is_empty());
}

/// The files a package installs (`/usr/share/bash-completion/completions/cradle`,
/// `/usr/share/zsh/vendor-completions/_cradle`,
/// `/usr/share/fish/vendor_completions.d/cradle.fish`) are written by the build
/// tree's binary with `--completer cradle`: they call the `cradle` on PATH,
/// never the build path; without the flag, the binary as invoked.
#[test]
fn completions_with_completer_cradle_call_cradle_from_path_not_the_build_path() {
    let bin = cradle_bin();
    let build_dir = bin.parent().expect("the binary's directory").to_str().expect("utf-8 path").to_string();
    for shell in ["bash", "zsh", "fish"] {
        let packaged = Out::from(
            clean(Command::new(&bin)).args(["completions", shell, "--completer", "cradle"]).output().expect("run"),
        );
        assert!(packaged.code == 0 && packaged.stderr.is_empty(), "{packaged:#?}");
        assert!(!packaged.stdout.contains(&build_dir), "{shell} script names the build path:\n{}", packaged.stdout);
        assert!(!packaged.stdout.contains("/cradle"), "{shell} script calls cradle by a path:\n{}", packaged.stdout);
        let dev = Out::from(clean(Command::new(&bin)).args(["completions", shell]).output().expect("run"));
        assert!(dev.stdout.contains(bin.to_str().expect("utf-8 path")), "{shell} script:\n{}", dev.stdout);
    }
}

/// zsh's compinit autoloads `_cradle` from `$fpath` on the first TAB: that
/// first call must complete, not only register the completer (which would
/// leave the operator's first TAB with nothing). `_describe` is stubbed to
/// print what zsh would offer; `cradle` is found on PATH.
#[test]
fn completions_zsh_file_in_fpath_completes_on_the_first_tab() {
    let dir = project();
    let out = Out::from(
        clean(Command::new(cradle_bin())).args(["completions", "zsh", "--completer", "cradle"]).output().expect("run"),
    );
    let fpath = dir.path().join("vendor-completions");
    std::fs::create_dir(&fpath).expect("mkdir");
    std::fs::write(fpath.join("_cradle"), &out.stdout).expect("write _cradle");
    let code = r#"fpath=("$1" $fpath); autoload -Uz _cradle
        compdef() { print -r -- "compdef $*" }
        _describe() { shift 2; print -rl -- ${(P)1} }
        words=(cradle provisio); CURRENT=2; _cradle"#;
    let path =
        format!("{}:{}", cradle_bin().parent().expect("dir").display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = clean(Command::new("zsh"));
    cmd.args(["-f", "-c", code, "zsh", fpath.to_str().expect("utf-8 path")]).current_dir(dir.path());
    cmd.env("HOME", dir.path()).env("PATH", path);
    let out = Out::from(cmd.output().expect("run zsh"));
    assert!(out.code == 0 && out.stderr.is_empty(), "{out:#?}");
    assert!(out.stdout.starts_with("provision:"), "the first TAB offered nothing:\n{out:#?}");
}
