//! Host entries of INI and YAML inventories: `name[:port]` and Ansible's ranges
//! `web[01:03]` (zero-padded), `db[a:c]` (letters), `node[0:10:2]` (step), several
//! ranges in one name. Mirrors `expand_hostname_range`.
//!
//! Failure mode: a malformed range (`[3:1]`, `[01:3]`, a missing end) is an error
//! message that the caller turns into a `Parse` error with file and line.

/// Split `entry` into the expanded host names and an optional port.
pub(crate) fn expand(entry: &str) -> Result<(Vec<String>, Option<u16>), String> {
    let (name, port) = split_port(entry)?;
    if name.is_empty() {
        return Err(format!("`{entry}` has no host name"));
    }
    Ok((expand_ranges(name)?, port))
}

fn split_port(entry: &str) -> Result<(&str, Option<u16>), String> {
    // Colons outside brackets: one means `host:port`; several mean an IPv6 address.
    let mut depth = 0usize;
    let mut colons = Vec::new();
    for (i, c) in entry.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ':' if depth == 0 => colons.push(i),
            _ => {}
        }
    }
    match colons.as_slice() {
        [] => Ok((entry, None)),
        [i] => {
            let port = &entry[i + 1..];
            let n: u16 = port
                .parse()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("`{entry}`: `{port}` is not a port (write host:2222, a number 1..65535)"))?;
            Ok((&entry[..*i], Some(n)))
        }
        _ => Ok((entry, None)),
    }
}

/// Whether `name` holds a `[begin:end]` range.
fn range_at(name: &str) -> Option<(usize, usize)> {
    let open = name.find('[')?;
    let close = open + name[open..].find(']')?;
    name[open..close].contains(':').then_some((open, close))
}

fn expand_ranges(name: &str) -> Result<Vec<String>, String> {
    let Some((open, close)) = range_at(name) else {
        return Ok(vec![name.to_string()]);
    };
    let (head, spec, tail) = (&name[..open], &name[open + 1..close], &name[close + 1..]);
    let bounds: Vec<&str> = spec.split(':').collect();
    let bad = |why: &str| format!("host range `{name}`: {why} (write e.g. web[01:03] or web[a:c] or web[0:10:2])");
    let (beg, end, step) = match bounds.as_slice() {
        [b, e] => (*b, *e, "1"),
        [b, e, s] => (*b, *e, *s),
        _ => return Err(bad("expected begin:end or begin:end:step")),
    };
    let beg = if beg.is_empty() { "0" } else { beg };
    if end.is_empty() {
        return Err(bad("the end is missing"));
    }
    let step: usize = step.parse().ok().filter(|s| *s > 0).ok_or_else(|| bad("the step must be a positive number"))?;
    let items: Vec<String> = if beg.len() == 1
        && end.len() == 1
        && beg.chars().all(|c| c.is_ascii_alphabetic())
        && end.chars().all(|c| c.is_ascii_alphabetic())
    {
        // Python's string.ascii_letters order: a..z then A..Z.
        const LETTERS: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let (b, e) = (LETTERS.find(beg).unwrap_or(0), LETTERS.find(end).unwrap_or(0));
        if b > e {
            return Err(bad("the begin is after the end"));
        }
        LETTERS[b..=e].chars().step_by(step).map(String::from).collect()
    } else {
        let b: u64 = beg.parse().map_err(|_| bad("begin and end must both be numbers or both single letters"))?;
        let e: u64 = end.parse().map_err(|_| bad("begin and end must both be numbers or both single letters"))?;
        if b > e {
            return Err(bad("the begin is after the end"));
        }
        let width = if beg.starts_with('0') && beg.len() > 1 {
            if beg.len() != end.len() {
                return Err(bad("a zero-padded range needs begin and end of equal length"));
            }
            beg.len()
        } else {
            0
        };
        (b..=e).step_by(step).map(|n| format!("{n:0width$}")).collect()
    };
    let mut out = Vec::new();
    for item in items {
        out.extend(expand_ranges(&format!("{head}{item}{tail}"))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_expand_like_ansible() {
        assert_eq!(expand("web[01:03]").expect("range").0, vec!["web01", "web02", "web03"]);
        assert_eq!(expand("test-[0:3]").expect("range").0, vec!["test-0", "test-1", "test-2", "test-3"]);
        assert_eq!(expand("db-[a:c]").expect("range").0, vec!["db-a", "db-b", "db-c"]);
        assert_eq!(expand("n[0:6:3]").expect("range").0, vec!["n0", "n3", "n6"]);
        assert_eq!(expand("r[1:2]-[a:b]").expect("range").0, vec!["r1-a", "r1-b", "r2-a", "r2-b"]);
        assert_eq!(expand("web[01:02]:2222").expect("port"), (vec!["web01".into(), "web02".into()], Some(2222)));
        assert_eq!(expand("pve1:22").expect("port"), (vec!["pve1".to_string()], Some(22)));
        assert_eq!(expand("fe80::1").expect("ipv6").1, None);
    }

    #[test]
    fn malformed_ranges_are_errors() {
        assert!(expand("web[3:1]").unwrap_err().contains("begin is after the end"));
        assert!(expand("web[01:3]").unwrap_err().contains("equal length"));
        assert!(expand("web[1:]").unwrap_err().contains("end is missing"));
        assert!(expand("web:abc").unwrap_err().contains("not a port"));
    }
}
