//! Shell completions: `cradle completions bash|zsh|fish`, and the completion
//! requests the shells send back while the operator presses TAB.
//!
//! Contract:
//! - Completion is dynamic ([`clap_complete::CompleteEnv`]): the registration
//!   script makes the shell run `COMPLETE=<shell> cradle -- <words>` on TAB;
//!   [`complete_if_asked`], called first thing in `cli::main`, answers such a
//!   request and exits before anything else runs (no logging, no runtime).
//!   `cradle completions SHELL` prints exactly the script `COMPLETE=SHELL cradle`
//!   prints, so `source <(cradle completions bash)` and a file written once
//!   behave the same. The script calls back the program `--completer` names,
//!   else this cradle as invoked (`./target/debug/cradle` made absolute): a
//!   package writes its files with `--completer cradle`, so the installed
//!   scripts run the `cradle` found on PATH, never a build path.
//! - The zsh script works both sourced and installed as `_cradle` in `$fpath`
//!   (`/usr/share/zsh/vendor-completions/_cradle`): autoloaded by compinit,
//!   it completes on the first TAB instead of only registering itself
//!   (clap_complete's dynamic zsh script only registers; its static one
//!   checks `$funcstack` the same way): [`ZshAutoload`], used by both
//!   `cradle completions zsh` and `COMPLETE=zsh cradle`.
//! - Subcommands, options and file paths complete from the clap definition.
//!   `--env` completes the environment names of the project's cradle.toml:
//!   the `--config` on the command line being completed, else `CRADLE_CONFIG`,
//!   else `./cradle.toml`. `--limit` completes the host and group names of the
//!   inventory: the `-i`/`--inventory` on that command line, else `inventory/`
//!   next to cradle.toml (the layout `cradle init` writes). A `--limit` pattern
//!   is a list (`a,b`, `a:b`, `!x`, `&y`): only its last term is completed, the
//!   rest is kept, and names already in the list are not offered again.
//!
//! Failure modes: none reach the terminal. An unreadable or invalid
//! cradle.toml or inventory, a missing file, or even a panic while reading one
//! gives no candidates and prints nothing (a completion that writes to the
//! terminal garbles the operator's command line). Known limit: bash splits
//! words at `:`, so in bash only `,` separates `--limit` terms being completed.

use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, CommandFactory as _, ValueEnum};
use clap_complete::CompletionCandidate;
use clap_complete::env::{Bash, CompleteEnv, Elvish, EnvCompleter, Fish, Powershell, Shells, Zsh};

use super::Cli;
use crate::config::{CONFIG_FILE, Config};
use crate::inventory::Inventory;

/// The variable the registration scripts set to ask for completions.
const VAR: &str = "COMPLETE";

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to print the completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
    /// The program the script runs on TAB: `cradle` (found on PATH) for the
    /// files a package installs. Default: this cradle, as invoked.
    #[arg(long, value_name = "PROGRAM")]
    pub completer: Option<String>,
}

/// The shells `cradle completions` writes scripts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    /// `source <(cradle completions bash)` in ~/.bashrc.
    Bash,
    /// `source <(cradle completions zsh)` in ~/.zshrc, after `compinit`.
    Zsh,
    /// `cradle completions fish > ~/.config/fish/completions/cradle.fish`.
    Fish,
}

/// Answer a shell's completion request (`COMPLETE=bash cradle -- cradle pro`)
/// and exit; return when the process is not one.
pub fn complete_if_asked() {
    if std::env::var_os(VAR).is_some_and(|v| !v.is_empty() && v != "0") {
        // A candidate reader that panics must not print over the command line.
        std::panic::set_hook(Box::new(|_| {}));
    }
    CompleteEnv::with_factory(Cli::command).var(VAR).shells(SHELLS).complete();
}

/// clap_complete's shells, zsh's registration made autoloadable.
const SHELLS: Shells<'static> = Shells(&[&Bash, &Elvish, &Fish, &Powershell, &ZshAutoload]);

/// clap_complete's zsh support, its registration script made to complete
/// when compinit autoloads it as `_NAME` from `$fpath` (the body then runs on
/// the first TAB: define the function, then call it) and to register itself
/// when sourced, as before.
struct ZshAutoload;

impl EnvCompleter for ZshAutoload {
    fn name(&self) -> &'static str {
        Zsh.name()
    }

    fn is(&self, name: &str) -> bool {
        Zsh.is(name)
    }

    fn write_registration(
        &self,
        var: &str,
        name: &str,
        bin: &str,
        completer: &str,
        buf: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        let mut script = Vec::new();
        Zsh.write_registration(var, name, bin, completer, &mut script)?;
        buf.write_all(zsh_autoloadable(&String::from_utf8_lossy(&script), name).as_bytes())
    }

    fn write_complete(
        &self,
        cmd: &mut clap::Command,
        args: Vec<OsString>,
        current_dir: Option<&Path>,
        buf: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        Zsh.write_complete(cmd, args, current_dir, buf)
    }
}

