//! The filesystem lock store: `mkdir` is atomic, so exactly one process creates
//! `<locks>/<encoded key>.lock`; the winner then records itself in `holder.json`
//! (written atomically). Release and removal rename the directory aside first, so
//! the lock disappears in one step and a crash never leaves a half-removed lock.

use std::fs::DirBuilder;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Acquired, Holder, Liveness, LockError, LockStore, Removal, local_liveness};
use crate::state::{create_private_dir, host_name, sync_dir, write_private_file_atomic};

const HOLDER_FILE: &str = "holder.json";

/// A lock directory without holder.json younger than this may belong to a run
/// that is between `mkdir` and writing holder.json; `remove_stale` leaves it be.
const UNKNOWN_HOLDER_GRACE: Duration = Duration::from_secs(60);

/// How long `acquire` waits for a just-created lock's holder.json to appear
/// before reporting an unknown holder.
const HOLDER_WRITE_WAIT: Duration = Duration::from_secs(2);

/// Workflow locks as directories under one owner-only directory.
#[derive(Debug, Clone)]
pub struct FsLockStore {
    dir: PathBuf,
}

/// holder.json: the holder plus the full key, since the directory name is lossy.
#[derive(Serialize, Deserialize)]
struct HolderFile {
    key: String,
    #[serde(flatten)]
    holder: Holder,
}

enum State {
    Free,
    Held(Holder),
    Unknown { since: SystemTime },
}

static ASIDE_COUNTER: AtomicU64 = AtomicU64::new(0);

impl FsLockStore {
    /// A store in `dir` (normally [`crate::state::StateDir::locks`]); the directory
    /// is created 0700 on first use.
    pub fn new(dir: PathBuf) -> FsLockStore {
        FsLockStore { dir }
    }

    /// The lock directory for `key`: a readable, filesystem-safe form of the key
    /// plus 12 hex digits of its SHA-256 (so distinct keys never share a name).
    pub fn lock_dir(&self, key: &str) -> PathBuf {
        let mut readable = String::new();
        for c in key.chars() {
            let c = if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' };
            if !(c == '_' && readable.ends_with('_')) {
                readable.push(c);
            }
        }
        let readable: String = readable.trim_start_matches(['.', '_']).chars().take(64).collect();
        let hash = hex::encode(Sha256::digest(key.as_bytes()));
        self.dir.join(format!("{readable}-{}.lock", &hash[..12]))
    }

    fn io(key: &str, action: &'static str, path: &Path, source: io::Error) -> LockError {
        LockError::Io { key: key.to_string(), action, path: path.to_path_buf(), source }
    }

    fn state(&self, key: &str, lock: &Path) -> Result<State, LockError> {
        let file = lock.join(HOLDER_FILE);
        match std::fs::read(&file) {
            Ok(bytes) => {
                let parsed: HolderFile = serde_json::from_slice(&bytes).map_err(|e| LockError::Corrupt {
                    key: key.to_string(),
                    path: file.clone(),
                    detail: e.to_string(),
                })?;
                if parsed.key != key {
                    return Err(LockError::Corrupt {
                        key: key.to_string(),
                        path: file,
                        detail: format!("it records the key `{}`", parsed.key),
                    });
                }
                Ok(State::Held(parsed.holder))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => match std::fs::metadata(lock) {
                Ok(meta) => Ok(State::Unknown { since: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH) }),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(State::Free),
                Err(e) => Err(Self::io(key, "inspect", lock, e)),
            },
            Err(e) => Err(Self::io(key, "read", &file, e)),
        }
    }

    fn unknown(key: &str, lock: &Path, since: SystemTime) -> LockError {
        LockError::UnknownHolder {
            key: key.to_string(),
            dir: lock.to_path_buf(),
            since: crate::journal::Timestamp::from(time::OffsetDateTime::from(since)).to_string(),
        }
    }

    /// Takes the lock away in one rename, then deletes it; `expect` guards against
    /// the lock having changed hands since it was inspected.
    fn remove(&self, key: &str, lock: &Path, expect: Option<&Holder>) -> Result<(), LockError> {
        let n = ASIDE_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = lock.file_name().map(|n| n.to_string_lossy().into_owned());
        let aside = self.dir.join(format!(".{}.removed-{}-{n}", name.unwrap_or_default(), std::process::id()));
        match std::fs::rename(lock, &aside) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Self::io(key, "move aside", lock, e)),
        }
        if let Some(expected) = expect {
            let now = match std::fs::read(aside.join(HOLDER_FILE)) {
                Ok(b) => serde_json::from_slice::<HolderFile>(&b).ok().map(|f| f.holder),
                Err(_) => None,
            };
            if now.as_ref().map(|h| &h.run_id) != Some(&expected.run_id) {
                // Someone took the lock in between: put it back and let the operator retry.
                let _ = std::fs::rename(&aside, lock);
                return Err(LockError::NotStale {
                    key: key.to_string(),
                    reason: "it changed hands while being removed; run the command again".into(),
                });
            }
        }
        std::fs::remove_dir_all(&aside).map_err(|e| Self::io(key, "remove", &aside, e))?;
        sync_dir(&self.dir)?;
        Ok(())
    }
}

