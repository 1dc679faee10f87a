//! INI inventories, as Ansible's `ini` inventory plugin reads them.
//!
//! - Lines before the first section are hosts of `ungrouped`; `#` and `;` start
//!   comment lines.
//! - `[group]` lists hosts: `name[:port] key=value ...` (shlex-quoted, values
//!   through `literal_eval`), ranges like `test-[0:3]`.
//! - `[group:children]` lists child groups, which must be declared somewhere in the
//!   file (`[child]` or `[child:children]`), before or after.
//! - `[group:vars]` holds one `key=value` per line (value = everything after the
//!   first `=`, through `literal_eval`); the group must be declared elsewhere.
//!
//! Failure modes: an unknown section type, a section header with spaces or
//! without its closing `]` (never read as a host named `[test`), a host
//! token without `=`, unclosed quotes, a bad range, an undeclared child or `:vars`
//! group: a `Parse` error naming the file and line.

use std::collections::BTreeMap;
use std::path::Path;

use super::{Inventory, InventoryError, UNGROUPED, hostpat, literal};

enum State {
    Hosts,
    Children,
    Vars,
}

pub(crate) fn parse(inv: &mut Inventory, text: &str, path: &Path) -> Result<(), InventoryError> {
    let err =
        |line: usize, message: String| InventoryError::Parse { path: path.to_path_buf(), line: Some(line), message };
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    // Groups only mentioned by `[g:vars]` or as a child, with the first such line.
    let mut pending: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut group = UNGROUPED;
    let mut state = State::Hosts;
    for (n, raw) in text.lines().enumerate() {
        let line_no = n + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some((name, kind)) = section(line) {
            let kind = kind.unwrap_or("hosts");
            state = match kind {
                "hosts" => State::Hosts,
                "children" => State::Children,
                "vars" => State::Vars,
                other => {
                    return Err(err(
                        line_no,
                        format!(
                            "section [{name}:{other}] has unknown type `{other}` (use [{name}], [{name}:children] or [{name}:vars])"
                        ),
                    ));
                }
            };
            let existed = inv.group_ix.contains_key(name);
            group = inv.group(name);
            if kind != "vars" {
                pending.remove(name);
            } else if !existed {
                pending.insert(name.to_string(), (line_no, format!("[{name}:vars]")));
            }
            continue;
        }
        // A section header without its `]`: read as a host line it would become
        // a VM named `[test`. (A bracketed entry with its `]` goes on to the
        // checks below.)
        if line.starts_with('[') && !line.contains(']') {
            let fixed = line.split('#').next().unwrap_or(line).trim_end();
            return Err(err(line_no, format!("section header `{line}` is missing its closing `]`: write {fixed}]")));
        }
        if line.starts_with('[') && line.ends_with(']') {
            return Err(err(
                line_no,
                format!("invalid section `{line}`: write [group], [group:children] or [group:vars] without spaces"),
            ));
        }
        match state {
            State::Hosts => {
                let tokens =
                    literal::shlex_split(line).map_err(|e| err(line_no, format!("host line `{line}`: {e}")))?;
                let Some(entry) = tokens.first() else { continue };
                let (names, port) = hostpat::expand(entry).map_err(|e| err(line_no, e.to_string()))?;
                inv.room_for(&names).map_err(|e| err(line_no, e.to_string()))?;
                let mut vars = Vec::new();
                for t in &tokens[1..] {
                    let Some((k, v)) = t.split_once('=') else {
                        return Err(err(
                            line_no,
                            format!(
                                "expected key=value after the host name, got `{t}` (quote values with spaces: key=\"a b\")"
                            ),
                        ));
                    };
                    vars.push((k.to_string(), literal::parse_value(v)));
                }
                if let Some(p) = port {
                    vars.push(("ansible_port".to_string(), p.into()));
                }
                let origin = format!("{file}:{line_no}");
                for name in names {
                    inv.add_host(&name, group, vars.clone(), &origin);
                }
            }
            State::Children => {
                let child = line.split('#').next().unwrap_or_default().trim();
                if child.is_empty() || child.contains([':', ']', ' ', '\t']) {
                    return Err(err(line_no, format!("expected a group name in [children], got `{line}`")));
                }
                if !inv.group_ix.contains_key(child) {
                    let parent = inv.groups[group].name.clone();
                    pending.entry(child.to_string()).or_insert((line_no, format!("[{parent}:children]")));
                }
                let c = inv.group(child);
                inv.add_child(group, c);
            }
            State::Vars => {
                let Some((k, v)) = line.split_once('=') else {
                    return Err(err(line_no, format!("expected key=value in [vars], got `{line}`")));
                };
                let origin = format!("[{}:vars] in {file}:{line_no}", inv.groups[group].name);
                inv.groups[group].vars.set(k.trim(), literal::parse_value(v.trim()), &origin);
            }
        }
    }
    // The implicit groups need no declaration.
    pending.remove("all");
    pending.remove("ungrouped");
    if let Some((name, (line_no, section))) = pending.into_iter().next() {
        return Err(err(
            line_no,
            format!(
                "{section} refers to group `{name}`, which is never declared; add a [{name}] section (it may be empty)"
            ),
        ));
    }
    Ok(())
}

/// `[name]` or `[name:kind]`, optionally followed by a `#` comment.
fn section(line: &str) -> Option<(&str, Option<&str>)> {
    let rest = line.strip_prefix('[')?;
    let close = rest.find(']')?;
    let after = rest[close + 1..].trim();
    if !(after.is_empty() || after.starts_with('#')) {
        return None;
    }
    let inner = &rest[..close];
    let (name, kind) = match inner.split_once(':') {
        Some((n, k)) => (n, Some(k)),
        None => (inner, None),
    };
    let name_ok = !name.is_empty() && !name.contains(|c: char| c.is_whitespace() || c == ':' || c == ']');
    let kind_ok = kind.is_none_or(|k| !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_'));
    (name_ok && kind_ok).then_some((name, kind))
}
