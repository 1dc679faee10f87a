//! `cradle.toml` as every command reads it: `Config::parse` (TOML, the
//! sections' serde shapes, the built-ins environments name, path resolution,
//! validation), as if the file were `/proj/cradle.toml`.
//!
//! Invariants: no panic; loading is deterministic (the same text gives the same
//! configuration, or the same error); an accepted configuration's paths are
//! absolute (they are resolved against the file's directory); a credential
//! written inline as `token = "VALUE"` (or `password`, `secret`) is never
//! echoed by the error (secrets are references, never inline).
#![no_main]

use std::path::Path;

use cradle_fuzz::config::Config;
use libfuzzer_sys::fuzz_target;

/// The quoted values of one-line `token = "…"`-like assignments: what an
/// error must never show.
fn inline_secrets(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('=')?;
            let key = key.trim().to_ascii_lowercase();
            if !["token", "password", "passwd", "secret"].iter().any(|w| key.ends_with(w)) {
                return None;
            }
            let value = value.trim().strip_prefix('"')?.split('"').next()?;
            // Long enough to be a credential and not a word any message uses.
            (value.len() >= 12 && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')).then_some(value)
        })
        .filter(|v| text.matches(v).count() == 1)
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (path, base) = (Path::new("/proj/cradle.toml"), Path::new("/proj"));
    let first = Config::parse(text, path, base);
    let again = Config::parse(text, path, base);
    match (&first, &again) {
        (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "two loads differ"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "two loads fail differently"),
        _ => panic!("one load accepted what the other refused"),
    }
    match first {
        Ok(config) => {
            assert!(config.workflow_dir().is_absolute());
            for (name, plugin) in &config.plugins {
                if let Some(tf) = &plugin.grants.terraform {
                    assert!(tf.module_root.is_absolute(), "plugins.{name}: module_root {:?}", tf.module_root);
                }
            }
            if let Some(state) = config.state_dir_override(None) {
                assert!(state.is_absolute(), "state_dir {state:?}");
            }
        }
        Err(e) => {
            let message = e.to_string();
            for secret in inline_secrets(text) {
                assert!(!message.contains(secret), "the error echoes the inline credential {secret:?}: {message}");
            }
        }
    }
});
