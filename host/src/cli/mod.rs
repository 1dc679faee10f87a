//! The `cradle` command line: argument parsing, logging set-up, and one small
//! module per command group. Errors reach the operator as one paragraph
//! (`error: ...` with its causes), never as a panic or a backtrace.

mod completions;
mod init;
mod logfmt;
mod maintain;
mod manpages;
mod netbox;
mod plugin_test;
mod plugins;
mod progress;
mod provision;
mod remove;
mod run;
mod runs;
mod serve;
mod sim;
mod workflows;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::project::Project;

/// Provision Proxmox VE virtual machines through sandboxed WebAssembly backends
/// and operator-editable Rhai workflows.
#[derive(Debug, Parser)]
#[command(name = "cradle", version, about, long_about = None)]
pub struct Cli {
    /// The project configuration.
    #[arg(long, global = true, env = "CRADLE_CONFIG", default_value = "cradle.toml")]
    pub config: PathBuf,
    /// cradle's state directory (journals, locks, checkpoints, cache).
    #[arg(long, global = true, env = "CRADLE_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// More log output (-v debug, -vv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Output format.
    #[arg(long, global = true, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    #[command(subcommand)]
    command: Command,
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people.
    Text,
    /// One JSON document on stdout.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a starter project: cradle.toml, the built-in workflows, an inventory.
    Init(init::InitArgs),
    /// Backend plugins: inspect the configured ones; write, build and test your own
    /// (`cradle plugin new NAME`).
    #[command(subcommand, visible_alias = "plugin")]
    Plugins(plugins::PluginsCmd),
    /// Check the workflow scripts.
    #[command(subcommand)]
    Workflows(workflows::WorkflowsCmd),
    /// Provision the inventory's VMs (create, finalize pending, or skip each).
    Provision(provision::ProvisionArgs),
    /// Show how the inventory's complete VMs differ from their live config (cores,
    /// memory, disks, NICs, tags, startup order), each change classified; write a
    /// reviewed plan with --out. Changes nothing.
    Plan(maintain::PlanArgs),
    /// Apply a plan `cradle plan --out` wrote, VM by VM under each VM's lock;
    /// a VM changed since the plan is refused, not overwritten.
    Apply(maintain::ApplyArgs),
    /// Destroy the inventory's selected VMs (asks for confirmation).
    Remove(remove::RemoveArgs),
    /// Remove a VM's lock once its holder is shown to be gone.
    Unlock(remove::UnlockArgs),
    /// Run a workflow function.
    Run(run::RunArgs),
    /// Read run journals.
    #[command(subcommand)]
    Runs(runs::RunsCmd),
    /// Accept NetBox webhooks and run the pipeline of each VM set to Staged.
    Serve(serve::ServeArgs),
    /// The NetBox pipeline without a webhook (`sync`: every VM NetBox has Staged).
    #[command(subcommand)]
    Netbox(netbox::NetboxCmd),
    /// The simulated Proxmox VE cluster.
    #[command(subcommand)]
    Sim(sim::SimCmd),
    /// Print the shell completion script (bash, zsh, fish).
    Completions(completions::CompletionsArgs),
    /// Write the manual pages (cradle.1, cradle-SUB.1, ...) into DIR, for packaging.
    #[command(hide = true)]
    Manpages(manpages::ManpagesArgs),
}

/// Parse the command line and run it; the process exit code.
pub fn main() -> ExitCode {
    // The shell asking for completions (`COMPLETE=bash cradle -- ...`): answered, then exit.
    completions::complete_if_asked();
    let cli = Cli::parse();
    // Before any thread starts: no child process may inherit $NOTIFY_SOCKET.
    crate::serve::notify::take_from_env();
    init_tracing(&cli);
    let json = cli.output == Output::Json;
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(dispatch(cli));
    // Work still on a blocking thread now is abandoned: the process does not
    // wait for it. (`cradle serve` never gets here with a pipeline running
    // past its grace period: it exits at once, as a kill would, so the
    // pipeline resumes at the next start instead of failing here; see
    // cli/serve.rs.)
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => code,
        // The reader of stdout went away (`cradle runs list | head`): nothing
        // more to say, and no one to say it to.
        Err(e) if is_broken_pipe(&e) => ExitCode::FAILURE,
        Err(e) => {
            let message = crate::secrets::redact(&render_error(&e)).into_owned();
            // A JSON consumer reads stdout: give it a document there too.
            if json {
                println!("{}", serde_json::json!({ "ok": false, "error": message }));
            }
            // The JSON above is exact; the terminal gets control characters
            // escaped (plugin or remote text may be part of the message).
            // Under systemd the journal files it as an error, not as info.
            let priority = if logfmt::stderr_is_journal() { "<3>" } else { "" };
            eprintln!("{priority}error: {}", crate::text::printable_paragraph(&message));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes as one line. Most of cradle's errors already
/// state their cause in their own message (`cannot read X: No such file`), so
/// a cause whose text is already there is not repeated.
fn render_error(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

/// `println!` that returns the write error instead of panicking when stdout
/// is closed.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}
pub(crate) use outln;

/// `print!` that returns the write error instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}
pub(crate) use out;

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match &cli.command {
        Command::Init(args) => init::run(&cli, args),
        Command::Plugins(cmd) => plugins::run(&cli, cmd).await,
        Command::Workflows(cmd) => workflows::run(&cli, cmd),
        Command::Provision(args) => provision::run(&cli, args).await,
        Command::Plan(args) => maintain::plan(&cli, args).await,
        Command::Apply(args) => maintain::apply(&cli, args).await,
        Command::Remove(args) => remove::remove(&cli, args).await,
        Command::Unlock(args) => remove::unlock(&cli, args),
        Command::Run(args) => run::run(&cli, args).await,
        Command::Runs(cmd) => runs::run(&cli, cmd),
        Command::Serve(args) => serve::run(&cli, args).await,
        Command::Netbox(cmd) => netbox::run(&cli, cmd).await,
        Command::Sim(cmd) => sim::run(cmd, cli.state_dir.clone()).await,
        Command::Completions(args) => completions::run(args),
        Command::Manpages(args) => manpages::run(args),
    }
}

impl Cli {
    /// Open the project named by `--config`.
    fn project(&self) -> anyhow::Result<Project> {
        Ok(Project::open(&self.config, self.state_dir.as_deref())?)
    }
}

fn init_tracing(cli: &Cli) {
    // Commands over an inventory say one line per VM (its outcome) plus
    // warnings and errors; plugin and workflow log events, like the steps,
    // are detail for `-v` (the journal has them all either way).
    let inventory =
        matches!(cli.command, Command::Provision(_) | Command::Remove(_) | Command::Plan(_) | Command::Apply(_));
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "error",
        (false, 0) if inventory => "warn,cradle=info,cradle::log=warn",
        (false, 0) => "warn,cradle=info",
        (false, 1) => "debug,wasmtime=info,cranelift=info",
        (false, _) => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("CRADLE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    // Colour only on a terminal, and never when NO_COLOR is set.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(progress::log_writer)
        .fmt_fields(crate::text::log_fields());
    // Under systemd: journald stamps and colours nothing itself, and reads the
    // priority from each line's `<N>` (cli/logfmt.rs).
    let _ = if logfmt::stderr_is_journal() {
        builder.event_format(logfmt::journal_format()).try_init()
    } else {
        builder.with_target(false).with_ansi(ansi).try_init()
    };
}

/// Print `value` as pretty JSON on stdout.
fn print_json(value: &serde_json::Value) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(value)?)?;
    Ok(())
}
