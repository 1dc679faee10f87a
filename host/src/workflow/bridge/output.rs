//! WIT value → script value ([`from_value`]): for values from a plugin, with
//! their type, it fails only on resources, futures, streams and
//! error-contexts (a [`BridgeError`] naming the path); without a type it
//! follows the value alone. Pure code over [`WitType`] and [`WitValue`] (no
//! wasmtime): the fuzz crate compiles it.

use rhai::{Array, Blob, Dynamic, INT, Map};

use super::{BridgeError, WitType, WitValue, snake, unsupported};

/// Converts a WIT value to a script value; `ty` is its type when known (a
/// value from a plugin) and `None` to follow the value alone (an empty
/// `list<u8>` then becomes an empty array rather than a blob). Errors only for
/// kinds that cannot cross the boundary, naming `path`.
pub fn from_value(val: &WitValue, ty: Option<&WitType>, path: &str) -> Result<Dynamic, BridgeError> {
    convert_out(val, ty, path)
}

fn convert_out(val: &WitValue, ty: Option<&WitType>, path: &str) -> Result<Dynamic, BridgeError> {
    // Sub-types are looked up only when a type was given; untyped conversion
    // follows the value alone.
    Ok(match val {
        WitValue::Bool(b) => Dynamic::from_bool(*b),
        WitValue::S8(n) => Dynamic::from_int(INT::from(*n)),
        WitValue::U8(n) => Dynamic::from_int(INT::from(*n)),
        WitValue::S16(n) => Dynamic::from_int(INT::from(*n)),
        WitValue::U16(n) => Dynamic::from_int(INT::from(*n)),
        WitValue::S32(n) => Dynamic::from_int(INT::from(*n)),
        WitValue::U32(n) => Dynamic::from_int(INT::from(*n)),
        WitValue::S64(n) => Dynamic::from_int(*n),
        WitValue::U64(n) => match INT::try_from(*n) {
            Ok(n) => Dynamic::from_int(n),
            // Lossless and accepted back by `to_value`; a FLOAT would round.
            Err(_) => Dynamic::from(n.to_string()),
        },
        WitValue::Float32(f) => Dynamic::from_float(f64::from(*f)),
        WitValue::Float64(f) => Dynamic::from_float(*f),
        WitValue::Char(c) => Dynamic::from_char(*c),
        WitValue::String(s) => Dynamic::from(s.clone()),
        WitValue::List(items) => {
            let elem = match ty {
                Some(WitType::List(t)) => Some(&**t),
                _ => None,
            };
            let is_bytes = match elem {
                Some(t) => *t == WitType::U8,
                None => matches!(items.first(), Some(WitValue::U8(_))),
            };
            if is_bytes {
                let blob: Blob = items.iter().map(|v| if let WitValue::U8(b) = v { *b } else { 0 }).collect();
                Dynamic::from_blob(blob)
            } else {
                list_out(items, elem, path)?
            }
        }
        WitValue::FixedLengthList(items) => {
            let elem = match ty {
                Some(WitType::FixedLengthList(t, _)) => Some(&**t),
                _ => None,
            };
            list_out(items, elem, path)?
        }
        WitValue::Tuple(items) => {
            let types: Vec<Option<&WitType>> = match ty {
                Some(WitType::Tuple(t)) => t.iter().map(Some).collect(),
                _ => vec![None; items.len()],
            };
            let mut out = Array::with_capacity(items.len());
            for (i, (item, t)) in items.iter().zip(types).enumerate() {
                out.push(convert_out(item, t, &format!("{path}[{i}]"))?);
            }
            Dynamic::from_array(out)
        }
        WitValue::Record(fields) => {
            let types: &[(String, WitType)] = match ty {
                Some(WitType::Record(r)) => r,
                _ => &[],
            };
            let mut map = Map::new();
            for (name, v) in fields {
                let t = types.iter().find(|(n, _)| n == name).map(|(_, t)| t);
                let key = snake(name);
                let field = convert_out(v, t, &format!("{path}.{key}"))?;
                map.insert(key.into(), field);
            }
            Dynamic::from_map(map)
        }
        WitValue::Variant(case, payload) => match payload {
            None => Dynamic::from(case.clone()),
            Some(payload) => {
                let t = match ty {
                    Some(WitType::Variant(cases)) => {
                        cases.iter().find(|(c, _)| c == case).and_then(|(_, t)| t.as_ref())
                    }
                    _ => None,
                };
                let mut map = Map::new();
                map.insert("kind".into(), Dynamic::from(case.clone()));
                let value = convert_out(payload, t, &format!("{path}.value"))?;
                map.insert("value".into(), value);
                Dynamic::from_map(map)
            }
        },
        WitValue::Enum(case) => Dynamic::from(case.clone()),
        WitValue::Option(None) => Dynamic::UNIT,
        WitValue::Option(Some(v)) => {
            let t = match ty {
                Some(WitType::Option(t)) => Some(&**t),
                _ => None,
            };
            convert_out(v, t, path)?
        }
        WitValue::Result(result) => {
            let (ok_ty, err_ty) = match ty {
                Some(WitType::Result { ok, err }) => (ok.as_deref(), err.as_deref()),
                _ => (None, None),
            };
            let (key, payload, t) = match result {
                Ok(p) => ("ok", p, ok_ty),
                Err(p) => ("err", p, err_ty),
            };
            let value = match payload {
                Some(p) => convert_out(p, t, &format!("{path}.{key}"))?,
                None => Dynamic::UNIT,
            };
            let mut map = Map::new();
            map.insert(key.into(), value);
            Dynamic::from_map(map)
        }
        WitValue::Flags(names) => Dynamic::from_array(names.iter().map(|n| Dynamic::from(n.clone())).collect()),
        WitValue::Map(pairs) => {
            // With its type, a map's form follows its key type (an empty
            // `map<u32, _>` is `[]`, not `#{}`); without, its keys.
            let (key_ty, val_ty) = match ty {
                Some(WitType::Map(k, v)) => (Some(&**k), Some(&**v)),
                _ => (None, None),
            };
            let string_keys = match key_ty {
                Some(k) => *k == WitType::String,
                None => pairs.iter().all(|(k, _)| matches!(k, WitValue::String(_))),
            };
            if string_keys {
                let mut map = Map::new();
                for (k, v) in pairs {
                    if let WitValue::String(k) = k {
                        map.insert(k.as_str().into(), convert_out(v, val_ty, &format!("{path}.{k}"))?);
                    }
                }
                Dynamic::from_map(map)
            } else {
                let mut out = Array::with_capacity(pairs.len());
                for (i, (k, v)) in pairs.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    out.push(Dynamic::from_array(vec![convert_out(k, key_ty, &p)?, convert_out(v, val_ty, &p)?]));
                }
                Dynamic::from_array(out)
            }
        }
        WitValue::Unsupported(kind) => return unsupported(path, kind),
    })
}

fn list_out(items: &[WitValue], elem: Option<&WitType>, path: &str) -> Result<Dynamic, BridgeError> {
    let mut out = Array::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        out.push(convert_out(item, elem, &format!("{path}[{i}]"))?);
    }
    Ok(Dynamic::from_array(out))
}
