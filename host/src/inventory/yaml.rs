//! YAML (and JSON) inventories, as Ansible's `yaml` inventory plugin reads them:
//!
//! ```yaml
//! all:
//!   vars: {...}
//!   hosts: { pve1: {ansible_host: 10.0.10.11} }
//!   children:
//!     test:
//!       hosts: { test-[0:3]: }
//!       vars: { vms_vmid_base: 9100 }
//! ```
//!
//! Every top-level key is a group (`all` included); a group holds only `hosts`,
//! `children` and `vars`, each a mapping (a bare string is one name, as in
//! Ansible). Host keys take ranges and `:port`. Values keep their YAML types;
//! `<<` merge keys are applied; `!unsafe` values are plain strings; `!vault` values
//! are kept as an opaque marker that fails only if cradle reads that variable.
//!
//! Failure modes: nesting deeper than 64 levels (refused before parsing, with
//! the line; see `nesting.rs`), YAML syntax errors (with line and column), a group that is not a
//! mapping, an unknown key in a group (Ansible warns and skips it; cradle refuses,
//! since a typo like `host:` would otherwise drop hosts silently), any other tag.

use std::path::Path;

use serde_json::{Map, Value};
use serde_yaml_ng::Value as Y;

use super::{Inventory, InventoryError, hostpat, nesting};

/// The key an inline `!vault` value is stored under (see `values.rs`).
pub(crate) const VAULT_MARKER: &str = "__cradle_ansible_vault__";

pub(crate) fn parse(inv: &mut Inventory, text: &str, path: &Path) -> Result<(), InventoryError> {
    // Walked as YAML (not JSON) so groups and hosts keep the file's order.
    let doc = load(text, path)?;
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    match doc {
        Y::Null => Ok(()),
        Y::Mapping(map) => {
            for (name, data) in &map {
                group(inv, &key(name, path)?, data, path, &file)?;
            }
            Ok(())
        }
        _ => Err(perr(path, "the top level must be a mapping of groups (`all:` with hosts/children/vars)".into())),
    }
}

fn perr(path: &Path, message: String) -> InventoryError {
    InventoryError::Parse { path: path.to_path_buf(), line: None, message }
}

fn key(k: &Y, path: &Path) -> Result<String, InventoryError> {
    match k {
        Y::String(s) => Ok(s.clone()),
        Y::Number(n) => Ok(n.to_string()),
        Y::Bool(b) => Ok(b.to_string()),
        other => {
            Err(perr(path, format!("a group, host or variable name must be a plain scalar, found {}", kind(other))))
        }
    }
}

fn group(inv: &mut Inventory, name: &str, data: &Y, path: &Path, file: &str) -> Result<usize, InventoryError> {
    let g = inv.group(name);
    let map = match data {
        Y::Null => return Ok(g),
        Y::Mapping(m) => m,
        other => {
            return Err(perr(
                path,
                format!("group `{name}` must be a mapping with hosts/children/vars, found {}", kind(other)),
            ));
        }
    };
    for (section_key, section) in map {
        let section_name = key(section_key, path)?;
        let entries: Vec<(String, Y)> = match section {
            Y::String(s) => vec![(s.clone(), Y::Null)],
            Y::Mapping(m) => {
                m.iter().map(|(k, v)| Ok((key(k, path)?, v.clone()))).collect::<Result<_, InventoryError>>()?
            }
            Y::Null => continue,
            other => {
                return Err(perr(path, format!("`{name}.{section_name}` must be a mapping, found {}", kind(other))));
            }
        };
        match section_name.as_str() {
            "vars" => {
                let origin = format!("vars of group `{name}` in {file}");
                for (k, v) in entries {
                    let v = convert(v).map_err(|m| perr(path, m.to_string()))?;
                    inv.groups[g].vars.set(&k, v, &origin);
                }
            }
            "children" => {
                for (child, cdata) in &entries {
                    let c = group(inv, child, cdata, path, file)?;
                    inv.add_child(g, c);
                }
            }
            "hosts" => {
                for (entry, hvars) in entries {
                    let (names, port) =
                        hostpat::expand(&entry).map_err(|e| perr(path, format!("group `{name}`: {e}")))?;
                    inv.room_for(&names).map_err(|e| perr(path, format!("group `{name}`: {e}")))?;
                    let mut vars: Vec<(String, Value)> = match convert(hvars).map_err(|m| perr(path, m.to_string()))? {
                        Value::Null => Vec::new(),
                        Value::Object(m) => m.into_iter().collect(),
                        other => {
                            return Err(perr(
                                path,
                                format!(
                                    "host `{entry}` in group `{name}` must map to its variables, found {}",
                                    json_kind(&other)
                                ),
                            ));
                        }
                    };
                    if let Some(p) = port {
                        vars.push(("ansible_port".into(), p.into()));
                    }
                    let origin = format!("host `{entry}` in {file}");
                    for h in names {
                        inv.add_host(&h, g, vars.clone(), &origin);
                    }
                }
            }
            other => {
                return Err(perr(
                    path,
                    format!(
                        "group `{name}` has key `{other}`; only hosts, children and vars are allowed (is it a typo, or a group that belongs under children?)"
                    ),
                ));
            }
        }
    }
    Ok(g)
}

