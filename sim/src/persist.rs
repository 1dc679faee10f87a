//! Writing the cluster state to `state.json` once per batch of changes, not once
//! per change.
//!
//! Contract: a change only marks the state dirty ([`Persist::changed`], an atomic
//! increment, callable with the state locked). [`Sim::settle`] is awaited before
//! an API response (and an SSH reply) leaves the simulator: it returns once every
//! change made before it was called is in `state.json`. Callers that arrive while
//! a write is in progress queue on one async mutex and usually find their change
//! written by that write (group commit), so 100 concurrent requests cost one or
//! two serialisations of the state instead of 100. Whatever a client has seen thus
//! survives the process being killed, as it does on PVE; a change nobody has been
//! told about yet (a timer's) is written by the next response or at shutdown
//! ([`Sim::flush`]).
//!
//! Failure mode: a failed write is logged and counted as written (best effort, as
//! the state file always was), so a full disk never hangs the API.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::fsutil;
use crate::sim::{Sim, lock};

/// Dirty and written generations of the state, and the one writer's turn.
#[derive(Debug, Default)]
pub struct Persist {
    /// Bumped by every change.
    changed: AtomicU64,
    /// The generation `state.json` holds (every change up to it is written).
    written: AtomicU64,
    /// Whose turn it is to write; held across the write only.
    writer: tokio::sync::Mutex<()>,
    /// Held while the file is replaced, so a shutdown flush and a response's
    /// write never share the temporary file.
    file: std::sync::Mutex<()>,
    /// How many times the file was written (for the simulator's own tests).
    writes: AtomicU64,
}

impl Persist {
    /// Marks the state changed.
    pub fn changed(&self) {
        self.changed.fetch_add(1, Ordering::SeqCst);
    }

    /// How many times `state.json` was written.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    fn clean_up_to(&self, generation: u64) -> bool {
        self.written.load(Ordering::SeqCst) >= generation
    }
}

impl Sim {
    /// Marks the state changed; it reaches `state.json` before the next response.
    pub fn changed(&self) {
        self.persist.changed();
    }

    /// Waits until every change made so far is in `state.json` (see the module docs).
    pub async fn settle(&self) {
        if self.cfg.state_dir.is_none() {
            return;
        }
        let wanted = self.persist.changed.load(Ordering::SeqCst);
        if self.persist.clean_up_to(wanted) {
            return;
        }
        let _turn = self.persist.writer.lock().await;
        // The write before ours may have covered our change.
        if !self.persist.clean_up_to(wanted) {
            self.write_state();
        }
    }

    /// Writes the state now if anything changed since the last write (blocking;
    /// for shutdown).
    pub fn flush(&self) {
        if self.cfg.state_dir.is_none() {
            return;
        }
        let wanted = self.persist.changed.load(Ordering::SeqCst);
        if !self.persist.clean_up_to(wanted) {
            self.write_state();
        }
    }

    /// Serialises the state under its lock (only the VMs and tasks changed
    /// since the last write are rendered anew: `model::cached`) and replaces the
    /// file; afterwards the file holds every change counted before the lock was
    /// taken.
    fn write_state(&self) {
        let Some(dir) = &self.cfg.state_dir else { return };
        let _file = lock(&self.persist.file);
        let (generation, bytes) = {
            let mut st = lock(&self.state);
            (self.persist.changed.load(Ordering::SeqCst), st.write_json())
        };
        match bytes {
            Ok(bytes) => {
                if let Err(e) = fsutil::write_private_nosync(&dir.join("state.json"), &bytes) {
                    tracing::warn!(error = %e, "cannot persist simulator state");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot serialise simulator state"),
        }
        self.persist.writes.fetch_add(1, Ordering::SeqCst);
        self.persist.written.fetch_max(generation, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use crate::config::SimConfig;
    use crate::sim::Sim;

    #[tokio::test]
    async fn changes_waiting_together_share_one_write_of_the_state_file() {
        let dir = tempfile::tempdir().unwrap();
        let sim = Sim::new(SimConfig { state_dir: Some(dir.path().join("sim")), ..SimConfig::default() }).unwrap();
        let seeded = sim.persist.writes();
        assert_eq!(seeded, 1, "a fresh cluster is written once, seeded");
        sim.settle().await;
        assert_eq!(sim.persist.writes(), seeded, "nothing changed: nothing written");
        for _ in 0..100 {
            sim.changed();
        }
        // A hundred responses waiting at once: the first writes for all.
        let waits: Vec<_> = (0..100).map(|_| sim.settle()).collect();
        for w in waits {
            w.await;
        }
        assert_eq!(sim.persist.writes(), seeded + 1);
        sim.changed();
        sim.flush();
        sim.flush();
        assert_eq!(sim.persist.writes(), seeded + 2, "a flush writes what changed, once");
    }

    #[tokio::test]
    async fn without_a_state_dir_nothing_is_written() {
        let sim = Sim::new(SimConfig::default()).unwrap();
        sim.changed();
        sim.settle().await;
        sim.flush();
        assert_eq!(sim.persist.writes(), 0);
    }
}
