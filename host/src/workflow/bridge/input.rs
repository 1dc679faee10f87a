//! Script value → WIT value ([`to_value`]), as strict as the table in the
//! parent module says: a wrong kind, an unknown or missing field, an
//! out-of-range integer, an unknown case name, a wrong tuple length or a type
//! that cannot cross is a [`BridgeError`] naming the value's path. Pure code
//! over [`WitType`] and [`WitValue`] (no wasmtime): the fuzz crate compiles it.

use rhai::{Dynamic, INT};

use super::{BridgeError, WitType, WitValue, describe, did_you_mean, snake, unsupported, wit_type_name};

/// Converts `value` to a WIT value of type `ty`; `path` names `value` in errors
/// (the parameter name at the top level).
pub fn to_value(value: &Dynamic, ty: &WitType, path: &str) -> Result<WitValue, BridgeError> {
    let value = value.flatten_clone();
    let mismatch =
        || BridgeError::Mismatch { path: path.to_string(), expected: wit_type_name(ty), got: describe(&value) };
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
            <$rust>::try_from(n).map(WitValue::$variant).map_err(|_| BridgeError::OutOfRange {
                path: path.to_string(),
                value: n.to_string(),
                ty: $name,
            })
        }};
    }
    match ty {
        WitType::Bool => value.as_bool().map(WitValue::Bool).map_err(|_| mismatch()),
        WitType::S8 => ranged!(S8, i8, "s8"),
        WitType::U8 => ranged!(U8, u8, "u8"),
        WitType::S16 => ranged!(S16, i16, "s16"),
        WitType::U16 => ranged!(U16, u16, "u16"),
        WitType::S32 => ranged!(S32, i32, "s32"),
        WitType::U32 => ranged!(U32, u32, "u32"),
        WitType::S64 => int("s64").map(WitValue::S64),
        WitType::U64 => to_u64(&value, path),
        WitType::Float32 => float(&value).map(|f| WitValue::Float32(f as f32)).ok_or_else(mismatch),
        WitType::Float64 => float(&value).map(WitValue::Float64).ok_or_else(mismatch),
        WitType::Char => to_char(&value).map(WitValue::Char).ok_or_else(mismatch),
        WitType::String => string_of(&value).map(WitValue::String).ok_or_else(mismatch),
        WitType::List(elem) if **elem == WitType::U8 && !value.is_array() => {
            if let Ok(blob) = value.as_blob_ref() {
                return Ok(WitValue::List(blob.iter().map(|b| WitValue::U8(*b)).collect()));
            }
            let text = string_of(&value).ok_or_else(mismatch)?;
            Ok(WitValue::List(text.bytes().map(WitValue::U8).collect()))
        }
        WitType::List(elem) => {
            let items = value.as_array_ref().map_err(|_| mismatch())?;
            elements(&items, elem, path).map(WitValue::List)
        }
        WitType::FixedLengthList(elem, len) => {
            let items = value.as_array_ref().map_err(|_| mismatch())?;
            check_len(path, *len as usize, items.len())?;
            elements(&items, elem, path).map(WitValue::FixedLengthList)
        }
        WitType::Tuple(types) => {
            let items = value.as_array_ref().map_err(|_| mismatch())?;
            check_len(path, types.len(), items.len())?;
            let mut out = Vec::with_capacity(items.len());
            for (i, (item, ty)) in items.iter().zip(types).enumerate() {
                out.push(to_value(item, ty, &format!("{path}[{i}]"))?);
            }
            Ok(WitValue::Tuple(out))
        }
        WitType::Record(fields) => to_record(&value, ty, fields, path),
        WitType::Enum(names) => {
            let got = string_of(&value).ok_or_else(mismatch)?;
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            find_case(path, "case", &got, &names).map(WitValue::Enum)
        }
        WitType::Flags(names) => {
            let items = value.as_array_ref().map_err(|_| mismatch())?;
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
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
            Ok(WitValue::Flags(out))
        }
        WitType::Variant(cases) => to_variant(&value, ty, cases, path),
        WitType::Option(_) if value.is_unit() => Ok(WitValue::Option(None)),
        WitType::Option(inner) => Ok(WitValue::Option(Some(Box::new(to_value(&value, inner, path)?)))),
        WitType::Result { ok: ok_ty, err: err_ty } => {
            let map = value.as_map_ref().map_err(|_| mismatch())?;
            let (key, ty, ok) = match (map.get("ok"), map.get("err"), map.len()) {
                (Some(_), None, 1) => ("ok", ok_ty, true),
                (None, Some(_), 1) => ("err", err_ty, false),
                _ => return Err(mismatch()),
            };
            let inner = &map[key];
            let payload = match ty {
                None if inner.is_unit() => None,
                None => return Err(mismatch()),
                Some(ty) => Some(Box::new(to_value(inner, ty, &format!("{path}.{key}"))?)),
            };
            Ok(WitValue::Result(if ok { Ok(payload) } else { Err(payload) }))
        }
        WitType::Map(key, val_ty) => to_map(&value, key, val_ty, path).ok_or_else(mismatch)?,
        WitType::Unsupported(kind) => unsupported(path, kind),
    }
}

