//! [`InventoryError`]: every way reading an inventory or resolving a host can fail.
//! Each message names the file (and line) or the host and variable, the offending
//! value, and what to write instead.

use std::path::PathBuf;

use super::template::TemplateError;

/// Why an inventory could not be read, a pattern not evaluated, or a host not resolved.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// A file or directory could not be read.
    #[error("cannot read inventory {path}: {source} (check the path given to -i)")]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An inventory or vars file is malformed.
    #[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The 1-based line, when known.
        line: Option<usize>,
        /// What is wrong and what to write instead.
        message: String,
    },
    /// A host name that is not in the inventory.
    #[error("host `{host}` is not in the inventory{}", hint(close))]
    UnknownHost {
        /// The name asked for.
        host: String,
        /// Similar host and group names.
        close: Vec<String>,
    },
    /// A group name that is not in the inventory.
    #[error("group `{group}` is not in the inventory{}", hint(close))]
    UnknownGroup {
        /// The name asked for.
        group: String,
        /// Similar host and group names.
        close: Vec<String>,
    },
    /// A `--limit` pattern that cradle cannot evaluate or that matches nothing.
    #[error("--limit `{pattern}`: {message}{}", hint(close))]
    Pattern {
        /// The whole pattern.
        pattern: String,
        /// What is wrong.
        message: String,
        /// Similar host and group names.
        close: Vec<String>,
    },
    /// A variable has a value cradle cannot use.
    #[error("host `{host}`: {variable} = {value} ({origin}) is not valid: expected {expected}")]
    Invalid {
        /// The inventory hostname.
        host: String,
        /// The variable path, e.g. `vms_config.network.nic0.vlan`.
        variable: String,
        /// The offending value, as JSON.
        value: String,
        /// Where the variable was set (`group_vars/test.yml`).
        origin: String,
        /// The accepted form, with an example.
        expected: String,
    },
    /// A variable cradle needs is not set.
    #[error("host `{host}`: {variable} is not set; {hint}")]
    Missing {
        /// The inventory hostname.
        host: String,
        /// The variable path.
        variable: String,
        /// Where and how to set it.
        hint: String,
    },
    /// A `{{ ... }}` reference cradle cannot evaluate.
    #[error("host `{host}`: {variable}: {message}")]
    Template {
        /// The inventory hostname.
        host: String,
        /// The variable whose value holds the reference.
        variable: String,
        /// What is wrong and what cradle supports.
        message: TemplateError,
    },
    /// Two hosts would share a VMID or a canonical name (invariant 6).
    #[error("hosts `{first}` and `{second}` both resolve to {what}; give each host its own (set vms_vmid / vms_name)")]
    Duplicate {
        /// `VMID 9100` or `name test-0`.
        what: String,
        /// The first host.
        first: String,
        /// The second host.
        second: String,
    },
}

fn hint(close: &[String]) -> String {
    if close.is_empty() { String::new() } else { format!(" (did you mean: {}?)", close.join(", ")) }
}
