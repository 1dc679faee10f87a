//! Request parameters: query string and body (form-urlencoded or JSON) merged into one
//! string map, as pve-http-server does, with schema checks in PVE's 400 shape.
//!
//! Failure modes: unknown parameters, missing required ones and type errors become
//! [`ApiError::Params`] whose map names each offending parameter.

use std::collections::BTreeMap;

use super::ApiError;

/// Merged request parameters.
#[derive(Debug, Default, Clone)]
pub struct Params {
    /// Name → value (JSON scalars converted to their string form, booleans to 0/1).
    pub map: BTreeMap<String, String>,
}

impl Params {
    /// Parse the query and body.
    pub fn parse(query: Option<&str>, content_type: Option<&str>, body: &[u8]) -> Result<Self, ApiError> {
        let mut map = BTreeMap::new();
        if let Some(q) = query {
            for (k, v) in form_urlencoded::parse(q.as_bytes()) {
                map.insert(k.into_owned(), v.into_owned());
            }
        }
        if !body.is_empty() {
            let is_json = content_type.is_some_and(|c| c.starts_with("application/json"));
            if is_json {
                let v: serde_json::Value = serde_json::from_slice(body)
                    .map_err(|e| ApiError::status(400, format!("failed to parse JSON body: {e}")))?;
                let obj = v.as_object().ok_or_else(|| ApiError::status(400, "JSON body must be an object"))?;
                for (k, v) in obj {
                    let s = match v {
                        serde_json::Value::String(s) => s.clone(),
                        serde_json::Value::Bool(b) => {
                            if *b {
                                "1".into()
                            } else {
                                "0".into()
                            }
                        }
                        serde_json::Value::Null => continue,
                        serde_json::Value::Array(a) => a
                            .iter()
                            .map(|x| x.as_str().map(str::to_string).unwrap_or_else(|| x.to_string()))
                            .collect::<Vec<_>>()
                            .join(","),
                        other => other.to_string(),
                    };
                    map.insert(k.clone(), s);
                }
            } else {
                for (k, v) in form_urlencoded::parse(body) {
                    map.insert(k.into_owned(), v.into_owned());
                }
            }
        }
        Ok(Params { map })
    }

    /// A parameter's value.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.map.get(k).map(String::as_str)
    }

    /// Reject parameters outside `allowed` (path parameters are not in the map).
    pub fn only(&self, allowed: &[&str]) -> Result<(), ApiError> {
        let bad: BTreeMap<String, String> = self
            .map
            .keys()
            .filter(|k| !allowed.contains(&k.as_str()))
            .map(|k| (k.clone(), crate::model::props::NOT_IN_SCHEMA.to_string()))
            .collect();
        if bad.is_empty() { Ok(()) } else { Err(ApiError::Params(bad)) }
    }

    /// A required parameter.
    pub fn required(&self, k: &str) -> Result<&str, ApiError> {
        self.get(k).ok_or_else(|| ApiError::param(k, "property is missing and it is not optional"))
    }

    /// A boolean (0/1) parameter with default.
    pub fn bool(&self, k: &str, default: bool) -> Result<bool, ApiError> {
        match self.get(k) {
            None => Ok(default),
            Some("1" | "true" | "yes" | "on") => Ok(true),
            Some("0" | "false" | "no" | "off") => Ok(false),
            Some(v) => Err(ApiError::param(k, format!("type check ('boolean') failed - got '{v}'"))),
        }
    }

    /// An optional integer parameter within bounds.
    pub fn int(&self, k: &str, min: i64, max: i64) -> Result<Option<i64>, ApiError> {
        let Some(v) = self.get(k) else { return Ok(None) };
        let n: i64 = v.parse().map_err(|_| ApiError::param(k, format!("type check ('integer') failed - got '{v}'")))?;
        if n < min {
            return Err(ApiError::param(k, format!("value must have a minimum value of {min}")));
        }
        if n > max {
            return Err(ApiError::param(k, format!("value must have a maximum value of {max}")));
        }
        Ok(Some(n))
    }
}

/// Parse a VMID (path or parameter) with PVE's bounds.
pub fn vmid(name: &str, v: &str) -> Result<u32, ApiError> {
    let n: i64 = v.parse().map_err(|_| ApiError::param(name, format!("type check ('integer') failed - got '{v}'")))?;
    if n < 100 {
        return Err(ApiError::param(name, "value must have a minimum value of 100"));
    }
    if n > 999_999_999 {
        return Err(ApiError::param(name, "value must have a maximum value of 999999999"));
    }
    Ok(n as u32)
}

/// The normalizer of one config parameter (`props::normalize` for VMs,
/// `ct::normalize` for containers), given a MAC generator for NICs without one.
pub type Normalize = fn(&str, &str, &mut dyn FnMut() -> String) -> Result<String, String>;

/// Normalize `value` of `key` into `config`, or record its error in `errors`
/// (PVE reports every bad parameter of a create at once). New MACs come from
/// the cluster's seed, the VMID and `counter`, which advances per MAC.
#[allow(clippy::too_many_arguments, reason = "one parameter's facts and the two maps it lands in")]
pub fn put_normalized(
    normalize: Normalize,
    seed: u64,
    vmid: u32,
    counter: &mut u64,
    key: &str,
    value: &str,
    config: &mut BTreeMap<String, String>,
    errors: &mut BTreeMap<String, String>,
) {
    let mut mac = || {
        *counter += 1;
        crate::model::ids::mac(seed ^ u64::from(vmid), *counter)
    };
    match normalize(key, value, &mut mac) {
        Ok(nv) => {
            config.insert(key.to_string(), nv);
        }
        Err(e) => {
            errors.insert(key.to_string(), e);
        }
    }
}
