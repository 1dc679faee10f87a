//! The durable record of accepted webhook events: `serve/events.jsonl` in the
//! state directory (0600, in a 0700 directory), one JSON record per line.
//!
//! Contract:
//! - [`EventStore::admit`] returns only once the event's `accepted` line is on
//!   disk (written and `fdatasync`ed), so a `202` that `cradle serve` sends
//!   survives a crash. Lines from many requests are written and synced
//!   together (group commit): one sync per batch, not one per event.
//! - At most one event per (source, NetBox VM) is in flight: a delivery for a
//!   VM whose event is accepted or running is [`Admission::InFlight`], and a
//!   body already recorded (same SHA-256) is [`Admission::Duplicate`]; neither
//!   starts a second run.
//! - [`EventStore::open`] replays the file: events accepted or running when
//!   the last process stopped are returned to resume, in the order they
//!   came. An event interrupted [`MAX_ATTEMPTS`] times is given up (failed)
//!   instead of crashing the service in a loop. The file is then rewritten
//!   with the events still held: the unfinished ones and the last
//!   [`KEEP_FINISHED`] finished ones (the duplicate check's memory).
//!
//! Failure modes: a line that cannot be written or synced fails the admission
//! (the caller answers 503 and NetBox may retry) and is cut off the file, so the
//! next line starts clean; a torn last line (a crash mid-write: never
//! acknowledged) is dropped with a warning; a damaged line before the last is
//! a [`StoreError::Corrupt`] naming the file and line.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::event::StagedVm;
use crate::state::{StateError, create_private_dir, open_private_append, write_private_file_atomic};

/// The file's name inside `<state>/serve/`.
pub const FILE: &str = "events.jsonl";
/// Runs of one event that may be interrupted before it is given up.
pub const MAX_ATTEMPTS: u32 = 3;
/// Finished events kept (for the duplicate check and for operators).
pub const KEEP_FINISHED: usize = 1000;

/// Where an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventState {
    /// Recorded, waiting for a pipeline slot.
    Accepted,
    /// Its pipeline runs (or ran when the process stopped).
    Running,
    /// The pipeline succeeded.
    Done,
    /// The pipeline failed, or was given up.
    Failed,
}

impl EventState {
    /// Accepted or running: the VM is in flight.
    pub fn unfinished(self) -> bool {
        matches!(self, EventState::Accepted | EventState::Running)
    }
}

/// One accepted delivery and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Its number, in the order events were accepted.
    pub seq: u64,
    /// The `[serve.sources.NAME]` it came through.
    pub source: String,
    /// The VM's NetBox id.
    pub vm_id: u64,
    /// The VM's name in NetBox at the time.
    pub vm_name: String,
    /// When cradle accepted it (RFC 3339, UTC).
    pub received: String,
    /// When NetBox saw the change.
    pub netbox_timestamp: String,
    /// NetBox's request id, if any.
    pub request_id: Option<String>,
    /// The NetBox user, if any.
    pub user: Option<String>,
    /// What asked for the pipeline (`staged`, `created`, `primary-ip`, or
    /// `sync` for `cradle netbox sync`); lines written before it was
    /// recorded read as `staged`.
    #[serde(default = "staged_trigger")]
    pub trigger: String,
    /// SHA-256 of the raw body (hex).
    pub digest: String,
    /// Where it is.
    pub state: EventState,
    /// Pipeline runs started for it.
    pub attempts: u32,
    /// The last run's id (its journal: `cradle runs show RUN`).
    pub run_id: Option<String>,
    /// The outcome in a line (the error of a failed run).
    pub detail: Option<String>,
}

/// The trigger of an event recorded before triggers were.
fn staged_trigger() -> String {
    "staged".to_string()
}

impl Event {
    /// An event for a VM found Staged without a delivery (`cradle netbox
    /// sync`): it is run at once and not recorded.
    pub fn found(source: &str, vm_id: u64, vm_name: &str) -> Event {
        Event {
            seq: 0,
            source: source.to_string(),
            vm_id,
            vm_name: vm_name.to_string(),
            received: now(),
            netbox_timestamp: String::new(),
            request_id: None,
            user: None,
            trigger: "sync".to_string(),
            digest: String::new(),
            state: EventState::Running,
            attempts: 1,
            run_id: None,
            detail: None,
        }
    }
}

