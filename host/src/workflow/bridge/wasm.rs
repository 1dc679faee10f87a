//! The wasmtime side of the bridge: a component [`Type`] as a [`WitType`],
//! and [`Val`] ↔ [`WitValue`], one to one. The conversions themselves are in
//! `input.rs` and `output.rs`.

use rhai::Dynamic;
use wasmtime::component::{Type, Val};

use super::{BridgeError, WitType, WitValue, from_value, to_value, unsupported, wit_type_name};

/// Converts `value` to a component value of type `ty`; `path` names `value` in errors
/// (the parameter name at the top level).
pub fn to_val(value: &Dynamic, ty: &Type, path: &str) -> Result<Val, BridgeError> {
    into_val(to_value(value, &wit_type(ty), path)?, path)
}

/// Converts a component value to a script value without its type: an empty
/// `list<u8>` becomes an empty array rather than a blob, and values that cannot
/// cross (resources, futures, streams, error-contexts) become `()`. Use
/// [`from_val_typed`] for values coming back from a plugin.
pub fn from_val(val: &Val) -> Dynamic {
    from_value(&wit_value(val), None, "value").unwrap_or(Dynamic::UNIT)
}

/// Converts a component value of type `ty` to a script value; errors only for
/// kinds that cannot cross the boundary.
pub fn from_val_typed(val: &Val, ty: &Type, path: &str) -> Result<Dynamic, BridgeError> {
    from_value(&wit_value(val), Some(&wit_type(ty)), path)
}

/// A human name for a WIT type, as written in WIT (`list<string>`, `option<u16>`).
pub fn type_name(ty: &Type) -> String {
    wit_type_name(&wit_type(ty))
}

/// The bridge's picture of a component type.
pub fn wit_type(ty: &Type) -> WitType {
    let boxed = |t: Type| Box::new(wit_type(&t));
    match ty {
        Type::Bool => WitType::Bool,
        Type::S8 => WitType::S8,
        Type::U8 => WitType::U8,
        Type::S16 => WitType::S16,
        Type::U16 => WitType::U16,
        Type::S32 => WitType::S32,
        Type::U32 => WitType::U32,
        Type::S64 => WitType::S64,
        Type::U64 => WitType::U64,
        Type::Float32 => WitType::Float32,
        Type::Float64 => WitType::Float64,
        Type::Char => WitType::Char,
        Type::String => WitType::String,
        Type::List(l) => WitType::List(boxed(l.ty())),
        Type::FixedLengthList(l) => WitType::FixedLengthList(boxed(l.ty()), l.len()),
        Type::Map(m) => WitType::Map(boxed(m.key()), boxed(m.value())),
        Type::Record(r) => WitType::Record(r.fields().map(|f| (f.name.to_string(), wit_type(&f.ty))).collect()),
        Type::Tuple(t) => WitType::Tuple(t.types().map(|t| wit_type(&t)).collect()),
        Type::Variant(v) => {
            WitType::Variant(v.cases().map(|c| (c.name.to_string(), c.ty.as_ref().map(wit_type))).collect())
        }
        Type::Enum(e) => WitType::Enum(e.names().map(str::to_string).collect()),
        Type::Flags(f) => WitType::Flags(f.names().map(str::to_string).collect()),
        Type::Option(o) => WitType::Option(boxed(o.ty())),
        Type::Result(r) => WitType::Result { ok: r.ok().map(boxed), err: r.err().map(boxed) },
        Type::Own(_) | Type::Borrow(_) => WitType::Unsupported("resource"),
        Type::Future(_) => WitType::Unsupported("future"),
        Type::Stream(_) => WitType::Unsupported("stream"),
        Type::ErrorContext => WitType::Unsupported("error-context"),
    }
}

