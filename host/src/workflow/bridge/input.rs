//! Script value → component value ([`to_val`]), as strict as the table in the
//! parent module says: a wrong kind, an unknown or missing field, an
//! out-of-range integer, an unknown case name, a wrong tuple length or a type
//! that cannot cross is a [`BridgeError`] naming the value's path.

use rhai::{Dynamic, INT};
use wasmtime::component::types::{Record, Variant};
use wasmtime::component::{Type, Val};

use super::{BridgeError, describe, did_you_mean, snake, type_name, unsupported};

/// Converts `value` to a component value of type `ty`; `path` names `value` in errors
/// (the parameter name at the top level).
pub fn to_val(value: &Dynamic, ty: &Type, path: &str) -> Result<Val, BridgeError> {
    let value = value.flatten_clone();
    let mismatch = || BridgeError::Mismatch { path: path.to_string(), expected: type_name(ty), got: describe(&value) };
    let int = |ty_name: &'static str| -> Result<INT, BridgeError> {
        value.as_int().map_err(|_| BridgeError::Mismatch {
            path: path.to_string(),
            expected: ty_name.to_string(),
            got: describe(&value),
        })
    };
    macro_rules! ranged {
        ($variant:ident, $rust:ty, $name:literal) => {{
            let n = int($name)?;
            <$rust>::try_from(n).map(Val::$variant).map_err(|_| BridgeError::OutOfRange {
                path: path.to_string(),
                value: n.to_string(),
                ty: $name,
            })
        }};
    }
    match ty {
        Type::Bool => value.as_bool().map(Val::Bool).map_err(|_| mismatch()),
        Type::S8 => ranged!(S8, i8, "s8"),
        Type::U8 => ranged!(U8, u8, "u8"),
        Type::S16 => ranged!(S16, i16, "s16"),
        Type::U16 => ranged!(U16, u16, "u16"),
        Type::S32 => ranged!(S32, i32, "s32"),
        Type::U32 => ranged!(U32, u32, "u32"),
        Type::S64 => int("s64").map(Val::S64),
        Type::U64 => to_u64(&value, path),
        Type::Float32 => float(&value).map(|f| Val::Float32(f as f32)).ok_or_else(mismatch),
        Type::Float64 => float(&value).map(Val::Float64).ok_or_else(mismatch),
        Type::Char => to_char(&value).map(Val::Char).ok_or_else(mismatch),
        Type::String => string_of(&value).map(Val::String).ok_or_else(mismatch),
        Type::List(list) if list.ty() == Type::U8 && !value.is_array() => {
            if let Ok(blob) = value.as_blob_ref() {
                return Ok(Val::List(blob.iter().map(|b| Val::U8(*b)).collect()));
            }
            let text = string_of(&value).ok_or_else(mismatch)?;
            Ok(Val::List(text.bytes().map(Val::U8).collect()))
        }
        Type::List(list) => {
            let items = value.as_array_ref().map_err(|_| mismatch())?;
            elements(&items, &list.ty(), path).map(Val::List)
        }
        Type::FixedLengthList(list) => {
            let items = value.as_array_ref().map_err(|_| mismatch())?;
            check_len(path, list.len() as usize, items.len())?;
            elements(&items, &list.ty(), path).map(Val::FixedLengthList)
        }
        Type::Tuple(tuple) => {
            let items = value.as_array_ref().map_err(|_| mismatch())?;
            check_len(path, tuple.types().len(), items.len())?;
            let mut out = Vec::with_capacity(items.len());
            for (i, (item, ty)) in items.iter().zip(tuple.types()).enumerate() {
                out.push(to_val(item, &ty, &format!("{path}[{i}]"))?);
            }
            Ok(Val::Tuple(out))
        }
        Type::Record(record) => to_record(&value, record, path),
        Type::Enum(en) => {
            let got = string_of(&value).ok_or_else(mismatch)?;
            let names: Vec<&str> = en.names().collect();
            find_case(path, "case", &got, &names).map(Val::Enum)
        }
        Type::Flags(flags) => {
            let items = value.as_array_ref().map_err(|_| mismatch())?;
            let names: Vec<&str> = flags.names().collect();
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let item_path = format!("{path}[{i}]");
                let got = item.clone().into_string().map_err(|_| BridgeError::Mismatch {
                    path: item_path.clone(),
                    expected: "a flag name (string)".to_string(),
                    got: describe(item),
                })?;
                out.push(find_case(&item_path, "flag", &got, &names)?);
            }
            Ok(Val::Flags(out))
        }
        Type::Variant(variant) => to_variant(&value, variant, path),
        Type::Option(_) if value.is_unit() => Ok(Val::Option(None)),
        Type::Option(opt) => Ok(Val::Option(Some(Box::new(to_val(&value, &opt.ty(), path)?)))),
        Type::Result(result) => {
            let map = value.as_map_ref().map_err(|_| mismatch())?;
            let (key, ty, ok) = match (map.get("ok"), map.get("err"), map.len()) {
                (Some(_), None, 1) => ("ok", result.ok(), true),
                (None, Some(_), 1) => ("err", result.err(), false),
                _ => return Err(mismatch()),
            };
            let inner = &map[key];
            let payload = match ty {
                None if inner.is_unit() => None,
                None => return Err(mismatch()),
                Some(ty) => Some(Box::new(to_val(inner, &ty, &format!("{path}.{key}"))?)),
            };
            Ok(Val::Result(if ok { Ok(payload) } else { Err(payload) }))
        }
        Type::Map(m) => to_map(&value, &m.key(), &m.value(), path).ok_or_else(mismatch)?,
        Type::Own(_) | Type::Borrow(_) => unsupported(path, "resource"),
        Type::Future(_) => unsupported(path, "future"),
        Type::Stream(_) => unsupported(path, "stream"),
        Type::ErrorContext => unsupported(path, "error-context"),
    }
}

