//! A script's SSH target (`#{host, port, user}`) as the `ssh` capability's
//! typed [`Target`]: the one reading of it, used by the `ssh::*` functions
//! (`rhai.rs`), `cloudinit::wait_done`, `guestnet::verify` and
//! `cradle::check_inputs`.
//!
//! Contract: depends only on `rhai`, the value glue
//! ([`crate::caps::script_glue`]) and the WIT `Target`; no run, no I/O (so
//! `fuzz/` compiles it: target `script_args`). A value it refuses throws
//! `#{kind: "invalid", message}` naming the calling function and the field.
//! It reads the shape only (strings, a port in 1..=65535, `port` left out is
//! 22); what a host or user name may contain is the adapter's check
//! (`caps::ssh::check_target`), made on every call and by `check_inputs`.

use rhai::Map;

use crate::caps::script_glue::{Res, invalid};
use crate::contract::bindings::cradle::host::ssh::Target;

/// The port of a target that names none.
pub const DEFAULT_PORT: u16 = 22;

/// A `#{host, port, user}` map as an SSH target; `function` names the caller
/// in messages (`ssh::exec: target is missing `host``).
pub fn target(map: &Map, function: &str) -> Res<Target> {
    let string = |k: &str| -> Res<String> {
        map.get(k)
            .ok_or_else(|| invalid(format!("{function}: target is missing `{k}`")))?
            .clone()
            .into_string()
            .map_err(|t| invalid(format!("{function}: {k} must be a string, got {t}")))
    };
    let host = string("host")?;
    let user = string("user")?;
    let port = match map.get("port") {
        None => DEFAULT_PORT,
        Some(p) => p
            .as_int()
            .ok()
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
            .ok_or_else(|| invalid(format!("{function}: port must be 1..65535, got {p}")))?,
    };
    Ok(Target { host, port, user })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::script_glue::{thrown_message, to_map};

    fn map(script: &str) -> Map {
        rhai::Engine::new().eval::<Map>(script).expect("map")
    }

    #[test]
    fn a_target_map_becomes_the_typed_target_with_port_22_when_left_out() {
        let t = target(&map(r#"#{host: "10.0.0.5", user: "ops"}"#), "ssh::exec").expect("target");
        assert_eq!((t.host.as_str(), t.port, t.user.as_str()), ("10.0.0.5", 22, "ops"));
        let again = target(&to_map(&t).expect("map form"), "ssh::exec").expect("re-parses");
        assert_eq!((again.host, again.port, again.user), (t.host, t.port, t.user), "re-parses from its map form");
    }

    #[test]
    fn a_bad_target_is_refused_naming_the_function_and_field() {
        let cases = [
            (r#"#{user: "ops"}"#, "ssh::exec: target is missing `host`"),
            (r#"#{host: "h", user: 5}"#, "ssh::exec: user must be a string, got i64"),
            (r#"#{host: "h", user: "ops", port: 70000}"#, "ssh::exec: port must be 1..65535, got 70000"),
        ];
        for (script, want) in cases {
            let e = thrown_message(&target(&map(script), "ssh::exec").expect_err(script));
            assert_eq!(e, want);
        }
    }

    /// Port 0 passed the parser although its message said 1..65535 (found
    /// writing the `script_args` fuzz target's invariant: an accepted port is
    /// never 0).
    #[test]
    fn port_zero_is_refused_by_the_parser() {
        let e = target(&map(r#"#{host: "h", user: "ops", port: 0}"#), "ssh::exec").expect_err("port 0");
        assert_eq!(thrown_message(&e), "ssh::exec: port must be 1..65535, got 0");
    }
}
