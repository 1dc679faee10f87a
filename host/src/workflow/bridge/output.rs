//! Component value → script value: [`from_val_typed`] for values from a plugin,
//! which fails only on resources, futures, streams and error-contexts (a
//! [`BridgeError`] naming the path); [`from_val`] without a type, which turns a
//! value holding one of those into `()` as a whole.

use rhai::{Array, Blob, Dynamic, INT, Map};
use wasmtime::component::{Type, Val};

use super::{BridgeError, snake, unsupported};

/// Converts a component value to a script value without its type: an empty
/// `list<u8>` becomes an empty array rather than a blob, and values that cannot
/// cross (resources, futures, streams, error-contexts) become `()`. Use
/// [`from_val_typed`] for values coming back from a plugin.
pub fn from_val(val: &Val) -> Dynamic {
    convert_out(val, None, "value").unwrap_or(Dynamic::UNIT)
}

/// Converts a component value of type `ty` to a script value; errors only for
/// kinds that cannot cross the boundary.
pub fn from_val_typed(val: &Val, ty: &Type, path: &str) -> Result<Dynamic, BridgeError> {
    convert_out(val, Some(ty), path)
}

fn convert_out(val: &Val, ty: Option<&Type>, path: &str) -> Result<Dynamic, BridgeError> {
    // Sub-types are looked up only when a type was given; untyped conversion
    // follows the value alone.
    let sub = |f: &dyn Fn(&Type) -> Option<Type>| ty.and_then(f);
    Ok(match val {
        Val::Bool(b) => Dynamic::from_bool(*b),
        Val::S8(n) => Dynamic::from_int(INT::from(*n)),
        Val::U8(n) => Dynamic::from_int(INT::from(*n)),
        Val::S16(n) => Dynamic::from_int(INT::from(*n)),
        Val::U16(n) => Dynamic::from_int(INT::from(*n)),
        Val::S32(n) => Dynamic::from_int(INT::from(*n)),
        Val::U32(n) => Dynamic::from_int(INT::from(*n)),
        Val::S64(n) => Dynamic::from_int(*n),
        Val::U64(n) => match INT::try_from(*n) {
            Ok(n) => Dynamic::from_int(n),
            // Lossless and accepted back by `to_val`; a FLOAT would round.
            Err(_) => Dynamic::from(n.to_string()),
        },
        Val::Float32(f) => Dynamic::from_float(f64::from(*f)),
        Val::Float64(f) => Dynamic::from_float(*f),
        Val::Char(c) => Dynamic::from_char(*c),
        Val::String(s) => Dynamic::from(s.clone()),
        Val::List(items) => {
            let elem = sub(&|t| match t {
                Type::List(l) => Some(l.ty()),
                _ => None,
            });
            let is_bytes = match &elem {
                Some(t) => *t == Type::U8,
                None => matches!(items.first(), Some(Val::U8(_))),
            };
            if is_bytes {
                let blob: Blob = items.iter().map(|v| if let Val::U8(b) = v { *b } else { 0 }).collect();
                Dynamic::from_blob(blob)
            } else {
                list_out(items, elem.as_ref(), path)?
            }
        }
        Val::FixedLengthList(items) => {
            let elem = sub(&|t| match t {
                Type::FixedLengthList(l) => Some(l.ty()),
                _ => None,
            });
            list_out(items, elem.as_ref(), path)?
        }
        Val::Tuple(items) => {
            let types: Vec<Option<Type>> = match ty {
                Some(Type::Tuple(t)) => t.types().map(Some).collect(),
                _ => vec![None; items.len()],
            };
            let mut out = Array::with_capacity(items.len());
            for (i, (item, t)) in items.iter().zip(types).enumerate() {
                out.push(convert_out(item, t.as_ref(), &format!("{path}[{i}]"))?);
            }
            Dynamic::from_array(out)
        }
        Val::Record(fields) => {
            let types: Vec<(String, Type)> = match ty {
                Some(Type::Record(r)) => r.fields().map(|f| (f.name.to_string(), f.ty)).collect(),
                _ => Vec::new(),
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
        Val::Variant(case, payload) => match payload {
            None => Dynamic::from(case.clone()),
            Some(payload) => {
                let t = match ty {
                    Some(Type::Variant(v)) => v.cases().find(|c| c.name == case).and_then(|c| c.ty),
                    _ => None,
                };
                let mut map = Map::new();
                map.insert("kind".into(), Dynamic::from(case.clone()));
                let value = convert_out(payload, t.as_ref(), &format!("{path}.value"))?;
                map.insert("value".into(), value);
                Dynamic::from_map(map)
            }
        },
        Val::Enum(case) => Dynamic::from(case.clone()),
        Val::Option(None) => Dynamic::UNIT,
        Val::Option(Some(v)) => {
            let t = sub(&|t| match t {
                Type::Option(o) => Some(o.ty()),
                _ => None,
            });
            convert_out(v, t.as_ref(), path)?
        }
        Val::Result(result) => {
            let (key, payload, t) = match result {
                Ok(p) => (
                    "ok",
                    p,
                    sub(&|t| {
                        if let Type::Result(r) = t { r.ok() } else { None }
                    }),
                ),
                Err(p) => (
                    "err",
                    p,
                    sub(&|t| {
                        if let Type::Result(r) = t { r.err() } else { None }
                    }),
                ),
            };
            let value = match payload {
                Some(p) => convert_out(p, t.as_ref(), &format!("{path}.{key}"))?,
                None => Dynamic::UNIT,
            };
            let mut map = Map::new();
            map.insert(key.into(), value);
            Dynamic::from_map(map)
        }
        Val::Flags(names) => Dynamic::from_array(names.iter().map(|n| Dynamic::from(n.clone())).collect()),
        Val::Map(pairs) => {
            if pairs.iter().all(|(k, _)| matches!(k, Val::String(_))) {
                let mut map = Map::new();
                for (k, v) in pairs {
                    if let Val::String(k) = k {
                        map.insert(k.as_str().into(), convert_out(v, None, &format!("{path}.{k}"))?);
                    }
                }
                Dynamic::from_map(map)
            } else {
                let mut out = Array::with_capacity(pairs.len());
                for (i, (k, v)) in pairs.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    out.push(Dynamic::from_array(vec![convert_out(k, None, &p)?, convert_out(v, None, &p)?]));
                }
                Dynamic::from_array(out)
            }
        }
        Val::Resource(_) => return unsupported(path, "resource"),
        Val::Future(_) => return unsupported(path, "future"),
        Val::Stream(_) => return unsupported(path, "stream"),
        Val::ErrorContext(_) => return unsupported(path, "error-context"),
    })
}

fn list_out(items: &[Val], elem: Option<&Type>, path: &str) -> Result<Dynamic, BridgeError> {
    let mut out = Array::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        out.push(convert_out(item, elem, &format!("{path}[{i}]"))?);
    }
    Ok(Dynamic::from_array(out))
}
