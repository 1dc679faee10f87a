//! How log lines look when stderr is systemd's journal.
//!
//! Contract: when `$JOURNAL_STREAM` names stderr (its `DEVICE:INODE` equals
//! stderr's, as sd_journal's stream protocol documents: a child's stderr
//! redirected elsewhere keeps the variable but not the match), each line
//! starts with its syslog priority (`<3>` error, `<4>` warn, `<6>` info,
//! `<7>` debug and trace; journald's `SYSLOG_PREFIX` parsing turns it into
//! the entry's PRIORITY), keeps its level word, and has no timestamp of
//! cradle's own (journald stamps every entry) and no colour. Anywhere else
//! nothing changes. A multi-line message's later lines reach the journal as
//! entries of the stream's default priority (info): the prefix is per line
//! and only the first has it.

use std::fmt;
use std::os::fd::AsFd as _;
use std::os::unix::fs::MetadataExt as _;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Whether stderr is the journal's stream (module docs).
pub fn stderr_is_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else { return false };
    let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else { return false };
    let Ok(meta) = std::fs::File::from(fd).metadata() else { return false };
    names_stream(&value.to_string_lossy(), meta.dev(), meta.ino())
}

/// `$JOURNAL_STREAM` (`DEVICE:INODE`, decimal) names the file `dev`, `ino`.
fn names_stream(value: &str, dev: u64, ino: u64) -> bool {
    value.split_once(':').is_some_and(|(d, i)| d.parse() == Ok(dev) && i.parse() == Ok(ino))
}

/// The syslog priority journald reads from a line's `<N>` prefix.
pub fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// An event format that puts `<N>` before what `inner` writes.
pub struct SyslogPrefix<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for SyslogPrefix<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        write!(writer, "<{}>", priority(event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// The journal's event format: priority prefix, level, message and fields;
/// no time, no colour, no target (as on a terminal).
pub fn journal_format()
-> SyslogPrefix<tracing_subscriber::fmt::format::Format<tracing_subscriber::fmt::format::Full, ()>> {
    SyslogPrefix(tracing_subscriber::fmt::format().without_time().with_target(false).with_ansi(false))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn each_level_maps_to_its_syslog_priority() {
        assert_eq!(priority(&Level::ERROR), 3);
        assert_eq!(priority(&Level::WARN), 4);
        assert_eq!(priority(&Level::INFO), 6);
        assert_eq!(priority(&Level::DEBUG), 7);
        assert_eq!(priority(&Level::TRACE), 7);
    }

    #[test]
    fn journal_stream_must_name_stderrs_device_and_inode() {
        assert!(names_stream("27:1234", 27, 1234));
        assert!(!names_stream("27:1235", 27, 1234), "stderr redirected elsewhere");
        assert!(!names_stream("", 27, 1234));
        assert!(!names_stream("27", 27, 1234));
        assert!(!names_stream("x:y", 27, 1234));
    }

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn journal_lines_carry_the_priority_and_level_without_a_timestamp() {
        let buf = Buf::default();
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_max_level(Level::DEBUG)
            .event_format(journal_format())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(vm = "web-1", "cannot clone");
            tracing::warn!("reload failed");
            tracing::info!("listening");
            tracing::debug!("detail");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            ["<3>ERROR cannot clone vm=\"web-1\"", "<4> WARN reload failed", "<6> INFO listening", "<7>DEBUG detail"],
            "no timestamp, no colour: {text:?}"
        );
    }
}
