//! `log`: structured events and progress lines in the run's journal and on
//! the operator's terminal. Never fails; the host drops an event once the
//! call's journal budget is spent.

pub use crate::bindings::cradle::host::log::{Level, event, progress};
use crate::types::{Entry, VmSpec};

/// An event about `vm`, with its name as the `vm` field.
pub fn vm(level: Level, vm: &VmSpec, message: &str) {
    event(level, message, &[field("vm", &vm.name)]);
}

/// An `info` event with fields given as pairs.
pub fn info(message: &str, fields: &[(&str, &str)]) {
    with_fields(Level::Info, message, fields);
}

/// A `warn` event with fields given as pairs.
pub fn warn(message: &str, fields: &[(&str, &str)]) {
    with_fields(Level::Warn, message, fields);
}

/// A `debug` event with fields given as pairs.
pub fn debug(message: &str, fields: &[(&str, &str)]) {
    with_fields(Level::Debug, message, fields);
}

fn with_fields(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<Entry> = fields.iter().map(|(k, v)| field(k, v)).collect();
    event(level, message, &fields);
}

/// One `key = value` field.
pub fn field(key: &str, value: impl ToString) -> Entry {
    Entry { key: key.to_string(), value: value.to_string() }
}
