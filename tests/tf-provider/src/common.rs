//! Helpers both resources share: value aliases, schema builders, the refresh rule,
//! and turning failures into diagnostics.
//!
//! Contract (the refresh rule): an optional attribute that is null in the prior state
//! stays null on refresh — it is not managed, so reading it back must not invent a
//! value (no defaults are stored); a non-null one takes the value the VM has now, or
//! null when the VM no longer has it. Computed attributes are always refreshed.

use serde::{Deserialize, Deserializer};
use tf_provider::schema::{Attribute, AttributeConstraint, AttributeType, Block, Description, NestedBlock};
use tf_provider::value::Value;
use tf_provider::{AttributePath, Diagnostic, Diagnostics};

use crate::api::Pve;
use crate::creds::{Endpoint, Flavour};

/// A string attribute.
pub type Str = Value<String>;
/// A number attribute (whole numbers only here).
pub type Num = Value<i64>;
/// A bool attribute.
pub type Flag = Value<bool>;

/// Attribute constraints, short.
pub use AttributeConstraint::{Computed as C, Optional as O, OptionalComputed as OC, Required as R};

/// An attribute of type `ty`.
pub fn attr(ty: AttributeType, constraint: AttributeConstraint, doc: &str) -> Attribute {
    Attribute { attr_type: ty, description: Description::plain(doc), constraint, ..Default::default() }
}

/// A block with attributes and nested blocks.
pub fn block(doc: &str, attrs: Vec<(&str, Attribute)>, blocks: Vec<(&str, NestedBlock)>) -> Block {
    Block {
        version: 0,
        description: Description::plain(doc),
        attributes: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        blocks: blocks.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        deprecated: false,
    }
}

/// A list of blocks as SDKv2 `TypeList` + `Elem: &schema.Resource` (at most one).
pub fn list_max1(b: Block) -> NestedBlock {
    NestedBlock::Optional(b)
}

/// A list of blocks as SDKv2 `TypeList` + `Elem: &schema.Resource`.
pub fn list(b: Block) -> NestedBlock {
    NestedBlock::List(b)
}

/// Deserialize a block list, reading null as no blocks.
pub fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// The refresh rule for one optional attribute.
pub fn refresh<T>(prior: &Value<T>, now: Option<T>) -> Value<T> {
    if prior.is_null() {
        return Value::Null;
    }
    now.map_or(Value::Null, Value::Value)
}

/// The refresh rule, keeping the prior spelling when `same` says it is equivalent.
pub fn refresh_same<T: Clone>(prior: &Value<T>, now: Option<T>, same: impl Fn(&T, &T) -> bool) -> Value<T> {
    match (prior, now) {
        (Value::Null, _) => Value::Null,
        (Value::Value(p), Some(n)) if same(p, &n) => Value::Value(p.clone()),
        (_, now) => now.map_or(Value::Null, Value::Value),
    }
}

/// A known value.
pub fn known<T>(v: &Value<T>) -> Option<&T> {
    v.as_ref_option()
}

/// A known string.
pub fn known_str(v: &Str) -> Option<&str> {
    v.as_ref_option().map(String::as_str)
}

/// A connected client for `flavour`, or why not (missing variable, TLS trust).
pub fn connect(flavour: Flavour) -> Result<Pve, String> {
    Pve::new(Endpoint::from_env(flavour)?)
}

/// A diagnostic built directly: tf-provider's constructors append a backtrace to the
/// detail whenever `RUST_BACKTRACE` is set, which is noise in Terraform's output.
fn diagnostic(summary: String, detail: String, attribute: AttributePath) -> Diagnostic {
    Diagnostic { summary: summary.into(), detail: detail.into(), attribute }
}

/// Record an error (`attribute`: the config attribute it is about, if any).
pub fn error(diags: &mut Diagnostics, summary: impl Into<String>, detail: impl Into<String>, attribute: Option<&str>) {
    let path = attribute.map(|a| AttributePath::new(a.to_string())).unwrap_or_default();
    diags.add_error(diagnostic(summary.into(), detail.into(), path));
}

/// Record `warnings` as warning diagnostics.
pub fn warn_all(diags: &mut Diagnostics, what: &str, warnings: Vec<String>) {
    for w in warnings {
        diags.add_warning(diagnostic(what.to_string(), w, AttributePath::default()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmanaged_attributes_stay_null_and_managed_ones_follow_the_vm() {
        assert_eq!(refresh(&Num::Null, Some(4)), Num::Null);
        assert_eq!(refresh(&Num::Value(2), Some(4)), Num::Value(4));
        assert_eq!(refresh(&Num::Value(2), None), Num::Null);
        let same = |a: &String, b: &String| a.eq_ignore_ascii_case(b);
        assert_eq!(refresh_same(&Str::Value("A".into()), Some("a".into()), same), Str::Value("A".into()));
    }
}
