//! Parameter values as `PVE::JSONSchema` checks them (pve-common f665029
//! `src/PVE/JSONSchema.pm`: `check_object` 1296, `check_prop` 1507, `check_type` 1176,
//! `check_format` 975, `parse_property_string` 1080; `split_list` in `ParseUtils.pm` 49).
//!
//! Contract: every function returns `(location, problem)` pairs, empty when the value
//! conforms; problems use PVE's texts (`property is missing and it is not optional`,
//! `type check ('integer') failed - got 'x'`, ...).

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::{Map, Value};

/// Named formats with a whole-value regular expression (the fixture's `format_patterns`).
#[derive(Debug)]
pub struct Formats(BTreeMap<String, Regex>);

/// A Perl pattern as the regex crate reads it: `(?^:` (a stringified `qr//`) is a plain
/// group, an atomic group `(?>` is a plain group, `{,n}` is `{0,n}`, `\0` is NUL.
pub fn perl_to_regex(pattern: &str) -> Result<Regex, regex::Error> {
    let p = pattern.replace("(?^:", "(?:").replace("(?>", "(?:").replace("{,", "{0,").replace("\\0", "\\x00");
    Regex::new(&format!("^(?:{p})$"))
}

impl Formats {
    pub fn parse(v: &Value) -> Result<Formats, String> {
        let mut out = BTreeMap::new();
        for (name, f) in v.as_object().into_iter().flatten() {
            let p = f["pattern"].as_str().ok_or_else(|| format!("format_patterns.{name}: no pattern"))?;
            out.insert(name.clone(), perl_to_regex(p).map_err(|e| format!("format_patterns.{name}: {e}"))?);
        }
        Ok(Formats(out))
    }

    /// Check `value` against the named format (`-list`: each element of PVE's
    /// `split_list`; `-opt`: only when non-empty). Unknown formats pass.
    fn check(&self, format: &str, value: &str) -> Option<String> {
        if let Some(base) = format.strip_suffix("-list")
            && let Some(re) = self.0.get(base)
        {
            let items: Vec<&str> = if value.contains('\0') {
                value.split('\0').collect()
            } else {
                value.split([',', ';', ' ', '\t', '\n']).filter(|s| !s.is_empty()).collect()
            };
            return items
                .into_iter()
                .find(|i| !re.is_match(i))
                .map(|i| format!("invalid format - value '{i}' does not look like a valid {base}"));
        }
        if let Some(base) = format.strip_suffix("-opt")
            && let Some(re) = self.0.get(base)
        {
            return (!value.is_empty() && !re.is_match(value))
                .then(|| format!("invalid format - value does not look like a valid {base}"));
        }
        let re = self.0.get(format)?;
        (!re.is_match(value)).then(|| format!("invalid format - value does not look like a valid {format}"))
    }
}

/// The schema of a parameter name: exact, or `name[n]` for `name<digits>`.
pub fn lookup<'a>(props: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    if let Some(s) = props.get(name) {
        return Some(s);
    }
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    (stem.len() < name.len()).then(|| props.get(&format!("{stem}[n]"))).flatten()
}

fn is_integer(v: &str) -> bool {
    let d = v.strip_prefix(['+', '-']).unwrap_or(v);
    !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
}

