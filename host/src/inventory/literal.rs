//! The two lexical pieces of Ansible's INI plugin: POSIX `shlex` splitting of host
//! lines (quotes, backslash escapes, `#` comments) and `ast.literal_eval` of values
//! (Python ints, floats, quoted strings, `True`/`False`/`None`, lists, tuples, dicts).
//!
//! Contract: [`parse_value`] never fails: text that is not a Python literal stays a
//! string, exactly as Ansible keeps it (`yes` and `010` are strings, `20` is a number).

use serde_json::{Map, Number, Value};

/// Why a host line does not split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ShlexError {
    /// A quote (`'` or `"`) that is not closed.
    #[error("no closing quotation ({0})")]
    Unclosed(char),
    /// A backslash at the end of a double-quoted word.
    #[error("no escaped character")]
    NoEscaped,
}

/// Split a host line like Python's `shlex.split(line, comments=True)`.
pub(crate) fn shlex_split(line: &str) -> Result<Vec<String>, ShlexError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '#' => break,
            '\\' => {
                in_word = true;
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(n) => cur.push(n),
                        None => return Err(ShlexError::Unclosed('\'')),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(n @ ('\\' | '"' | '$' | '`')) => cur.push(n),
                            Some(n) => {
                                cur.push('\\');
                                cur.push(n);
                            }
                            None => return Err(ShlexError::NoEscaped),
                        },
                        Some(n) => cur.push(n),
                        None => return Err(ShlexError::Unclosed('"')),
                    }
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

/// Ansible's `_parse_value`: a Python literal when the text is one, else the text.
pub(crate) fn parse_value(text: &str) -> Value {
    let mut p = Parser { s: text.as_bytes(), i: 0 };
    match p.value() {
        Some(v) => {
            p.ws();
            if p.i == p.s.len() || p.s[p.i] == b'#' { v } else { Value::String(text.to_string()) }
        }
        None => Value::String(text.to_string()),
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        self.ws();
        if self.s.get(self.i) == Some(&b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Option<Value> {
        self.ws();
        match *self.s.get(self.i)? {
            b'\'' | b'"' => self.string().map(Value::String),
            b'[' => self.seq(b'[', b']'),
            b'(' => self.seq(b'(', b')'),
            b'{' => self.dict(),
            b'-' | b'+' | b'0'..=b'9' | b'.' => self.number(),
            _ => self.word(),
        }
    }

    fn word(&mut self) -> Option<Value> {
        let start = self.i;
        while self.i < self.s.len() && (self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == b'_') {
            self.i += 1;
        }
        match &self.s[start..self.i] {
            b"True" => Some(Value::Bool(true)),
            b"False" => Some(Value::Bool(false)),
            b"None" => Some(Value::Null),
            _ => None,
        }
    }

    fn number(&mut self) -> Option<Value> {
        let start = self.i;
        if matches!(self.s[self.i], b'-' | b'+') {
            self.i += 1;
        }
        let digits_start = self.i;
        while self.i < self.s.len() && (self.s[self.i].is_ascii_digit() || self.s[self.i] == b'_') {
            self.i += 1;
        }
        let int_part = std::str::from_utf8(&self.s[digits_start..self.i]).ok()?.replace('_', "");
        let mut is_float = false;
        if self.s.get(self.i) == Some(&b'.') {
            is_float = true;
            self.i += 1;
            while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                self.i += 1;
            }
        }
        if matches!(self.s.get(self.i), Some(b'e' | b'E')) {
            is_float = true;
            self.i += 1;
            if matches!(self.s.get(self.i), Some(b'-' | b'+')) {
                self.i += 1;
            }
            while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                self.i += 1;
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).ok()?.replace('_', "");
        if is_float {
            let f: f64 = text.parse().ok()?;
            return Number::from_f64(f).map(Value::Number);
        }
        // Python 3 refuses leading zeros (`010`): Ansible keeps such text a string.
        if int_part.is_empty() || (int_part.len() > 1 && int_part.starts_with('0')) {
            return None;
        }
        text.parse::<i64>().ok().map(|n| Value::Number(n.into()))
    }

    fn string(&mut self) -> Option<String> {
        let q = self.s[self.i];
        self.i += 1;
        let mut out = Vec::new();
        while self.i < self.s.len() {
            let c = self.s[self.i];
            self.i += 1;
            if c == q {
                return String::from_utf8(out).ok();
            }
            if c == b'\\' {
                let n = *self.s.get(self.i)?;
                self.i += 1;
                out.push(match n {
                    b'n' => b'\n',
                    b't' => b'\t',
                    b'r' => b'\r',
                    b'0' => 0,
                    other => other,
                });
            } else {
                out.push(c);
            }
        }
        None
    }

    fn seq(&mut self, open: u8, close: u8) -> Option<Value> {
        self.eat(open);
        let mut items = Vec::new();
        loop {
            if self.eat(close) {
                return Some(Value::Array(items));
            }
            items.push(self.value()?);
            if !self.eat(b',') {
                return self.eat(close).then_some(Value::Array(items));
            }
        }
    }

    fn dict(&mut self) -> Option<Value> {
        self.eat(b'{');
        let mut map = Map::new();
        loop {
            if self.eat(b'}') {
                return Some(Value::Object(map));
            }
            let key = match self.value()? {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => if b { "True" } else { "False" }.to_string(),
                _ => return None,
            };
            if !self.eat(b':') {
                return None;
            }
            map.insert(key, self.value()?);
            if !self.eat(b',') {
                return self.eat(b'}').then_some(Value::Object(map));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_follow_python_literal_eval() {
        assert_eq!(parse_value("9100"), json!(9100));
        assert_eq!(parse_value("-3"), json!(-3));
        assert_eq!(parse_value("1.5"), json!(1.5));
        assert_eq!(parse_value("010"), json!("010"));
        assert_eq!(parse_value("yes"), json!("yes"));
        assert_eq!(parse_value("True"), json!(true));
        assert_eq!(parse_value("None"), json!(null));
        assert_eq!(parse_value("'quoted'"), json!("quoted"));
        assert_eq!(parse_value("10.0.20.10/24"), json!("10.0.20.10/24"));
        assert_eq!(parse_value("['a', \"b\", 3,]"), json!(["a", "b", 3]));
        assert_eq!(parse_value("{'bridge': 'vmbr0', 'vlan': 20}"), json!({"bridge": "vmbr0", "vlan": 20}));
        assert_eq!(parse_value("(1, 2)"), json!([1, 2]));
        assert_eq!(parse_value("[1, 2"), json!("[1, 2"));
    }

    #[test]
    fn host_lines_split_like_shlex() {
        let t = shlex_split(r#"test-0 ansible_host=10.0.20.10 note="two words" x='a b' # comment"#).expect("split");
        assert_eq!(t, vec!["test-0", "ansible_host=10.0.20.10", "note=two words", "x=a b"]);
        assert!(shlex_split("a b=\"open").is_err());
    }
}
