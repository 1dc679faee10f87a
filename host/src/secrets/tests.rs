//! Secret references: the config forms (an inline string refused without
//! echoing it), env, file and command resolution and their errors (file
//! permissions, exit code and stderr but never stdout, no shell, the deadline,
//! empty values, unknown programs), and which values get registered for
//! redaction.

use super::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;

fn cmd(args: &[&str]) -> SecretRef {
    SecretRef::Command(args.iter().map(|s| s.to_string()).collect())
}

#[derive(Debug, Deserialize)]
struct Cfg {
    token: SecretRef,
}

#[test]
fn config_forms_deserialize_and_an_inline_string_is_refused_without_echoing_it() {
    let c: Cfg = toml::from_str(r#"token = { env = "PVE_TOKEN" }"#).unwrap();
    assert_eq!(c.token, SecretRef::Env("PVE_TOKEN".into()));
    let c: Cfg = toml::from_str(r#"token = { file = "/t" }"#).unwrap();
    assert_eq!(c.token, SecretRef::File("/t".into()));
    let c: Cfg = toml::from_str(r#"token = { command = ["pass", "show", "x"] }"#).unwrap();
    assert_eq!(c.token, cmd(&["pass", "show", "x"]));
    let err = toml::from_str::<Cfg>(r#"token = "CANARY-inline-7781""#).unwrap_err();
    let msg = err.message();
    assert!(msg.contains("never written inline") && msg.contains("command ="), "{msg}");
    assert!(!msg.contains("CANARY-inline-7781"), "{msg}");
    // toml's Display quotes the source line; redaction must still hide the value.
    let shown = redact(&err.to_string()).into_owned();
    assert!(shown.contains("[redacted]") && !shown.contains("CANARY-inline-7781"));
    let two = r#"token = { env = "A", file = "/b" }"#;
    assert!(toml::from_str::<Cfg>(two).is_err());
}

#[test]
fn env_var_value_is_returned_and_an_empty_or_non_utf8_one_is_named() {
    use std::env::VarError;
    assert_eq!(from_env("T", |_| Ok("v4lue".into())).unwrap(), "v4lue");
    let err = from_env("PVE_TOKEN", |_| Ok(String::new())).unwrap_err().to_string();
    assert!(err.contains("PVE_TOKEN is empty"), "{err}");
    let bad = |_: &str| Err(VarError::NotUnicode(std::ffi::OsString::from("x")));
    let err = from_env("PVE_TOKEN", bad).unwrap_err().to_string();
    assert!(err.contains("PVE_TOKEN is not valid UTF-8"), "{err}");
}

#[test]
fn missing_env_var_is_named() {
    let r = SecretRef::Env("CRADLE_TEST_SURELY_UNSET_VAR_93".into());
    let err = r.resolve().unwrap_err().to_string();
    assert!(err.contains("CRADLE_TEST_SURELY_UNSET_VAR_93") && err.contains("not set"));
}

#[test]
fn file_secret_is_trimmed_and_an_open_file_is_refused_with_chmod() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("tok");
    fs::write(&f, "CANARY-file-5521\n").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
    let s = SecretRef::File(f.clone()).resolve().unwrap();
    assert_eq!(s.expose(), "CANARY-file-5521");
    fs::set_permissions(&f, fs::Permissions::from_mode(0o640)).unwrap();
    let err = SecretRef::File(f.clone()).resolve().unwrap_err().to_string();
    assert!(err.contains(&format!("chmod 600 {}", f.display())), "{err}");
}

#[test]
fn command_output_is_trimmed_and_registered_for_redaction() {
    let s = cmd(&["printf", "  CANARY-cmd-0042\n"]).resolve().unwrap();
    assert_eq!(s.expose(), "CANARY-cmd-0042");
    assert_eq!(format!("{s} {s:?}"), "[redacted] [redacted]");
    let text = "token=CANARY-cmd-0042; again CANARY-cmd-0042";
    assert_eq!(redact(text), "token=[redacted]; again [redacted]");
    assert!(matches!(redact("nothing here"), Cow::Borrowed(_)));
}

#[test]
fn failing_command_reports_code_and_stderr_but_never_stdout() {
    // printf assembles the canary, so it is in stdout but not in argv.
    let script = "printf 'CANARY-%s-3141' out; echo 'first err line' >&2; printf '%s-line' second >&2; exit 3";
    let err = cmd(&["sh", "-c", script]).resolve().unwrap_err().to_string();
    assert!(err.contains("exited with code 3: first err line"), "{err}");
    assert!(!err.contains("CANARY-out-3141") && !err.contains("second-line"), "{err}");
}

#[test]
fn command_runs_without_a_shell() {
    // With a shell, `$HOME` would expand; without one it is a literal argument.
    let s = cmd(&["printf", "%s", "lit-$HOME"]).resolve().unwrap();
    assert_eq!(s.expose(), "lit-$HOME");
}

#[test]
fn hanging_command_is_killed_at_the_deadline() {
    let argv = ["sleep".to_string(), "30".to_string()];
    let err = from_command(&argv, Duration::from_millis(100)).unwrap_err();
    assert!(err.to_string().contains("did not finish"), "{err}");
}

#[test]
fn empty_values_and_unknown_programs_are_errors() {
    assert!(cmd(&["true"]).resolve().is_err());
    let err = cmd(&["/nonexistent/cradle-secret-tool"]).resolve().unwrap_err();
    assert!(err.to_string().contains("could not be started"), "{err}");
}

#[test]
fn short_values_are_not_registered() {
    let _ = Secret::new("ab".into());
    assert_eq!(redact("ab cd"), "ab cd");
}
