//! `cradle manpages DIR`: the manual pages, generated from the same clap
//! definitions as `--help`, for a package to install under
//! `/usr/share/man/man1` (scripts/package runs it at build time).
//!
//! Contract:
//! - Writes `cradle.1` and one page per subcommand, nested ones included, named
//!   as `man` and lintian expect: `cradle-SUB.1`, `cradle-SUB-SUBSUB.1`
//!   (`cradle-runs-show.1`). Every page but `cradle.1` ends with a SEE ALSO
//!   naming cradle(1) and its parent's page; a page with subcommands lists
//!   them (clap_mangen's SUBCOMMANDS section).
//! - Hidden subcommands (this one) and clap's implicit `help` get no page.
//! - Pages are public documentation, not state: files 0644, and DIR, when it
//!   does not exist, is created 0755 (its parents with the umask). An existing
//!   page is overwritten; nothing else in DIR is touched.
//! - No date in the pages, so the same build writes byte-identical pages
//!   (a reproducible package).
//!
//! The command itself is hidden from `--help`: operators read the pages, they
//! do not make them.

use std::fs::Permissions;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, CommandFactory as _};

use super::{Cli, outln};

#[derive(Debug, Args)]
pub struct ManpagesArgs {
    /// Where to write the pages (created 0755 if missing).
    pub dir: PathBuf,
}

/// `cradle manpages DIR`: write the pages, print each path written.
pub fn run(args: &ManpagesArgs) -> anyhow::Result<ExitCode> {
    for path in write_all(&args.dir)? {
        outln!("{}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Write every page into `dir`; the paths written, `cradle.1` first.
pub fn write_all(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .with_context(|| format!("cannot create the man page directory {}", dir.display()))?;
        // The mode above is masked by the umask; public docs are 0755 whatever it is.
        std::fs::set_permissions(dir, Permissions::from_mode(0o755))
            .with_context(|| format!("cannot set the mode of {}", dir.display()))?;
    }
    let mut written = Vec::new();
    for page in pages() {
        let path = dir.join(&page.file);
        write_page(&path, &page.roff)?;
        written.push(path);
    }
    Ok(written)
}

/// One rendered page: its file name (`cradle-runs-show.1`) and roff text.
pub struct Page {
    pub file: String,
    pub roff: Vec<u8>,
}

/// Every page, `cradle.1` first, then depth first in definition order.
pub fn pages() -> Vec<Page> {
    // `build` gives every subcommand its display name (`cradle-runs-show`)
    // and bin name (`cradle runs show`), which the page titles, file names
    // and synopses use.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    collect(&cmd, None, &mut out);
    out
}

fn collect(cmd: &clap::Command, parent: Option<&str>, out: &mut Vec<Page>) {
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name()).to_string();
    // Subcommands carry no version of their own: name cradle's on every page
    // (the footer), not the subcommand's name.
    let man = clap_mangen::Man::new(cmd.clone())
        .source(format!("cradle {}", env!("CARGO_PKG_VERSION")))
        .manual("cradle manual");
    let mut roff = Vec::new();
    // Rendering into memory cannot fail; a failure would be clap_mangen's bug,
    // and the page would then be empty rather than the command failing.
    let _ = man.render(&mut roff);
    if let Some(parent) = parent {
        roff.extend_from_slice(see_also(parent).as_bytes());
    }
    out.push(Page { file: man.get_filename(), roff });
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect(sub, Some(&name), out);
    }
}

/// The SEE ALSO section of a subcommand's page: cradle(1), and the parent's
/// page when that is not cradle(1) itself. `\-` is roff's hyphen in a name
/// (a plain `-` may be typeset as a minus sign or a break point).
fn see_also(parent: &str) -> String {
    let mut refs = vec!["cradle".to_string()];
    if parent != "cradle" {
        refs.push(parent.to_string());
    }
    let lines: Vec<String> = refs.iter().map(|r| format!(".BR {} (1)", r.replace('-', "\\-"))).collect();
    format!(".SH \"SEE ALSO\"\n{}\n", lines.join(",\n"))
}

fn write_page(path: &Path, roff: &[u8]) -> anyhow::Result<()> {
    let mut file =
        std::fs::File::create(path).with_context(|| format!("cannot write the man page {}", path.display()))?;
    file.write_all(roff).with_context(|| format!("cannot write the man page {}", path.display()))?;
    // An existing file keeps its mode through `create`; the umask may also have masked it.
    file.set_permissions(Permissions::from_mode(0o644))
        .with_context(|| format!("cannot set the mode of {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
#[path = "manpages_tests.rs"]
mod tests;