/// A component value as the bridge's value; handles become
/// [`WitValue::Unsupported`], refused when converted to a script value.
fn wit_value(val: &Val) -> WitValue {
    let boxed = |v: &Option<Box<Val>>| v.as_deref().map(|v| Box::new(wit_value(v)));
    let all = |items: &[Val]| items.iter().map(wit_value).collect();
    match val {
        Val::Bool(b) => WitValue::Bool(*b),
        Val::S8(n) => WitValue::S8(*n),
        Val::U8(n) => WitValue::U8(*n),
        Val::S16(n) => WitValue::S16(*n),
        Val::U16(n) => WitValue::U16(*n),
        Val::S32(n) => WitValue::S32(*n),
        Val::U32(n) => WitValue::U32(*n),
        Val::S64(n) => WitValue::S64(*n),
        Val::U64(n) => WitValue::U64(*n),
        Val::Float32(f) => WitValue::Float32(*f),
        Val::Float64(f) => WitValue::Float64(*f),
        Val::Char(c) => WitValue::Char(*c),
        Val::String(s) => WitValue::String(s.clone()),
        Val::List(items) => WitValue::List(all(items)),
        Val::FixedLengthList(items) => WitValue::FixedLengthList(all(items)),
        Val::Record(fields) => WitValue::Record(fields.iter().map(|(n, v)| (n.clone(), wit_value(v))).collect()),
        Val::Tuple(items) => WitValue::Tuple(all(items)),
        Val::Variant(case, payload) => WitValue::Variant(case.clone(), boxed(payload)),
        Val::Enum(case) => WitValue::Enum(case.clone()),
        Val::Option(v) => WitValue::Option(boxed(v)),
        Val::Result(Ok(v)) => WitValue::Result(Ok(boxed(v))),
        Val::Result(Err(v)) => WitValue::Result(Err(boxed(v))),
        Val::Flags(names) => WitValue::Flags(names.clone()),
        Val::Map(pairs) => WitValue::Map(pairs.iter().map(|(k, v)| (wit_value(k), wit_value(v))).collect()),
        Val::Resource(_) => WitValue::Unsupported("resource"),
        Val::Future(_) => WitValue::Unsupported("future"),
        Val::Stream(_) => WitValue::Unsupported("stream"),
        Val::ErrorContext(_) => WitValue::Unsupported("error-context"),
    }
}

/// The component value of a bridge value. [`to_value`] never makes a
/// [`WitValue::Unsupported`]; one is refused all the same, at `path`.
fn into_val(value: WitValue, path: &str) -> Result<Val, BridgeError> {
    let boxed = |v: Option<Box<WitValue>>| -> Result<Option<Box<Val>>, BridgeError> {
        v.map(|v| into_val(*v, path).map(Box::new)).transpose()
    };
    let all = |items: Vec<WitValue>| items.into_iter().map(|v| into_val(v, path)).collect::<Result<Vec<_>, _>>();
    Ok(match value {
        WitValue::Bool(b) => Val::Bool(b),
        WitValue::S8(n) => Val::S8(n),
        WitValue::U8(n) => Val::U8(n),
        WitValue::S16(n) => Val::S16(n),
        WitValue::U16(n) => Val::U16(n),
        WitValue::S32(n) => Val::S32(n),
        WitValue::U32(n) => Val::U32(n),
        WitValue::S64(n) => Val::S64(n),
        WitValue::U64(n) => Val::U64(n),
        WitValue::Float32(f) => Val::Float32(f),
        WitValue::Float64(f) => Val::Float64(f),
        WitValue::Char(c) => Val::Char(c),
        WitValue::String(s) => Val::String(s),
        WitValue::List(items) => Val::List(all(items)?),
        WitValue::FixedLengthList(items) => Val::FixedLengthList(all(items)?),
        WitValue::Record(fields) => {
            Val::Record(fields.into_iter().map(|(n, v)| Ok((n, into_val(v, path)?))).collect::<Result<_, _>>()?)
        }
        WitValue::Tuple(items) => Val::Tuple(all(items)?),
        WitValue::Variant(case, payload) => Val::Variant(case, boxed(payload)?),
        WitValue::Enum(case) => Val::Enum(case),
        WitValue::Option(v) => Val::Option(boxed(v)?),
        WitValue::Result(Ok(v)) => Val::Result(Ok(boxed(v)?)),
        WitValue::Result(Err(v)) => Val::Result(Err(boxed(v)?)),
        WitValue::Flags(names) => Val::Flags(names),
        WitValue::Map(pairs) => Val::Map(
            pairs.into_iter().map(|(k, v)| Ok((into_val(k, path)?, into_val(v, path)?))).collect::<Result<_, _>>()?,
        ),
        WitValue::Unsupported(kind) => return unsupported(path, kind),
    })
}
