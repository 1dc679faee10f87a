//! Secret references and the process-wide redactor (invariant 7).
//!
//! Contract:
//! - A [`SecretRef`] in `cradle.toml` is one of `{ env = "PVE_TOKEN" }`,
//!   `{ file = "/path" }` or `{ command = ["pass", "show", "pve/token"] }`. A plain
//!   string is refused when the config is deserialized: secrets are never inline.
//! - [`SecretRef::resolve`] yields a [`Secret`]. Environment: missing or empty is an
//!   error naming the variable. File: refused if group/other can access it (the
//!   message has the `chmod 600`), trailing newline trimmed. Command: run without a
//!   shell, stdin closed, 10 s timeout; a non-zero exit reports the exit code and
//!   the first line of stderr, never stdout; the output is trimmed. An empty value
//!   is an error in every form.
//! - Every resolved value of 4 characters or more is registered in a process-wide
//!   redactor; [`redact`] replaces each registered value with `[redacted]`. The
//!   journal and error/log paths run their text through it.
//! - [`Secret`] prints as `[redacted]` (Debug and Display) and is not `Serialize`;
//!   [`Secret::expose`] is the one way to the value.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::Duration;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use command::from_command;

mod command;

/// What replaces a secret value in any text cradle writes.
pub const REDACTED: &str = "[redacted]";

/// How long a secret command may run.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// Values shorter than this are not registered: replacing e.g. "abc" everywhere
/// would shred logs while hiding nothing worth hiding.
const MIN_REDACT_LEN: usize = 4;

/// Where a secret comes from. Never holds the value itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretRef {
    /// An environment variable of the cradle process.
    Env(String),
    /// An owner-only file.
    File(PathBuf),
    /// A command (program and arguments, no shell) that prints the secret.
    Command(Vec<String>),
}

/// Why a secret could not be resolved. Messages name the source, never the value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The environment variable is not set, is empty, or is not UTF-8.
    #[error("secret environment variable {var} is {problem}; export it before running cradle")]
    Env {
        /// The variable name.
        var: String,
        /// `not set`, `empty` or `not valid UTF-8`.
        problem: &'static str,
    },
    /// The secret file cannot be read.
    #[error("cannot read secret file {path}: {source}")]
    FileUnreadable {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The secret file is accessible by group or others.
    #[error(
        "secret file {path} is accessible by group or others (mode {mode:03o}); \
         run `chmod 600 {path}` and retry"
    )]
    FileTooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The command could not be started, timed out, or failed.
    #[error("secret command `{command}` {problem}")]
    Command {
        /// The command line (program and arguments from cradle.toml).
        command: String,
        /// What went wrong, e.g. `exited with code 1: gpg: decryption failed`.
        problem: String,
    },
    /// The source produced an empty value (or one that is not UTF-8).
    #[error("secret from {source_desc} is {problem}; check that it holds the secret")]
    BadValue {
        /// The source, e.g. `file /etc/cradle/token`.
        source_desc: String,
        /// `empty` or `not valid UTF-8`.
        problem: &'static str,
    },
}

/// A resolved secret. Prints as `[redacted]`; read it with [`Secret::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value obtained elsewhere and registers it with the redactor.
    pub fn new(value: String) -> Secret {
        register(&value);
        Secret(value)
    }

    /// The secret value; pass it only to the place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Registered values, longest first so a secret containing another is replaced whole.
static REGISTRY: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Registers `value` (if it has at least 4 characters) so [`redact`] hides it.
pub fn register(value: &str) {
    if value.chars().count() < MIN_REDACT_LEN {
        return;
    }
    // A poisoned lock only means another thread panicked mid-push; the list is
    // still a list of strings, so keep using it rather than lose redaction.
    let mut list = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    if !list.iter().any(|v| v == value) {
        list.push(value.to_string());
        list.sort_by_key(|v| std::cmp::Reverse(v.len()));
    }
}

/// Replaces every registered secret value in `text` with `[redacted]`.
pub fn redact(text: &str) -> Cow<'_, str> {
    let list = REGISTRY.read().unwrap_or_else(|e| e.into_inner());
    let mut out = Cow::Borrowed(text);
    for value in list.iter() {
        if out.contains(value.as_str()) {
            out = Cow::Owned(out.replace(value.as_str(), REDACTED));
        }
    }
    out
}

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretRef::Env(v) => write!(f, "env {v}"),
            SecretRef::File(p) => write!(f, "file {}", p.display()),
            SecretRef::Command(argv) => write!(f, "command `{}`", argv.join(" ")),
        }
    }
}