/// A map as a record: strict about unknown keys, lenient about absent options.
fn to_record(value: &Dynamic, record: &Record, path: &str) -> Result<Val, BridgeError> {
    let mismatch = || BridgeError::Mismatch {
        path: path.to_string(),
        expected: type_name(&Type::Record(record.clone())),
        got: describe(value),
    };
    let map = value.as_map_ref().map_err(|_| mismatch())?;
    let fields: Vec<_> = record.fields().map(|f| (f.name.to_string(), f.ty)).collect();
    let known: Vec<String> = fields.iter().map(|(n, _)| snake(n)).collect();
    if let Some(key) = map.keys().find(|k| !known.contains(&snake(k))) {
        return Err(BridgeError::UnknownField {
            path: path.to_string(),
            key: key.to_string(),
            hint: did_you_mean(&snake(key), known.iter().map(String::as_str)),
            fields: known.join(", "),
        });
    }
    let mut out = Vec::with_capacity(fields.len());
    for ((name, ty), snake_name) in fields.iter().zip(&known) {
        let field_path = format!("{path}.{snake_name}");
        let found = map.get(snake_name.as_str()).or_else(|| map.get(name.as_str()));
        let val = match (found, ty) {
            (Some(v), _) => to_val(v, ty, &field_path)?,
            (None, Type::Option(_)) => Val::Option(None),
            (None, _) => {
                return Err(BridgeError::MissingField { path: field_path, expected: type_name(ty) });
            }
        };
        out.push((name.clone(), val));
    }
    Ok(Val::Record(out))
}

/// A case name (payload-less) or `#{kind, value}` as a variant.
fn to_variant(value: &Dynamic, variant: &Variant, path: &str) -> Result<Val, BridgeError> {
    let mismatch = || BridgeError::Mismatch {
        path: path.to_string(),
        expected: type_name(&Type::Variant(variant.clone())),
        got: describe(value),
    };
    let cases: Vec<(String, Option<Type>)> = variant.cases().map(|c| (c.name.to_string(), c.ty)).collect();
    let names: Vec<&str> = cases.iter().map(|(n, _)| n.as_str()).collect();
    let (got, payload) = if value.is_string() {
        (string_of(value).ok_or_else(mismatch)?, None)
    } else {
        let map = value.as_map_ref().map_err(|_| mismatch())?;
        if let Some(key) = map.keys().find(|k| !matches!(k.as_str(), "kind" | "value")) {
            return Err(BridgeError::UnknownField {
                path: path.to_string(),
                key: key.to_string(),
                hint: String::new(),
                fields: "kind, value".to_string(),
            });
        }
        let case = map.get("kind").ok_or_else(mismatch)?;
        let case = case.clone().into_string().map_err(|_| BridgeError::Mismatch {
            path: format!("{path}.kind"),
            expected: "a case name (string)".to_string(),
            got: describe(case),
        })?;
        (case, map.get("value").cloned())
    };
    let name = find_case(path, "case", &got, &names)?;
    let case_ty = cases.iter().find(|(n, _)| *n == name).and_then(|(_, t)| t.clone());
    let payload = match (case_ty, payload) {
        (None, None) => None,
        (None, Some(v)) if v.is_unit() => None,
        (Some(ty), Some(v)) => Some(Box::new(to_val(&v, &ty, &format!("{path}.value"))?)),
        (Some(ty), None) => {
            return Err(BridgeError::MissingField { path: format!("{path}.value"), expected: type_name(&ty) });
        }
        (None, Some(v)) => {
            return Err(BridgeError::Mismatch {
                path: format!("{path}.value"),
                expected: format!("no payload for case '{name}'"),
                got: describe(&v),
            });
        }
    };
    Ok(Val::Variant(name, payload))
}

