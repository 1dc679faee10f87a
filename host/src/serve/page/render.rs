//! Escaping for the status page, in one place: every string a page answer
//! carries (run ids, VM and step names, errors from plugins, guests, NetBox)
//! passes through [`page_json`] before it leaves the process.
//!
//! Contract:
//! - control characters (terminal escapes, `\r`, bidirectional overrides) are
//!   shown as visible escapes ([`crate::text::printable`]), so an `ESC[2J` in
//!   an error is the text `\u{1b}[2J` on the page;
//! - a string over [`MAX_TEXT`] characters is cut there and says how much was
//!   left out and where the rest is (the journal, `cradle runs show`);
//! - markup is not escaped here: the page only ever puts these strings in the
//!   document as text (`textContent`), never as HTML, and the JSON travels as
//!   `application/json` or as one SSE `data:` line (serde escapes newlines).

use serde::Serialize;
use serde_json::Value;

use crate::text::printable;

/// The longest string shown, in characters.
pub const MAX_TEXT: usize = 2000;

/// `value` as JSON with every string made safe to show (module docs).
pub fn page_json<T: Serialize>(value: &T) -> String {
    let mut v = serde_json::to_value(value).unwrap_or(Value::Null);
    clean(&mut v);
    v.to_string()
}

fn clean(v: &mut Value) {
    match v {
        Value::String(s) => {
            if let Some(shown) = shown(s) {
                *s = shown;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(clean),
        Value::Object(fields) => fields.values_mut().for_each(clean),
        _ => {}
    }
}

/// `s` as shown, if that differs from `s`.
fn shown(s: &str) -> Option<String> {
    let p = printable(s);
    let count = p.chars().count();
    if count > MAX_TEXT {
        let kept: String = p.chars().take(MAX_TEXT).collect();
        return Some(format!(
            "{kept}… ({} more characters: the journal has all of it, see cradle runs show)",
            count - MAX_TEXT
        ));
    }
    match p {
        std::borrow::Cow::Borrowed(_) => None,
        std::borrow::Cow::Owned(o) => Some(o),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn terminal_escapes_become_visible_text_and_long_strings_are_cut_saying_so() {
        let long = "x".repeat(MAX_TEXT + 500);
        let out = page_json(&json!({
            "error": "\u{1b}[2J\u{1b}]0;owned\u{7}boom\r\nerror: forged",
            "vm": "<script>alert(1)</script>",
            "nested": [{ "msg": long }],
        }));
        let back: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(back["error"], "\\u{1b}[2J\\u{1b}]0;owned\\u{7}boom\\r\\nerror: forged");
        assert_eq!(back["vm"], "<script>alert(1)</script>", "markup stays text; the page never parses it");
        let msg = back["nested"][0]["msg"].as_str().expect("msg");
        assert!(msg.starts_with(&"x".repeat(MAX_TEXT)), "kept the first MAX_TEXT characters");
        assert!(msg.ends_with("… (500 more characters: the journal has all of it, see cradle runs show)"), "{msg}");
        assert!(!out.contains('\u{1b}') && !out.contains('\n'), "one SSE data line, no raw escape");
    }
}