impl LockStore for FsLockStore {
    fn acquire(&self, key: &str, holder: &Holder) -> Result<Acquired, LockError> {
        super::check_key(key)?;
        create_private_dir(&self.dir)?;
        let lock = self.lock_dir(key);
        // A lock released between our failed mkdir and our read shows up as Free;
        // retry a few times rather than report a lock nobody holds.
        let deadline = Instant::now() + HOLDER_WRITE_WAIT;
        let mut free_retries = 0;
        loop {
            match DirBuilder::new().mode(0o700).create(&lock) {
                Ok(()) => {
                    let record = HolderFile { key: key.to_string(), holder: holder.clone() };
                    let json = serde_json::to_vec_pretty(&record).map_err(|e| LockError::Corrupt {
                        key: key.to_string(),
                        path: lock.join(HOLDER_FILE),
                        detail: e.to_string(),
                    })?;
                    let written =
                        write_private_file_atomic(&lock.join(HOLDER_FILE), &json).and_then(|()| sync_dir(&self.dir));
                    if let Err(e) = written {
                        // We own the fresh directory: remove it so the failure does not
                        // leave a lock with an unknown holder.
                        let _ = std::fs::remove_dir_all(&lock);
                        return Err(e.into());
                    }
                    return Ok(Acquired { reentrant: false, fence: None });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    match self.state(key, &lock)? {
                        State::Held(h) if h.run_id == holder.run_id => {
                            return Ok(Acquired { reentrant: true, fence: None });
                        }
                        State::Held(h) => {
                            return Err(LockError::Held { key: key.to_string(), holder: Box::new(h) });
                        }
                        State::Unknown { since } => {
                            // The winner of a race is between mkdir and writing
                            // holder.json; give it a moment so the loser can name it.
                            let age = SystemTime::now().duration_since(since).unwrap_or_default();
                            if age < HOLDER_WRITE_WAIT && Instant::now() < deadline {
                                std::thread::sleep(Duration::from_millis(5));
                                continue;
                            }
                            return Err(Self::unknown(key, &lock, since));
                        }
                        State::Free if free_retries < 8 => free_retries += 1,
                        State::Free => {
                            return Err(LockError::NotStale {
                                key: key.to_string(),
                                reason: "it is being taken and released repeatedly; try again".into(),
                            });
                        }
                    }
                }
                Err(e) => return Err(Self::io(key, "create", &lock, e)),
            }
        }
    }

    fn release(&self, key: &str, run_id: &str) -> Result<(), LockError> {
        super::check_key(key)?;
        let lock = self.lock_dir(key);
        match self.state(key, &lock)? {
            State::Free => Ok(()),
            State::Unknown { since } => Err(Self::unknown(key, &lock, since)),
            State::Held(h) if h.run_id != run_id => {
                Err(LockError::NotHolder { key: key.to_string(), run_id: run_id.to_string(), holder: Box::new(h) })
            }
            State::Held(h) => self.remove(key, &lock, Some(&h)),
        }
    }

    fn holder(&self, key: &str) -> Result<Option<Holder>, LockError> {
        super::check_key(key)?;
        let lock = self.lock_dir(key);
        match self.state(key, &lock)? {
            State::Free => Ok(None),
            State::Held(h) => Ok(Some(h)),
            State::Unknown { since } => Err(Self::unknown(key, &lock, since)),
        }
    }

    fn remove_stale(&self, key: &str, liveness: &dyn Fn(&Holder) -> Liveness) -> Result<Removal, LockError> {
        super::check_key(key)?;
        let lock = self.lock_dir(key);
        let refuse = |reason: String| LockError::NotStale { key: key.to_string(), reason };
        let holder = match self.state(key, &lock)? {
            State::Free => return Ok(Removal::NotLocked),
            State::Unknown { since } => {
                let age = SystemTime::now().duration_since(since).unwrap_or_default();
                if age < UNKNOWN_HOLDER_GRACE {
                    return Err(refuse(format!(
                        "{} has no holder.json yet but is only {} s old; a run may be taking \
                         it right now — run the command again in a minute",
                        lock.display(),
                        age.as_secs()
                    )));
                }
                self.remove(key, &lock, None)?;
                return Ok(Removal::Removed { holder: None });
            }
            State::Held(h) => h,
        };
        let local = holder.host == host_name();
        let here = if local { local_liveness(&holder) } else { Liveness::Unknown };
        if here == Liveness::Alive {
            return Err(refuse(format!("its holder {holder} is still running on this host; stop that run first")));
        }
        if here != Liveness::Gone && liveness(&holder) != Liveness::Gone {
            return Err(refuse(if local {
                format!("cannot tell whether pid {} of {holder} has exited", holder.pid)
            } else {
                format!(
                    "its holder {holder} ran on another host; cradle cannot see processes \
                     there — check on {} that pid {} has exited, then confirm the removal",
                    holder.host, holder.pid
                )
            }));
        }
        self.remove(key, &lock, Some(&holder))?;
        Ok(Removal::Removed { holder: Some(holder) })
    }
}
