//! [`WorkflowError`] and the translation of Rhai errors into it.
//!
//! Rhai reports a failure deep in a call chain as nested "error in function call"
//! frames. The translation walks the chain to find where it really happened (the
//! innermost position and the file it belongs to), the innermost `step` frame
//! (added by `step(...)`, see `context`), and the innermost message, so operators
//! read `workflows/provision.rhai:40:9: in step 'create' for VM 'test-0': conflict: ...`.

use std::path::PathBuf;

use rhai::{Dynamic, EvalAltResult, ParseErrorType, Position};

/// The prefix of the error frame `step` adds ([`super::context`]); script
/// function names cannot contain a quote, so it never collides with a real
/// function's frame.
pub(crate) const STEP_FRAME: &str = "step '";

use super::limits::WorkflowLimits;

/// Why loading or running workflows failed. Every variant names the file (and line
/// and column when known) and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    /// The workflows directory or a script could not be read.
    #[error("{}: cannot read: {source}; check that the path exists and is readable", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A script or module does not compile (or a module fails while loading).
    #[error("{}: {message}", location(file, *line, *column))]
    Compile { file: String, line: usize, column: usize, message: String },
    /// A script failed at run time.
    #[error("{}: {}{message}", location(file, *line, *column), in_step(step.as_deref()))]
    Script {
        file: String,
        line: usize,
        column: usize,
        /// `step 'create' for VM 'test-0'`: the innermost step the error escaped.
        step: Option<String>,
        /// The `kind` of a thrown `#{kind, message}` error (`conflict`, `denied`, ...).
        kind: Option<String>,
        message: String,
    },
    /// A script hit one of the configured limits and was stopped.
    #[error(
        "{}: {}script stopped: it exceeded the {limit} limit of {value}; if the workflow \
         legitimately needs more, raise `[workflow] {key}` in cradle.toml",
        location(file, *line, *column), in_step(step.as_deref())
    )]
    Limit {
        file: String,
        line: usize,
        column: usize,
        step: Option<String>,
        limit: &'static str,
        value: u64,
        key: &'static str,
    },
    /// `call` named a script that is not in the set.
    #[error("no workflow named '{script}'; the workflows are: {available}")]
    UnknownScript { script: String, available: String },
    /// `call` named a function the script does not define with that many parameters.
    #[error(
        "{file}: no public function '{function}' taking {arity} argument(s); \
         the functions are: {available}"
    )]
    UnknownFunction { file: String, function: String, arity: usize, available: String },
    /// The blocking task running a workflow panicked or was cancelled.
    #[error("workflow '{script}' function '{function}': the run's task failed: {message}")]
    Task { script: String, function: String, message: String },
}

impl WorkflowError {
    /// The innermost step the error escaped (`create` of `step 'create' for
    /// VM 'test-0'`), if it escaped one.
    pub fn step_name(&self) -> Option<&str> {
        match self {
            WorkflowError::Script { step: Some(s), .. } | WorkflowError::Limit { step: Some(s), .. } => {
                s.strip_prefix(STEP_FRAME).and_then(|rest| rest.split('\'').next())
            }
            _ => None,
        }
    }
}

impl WorkflowError {
    /// The error as a summary table reads it: the problem first, then where
    /// in the workflow it was raised — `preflight: not-found: template 9000
    /// does not exist … (workflows/lib/create.rhai:20:9)` — where the
    /// [`Display`](std::fmt::Display) form leads with the location. Other
    /// variants read as they display.
    pub fn problem_first(&self) -> String {
        match self {
            WorkflowError::Script { file, line, column, message, .. } => {
                let step = self.step_name().map(|s| format!("{s}: ")).unwrap_or_default();
                format!("{step}{message} ({})", location(file, *line, *column))
            }
            WorkflowError::Limit { file, line, column, limit, value, key, .. } => {
                let step = self.step_name().map(|s| format!("{s}: ")).unwrap_or_default();
                format!(
                    "{step}script stopped: it exceeded the {limit} limit of {value}; if the workflow legitimately \
                     needs more, raise `[workflow] {key}` in cradle.toml ({})",
                    location(file, *line, *column)
                )
            }
            other => other.to_string(),
        }
    }
}

impl WorkflowError {
    /// The error for someone who reads only what went wrong, not the
    /// workflow's source (a NetBox journal entry): the thrown message without
    /// the file, line and step around it, and without its `kind: ` prefix
    /// (`NetBox has no custom field proxmox_template`). A limit reads as
    /// `the workflow was stopped: …`; other variants as they display.
    pub fn reason(&self) -> String {
        match self {
            WorkflowError::Script { kind: Some(kind), message, .. } => {
                message.strip_prefix(&format!("{kind}: ")).unwrap_or(message).to_string()
            }
            WorkflowError::Script { message, .. } => message.clone(),
            WorkflowError::Limit { limit, value, key, .. } => format!(
                "the workflow was stopped: it exceeded the {limit} limit of {value} (`[workflow] {key}` in cradle.toml)"
            ),
            other => other.to_string(),
        }
    }
}

fn location(file: &str, line: usize, column: usize) -> String {
    match (line, column) {
        (0, _) => file.to_string(),
        (line, 0) => format!("{file}:{line}"),
        (line, column) => format!("{file}:{line}:{column}"),
    }
}

fn in_step(step: Option<&str>) -> String {
    step.map(|s| format!("in {s}: ")).unwrap_or_default()
}

