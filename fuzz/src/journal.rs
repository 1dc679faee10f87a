//! The journal's pure reading (`host/src/journal/parse.rs`) and the event types
//! it reads (`event.rs`), re-exported as the host's `journal` module does.

#[path = "../../host/src/journal/event.rs"]
mod event;

pub use event::{CallOutcome, Event, LogLevel, PluginVersion, RunStatus, Timestamp};

#[path = "../../host/src/journal/parse.rs"]
pub mod parse;
