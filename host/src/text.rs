//! Making untrusted text safe to print on a terminal.
//!
//! Plugin error messages, guest command output, remote API messages and
//! anything read back from a journal may contain control characters: an
//! `ESC[2J` clears the screen, an OSC sequence sets the window title, a `\r`
//! or `\n` starts a forged `error:` line. Every place that prints such text
//! for a person passes it through [`printable`] (or [`printable_paragraph`] for
//! cradle's own multi-line messages); every log line does, field by field,
//! through [`log_fields`], the formatter the CLI's subscriber is built with. JSON output does not: serde already
//! escapes control characters there, and the text must stay exact.
//!
//! Escaped: every Unicode control character (C0, DEL, C1) and the
//! bidirectional-override characters (which reorder what is shown). `\n`, `\r`
//! and `\t` become those two-character escapes; the rest become `\u{XX}`.

use std::borrow::Cow;
use std::fmt::Write as _;

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escape_into(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c => {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
}

/// `s` with every control character escaped, on one line.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if needs_escape(c) {
            escape_into(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `s` escaped like [`printable`], except that line breaks are kept and each
/// continuation line is indented by two spaces: a multi-line message (a TOML
/// error with its source excerpt) stays readable, yet no line of it can pose
/// as a line of cradle's own at the left margin.
pub fn printable_paragraph(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\n  "),
            c if needs_escape(c) => escape_into(&mut out, c),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The field formatter of cradle's log lines (`tracing_subscriber`'s
/// `fmt_fields`): every field value, the message included, is shown through
/// [`printable`]. Log lines carry text from outside — a webhook's VM name, a
/// request path, a plugin's or guest's message, an error quoting its input — and
/// this is the one place that keeps any of it from writing control sequences to
/// the operator's terminal or forging a second log line, whichever call site
/// logged it and whether it was recorded with `%` (Display, unescaped by the
/// default formatter) or `?`.
pub fn log_fields() -> impl for<'writer> tracing_subscriber::fmt::FormatFields<'writer> + 'static {
    use tracing_subscriber::field::MakeExt as _;
    tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
        let shown = format!("{value:?}");
        let shown = printable(&shown);
        if field.name() == "message" { write!(writer, "{shown}") } else { write!(writer, "{}={shown}", field.name()) }
    })
    .delimited(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_returned_unchanged_and_borrowed() {
        assert!(matches!(printable("vm test-0: ok — fine"), Cow::Borrowed(_)));
    }

    #[test]
    fn screen_clear_title_and_carriage_return_are_escaped() {
        let hostile = "boom\x1b[2J\x1b]0;pwned\x07\rerror: forged\nerror: again\u{9b}";
        let shown = printable(hostile);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
        assert_eq!(shown, "boom\\u{1b}[2J\\u{1b}]0;pwned\\u{7}\\rerror: forged\\nerror: again\\u{9b}");
    }

    #[test]
    fn log_lines_show_every_field_and_the_message_escaped() {
        use std::sync::{Arc, Mutex};

        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("buffer").extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .fmt_fields(log_fields())
            .finish();
        let name = "vm\x1b]0;pwned\x07\x1b[2J\rerror: forged";
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(vm = %name, seq = 3, quoted = ?name, "webhook for {name} accepted");
        });
        let out = String::from_utf8(buffer.0.lock().expect("buffer").clone()).expect("utf-8");
        assert_eq!(out.matches('\n').count(), 1, "one line: {out:?}");
        assert!(!out.trim_end().chars().any(needs_escape), "{out:?}");
        assert!(out.contains("webhook for vm\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\rerror: forged accepted"), "{out:?}");
        assert!(out.contains(" vm=vm\\u{1b}]0;pwned") && out.contains(" seq=3 "), "{out:?}");
    }

    #[test]
    fn bidi_overrides_are_escaped() {
        assert_eq!(printable("a\u{202e}b"), "a\\u{202e}b");
    }

    #[test]
    fn a_paragraph_keeps_its_lines_but_indents_them() {
        assert_eq!(
            printable_paragraph("bad key\n  | x = 1\nerror: forged\r"),
            "bad key\n    | x = 1\n  error: forged\\r"
        );
    }
}