/// One line of the file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Record {
    // Boxed: an event is many times the size of the other lines.
    Accepted { event: Box<Event> },
    Started { seq: u64, attempt: u32 },
    Finished { seq: u64, ok: bool, run_id: Option<String>, detail: String },
}

/// What [`EventStore::admit`] did with a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Recorded durably; run it.
    Accepted(Box<Event>),
    /// The VM already has an unfinished event (`seq`): nothing new.
    InFlight { seq: u64 },
    /// This exact body was recorded before as `seq`.
    Duplicate { seq: u64 },
    /// `queued` events wait already: the queue is full.
    Full { queued: usize },
}

/// Why the store cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The state directory or the file.
    #[error(transparent)]
    State(#[from] StateError),
    /// A line other than the last one is damaged.
    #[error(
        "{path}:{line}: not an event record ({detail}); the file is damaged. Move it aside to start \
         empty (unfinished events in it are then not resumed: run `cradle netbox sync`)"
    )]
    Corrupt { path: PathBuf, line: usize, detail: String },
    /// A line could not be written or synced.
    #[error("cannot record the event in {path}: {detail}")]
    Write { path: PathBuf, detail: String },
    /// The writer thread is gone (the service is stopping).
    #[error("the event store is closed")]
    Closed,
    /// The event is not held.
    #[error("no event {0} in the store")]
    Unknown(u64),
}

type Ack = tokio::sync::oneshot::Sender<Result<(), String>>;
/// A line to write, and whom to tell once it is on disk.
type Line = (Vec<u8>, Ack);

/// The event log and its in-memory index.
pub struct EventStore {
    path: PathBuf,
    index: Mutex<Index>,
    writer: Mutex<Option<std::sync::mpsc::Sender<Line>>>,
    max_queued: usize,
}

#[derive(Default)]
struct Index {
    next_seq: u64,
    events: BTreeMap<u64, Event>,
    in_flight: HashMap<(String, u64), u64>,
    digests: HashMap<String, u64>,
}

impl Index {
    fn apply(&mut self, record: Record) -> Result<(), String> {
        match record {
            Record::Accepted { event } => {
                self.next_seq = self.next_seq.max(event.seq + 1);
                if event.state.unfinished() {
                    self.in_flight.insert((event.source.clone(), event.vm_id), event.seq);
                }
                self.digests.insert(event.digest.clone(), event.seq);
                self.events.insert(event.seq, *event);
            }
            Record::Started { seq, attempt } => {
                let e = self.events.get_mut(&seq).ok_or_else(|| format!("start of unknown event {seq}"))?;
                e.state = EventState::Running;
                e.attempts = attempt;
            }
            Record::Finished { seq, ok, run_id, detail } => {
                let e = self.events.get_mut(&seq).ok_or_else(|| format!("end of unknown event {seq}"))?;
                e.state = if ok { EventState::Done } else { EventState::Failed };
                e.run_id = run_id.or(e.run_id.take());
                e.detail = Some(detail);
                self.in_flight.remove(&(e.source.clone(), e.vm_id));
            }
        }
        Ok(())
    }

    /// Forget the oldest finished events beyond `KEEP_FINISHED`.
    fn trim(&mut self) {
        let finished: Vec<u64> = self.events.values().filter(|e| !e.state.unfinished()).map(|e| e.seq).collect();
        for seq in finished.iter().take(finished.len().saturating_sub(KEEP_FINISHED)) {
            if let Some(e) = self.events.remove(seq) {
                self.digests.remove(&e.digest);
            }
        }
    }

    fn queued(&self) -> usize {
        self.in_flight.len()
    }
}

