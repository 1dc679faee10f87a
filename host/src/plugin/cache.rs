//! The on-disk cache of compiled components.
//!
//! Compiling a component with Cranelift takes far longer than loading the
//! result, so compiled code is kept under `<state>/cache/components/`, keyed by
//! the SHA-256 of the component bytes and a hash of the engine's compatibility
//! settings (wasmtime version, target, compiler flags). Each entry carries its
//! own SHA-256 so that a truncated, corrupted or foreign file is detected and
//! rebuilt — never handed to wasmtime's unchecked deserializer. Entries are
//! written atomically with mode 0600 in a 0700 directory.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

const MAGIC: &[u8; 16] = b"cradle-cwasm-v1\n";

/// What happened when a component was loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from a verified cache entry.
    Hit,
    /// Compiled and stored (no entry existed).
    Miss,
    /// An entry existed but was unusable; it was replaced. The reason says why.
    Rebuilt(String),
    /// Compiled, but the entry could not be stored (the reason says why).
    Uncached(String),
}

/// The component cache directory.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
}

impl ComponentCache {
    /// A cache in `dir` (created 0700 on first store).
    pub fn new(dir: impl Into<PathBuf>) -> ComponentCache {
        ComponentCache { dir: dir.into() }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry path for `wasm` under `engine`.
    pub fn entry_path(&self, engine: &Engine, wasm: &[u8]) -> PathBuf {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let engine_key = h.finish();
        let content = hex::encode(Sha256::digest(wasm));
        self.dir.join(format!("{content}-{engine_key:016x}.cwasm"))
    }

    /// Load the compiled form of `wasm` from the cache, or compile and store it.
    pub fn load_or_compile(&self, engine: &Engine, wasm: &[u8]) -> wasmtime::Result<(Component, CacheOutcome)> {
        let path = self.entry_path(engine, wasm);
        let mut stale = None;
        match std::fs::read(&path) {
            Ok(bytes) => match verify(&bytes) {
                Ok(payload) => match deserialize(engine, payload) {
                    Ok(component) => return Ok((component, CacheOutcome::Hit)),
                    Err(e) => stale = Some(format!("wasmtime refused the entry: {e}")),
                },
                Err(reason) => stale = Some(reason),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => stale = Some(format!("unreadable: {e}")),
        }
        if let Some(reason) = &stale {
            tracing::warn!(entry = %path.display(), %reason, "discarding a bad component cache entry and recompiling");
            let _ = std::fs::remove_file(&path);
        }
        let component = Component::new(engine, wasm)?;
        let outcome = match self.store(&path, &component) {
            Ok(()) => match stale {
                Some(reason) => CacheOutcome::Rebuilt(reason),
                None => CacheOutcome::Miss,
            },
            Err(reason) => {
                tracing::warn!(entry = %path.display(), %reason, "could not store the compiled component; the next start compiles again");
                CacheOutcome::Uncached(reason)
            }
        };
        Ok((component, outcome))
    }

    fn store(&self, path: &Path, component: &Component) -> Result<(), String> {
        let payload = component.serialize().map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(MAGIC.len() + 32 + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&Sha256::digest(&payload));
        out.extend_from_slice(&payload);
        crate::state::create_private_dir(&self.dir).map_err(|e| e.to_string())?;
        crate::state::write_private_file_atomic(path, &out).map_err(|e| e.to_string())
    }
}

/// Check the header and digest; return the payload.
fn verify(bytes: &[u8]) -> Result<&[u8], String> {
    let header = MAGIC.len() + 32;
    if bytes.len() < header || &bytes[..MAGIC.len()] != MAGIC {
        return Err("not a cradle cache entry (bad header)".into());
    }
    let (digest, payload) = bytes[MAGIC.len()..].split_at(32);
    if Sha256::digest(payload).as_slice() != digest {
        return Err("checksum mismatch (truncated or corrupted)".into());
    }
    Ok(payload)
}

#[allow(unsafe_code)]
fn deserialize(engine: &Engine, payload: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `Component::deserialize` trusts its input to be compiled code that
    // wasmtime produced. The payload comes from an owner-only file that cradle
    // wrote with `Component::serialize`, and its SHA-256 was just verified against
    // the digest stored beside it, so it is exactly what was written. wasmtime
    // itself rejects payloads from another version or engine configuration.
    unsafe { Component::deserialize(engine, payload) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Engine {
        Engine::new(&wasmtime::Config::new()).expect("engine")
    }

    const WAT: &str = r#"(component (core module (func (export "f"))))"#;

    #[test]
    fn a_second_load_is_a_verified_hit() {
        let dir = tempfile::tempdir().expect("tmp");
        let cache = ComponentCache::new(dir.path().join("c"));
        let wasm = wat::parse_str(WAT).expect("wat");
        let e = engine();
        assert_eq!(cache.load_or_compile(&e, &wasm).expect("first").1, CacheOutcome::Miss);
        assert_eq!(cache.load_or_compile(&e, &wasm).expect("second").1, CacheOutcome::Hit);
    }

    #[test]
    fn a_corrupted_entry_is_detected_and_rebuilt() {
        let dir = tempfile::tempdir().expect("tmp");
        let cache = ComponentCache::new(dir.path().join("c"));
        let wasm = wat::parse_str(WAT).expect("wat");
        let e = engine();
        assert_eq!(cache.load_or_compile(&e, &wasm).expect("first").1, CacheOutcome::Miss);
        let path = cache.entry_path(&e, &wasm);
        let mut bytes = std::fs::read(&path).expect("entry");
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).expect("corrupt");
        match cache.load_or_compile(&e, &wasm).expect("rebuilt").1 {
            CacheOutcome::Rebuilt(reason) => assert!(reason.contains("checksum"), "{reason}"),
            other => panic!("expected a rebuild, got {other:?}"),
        }
        assert_eq!(cache.load_or_compile(&e, &wasm).expect("third").1, CacheOutcome::Hit);
    }

    #[test]
    fn a_foreign_file_under_the_entry_name_is_rebuilt_not_trusted() {
        let dir = tempfile::tempdir().expect("tmp");
        let cache = ComponentCache::new(dir.path().join("c"));
        let wasm = wat::parse_str(WAT).expect("wat");
        let e = engine();
        crate::state::create_private_dir(cache.dir()).expect("dir");
        std::fs::write(cache.entry_path(&e, &wasm), b"ELF\0 something else entirely").expect("foreign");
        assert!(
            matches!(cache.load_or_compile(&e, &wasm).expect("load").1, CacheOutcome::Rebuilt(r) if r.contains("bad header"))
        );
    }

    #[test]
    fn entries_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tmp");
        let cache = ComponentCache::new(dir.path().join("cc"));
        let wasm = wat::parse_str(WAT).expect("wat");
        let e = engine();
        cache.load_or_compile(&e, &wasm).expect("first");
        let mode = std::fs::metadata(cache.entry_path(&e, &wasm)).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dmode = std::fs::metadata(cache.dir()).expect("meta").permissions().mode();
        assert_eq!(dmode & 0o777, 0o700);
    }

    #[test]
    fn an_engine_with_other_settings_uses_another_entry() {
        let dir = tempfile::tempdir().expect("tmp");
        let cache = ComponentCache::new(dir.path().join("c"));
        let wasm = wat::parse_str(WAT).expect("wat");
        let a = engine();
        let mut cfg = wasmtime::Config::new();
        cfg.epoch_interruption(true);
        let b = Engine::new(&cfg).expect("engine");
        assert_ne!(cache.entry_path(&a, &wasm), cache.entry_path(&b, &wasm));
    }
}
