//! cradle's owner-only state directory and the file helpers every module uses to
//! write there (invariant 7: generated files 0600, directories 0700).
//!
//! Contract:
//! - [`StateDir::resolve`] picks the directory: the explicit path, else
//!   `$CRADLE_STATE_DIR`, else `$XDG_STATE_HOME/cradle`, else
//!   `$HOME/.local/state/cradle`. It is created 0700; an existing directory that
//!   group or others can access is refused with the `chmod 700 <path>` to run,
//!   and one owned by another user is refused outright (its owner could swap
//!   journals, locks or cached compiled code under cradle).
//! - Subdirectories (`runs/`, `locks/`, `checkpoints/`, `cache/`) are created 0700
//!   on first use and checked the same way.
//! - [`write_private_file_atomic`] never leaves a half-written file under the final
//!   name: temp file (0600) in the same directory, write, fsync, rename, fsync dir.
//! - [`open_private_append`] creates 0600 and refuses an existing file that group
//!   or others can access.
//!
//! Failure modes are [`StateError`] values naming the path and what to do; nothing
//! here panics.

use std::ffi::OsString;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub mod process;

/// Errors from resolving the state directory or writing private files.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// No candidate location is set.
    #[error(
        "cannot choose a state directory: none of --state-dir, $CRADLE_STATE_DIR, \
         $XDG_STATE_HOME or $HOME is set; pass --state-dir <path> or set CRADLE_STATE_DIR"
    )]
    NoLocation,
    /// A directory or file other users can reach.
    #[error(
        "{path} is accessible by group or others (mode {mode:03o}); cradle keeps run \
         records, locks and checkpoints owner-only: run `chmod {fix} {path}` and retry"
    )]
    TooOpen {
        /// The offending path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// The mode to set (`700` for directories, `600` for files).
        fix: &'static str,
    },
    /// A directory owned by another user: its owner controls what is in it.
    #[error(
        "{path} is owned by uid {owner}, not by the user running cradle (uid {me}); cradle \
         trusts only its own state (journals, locks, cached compiled plugins): use a state \
         directory of your own (--state-dir), or `chown {me} {path}` if it is yours"
    )]
    ForeignOwner {
        /// The offending path.
        path: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// The effective uid of this process.
        me: u32,
    },
    /// The path exists but is not a directory.
    #[error("{path} exists but is not a directory; move it away or choose another state directory")]
    NotADirectory {
        /// The offending path.
        path: PathBuf,
    },
    /// An I/O operation failed.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done (`create directory`, `write`, ...).
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl StateError {
    pub(crate) fn io(action: &'static str, path: &Path, source: io::Error) -> Self {
        StateError::Io { action, path: path.to_path_buf(), source }
    }
}

/// cradle's state directory (owner-only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// Resolves and creates the state directory (see the module docs for the order).
    pub fn resolve(explicit: Option<&Path>) -> Result<StateDir, StateError> {
        Self::resolve_with(explicit, |name| std::env::var_os(name))
    }

    /// [`StateDir::resolve`] with an injectable environment, so tests never mutate
    /// the process environment.
    fn resolve_with(explicit: Option<&Path>, env: impl Fn(&str) -> Option<OsString>) -> Result<StateDir, StateError> {
        // Empty variables count as unset (the XDG spec says so for XDG_*); a relative
        // XDG_STATE_HOME is invalid per the spec and ignored.
        let non_empty = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let root = match explicit {
            Some(p) => p.to_path_buf(),
            None => non_empty("CRADLE_STATE_DIR")
                .or_else(|| non_empty("XDG_STATE_HOME").filter(|p| p.is_absolute()).map(|p| p.join("cradle")))
                .or_else(|| non_empty("HOME").map(|h| h.join(".local/state/cradle")))
                .ok_or(StateError::NoLocation)?,
        };
        create_private_dir(&root)?;
        Ok(StateDir { root })
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `runs/`: run journals (created 0700 on first use).
    pub fn runs(&self) -> Result<PathBuf, StateError> {
        self.subdir("runs")
    }

    /// `locks/`: filesystem workflow locks.
    pub fn locks(&self) -> Result<PathBuf, StateError> {
        self.subdir("locks")
    }

    /// `checkpoints/`: pending-finalization checkpoints.
    pub fn checkpoints(&self) -> Result<PathBuf, StateError> {
        self.subdir("checkpoints")
    }

    /// `cache/`: compiled components and other rebuildable data.
    pub fn cache(&self) -> Result<PathBuf, StateError> {
        self.subdir("cache")
    }

    /// The path of cradle's own `known_hosts` file (not created here).
    pub fn known_hosts(&self) -> PathBuf {
        self.root.join("known_hosts")
    }

    fn subdir(&self, name: &str) -> Result<PathBuf, StateError> {
        let dir = self.root.join(name);
        create_private_dir(&dir)?;
        Ok(dir)
    }
}

