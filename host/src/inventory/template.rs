//! Plain Jinja variable references in inventory values: `{{ name }}` and
//! `{{ name.sub }}` (also `name['sub']`, `name[0]`), resolved against the same
//! host's merged variables, recursively and lazily (only variables cradle reads).
//!
//! Contract: a value that is exactly one reference keeps the referenced value's
//! type (`vms_vmid_base: "{{ test_base }}"` stays a number); references inside
//! longer text are rendered as text. Filters, tests, expressions, `{% %}` blocks and
//! `{# #}` comments are refused with a message naming the expression: cradle does
//! not run Jinja. Undefined variables and reference cycles are errors too; each is
//! a [`TemplateError`] (the resolver wraps it in `InventoryError::Template`, naming
//! the host and the variable).

use serde_json::Value;

use super::Vars;

/// Why a value's references cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// Variables that refer to each other, in the order they were followed.
    #[error("variables refer to each other in a loop: {}", cycle.join(" -> "))]
    Cycle {
        /// The variables, the first one repeated at the end.
        cycle: Vec<String>,
    },
    /// Jinja beyond plain references (filters, tests, operators, blocks, comments).
    #[error(
        "`{source_text}` uses a Jinja expression; cradle supports only plain variable references like {{{{ name }}}} or {{{{ name.sub }}}} (no filters, tests, operators or blocks): replace it with a plain value"
    )]
    Unsupported {
        /// The value holding the expression.
        source_text: String,
    },
    /// `{{` without `}}`.
    #[error("`{source_text}` has `{{{{` without a closing `}}}}`")]
    Unclosed {
        /// The value.
        source_text: String,
    },
    /// A reference to a variable the host does not have.
    #[error("`{source_text}` refers to `{name}`, which is not defined for this host")]
    Undefined {
        /// The value holding the reference.
        source_text: String,
        /// The variable.
        name: String,
    },
    /// A reference into a value that has no such key or index.
    #[error("`{source_text}`: `{walked}` has no `{key}`")]
    NoKey {
        /// The value holding the reference.
        source_text: String,
        /// The part of the path that was found.
        walked: String,
        /// The key that was not.
        key: String,
    },
}

/// Renders references of one host's variables.
pub(crate) struct Renderer<'a> {
    vars: &'a Vars,
    stack: Vec<String>,
}

impl<'a> Renderer<'a> {
    pub(crate) fn new(vars: &'a Vars) -> Self {
        Renderer { vars, stack: Vec::new() }
    }

    /// The rendered value of top-level variable `name`, if set.
    pub(crate) fn var(&mut self, name: &str) -> Result<Option<Value>, TemplateError> {
        let Some(raw) = self.vars.get(name) else { return Ok(None) };
        if self.stack.iter().any(|s| s == name) {
            let mut cycle = self.stack.clone();
            cycle.push(name.to_string());
            return Err(TemplateError::Cycle { cycle });
        }
        self.stack.push(name.to_string());
        let out = self.render(raw);
        self.stack.pop();
        out.map(Some)
    }

    /// Render every string inside `value`.
    pub(crate) fn render(&mut self, value: &Value) -> Result<Value, TemplateError> {
        Ok(match value {
            Value::String(s) => self.render_str(s)?,
            Value::Array(items) => Value::Array(items.iter().map(|v| self.render(v)).collect::<Result<_, _>>()?),
            Value::Object(map) => Value::Object(
                map.iter().map(|(k, v)| Ok((k.clone(), self.render(v)?))).collect::<Result<_, TemplateError>>()?,
            ),
            other => other.clone(),
        })
    }

    fn render_str(&mut self, s: &str) -> Result<Value, TemplateError> {
        for marker in ["{%", "{#"] {
            if s.contains(marker) {
                return Err(unsupported(s));
            }
        }
        if !s.contains("{{") {
            return Ok(Value::String(s.to_string()));
        }
        let mut out = String::new();
        let mut rest = s;
        let mut whole: Option<Value> = None;
        while let Some(start) = rest.find("{{") {
            let end = rest[start..].find("}}").ok_or_else(|| TemplateError::Unclosed { source_text: s.to_string() })?;
            let expr = rest[start + 2..start + end].trim();
            let value = self.lookup(expr, s)?;
            if start == 0 && start + end + 2 == rest.len() && out.is_empty() {
                whole = Some(value.clone());
            }
            out.push_str(&rest[..start]);
            out.push_str(&text(&value));
            rest = &rest[start + end + 2..];
        }
        if let Some(v) = whole
            && rest.is_empty()
        {
            return Ok(v);
        }
        out.push_str(rest);
        Ok(Value::String(out))
    }