impl EventStore {
    /// Open (or create) the store in `dir` (`<state>/serve`); the events to
    /// resume, oldest first, and those given up now.
    pub fn open(dir: &Path, max_queued: usize) -> Result<(EventStore, Vec<Event>), StoreError> {
        create_private_dir(dir)?;
        let path = dir.join(FILE);
        let mut index = replay(&path)?;
        let mut resume = Vec::new();
        for e in index.events.values_mut().filter(|e| e.state.unfinished()) {
            if e.attempts >= MAX_ATTEMPTS {
                e.state = EventState::Failed;
                e.detail = Some(format!(
                    "given up: its pipeline was interrupted {} times (cradle serve stopped or crashed mid-run); \
                     see `cradle runs show {}`, then set the VM to Staged again in NetBox to retry",
                    e.attempts,
                    e.run_id.as_deref().unwrap_or("RUN")
                ));
                tracing::error!(seq = e.seq, vm = %e.vm_name, "an event's pipeline was interrupted too often; given up");
            } else {
                resume.push(e.clone());
            }
        }
        index.in_flight.retain(|_, seq| resume.iter().any(|e| e.seq == *seq));
        index.trim();
        let mut compact = Vec::new();
        for event in index.events.values() {
            compact.extend(line(&Record::Accepted { event: Box::new(event.clone()) }));
        }
        write_private_file_atomic(&path, &compact)?;
        let file = open_private_append(&path)?;
        let (tx, rx) = std::sync::mpsc::channel();
        let len = compact.len() as u64;
        std::thread::Builder::new()
            .name("cradle-serve-log".into())
            .spawn(move || write_batches(file, len, rx))
            .map_err(|e| StoreError::Write { path: path.clone(), detail: format!("cannot start the writer: {e}") })?;
        let store = EventStore { path, index: Mutex::new(index), writer: Mutex::new(Some(tx)), max_queued };
        Ok((store, resume))
    }

    /// Every event of the log in `dir`, oldest first, as the file says now:
    /// read only, so it may watch a log a running service writes (a torn
    /// last line is one being written).
    pub fn read(dir: &Path) -> Result<Vec<Event>, StoreError> {
        Ok(replay(&dir.join(FILE))?.events.into_values().collect())
    }

    /// Record `vm`'s delivery (its body's SHA-256 is `digest`) from `source`,
    /// unless the VM is in flight, the body was seen, or the queue is full.
    pub async fn admit(&self, source: &str, vm: &StagedVm, digest: String) -> Result<Admission, StoreError> {
        let (event, ack) = {
            let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(seq) = index.digests.get(&digest) {
                return Ok(Admission::Duplicate { seq: *seq });
            }
            if let Some(seq) = index.in_flight.get(&(source.to_string(), vm.vm_id)) {
                return Ok(Admission::InFlight { seq: *seq });
            }
            if index.queued() >= self.max_queued {
                return Ok(Admission::Full { queued: index.queued() });
            }
            let event = Event {
                seq: index.next_seq,
                source: source.to_string(),
                vm_id: vm.vm_id,
                vm_name: vm.name.clone(),
                received: now(),
                netbox_timestamp: vm.timestamp.clone(),
                request_id: vm.request_id.clone(),
                user: vm.user.clone(),
                trigger: vm.trigger.as_str().to_string(),
                digest,
                state: EventState::Accepted,
                attempts: 0,
                run_id: None,
                detail: None,
            };
            // Held before it is durable, so a concurrent duplicate waits behind it.
            index.apply(Record::Accepted { event: Box::new(event.clone()) }).map_err(|_| StoreError::Closed)?;
            (event.clone(), self.send(&Record::Accepted { event: Box::new(event) })?)
        };
        match ack.await {
            Ok(Ok(())) => Ok(Admission::Accepted(Box::new(event))),
            failed => {
                let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
                index.events.remove(&event.seq);
                index.in_flight.remove(&(event.source.clone(), event.vm_id));
                index.digests.remove(&event.digest);
                Err(self.write_error(failed))
            }
        }
    }