fn kind(v: &Y) -> &'static str {
    match v {
        Y::Null => "nothing",
        Y::Bool(_) => "a boolean",
        Y::Number(_) => "a number",
        Y::String(_) => "a string",
        Y::Sequence(_) => "a list",
        Y::Mapping(_) => "a mapping",
        Y::Tagged(_) => "a tagged value",
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn load(text: &str, path: &Path) -> Result<Y, InventoryError> {
    // Before the parser: libyaml is quadratic in the nesting depth (nesting.rs).
    nesting::check(text).map_err(|(line, depth)| InventoryError::Parse {
        path: path.to_path_buf(),
        line: Some(line),
        message: format!(
            "nesting {depth} levels deep; at most {} levels of groups and variable values are accepted (flatten the groups or the value)",
            nesting::MAX_DEPTH
        ),
    })?;
    let mut y: Y = serde_yaml_ng::from_str(text).map_err(|e| InventoryError::Parse {
        path: path.to_path_buf(),
        line: e.location().map(|l| l.line()),
        message: format!("YAML: {e}"),
    })?;
    y.apply_merge().map_err(|e| perr(path, format!("YAML merge key (<<): {e}")))?;
    Ok(y)
}

/// Parse YAML text into JSON-shaped data (merge keys applied, tags handled).
pub(crate) fn to_json(text: &str, path: &Path) -> Result<Value, InventoryError> {
    convert(load(text, path)?).map_err(|m| perr(path, m.to_string()))
}

/// A YAML value that has no JSON shape cradle reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ConvertError {
    /// A mapping key that is a list, a mapping or a tagged value.
    #[error("mapping keys must be plain scalars, found {found}")]
    Key { found: &'static str },
    /// A tag other than `!vault` and `!unsafe`.
    #[error("unsupported YAML tag `!{tag}` (cradle reads plain YAML values)")]
    Tag { tag: String },
}

fn convert(y: Y) -> Result<Value, ConvertError> {
    Ok(match y {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                n.as_f64().and_then(serde_json::Number::from_f64).map(Value::Number).unwrap_or(Value::Null)
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(items.into_iter().map(convert).collect::<Result<_, _>>()?),
        Y::Mapping(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let key = match k {
                    Y::String(s) => s,
                    Y::Number(n) => n.to_string(),
                    Y::Bool(b) => b.to_string(),
                    Y::Null => "null".to_string(),
                    other => return Err(ConvertError::Key { found: kind(&other) }),
                };
                out.insert(key, convert(v)?);
            }
            Value::Object(out)
        }
        Y::Tagged(t) => {
            let tag = t.tag.to_string();
            match tag.trim_start_matches('!') {
                "vault" => Value::Object(Map::from_iter([(VAULT_MARKER.to_string(), Value::Bool(true))])),
                "unsafe" => convert(t.value)?,
                other => return Err(ConvertError::Tag { tag: other.to_string() }),
            }
        }
    })
}
