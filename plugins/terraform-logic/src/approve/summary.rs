//! Operator-facing summary lines: which top-level attributes change, without ever
//! printing a value Terraform marks sensitive.

use serde_json::Value;

use super::plan::Change;

/// Longest compact JSON shown for an object or list value; longer ones print as `{…}` / `[…]`.
const MAX_INLINE: usize = 60;

/// `name old → new` for each top-level attribute that differs between `before` and
/// `after` (or becomes unknown until apply), sorted by name. Sensitive values print as
/// `(sensitive)`, values unknown until apply as `(known after apply)`.
pub(super) fn changed_attributes(change: &Change) -> Vec<String> {
    let empty = serde_json::Map::new();
    let before = change.before.as_object().unwrap_or(&empty);
    let after = change.after.as_object().unwrap_or(&empty);
    let unknown = change.after_unknown.as_object().unwrap_or(&empty);

    let mut names: Vec<&String> = before.keys().chain(after.keys()).chain(unknown.keys()).collect();
    names.sort();
    names.dedup();

    let mut out = Vec::new();
    for name in names {
        let old = before.get(name).unwrap_or(&Value::Null);
        let new = after.get(name).unwrap_or(&Value::Null);
        let becomes_unknown = unknown.get(name) == Some(&Value::Bool(true));
        if old == new && !becomes_unknown {
            continue;
        }
        let sensitive = is_sensitive(&change.before_sensitive, name) || is_sensitive(&change.after_sensitive, name);
        let (old_text, new_text) = if sensitive {
            ("(sensitive)".to_owned(), "(sensitive)".to_owned())
        } else {
            let new_text = if becomes_unknown { "(known after apply)".to_owned() } else { render(new) };
            (render(old), new_text)
        };
        out.push(format!("{name} {old_text} → {new_text}"));
    }
    out
}

/// `prefix: a → b, c → d`, or just `prefix` when nothing differs at the top level.
pub(super) fn line(prefix: String, changes: &[String]) -> String {
    if changes.is_empty() { prefix } else { format!("{prefix}: {}", changes.join(", ")) }
}

/// Whether the mask (`true`, `false` or an object shaped like the value) marks
/// anything at or under the top-level attribute `name` as sensitive.
fn is_sensitive(mask: &Value, name: &str) -> bool {
    match mask {
        Value::Bool(all) => *all,
        Value::Object(fields) => fields.get(name).is_some_and(contains_true),
        _ => false,
    }
}

fn contains_true(mask: &Value) -> bool {
    match mask {
        Value::Bool(b) => *b,
        Value::Array(items) => items.iter().any(contains_true),
        Value::Object(fields) => fields.values().any(contains_true),
        _ => false,
    }
}

fn render(value: &Value) -> String {
    match value {
        Value::Array(_) | Value::Object(_) => {
            let text = value.to_string();
            if text.chars().count() <= MAX_INLINE {
                text
            } else if value.is_array() {
                "[…]".to_owned()
            } else {
                "{…}".to_owned()
            }
        }
        scalar => scalar.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{changed_attributes, line};
    use crate::approve::plan::Change;

    fn change(v: Value) -> Change {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn changed_scalars_are_listed_and_unchanged_ones_omitted() {
        let c = change(json!({
            "actions": ["update"],
            "before": {"memory": 2048, "name": "web-1", "tags": "a"},
            "after": {"memory": 4096, "name": "web-1", "tags": "a;b"},
            "after_unknown": {}, "before_sensitive": {}, "after_sensitive": {}
        }));
        assert_eq!(changed_attributes(&c), ["memory 2048 → 4096", "tags \"a\" → \"a;b\""]);
    }

    #[test]
    fn sensitive_values_are_never_printed() {
        let c = change(json!({
            "actions": ["update"],
            "before": {"cipassword": "old-secret", "nested": {"k": "x"}},
            "after": {"cipassword": "new-secret", "nested": {"k": "y"}},
            "after_unknown": {},
            "before_sensitive": {"cipassword": true, "nested": {}},
            "after_sensitive": {"cipassword": true, "nested": {"k": true}}
        }));
        let lines = changed_attributes(&c);
        assert_eq!(lines, ["cipassword (sensitive) → (sensitive)", "nested (sensitive) → (sensitive)"]);
        assert!(!lines.concat().contains("secret"));
    }

    #[test]
    fn fully_sensitive_mask_hides_every_value() {
        let c = change(json!({
            "actions": ["update"], "before": {"a": 1}, "after": {"a": 2},
            "before_sensitive": true, "after_sensitive": true
        }));
        assert_eq!(changed_attributes(&c), ["a (sensitive) → (sensitive)"]);
    }

    #[test]
    fn unknown_after_apply_is_said_so_and_long_values_are_elided() {
        let long: Vec<String> = (0..20).map(|i| format!("disk-{i}")).collect();
        let c = change(json!({
            "actions": ["update"],
            "before": {"id": "x", "output": {"memory": 2048}, "disk": long},
            "after": {"id": "x", "disk": []},
            "after_unknown": {"output": true, "disk": [false]},
            "before_sensitive": {}, "after_sensitive": {}
        }));
        assert_eq!(changed_attributes(&c), ["disk […] → []", "output {\"memory\":2048} → (known after apply)"]);
    }

    #[test]
    fn a_line_without_changes_is_just_its_prefix() {
        assert_eq!(line("create x".to_owned(), &[]), "create x");
        assert_eq!(line("update x".to_owned(), &["a 1 → 2".to_owned()]), "update x: a 1 → 2");
    }
}