/// Creates `path` (and missing parents) with mode 0700, or checks that an existing
/// directory is not accessible by group or others.
pub fn create_private_dir(path: &Path) -> Result<(), StateError> {
    match DirBuilder::new().recursive(true).mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(StateError::io("create directory", path, e)),
    }
    let meta = fs::metadata(path).map_err(|e| StateError::io("inspect", path, e))?;
    if !meta.is_dir() {
        return Err(StateError::NotADirectory { path: path.to_path_buf() });
    }
    let me = effective_uid();
    if meta.uid() != me {
        return Err(StateError::ForeignOwner { path: path.to_path_buf(), owner: meta.uid(), me });
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(StateError::TooOpen { path: path.to_path_buf(), mode, fix: "700" });
    }
    Ok(())
}

/// The effective uid of this process.
fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    #[allow(unsafe_code, reason = "a libc call without preconditions")]
    unsafe {
        libc::geteuid()
    }
}

/// Distinguishes temp files of concurrent writers in one process (the pid covers
/// other processes).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` atomically and durably with mode 0600: a temp file in
/// the same directory, fsync, rename over `path`, fsync of the directory. Readers
/// see the old content or the new, never a mix; the parent directory must exist.
pub fn write_private_file_atomic(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let dir = parent_dir(path);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
    let result = write_temp_and_rename(&temp, path, bytes);
    if result.is_err() {
        // Best effort: the temp name is ours alone, and a leftover would only waste space.
        let _ = fs::remove_file(&temp);
    }
    result?;
    sync_dir(dir)
}

fn write_temp_and_rename(temp: &Path, path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(temp)
        .map_err(|e| StateError::io("create", temp, e))?;
    file.write_all(bytes).map_err(|e| StateError::io("write", temp, e))?;
    file.sync_all().map_err(|e| StateError::io("fsync", temp, e))?;
    fs::rename(temp, path).map_err(|e| StateError::io("rename into place", path, e))
}

/// fsyncs a directory so a rename or removal inside it survives a crash.
pub fn sync_dir(dir: &Path) -> Result<(), StateError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| StateError::io("fsync directory", dir, e))
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Opens `path` for appending, creating it with mode 0600. An existing file that
/// group or others can access is refused with the `chmod 600` to run.
pub fn open_private_append(path: &Path) -> Result<File, StateError> {
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| StateError::io("open for appending", path, e))?;
    let mode = file.metadata().map_err(|e| StateError::io("inspect", path, e))?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(StateError::TooOpen { path: path.to_path_buf(), mode, fix: "600" });
    }
    Ok(file)
}