fn line_col(pos: Position) -> (usize, usize) {
    (pos.line().unwrap_or(0), pos.position().unwrap_or(0))
}

/// A parse error in `file` as a [`WorkflowError::Compile`].
pub(crate) fn compile_error(file: &str, kind: &ParseErrorType, pos: Position) -> WorkflowError {
    let (line, column) = line_col(pos);
    let mut message = kind.to_string();
    if matches!(kind, ParseErrorType::ExprTooDeep) {
        // A fixed limit: no cradle.toml key raises it.
        message.push_str("; split the expression into smaller ones (let bindings or functions)");
    }
    WorkflowError::Compile { file: file.to_string(), line, column, message }
}

/// A run-time error of a call into `file` as a [`WorkflowError`].
pub(crate) fn script_error(file: &str, err: &EvalAltResult, limits: &WorkflowLimits) -> WorkflowError {
    let mut source = file.to_string();
    let mut at = (source.clone(), Position::NONE);
    let mut step = None;
    let mut cur = err;
    loop {
        if !cur.position().is_none() {
            at = (source.clone(), cur.position());
        }
        match cur {
            EvalAltResult::ErrorInFunctionCall(name, src, inner, _) => {
                if name.starts_with(STEP_FRAME) {
                    step = Some(name.clone());
                }
                // The inner error's positions are in the called function's file.
                if !src.is_empty() {
                    source = src.clone();
                }
                cur = inner;
            }
            EvalAltResult::ErrorInModule(_, inner, _) => cur = inner,
            _ => break,
        }
    }
    let (file, (line, column)) = (at.0, line_col(at.1));
    if let Some((limit, value, key)) = limits.hit(cur) {
        return WorkflowError::Limit { file, line, column, step, limit, value, key };
    }
    let kind = match cur {
        EvalAltResult::ErrorRuntime(value, _) => thrown_field(value, "kind"),
        _ => None,
    };
    WorkflowError::Script { file, line, column, step, kind, message: own_message(cur) }
}

/// The message of the innermost error of `err`, without Rhai's position suffix.
pub(crate) fn innermost_message(err: &EvalAltResult) -> String {
    own_message(err.unwrap_inner())
}

fn own_message(err: &EvalAltResult) -> String {
    if let EvalAltResult::ErrorRuntime(value, _) = err {
        return thrown_message(value);
    }
    let text = err.to_string();
    let suffix = format!(" ({})", err.position());
    text.strip_suffix(&suffix).unwrap_or(&text).to_string()
}

/// `kind: message` for a thrown `#{kind, message}` map, the string itself for a
/// thrown string, else the value's display form.
fn thrown_message(value: &Dynamic) -> String {
    match (thrown_field(value, "kind"), thrown_field(value, "message")) {
        (Some(kind), Some(message)) => format!("{kind}: {message}"),
        (None, Some(message)) => message,
        _ => value.to_string(),
    }
}

fn thrown_field(value: &Dynamic, field: &str) -> Option<String> {
    let map = value.as_map_ref().ok()?;
    map.get(field)?.clone().into_string().ok()
}

/// An error while compiling `file` or resolving its imports, as a compile error.
pub(crate) fn load_error(file: &str, err: &EvalAltResult, limits: &WorkflowLimits) -> WorkflowError {
    if let EvalAltResult::ErrorParsing(kind, pos) = err {
        return compile_error(file, kind, *pos);
    }
    match script_error(file, err, limits) {
        WorkflowError::Script { file, line, column, message, .. } => {
            WorkflowError::Compile { file, line, column, message }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::WorkflowError;

    #[test]
    fn the_reason_is_the_thrown_message_without_location_step_or_kind() {
        let e = WorkflowError::Script {
            file: "/srv/cradle/workflows/netbox.rhai".into(),
            line: 54,
            column: 9,
            step: Some("step 'validate' for VM 'web-1'".into()),
            kind: Some("invalid".into()),
            message: "invalid: web-1 cannot be built: NetBox has no custom field proxmox_template".into(),
        };
        assert_eq!(e.reason(), "web-1 cannot be built: NetBox has no custom field proxmox_template");
        let thrown_string = WorkflowError::Script {
            file: "/srv/cradle/workflows/netbox.rhai".into(),
            line: 3,
            column: 1,
            step: None,
            kind: None,
            message: "the clone failed".into(),
        };
        assert_eq!(thrown_string.reason(), "the clone failed");
    }

    #[test]
    fn problem_first_puts_the_step_and_message_before_the_location() {
        let e = WorkflowError::Script {
            file: "workflows/lib/create.rhai".into(),
            line: 20,
            column: 9,
            step: Some("step 'preflight' for VM 'test-2'".into()),
            kind: Some("not-found".into()),
            message: "not-found: template debian-13-cloud does not exist".into(),
        };
        assert_eq!(
            e.problem_first(),
            "preflight: not-found: template debian-13-cloud does not exist (workflows/lib/create.rhai:20:9)"
        );
        assert!(e.to_string().starts_with("workflows/lib/create.rhai:20:9: in step 'preflight'"), "{e}");
        let outside = WorkflowError::Script {
            file: "workflows/provision.rhai".into(),
            line: 3,
            column: 0,
            step: None,
            kind: None,
            message: "boom".into(),
        };
        assert_eq!(outside.problem_first(), "boom (workflows/provision.rhai:3)");
    }
}