/// `cradle completions SHELL`: the registration script on stdout.
pub fn run(args: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    let name = match args.shell {
        Shell::Bash => "bash",
        Shell::Zsh => "zsh",
        Shell::Fish => "fish",
    };
    let shells = SHELLS;
    let shell: &dyn EnvCompleter =
        shells.completer(name).ok_or_else(|| anyhow::anyhow!("clap_complete has no {name} support"))?;
    let cmd = Cli::command();
    let completer = args.completer.clone().unwrap_or_else(completer_path);
    let mut script = Vec::new();
    shell.write_registration(VAR, cmd.get_name(), cmd.get_name(), &completer, &mut script)?;
    std::io::stdout().lock().write_all(&script)?;
    Ok(ExitCode::SUCCESS)
}

/// `script` (clap_complete's zsh registration) with its final `compdef`
/// run only when sourced; autoloaded as `_NAME`, it completes instead.
fn zsh_autoloadable(script: &str, name: &str) -> String {
    let register = format!("compdef _clap_dynamic_completer_{name} {name}\n");
    let both = format!(
        "if [ \"$funcstack[1]\" = \"_{name}\" ]; then\n    _clap_dynamic_completer_{name} \"$@\"\nelse\n    {register}fi\n"
    );
    script.replacen(&register, &both, 1)
}

/// The program the script calls back, chosen as [`CompleteEnv`] chooses it:
/// `argv[0]` as typed (`cradle`, found on PATH), made absolute when it is a
/// relative path (`./target/debug/cradle`).
fn completer_path() -> String {
    let argv0 = PathBuf::from(std::env::args_os().next().unwrap_or_else(|| OsString::from("cradle")));
    let path = match std::env::current_dir() {
        Ok(cwd) if argv0.components().count() > 1 => cwd.join(argv0),
        _ => argv0,
    };
    path.to_string_lossy().into_owned()
}

/// Candidates for `--env`: the environments of the project's cradle.toml.
pub fn env_candidates(current: &OsStr) -> Vec<CompletionCandidate> {
    quietly(|| {
        let current = current.to_str()?;
        let words = request_words();
        let config = Config::load(&config_path(&words)).ok()?;
        Some(
            config
                .environments
                .iter()
                .filter(|(name, _)| name.starts_with(current))
                .map(|(name, env)| {
                    let help = format!("cluster {}, backend {}", env.cluster, env.backend);
                    CompletionCandidate::new(name).help(Some(help.into()))
                })
                .collect(),
        )
    })
}

/// Candidates for `--limit`: the inventory's host and group names, for the
/// last term of the pattern.
pub fn limit_candidates(current: &OsStr) -> Vec<CompletionCandidate> {
    quietly(|| {
        let current = current.to_str()?;
        let words = request_words();
        let inventory = match option_value(&words, Some('i'), "inventory") {
            Some(path) => expand_home(&path),
            None => config_path(&words).parent().unwrap_or(Path::new("")).join("inventory"),
        };
        let inv = Inventory::load(&inventory).ok()?;
        let hosts = inv.hosts();
        let names = hosts.iter().map(|h| (h.as_str(), "host")).chain(inv.groups().into_iter().map(|g| (g, "group")));
        Some(complete_pattern(current, names))
    })
}

/// Run a candidate reader; whatever goes wrong, including a panic, is no
/// candidates.
fn quietly(f: impl FnOnce() -> Option<Vec<CompletionCandidate>>) -> Vec<CompletionCandidate> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok().flatten().unwrap_or_default()
}

/// `current` split into the pattern so far (kept) and its last term's name
/// prefix; then every name (with its kind as help) that the last term can
/// become, not counting names the pattern already lists.
fn complete_pattern<'a>(
    current: &str,
    names: impl Iterator<Item = (&'a str, &'static str)>,
) -> Vec<CompletionCandidate> {
    let split = current.rfind([',', ':']).map_or(0, |i| i + 1);
    let (done, last) = current.split_at(split);
    let operator = if last.starts_with(['!', '&']) { 1 } else { 0 };
    let (operator, prefix) = last.split_at(operator);
    let listed: Vec<&str> = done.split([',', ':']).map(|t| t.trim_start_matches(['!', '&'])).collect();
    let mut seen = std::collections::HashSet::new();
    names
        .filter(|(name, _)| name.starts_with(prefix) && !listed.contains(name) && seen.insert(*name))
        .map(|(name, kind)| CompletionCandidate::new(format!("{done}{operator}{name}")).help(Some(kind.into())))
        .collect()
}