/// This machine's host name (from `/proc/sys/kernel/hostname`), used to tell local
/// lock holders and runs from remote ones; `unknown-host` if it cannot be read.
pub fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown-host".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_of(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn explicit_path_wins_and_is_created_0700() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b/state");
        let env = |_: &str| Some(OsString::from("/nonexistent-should-not-be-used"));
        let s = StateDir::resolve_with(Some(&dir), env).unwrap();
        assert_eq!(s.root(), dir);
        assert_eq!(mode_of(&dir), 0o700);
    }

    #[test]
    fn resolution_order_is_cradle_var_then_xdg_then_home() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().to_path_buf();
        let all = |name: &str| match name {
            "CRADLE_STATE_DIR" => Some(p.join("c").into_os_string()),
            "XDG_STATE_HOME" => Some(p.join("x").into_os_string()),
            "HOME" => Some(p.join("h").into_os_string()),
            _ => None,
        };
        assert_eq!(StateDir::resolve_with(None, all).unwrap().root(), p.join("c"));
        let xdg = |name: &str| match name {
            "CRADLE_STATE_DIR" => Some(OsString::new()),
            "XDG_STATE_HOME" => Some(p.join("x").into_os_string()),
            "HOME" => Some(p.join("h").into_os_string()),
            _ => None,
        };
        let got = StateDir::resolve_with(None, xdg).unwrap();
        assert_eq!(got.root(), p.join("x/cradle"));
        let home = |name: &str| match name {
            "XDG_STATE_HOME" => Some(OsString::from("relative/ignored")),
            "HOME" => Some(p.join("h").into_os_string()),
            _ => None,
        };
        let got = StateDir::resolve_with(None, home).unwrap();
        assert_eq!(got.root(), p.join("h/.local/state/cradle"));
        let none = |_: &str| None;
        assert!(matches!(StateDir::resolve_with(None, none), Err(StateError::NoLocation)));
    }

    #[test]
    fn group_readable_state_dir_is_refused_with_the_chmod_to_run() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).unwrap();
        let err = StateDir::resolve(Some(&dir)).unwrap_err();
        assert!(err.to_string().contains(&format!("chmod 700 {}", dir.display())), "{err}");
    }

    #[test]
    fn a_state_dir_owned_by_another_user_is_refused() {
        if effective_uid() != 0 {
            // Only root can hand a directory to another user.
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        let err = StateDir::resolve(Some(&dir)).unwrap_err();
        assert!(matches!(err, StateError::ForeignOwner { owner: 65534, .. }), "{err}");
        assert!(err.to_string().contains("owned by uid 65534"), "{err}");
        // A subdirectory handed to another user is refused the same way.
        let own = StateDir::resolve(Some(&tmp.path().join("own"))).unwrap();
        let runs = own.runs().unwrap();
        std::os::unix::fs::chown(&runs, Some(65534), None).unwrap();
        assert!(matches!(own.runs(), Err(StateError::ForeignOwner { .. })));
    }

    #[test]
    fn subdirectories_are_created_private_on_first_use() {
        let tmp = tempfile::tempdir().unwrap();
        let s = StateDir::resolve(Some(&tmp.path().join("s"))).unwrap();
        for d in [s.runs(), s.locks(), s.checkpoints(), s.cache()] {
            assert_eq!(mode_of(&d.unwrap()), 0o700);
        }
        assert_eq!(s.known_hosts(), s.root().join("known_hosts"));
    }

    #[test]
    fn atomic_write_replaces_content_with_a_0600_file_and_leaves_no_temp() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("x.json");
        write_private_file_atomic(&f, b"one").unwrap();
        write_private_file_atomic(&f, b"two").unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"two");
        assert_eq!(mode_of(&f), 0o600);
        let names: Vec<_> = fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "temp files left behind: {names:?}");
    }

    #[test]
    fn append_file_is_created_0600_and_a_world_readable_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("log");
        let mut h = open_private_append(&f).unwrap();
        h.write_all(b"a").unwrap();
        assert_eq!(mode_of(&f), 0o600);
        fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
        let err = open_private_append(&f).unwrap_err();
        assert!(err.to_string().contains("chmod 600"), "{err}");
    }
}