    /// A pipeline run of `seq` starts: its attempt count, durably.
    pub async fn started(&self, seq: u64) -> Result<Event, StoreError> {
        let (event, ack) = {
            let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
            let attempt = index.events.get(&seq).ok_or(StoreError::Unknown(seq))?.attempts + 1;
            let record = Record::Started { seq, attempt };
            let ack = self.send(&record)?;
            index.apply(record).map_err(|_| StoreError::Unknown(seq))?;
            (index.events.get(&seq).cloned().ok_or(StoreError::Unknown(seq))?, ack)
        };
        match ack.await {
            Ok(Ok(())) => Ok(event),
            failed => Err(self.write_error(failed)),
        }
    }

    /// The run of `seq` ended; the VM is no longer in flight.
    pub async fn finished(&self, seq: u64, ok: bool, run_id: Option<String>, detail: String) -> Result<(), StoreError> {
        let ack = {
            let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
            let record = Record::Finished { seq, ok, run_id, detail };
            let ack = self.send(&record)?;
            index.apply(record).map_err(|_| StoreError::Unknown(seq))?;
            index.trim();
            ack
        };
        match ack.await {
            Ok(Ok(())) => Ok(()),
            failed => Err(self.write_error(failed)),
        }
    }

    /// Every event held, oldest first.
    pub fn events(&self) -> Vec<Event> {
        self.index.lock().unwrap_or_else(|e| e.into_inner()).events.values().cloned().collect()
    }

    /// Events accepted or running.
    pub fn queued(&self) -> usize {
        self.index.lock().unwrap_or_else(|e| e.into_inner()).queued()
    }

    /// Events in flight: (accepted and waiting for a slot, running).
    pub fn in_flight(&self) -> (usize, usize) {
        let index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        let running = index
            .in_flight
            .values()
            .filter(|seq| index.events.get(seq).is_some_and(|e| e.state == EventState::Running))
            .count();
        (index.in_flight.len() - running, running)
    }

    /// Stop the writer once what was sent is written.
    pub fn close(&self) {
        self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn send(&self, record: &Record) -> Result<tokio::sync::oneshot::Receiver<Result<(), String>>, StoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        writer.as_ref().ok_or(StoreError::Closed)?.send((line(record), tx)).map_err(|_| StoreError::Closed)?;
        Ok(rx)
    }

    fn write_error(&self, failed: Result<Result<(), String>, tokio::sync::oneshot::error::RecvError>) -> StoreError {
        match failed {
            Ok(Err(detail)) => StoreError::Write { path: self.path.clone(), detail },
            _ => StoreError::Closed,
        }
    }
}

/// The index the log at `path` describes (none: empty).
fn replay(path: &Path) -> Result<Index, StoreError> {
    let mut index = Index::default();
    let text = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(index),
        Err(e) => return Err(StateError::io("read", path, e).into()),
    };
    let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim_ascii().is_empty() {
            continue;
        }
        let torn = i + 1 == lines.len() && !text.ends_with(b"\n");
        let applied = serde_json::from_slice::<Record>(line).map_err(|e| e.to_string()).and_then(|r| index.apply(r));
        match applied {
            Ok(()) => {}
            // Never acknowledged: its sync had not returned.
            Err(detail) if torn => {
                tracing::warn!(path = %path.display(), line = i + 1, %detail, "dropped a torn last line of the event log");
            }
            Err(detail) => return Err(StoreError::Corrupt { path: path.to_path_buf(), line: i + 1, detail }),
        }
    }
    Ok(index)
}

fn line(record: &Record) -> Vec<u8> {
    // A record of plain strings and numbers always serializes.
    let mut bytes = serde_json::to_vec(record).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

fn now() -> String {
    time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

/// The writer thread: take what is waiting, write it, sync once, answer all.
fn write_batches(mut file: File, mut len: u64, rx: std::sync::mpsc::Receiver<Line>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < 4096 {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let bytes: Vec<u8> = batch.iter().flat_map(|(l, _)| l.iter().copied()).collect();
        let result = file.write_all(&bytes).and_then(|()| file.sync_data()).map_err(|e| e.to_string());
        match &result {
            Ok(()) => len += bytes.len() as u64,
            // Cut a partial batch off, so the next line starts clean.
            Err(_) => {
                let _ = file.set_len(len);
            }
        }
        for (_, ack) in batch {
            let _ = ack.send(result.clone());
        }
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