    fn lookup(&mut self, expr: &str, source: &str) -> Result<Value, TemplateError> {
        let path = parse_path(expr).ok_or_else(|| unsupported(source))?;
        let (first, subs) = path.split_first().ok_or_else(|| unsupported(source))?;
        let Some(mut value) = self.var(first)? else {
            return Err(TemplateError::Undefined { source_text: source.to_string(), name: first.clone() });
        };
        let mut walked = first.clone();
        for key in subs {
            let next = match &value {
                Value::Object(m) => m.get(key).cloned(),
                Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i).cloned()),
                _ => None,
            };
            value = next.ok_or_else(|| TemplateError::NoKey {
                source_text: source.to_string(),
                walked: walked.clone(),
                key: key.clone(),
            })?;
            walked = format!("{walked}.{key}");
        }
        Ok(value)
    }
}

fn unsupported(source: &str) -> TemplateError {
    TemplateError::Unsupported { source_text: source.to_string() }
}

/// `a.b['c'][0]` → `["a", "b", "c", "0"]`; `None` for anything else.
fn parse_path(expr: &str) -> Option<Vec<String>> {
    let ident = |s: &str| {
        let mut c = s.chars();
        c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
            && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
    };
    let mut out = Vec::new();
    let mut rest = expr;
    let head_end = rest.find(['.', '[']).unwrap_or(rest.len());
    if !ident(&rest[..head_end]) {
        return None;
    }
    out.push(rest[..head_end].to_string());
    rest = &rest[head_end..];
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let seg = &r[..end];
            if !(ident(seg) || (!seg.is_empty() && seg.chars().all(|c| c.is_ascii_digit()))) {
                return None;
            }
            out.push(seg.to_string());
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = r[..end].trim();
            let key = if let Some(q) = inner.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')) {
                q
            } else if let Some(q) = inner.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
                q
            } else if !inner.is_empty() && inner.chars().all(|c| c.is_ascii_digit()) {
                inner
            } else {
                return None;
            };
            out.push(key.to_string());
            rest = &r[end + 1..];
        } else {
            return None;
        }
    }
    Some(out)
}

/// How a value reads inside text (Python's `str()` for the scalars).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Null => "None".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars(v: Value) -> Vars {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn references_resolve_recursively_and_keep_types() {
        let v = vars(json!({
            "base": 9100, "b2": "{{ base }}", "net": {"gw": "10.0.20.1"},
            "ip": "10.0.20.{{ last }}/24", "last": 12, "gw": "{{ net.gw }}", "gw2": "{{ net['gw'] }}",
        }));
        let mut r = Renderer::new(&v);
        assert_eq!(r.var("b2").expect("ok"), Some(json!(9100)));
        assert_eq!(r.var("ip").expect("ok"), Some(json!("10.0.20.12/24")));
        assert_eq!(r.var("gw").expect("ok"), Some(json!("10.0.20.1")));
        assert_eq!(r.var("gw2").expect("ok"), Some(json!("10.0.20.1")));
        assert_eq!(r.var("missing").expect("ok"), None);
    }

    #[test]
    fn filters_undefined_and_loops_are_refused() {
        let v = vars(json!({
            "f": "{{ x | default(1) }}", "u": "{{ nope }}", "a": "{{ b }}", "b": "{{ a }}", "blk": "{% if x %}1{% endif %}",
        }));
        let mut r = Renderer::new(&v);
        assert!(r.var("f").unwrap_err().to_string().contains("only plain variable references"));
        assert!(r.var("blk").unwrap_err().to_string().contains("only plain variable references"));
        assert!(r.var("u").unwrap_err().to_string().contains("`nope`, which is not defined"));
        assert!(r.var("a").unwrap_err().to_string().contains("a -> b -> a"));
    }
}