fn elements(items: &[Dynamic], ty: &Type, path: &str) -> Result<Vec<Val>, BridgeError> {
    items.iter().enumerate().map(|(i, item)| to_val(item, ty, &format!("{path}[{i}]"))).collect()
}

fn to_map(value: &Dynamic, key: &Type, val_ty: &Type, path: &str) -> Option<Result<Val, BridgeError>> {
    if let Ok(map) = value.as_map_ref() {
        if *key != Type::String {
            return None;
        }
        let pairs = map
            .iter()
            .map(|(k, v)| Ok((Val::String(k.to_string()), to_val(v, val_ty, &format!("{path}.{k}"))?)))
            .collect::<Result<Vec<_>, BridgeError>>();
        return Some(pairs.map(Val::Map));
    }
    let items = value.as_array_ref().ok()?;
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let pair = item.as_array_ref().ok().filter(|a| a.len() == 2);
        let Some(pair) = pair else {
            return Some(Err(BridgeError::Mismatch {
                path: p,
                expected: "a [key, value] pair".to_string(),
                got: describe(item),
            }));
        };
        let k = match to_val(&pair[0], key, &format!("{p}[0]")) {
            Ok(k) => k,
            Err(e) => return Some(Err(e)),
        };
        match to_val(&pair[1], val_ty, &format!("{p}[1]")) {
            Ok(v) => out.push((k, v)),
            Err(e) => return Some(Err(e)),
        }
    }
    Some(Ok(Val::Map(out)))
}

fn to_u64(value: &Dynamic, path: &str) -> Result<Val, BridgeError> {
    if let Ok(n) = value.as_int() {
        return u64::try_from(n).map(Val::U64).map_err(|_| BridgeError::OutOfRange {
            path: path.to_string(),
            value: n.to_string(),
            ty: "u64",
        });
    }
    let parsed = value.as_immutable_string_ref().ok().and_then(|s| s.parse::<u64>().ok());
    parsed.map(Val::U64).ok_or_else(|| BridgeError::Mismatch {
        path: path.to_string(),
        expected: "u64 (an integer, or a decimal string above i64::MAX)".to_string(),
        got: describe(value),
    })
}

fn string_of(value: &Dynamic) -> Option<String> {
    value.as_immutable_string_ref().ok().map(|s| s.to_string())
}

fn float(value: &Dynamic) -> Option<f64> {
    value.as_float().ok().or_else(|| value.as_int().ok().map(|n| n as f64))
}

fn to_char(value: &Dynamic) -> Option<char> {
    if let Ok(c) = value.as_char() {
        return Some(c);
    }
    let s = value.as_immutable_string_ref().ok()?;
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => Some(c),
        _ => None,
    }
}

fn check_len(path: &str, expected: usize, got: usize) -> Result<(), BridgeError> {
    if expected == got { Ok(()) } else { Err(BridgeError::WrongLength { path: path.to_string(), expected, got }) }
}

/// Matches `got` (kebab or snake) against the declared `names`; returns the WIT name.
fn find_case(path: &str, what: &'static str, got: &str, names: &[&str]) -> Result<String, BridgeError> {
    let wanted = snake(got);
    match names.iter().find(|n| snake(n) == wanted) {
        Some(name) => Ok((*name).to_string()),
        None => Err(BridgeError::UnknownCase {
            path: path.to_string(),
            what,
            got: got.to_string(),
            hint: did_you_mean(&wanted, names.iter().copied()),
            valid: names.join(", "),
        }),
    }
}