/// The words of the command line being completed: what follows the first
/// `--` of this process's arguments (`cradle -- cradle provision -i inv ...`).
fn request_words() -> Vec<String> {
    std::env::args_os().skip_while(|a| a != "--").skip(1).map(|a| a.to_string_lossy().into_owned()).collect()
}

/// cradle.toml as the command being completed would find it: its `--config`,
/// else `CRADLE_CONFIG`, else `./cradle.toml`.
fn config_path(words: &[String]) -> PathBuf {
    option_value(words, None, "config")
        .map(|p| expand_home(&p))
        .or_else(|| std::env::var_os("CRADLE_CONFIG").filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(CONFIG_FILE))
}

/// The value given to `--long` (`--long V`, `--long=V`) or `-s` (`-s V`,
/// `-sV`, after other short flags: `-vi V`) in `words`; the last one wins.
/// Stops at a bare `--`.
fn option_value(words: &[String], short: Option<char>, long: &str) -> Option<String> {
    let mut found = None;
    let mut words = words.iter();
    while let Some(word) = words.next() {
        if word == "--" {
            break;
        }
        if let Some(rest) = word.strip_prefix("--") {
            if rest == long {
                found = words.next().cloned().or(found);
            } else if let Some(value) = rest.strip_prefix(long).and_then(|r| r.strip_prefix('=')) {
                found = Some(value.to_string());
            }
        } else if let (Some(short), Some(cluster)) = (short, word.strip_prefix('-')) {
            // Count and boolean short flags may come first (`-vvi inv`).
            let rest = cluster.trim_start_matches(['v', 'q']);
            if let Some(value) = rest.strip_prefix(short) {
                found = if value.is_empty() { words.next().cloned().or(found) } else { Some(value.to_string()) };
            }
        }
    }
    found
}

/// `~/x` as the shell would have expanded it (completion sees the word as typed).
fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    fn values(current: &str) -> Vec<String> {
        let names = [("web-1", "host"), ("web-2", "host"), ("db-1", "host"), ("web", "group"), ("all", "group")];
        complete_pattern(current, names.into_iter())
            .iter()
            .map(|c| c.get_value().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_zsh_script_completes_when_autoloaded_and_registers_when_sourced() {
        let script = "#compdef cradle\nfunction _clap_dynamic_completer_cradle() {\n}\n\ncompdef _clap_dynamic_completer_cradle cradle\n";
        let fixed = zsh_autoloadable(script, "cradle");
        assert!(fixed.ends_with(
            "if [ \"$funcstack[1]\" = \"_cradle\" ]; then\n    _clap_dynamic_completer_cradle \"$@\"\nelse\n    compdef _clap_dynamic_completer_cradle cradle\nfi\n"
        ), "{fixed}");
    }

    #[test]
    fn a_limit_list_completes_its_last_term_and_keeps_the_rest() {
        assert_eq!(values(""), ["web-1", "web-2", "db-1", "web", "all"]);
        assert_eq!(values("we"), ["web-1", "web-2", "web"]);
        assert_eq!(values("web-1,we"), ["web-1,web-2", "web-1,web"]);
        assert_eq!(values("web:!d"), ["web:!db-1"]);
        assert_eq!(values("all,&w"), ["all,&web-1", "all,&web-2", "all,&web"]);
        assert_eq!(values("nothing"), Vec::<String>::new());
    }

    #[test]
    fn options_are_found_in_every_spelling_clap_accepts() {
        let inv = |line: &str| option_value(&words(line), Some('i'), "inventory");
        assert_eq!(inv("cradle provision -i inv --limit"), Some("inv".into()));
        assert_eq!(inv("cradle provision -iinv --limit"), Some("inv".into()));
        assert_eq!(inv("cradle -vv provision -vi inv --limit"), Some("inv".into()));
        assert_eq!(inv("cradle provision --inventory=a/b --limit"), Some("a/b".into()));
        assert_eq!(inv("cradle provision --inventory a --inventory b"), Some("b".into()));
        assert_eq!(inv("cradle provision --limit x"), None);
        assert_eq!(inv("cradle run wf -- -i x"), None);
        let config = |line: &str| option_value(&words(line), None, "config");
        assert_eq!(config("cradle --config p/c.toml run --env"), Some("p/c.toml".into()));
        assert_eq!(config("cradle run --configx y --env"), None);
    }
}