impl SecretRef {
    /// A relative `file` made absolute against `base` (cradle.toml's
    /// directory), so the secret does not depend on the working directory.
    pub fn anchor(&mut self, base: &std::path::Path) {
        if let SecretRef::File(p) = self
            && p.is_relative()
        {
            *p = base.join(&*p);
        }
    }

    /// Reads the secret from its source and registers it with the redactor.
    pub fn resolve(&self) -> Result<Secret, SecretError> {
        let value = match self {
            SecretRef::Env(var) => from_env(var, |v| std::env::var(v))?,
            SecretRef::File(path) => from_file(path)?,
            SecretRef::Command(argv) => from_command(argv, COMMAND_TIMEOUT)?,
        };
        if value.is_empty() {
            return Err(SecretError::BadValue { source_desc: self.to_string(), problem: "empty" });
        }
        Ok(Secret::new(value))
    }
}

/// `lookup` is `std::env::var` outside tests (tests must not mutate the
/// process environment).
fn from_env(var: &str, lookup: impl Fn(&str) -> Result<String, std::env::VarError>) -> Result<String, SecretError> {
    let err = |problem| SecretError::Env { var: var.to_string(), problem };
    match lookup(var) {
        Ok(v) if v.is_empty() => Err(err("empty")),
        Ok(v) => Ok(v),
        Err(std::env::VarError::NotPresent) => Err(err("not set")),
        Err(std::env::VarError::NotUnicode(_)) => Err(err("not valid UTF-8")),
    }
}

fn from_file(path: &Path) -> Result<String, SecretError> {
    let unreadable = |source| SecretError::FileUnreadable { path: path.to_path_buf(), source };
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SecretError::FileTooOpen { path: path.to_path_buf(), mode });
    }
    let bytes = std::fs::read(path).map_err(unreadable)?;
    let mut text = String::from_utf8(bytes).map_err(|_| SecretError::BadValue {
        source_desc: format!("file {}", path.display()),
        problem: "not valid UTF-8",
    })?;
    // Editors and `echo` add a final newline; it is never part of a token.
    while text.ends_with('\n') || text.ends_with('\r') {
        text.pop();
    }
    Ok(text)
}

const FORMS: &str = "secrets are never written inline in cradle.toml; use one of \
    { env = \"PVE_TOKEN\" }, { file = \"/path/to/token\" } or \
    { command = [\"pass\", \"show\", \"pve/token\"] }";

impl<'de> Deserialize<'de> for SecretRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RefVisitor)
    }
}

struct RefVisitor;

impl<'de> Visitor<'de> for RefVisitor {
    type Value = SecretRef;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(FORMS)
    }

    // An inline string is likely a real token: it is not echoed here, and it is
    // registered so that error paths which show the config line (the TOML parser's
    // error Display quotes the offending line) hide it once they call `redact`.
    fn visit_str<E: de::Error>(self, inline: &str) -> Result<SecretRef, E> {
        register(inline.trim());
        Err(E::custom(format_args!("found an inline string: {FORMS}")))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SecretRef, A::Error> {
        let mut found: Option<SecretRef> = None;
        while let Some(key) = map.next_key::<String>()? {
            let value = match key.as_str() {
                "env" => SecretRef::Env(map.next_value()?),
                "file" => SecretRef::File(map.next_value()?),
                "command" => {
                    let argv: Vec<String> = map.next_value()?;
                    if argv.is_empty() {
                        return Err(de::Error::custom("secret `command` is empty; give the program and its arguments"));
                    }
                    SecretRef::Command(argv)
                }
                other => {
                    return Err(de::Error::custom(format_args!("unknown secret source `{other}`: {FORMS}")));
                }
            };
            if found.is_some() {
                return Err(de::Error::custom(format_args!("a secret has exactly one source: {FORMS}")));
            }
            found = Some(value);
        }
        found.ok_or_else(|| de::Error::custom(format_args!("empty secret reference: {FORMS}")))
    }
}

impl Serialize for SecretRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(1))?;
        match self {
            SecretRef::Env(v) => m.serialize_entry("env", v)?,
            SecretRef::File(p) => m.serialize_entry("file", p)?,
            SecretRef::Command(argv) => m.serialize_entry("command", argv)?,
        }
        m.end()
    }
}

#[cfg(test)]
mod tests;