/// A map as a record: strict about unknown keys, lenient about absent options.
fn to_record(value: &Dynamic, ty: &WitType, fields: &[(String, WitType)], path: &str) -> Result<WitValue, BridgeError> {
    let mismatch =
        || BridgeError::Mismatch { path: path.to_string(), expected: wit_type_name(ty), got: describe(value) };
    let map = value.as_map_ref().map_err(|_| mismatch())?;
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
            (Some(v), _) => to_value(v, ty, &field_path)?,
            (None, WitType::Option(_)) => WitValue::Option(None),
            (None, _) => {
                return Err(BridgeError::MissingField { path: field_path, expected: wit_type_name(ty) });
            }
        };
        out.push((name.clone(), val));
    }
    Ok(WitValue::Record(out))
}

/// A case name (payload-less) or `#{kind, value}` as a variant.
fn to_variant(
    value: &Dynamic,
    ty: &WitType,
    cases: &[(String, Option<WitType>)],
    path: &str,
) -> Result<WitValue, BridgeError> {
    let mismatch =
        || BridgeError::Mismatch { path: path.to_string(), expected: wit_type_name(ty), got: describe(value) };
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
        (Some(ty), Some(v)) => Some(Box::new(to_value(&v, &ty, &format!("{path}.value"))?)),
        (Some(ty), None) => {
            return Err(BridgeError::MissingField { path: format!("{path}.value"), expected: wit_type_name(&ty) });
        }
        (None, Some(v)) => {
            return Err(BridgeError::Mismatch {
                path: format!("{path}.value"),
                expected: format!("no payload for case '{name}'"),
                got: describe(&v),
            });
        }
    };
    Ok(WitValue::Variant(name, payload))
}

fn elements(items: &[Dynamic], ty: &WitType, path: &str) -> Result<Vec<WitValue>, BridgeError> {
    items.iter().enumerate().map(|(i, item)| to_value(item, ty, &format!("{path}[{i}]"))).collect()
}

fn to_map(value: &Dynamic, key: &WitType, val_ty: &WitType, path: &str) -> Option<Result<WitValue, BridgeError>> {
    if let Ok(map) = value.as_map_ref() {
        // `#{}` is the empty map of any key type: what an empty map with
        // other keys would look like untyped.
        if *key != WitType::String {
            return map.is_empty().then(|| Ok(WitValue::Map(Vec::new())));
        }
        let pairs = map
            .iter()
            .map(|(k, v)| Ok((WitValue::String(k.to_string()), to_value(v, val_ty, &format!("{path}.{k}"))?)))
            .collect::<Result<Vec<_>, BridgeError>>();
        return Some(pairs.map(WitValue::Map));
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
        let k = match to_value(&pair[0], key, &format!("{p}[0]")) {
            Ok(k) => k,
            Err(e) => return Some(Err(e)),
        };
        // A key given twice would reach the plugin twice (and a string-keyed
        // map would come back with one of them): refused.
        if out.iter().any(|(seen, _)| *seen == k) {
            return Some(Err(BridgeError::DuplicateKey { path: format!("{p}[0]"), key: describe(&pair[0]) }));
        }
        match to_value(&pair[1], val_ty, &format!("{p}[1]")) {
            Ok(v) => out.push((k, v)),
            Err(e) => return Some(Err(e)),
        }
    }
    // String keys in key order, as from an object map (a Rhai map is sorted):
    // the same map either way, and the same map after a round trip.
    if *key == WitType::String {
        out.sort_by(|(a, _), (b, _)| match (a, b) {
            (WitValue::String(a), WitValue::String(b)) => a.cmp(b),
            _ => std::cmp::Ordering::Equal,
        });
    }
    Some(Ok(WitValue::Map(out)))
}

fn to_u64(value: &Dynamic, path: &str) -> Result<WitValue, BridgeError> {
    if let Ok(n) = value.as_int() {
        return u64::try_from(n).map(WitValue::U64).map_err(|_| BridgeError::OutOfRange {
            path: path.to_string(),
            value: n.to_string(),
            ty: "u64",
        });
    }
    let parsed = value.as_immutable_string_ref().ok().and_then(|s| s.parse::<u64>().ok());
    parsed.map(WitValue::U64).ok_or_else(|| BridgeError::Mismatch {
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