fn is_number(v: &str) -> bool {
    v.trim().parse::<f64>().is_ok_and(f64::is_finite)
        && !v.contains(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
}

/// `check_object` over string parameters: every given one known (when `closed`) and
/// valid, every required one present (path parameters included).
pub fn check_object(
    formats: &Formats,
    props: &Map<String, Value>,
    given: &BTreeMap<String, String>,
    closed: bool,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let type_of = |k: &str| props.get(k).and_then(|s| s["type-property"].as_str());
    for (name, value) in given {
        match lookup(props, name) {
            None if closed => out.push((
                name.clone(),
                "property is not defined in schema and the schema does not allow additional properties".into(),
            )),
            None => {}
            Some(schema) => {
                out.extend(check_string(formats, schema, value, name));
                if let Some(req) = schema["requires"].as_str()
                    && !given.contains_key(req)
                {
                    out.push((req.to_string(), format!("missing property required by '{name}'")));
                }
            }
        }
    }
    for (name, schema) in props {
        if name.ends_with("[n]") || schema["optional"].as_i64() == Some(1) || schema.get("alias").is_some() {
            continue;
        }
        // A property of other instance types than the request's `type` may be absent.
        if let (Some(types), Some(tp)) = (schema["instance-types"].as_array(), type_of(name))
            && !given.get(tp).is_some_and(|t| types.iter().any(|x| x.as_str() == Some(t)))
        {
            continue;
        }
        if !given.contains_key(name) {
            out.push((name.clone(), "property is missing and it is not optional".into()));
        }
    }
    out
}

/// `check_prop` of one string value: type, format (a property string is parsed), enum,
/// pattern, lengths, range.
pub fn check_string(formats: &Formats, schema: &Value, value: &str, at: &str) -> Vec<(String, String)> {
    let bad = |m: String| vec![(at.to_string(), m)];
    let ty = schema["type"].as_str().unwrap_or("string");
    let type_ok = match ty {
        "integer" => is_integer(value),
        "number" => is_number(value),
        "boolean" => matches!(value, "0" | "1"),
        _ => true,
    };
    if !type_ok {
        return bad(format!("type check ('{ty}') failed - got '{value}'"));
    }
    match &schema["format"] {
        Value::Object(sub) => {
            let errs = property_string(formats, sub, value, at);
            if !errs.is_empty() {
                return errs;
            }
        }
        Value::String(f) => {
            if let Some(e) = formats.check(f, value) {
                return bad(e);
            }
        }
        _ => {}
    }
    if let Some(e) = schema["enum"].as_array()
        && !e.iter().any(|x| x.as_str() == Some(value))
    {
        let list: Vec<&str> = e.iter().filter_map(Value::as_str).collect();
        return bad(format!("value '{value}' does not have a value in the enumeration '{}'", list.join(", ")));
    }
    if let Some(p) = schema["pattern"].as_str()
        && let Ok(re) = perl_to_regex(p)
        && !re.is_match(value)
    {
        return bad("value does not match the regex pattern".into());
    }
    let len = value.chars().count() as u64;
    if let Some(max) = schema["maxLength"].as_u64()
        && len > max
    {
        return bad(format!("value may only be {max} characters long"));
    }
    if let Some(min) = schema["minLength"].as_u64()
        && len < min
    {
        return bad(format!("value must be at least {min} characters long"));
    }
    if matches!(ty, "integer" | "number")
        && let Ok(n) = value.trim_start_matches('+').parse::<f64>()
    {
        if let Some(min) = schema["minimum"].as_f64()
            && n < min
        {
            return bad(format!("value must have a minimum value of {min}"));
        }
        if let Some(max) = schema["maximum"].as_f64()
            && n > max
        {
            return bad(format!("value must have a maximum value of {max}"));
        }
    }
    Vec::new()
}

/// PVE's `parse_property_string`: `k=v` parts (aliases and `keyAlias` remapped), one
/// part without `=` for the default key, booleans through `parse_boolean`; then
/// `check_object` of the sub-keys (closed: unknown keys are errors).
fn property_string(formats: &Formats, fmt: &Map<String, Value>, value: &str, at: &str) -> Vec<(String, String)> {
    let bad = |m: String| vec![(at.to_string(), format!("invalid format - {m}"))];
    let mut res: BTreeMap<String, String> = BTreeMap::new();
    let mut used_default = false;
    for part in value.split(',') {
        if part.trim().is_empty() {
            continue;
        }
        if let Some((k, v)) = part.split_once('=') {
            let Some(mut schema) = fmt.get(k) else {
                return bad(format!("invalid key in comma-separated list property: {k}"));
            };
            let mut key = k.to_string();
            if let Some(alias) = schema["alias"].as_str() {
                if let Some(ka) = schema["keyAlias"].as_str()
                    && res.insert(ka.to_string(), k.to_string()).is_some()
                {
                    return bad(format!("key alias '{ka}' is already defined"));
                }
                key = alias.to_string();
                let Some(s) = fmt.get(alias) else {
                    return bad(format!("invalid key in comma-separated list property: {k}"));
                };
                schema = s;
            }
            let v = if schema["type"].as_str() == Some("boolean") { parse_boolean(v) } else { v.to_string() };
            if res.insert(key.clone(), v).is_some() {
                return bad(format!("duplicate key in comma-separated list property: {key}"));
            }
        } else {
            let Some((dk, schema)) = fmt.iter().find(|(_, s)| s["default_key"].as_i64() == Some(1)) else {
                return bad("value without key, but schema does not define a default key".into());
            };
            if used_default || res.contains_key(dk) {
                return bad(format!("duplicate key in comma-separated list property: {dk}"));
            }
            used_default = true;
            let v = if schema["type"].as_str() == Some("boolean") { parse_boolean(part) } else { part.to_string() };
            res.insert(dk.clone(), v);
        }
    }
    let sub: Map<String, Value> =
        fmt.iter().filter(|(_, s)| s.get("alias").is_none()).map(|(k, v)| (k.clone(), v.clone())).collect();
    check_object(formats, &sub, &res, true).into_iter().map(|(k, m)| (format!("{at}.{k}"), m)).collect()
}

/// PVE's `parse_boolean`: 1/yes/on/true and 0/no/off/false (any case) to `1`/`0`.
fn parse_boolean(v: &str) -> String {
    match v.to_ascii_lowercase().as_str() {
        "1" | "yes" | "on" | "true" => "1".into(),
        "0" | "no" | "off" | "false" => "0".into(),
        _ => v.to_string(),
    }
}
