//! The on-disk cache of compiled components.
//!
//! Compiling a component with Cranelift takes far longer than loading the
//! result, so compiled code is kept under `<state>/cache/components/`, keyed by
//! the SHA-256 of the component bytes and a hash of the engine's compatibility
//! settings (wasmtime version, target, compiler flags).
//!
//! Entry format: `MAGIC`, the SHA-256 of the component's source `.wasm` bytes,
//! a SHA-256 over (that hash ‖ payload), then the serialized payload. On load
//! the digest must match (a truncated, corrupted or foreign file is rebuilt —
//! never handed to wasmtime's unchecked deserializer) and the embedded
//! component hash must equal the hash of the bytes being loaded: a valid entry
//! of another (e.g. older) build copied over this key's file would otherwise run
//! that other code while the journal records the new hash. A mismatch deletes
//! the entry and recompiles ([`CacheOutcome::Rebuilt`] with the [`StaleEntry`]
//! reason). Entries are written atomically with mode 0600 in a 0700 directory.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

const MAGIC: &[u8; 16] = b"cradle-cwasm-v2\n";

/// What happened when a component was loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from a verified cache entry.
    Hit,
    /// Compiled and stored (no entry existed).
    Miss,
    /// An entry existed but was unusable; it was replaced. The reason says why.
    Rebuilt(StaleEntry),
    /// Compiled, but the entry could not be stored (the reason says why).
    Uncached(StoreFailure),
}

/// Why a cache entry was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StaleEntry {
    /// The file could not be read.
    #[error("unreadable: {0}")]
    Unreadable(String),
    /// Not written by this cache.
    #[error("not a cradle cache entry (bad header)")]
    BadHeader,
    /// The digest does not match the content.
    #[error("checksum mismatch (truncated or corrupted)")]
    Checksum,
    /// A valid entry of another component.
    #[error("the entry was compiled from another component (sha256 {found}, expected {expected})")]
    OtherComponent {
        /// The SHA-256 the entry was compiled from, hex.
        found: String,
        /// The SHA-256 of the component being loaded, hex.
        expected: String,
    },
    /// wasmtime refused the verified payload (another version or configuration).
    #[error("wasmtime refused the entry: {0}")]
    Refused(String),
}

/// Why a compiled component could not be stored (wasmtime's or the file
/// system's message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreFailure {
    /// wasmtime could not serialize it.
    #[error("{0}")]
    Serialize(String),
    /// The cache directory or the entry could not be written.
    #[error("{0}")]
    Write(String),
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
        let component_hash: [u8; 32] = Sha256::digest(wasm).into();
        let mut stale = None;
        match std::fs::read(&path) {
            Ok(bytes) => match verify(&bytes, &component_hash) {
                Ok(payload) => match deserialize(engine, payload) {
                    Ok(component) => return Ok((component, CacheOutcome::Hit)),
                    Err(e) => stale = Some(StaleEntry::Refused(e.to_string())),
                },
                Err(reason) => stale = Some(reason),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => stale = Some(StaleEntry::Unreadable(e.to_string())),
        }
        if let Some(reason) = &stale {
            tracing::warn!(entry = %path.display(), %reason, "discarding a bad component cache entry and recompiling");
            let _ = std::fs::remove_file(&path);
        }
        let component = Component::new(engine, wasm)?;
        let outcome = match self.store(&path, &component_hash, &component) {
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

    fn store(&self, path: &Path, component_hash: &[u8; 32], component: &Component) -> Result<(), StoreFailure> {
        let payload = component.serialize().map_err(|e| StoreFailure::Serialize(e.to_string()))?;
        let mut out = Vec::with_capacity(MAGIC.len() + 64 + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(component_hash);
        out.extend_from_slice(&digest(component_hash, &payload));
        out.extend_from_slice(&payload);
        crate::state::create_private_dir(&self.dir).map_err(|e| StoreFailure::Write(e.to_string()))?;
        crate::state::write_private_file_atomic(path, &out).map_err(|e| StoreFailure::Write(e.to_string()))
    }
}

/// The digest stored in an entry: over the component hash and the payload, so
/// neither can be swapped alone.
fn digest(component_hash: &[u8; 32], payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(component_hash);
    h.update(payload);
    h.finalize().into()
}

/// Check the header, the digest and that the entry was compiled from the
/// component whose SHA-256 is `expected`; return the payload.
fn verify<'a>(bytes: &'a [u8], expected: &[u8; 32]) -> Result<&'a [u8], StaleEntry> {
    let header = MAGIC.len() + 64;
    if bytes.len() < header || &bytes[..MAGIC.len()] != MAGIC {
        return Err(StaleEntry::BadHeader);
    }
    let (bound, rest) = bytes[MAGIC.len()..].split_at(32);
    let (stored, payload) = rest.split_at(32);
    let bound: [u8; 32] = bound.try_into().map_err(|_| StaleEntry::BadHeader)?;
    if digest(&bound, payload).as_slice() != stored {
        return Err(StaleEntry::Checksum);
    }
    if &bound != expected {
        return Err(StaleEntry::OtherComponent { found: hex::encode(bound), expected: hex::encode(expected) });
    }
    Ok(payload)
}

#[allow(unsafe_code, reason = "Component::deserialize of a verified, owner-only cache entry")]
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
            CacheOutcome::Rebuilt(reason) => assert!(reason.to_string().contains("checksum"), "{reason}"),
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
            matches!(cache.load_or_compile(&e, &wasm).expect("load").1, CacheOutcome::Rebuilt(r) if r.to_string().contains("bad header"))
        );
    }

    #[test]
    fn an_older_valid_entry_copied_over_the_new_key_is_rebuilt_not_run() {
        let dir = tempfile::tempdir().expect("tmp");
        let cache = ComponentCache::new(dir.path().join("c"));
        let e = engine();
        let old = wat::parse_str(WAT).expect("wat");
        let new = wat::parse_str(r#"(component (core module (func (export "g"))))"#).expect("wat");
        cache.load_or_compile(&e, &old).expect("old");
        cache.load_or_compile(&e, &new).expect("new");
        std::fs::copy(cache.entry_path(&e, &old), cache.entry_path(&e, &new)).expect("swap");
        match cache.load_or_compile(&e, &new).expect("load").1 {
            CacheOutcome::Rebuilt(reason) => {
                let reason = reason.to_string();
                assert!(reason.contains("another component"), "{reason}");
                assert!(reason.contains(&hex::encode(Sha256::digest(&new))), "{reason}");
            }
            other => panic!("the old build's entry was used for the new build: {other:?}"),
        }
        // The rebuilt entry is the new build's own.
        let bytes = std::fs::read(cache.entry_path(&e, &new)).expect("entry");
        assert_eq!(&bytes[MAGIC.len()..MAGIC.len() + 32], Sha256::digest(&new).as_slice());
        assert_eq!(cache.load_or_compile(&e, &new).expect("again").1, CacheOutcome::Hit);
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
