//! Host entries of INI and YAML inventories: `name[:port]` and Ansible's ranges
//! `web[01:03]` (zero-padded), `db[a:c]` (letters), `node[0:10:2]` (step), several
//! ranges in one name. Mirrors `expand_hostname_range`.
//!
//! Failure mode: a malformed range (`[3:1]`, `[01:3]`, a missing end) or one
//! that names more than [`MAX_RANGE_HOSTS`] hosts is a [`HostEntryError`] that
//! the caller turns into a `Parse` error with file and line (INI) or group (YAML).
//! The size is computed before anything is expanded, so a range bomb costs no
//! memory; it is refused even under `--limit` (ranges are not expanded lazily:
//! a refused inventory is the same whatever the limit, and `--limit` never has
//! to interpret ranges).

/// The most hosts one host entry (`vm-[0:9999]`) may expand to.
pub(crate) const MAX_RANGE_HOSTS: u64 = 10_000;

/// Why a host entry cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HostEntryError {
    /// `:22` alone.
    #[error("`{entry}` has no host name")]
    NoName { entry: String },
    /// `host:abc`.
    #[error("`{entry}`: `{port}` is not a port (write host:2222, a number 1..65535)")]
    Port { entry: String, port: String },
    /// A range that is not `[begin:end]` or `[begin:end:step]` of numbers or letters.
    #[error("host range `{name}`: {why} (write e.g. web[01:03] or web[a:c] or web[0:10:2])")]
    Range { name: String, why: &'static str },
    /// A range naming more than [`MAX_RANGE_HOSTS`] hosts.
    #[error(
        "host range `{name}` expands to {count} hosts, more than the {MAX_RANGE_HOSTS} one entry may name; split it into smaller ranges or list the hosts you manage"
    )]
    TooMany { name: String, count: u64 },
}

/// Split `entry` into the expanded host names and an optional port.
pub(crate) fn expand(entry: &str) -> Result<(Vec<String>, Option<u16>), HostEntryError> {
    let (name, port) = split_port(entry)?;
    if name.is_empty() {
        return Err(HostEntryError::NoName { entry: entry.to_string() });
    }
    Ok((expand_ranges(name)?, port))
}

fn split_port(entry: &str) -> Result<(&str, Option<u16>), HostEntryError> {
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
                .ok_or_else(|| HostEntryError::Port { entry: entry.to_string(), port: port.to_string() })?;
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

/// One `[begin:end:step]` range, not expanded.
enum Range {
    /// Python's `string.ascii_letters` positions (a..z then A..Z).
    Letters { begin: usize, end: usize, step: usize },
    /// Numbers, zero-padded to `width` (0: no padding).
    Numbers { begin: u64, end: u64, step: u64, width: usize },
}

const LETTERS: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

impl Range {
    fn len(&self) -> u64 {
        match *self {
            Range::Letters { begin, end, step } => ((end - begin) / step + 1) as u64,
            Range::Numbers { begin, end, step, .. } => ((end - begin) / step).saturating_add(1),
        }
    }

    fn items(&self) -> Vec<String> {
        match *self {
            Range::Letters { begin, end, step } => {
                LETTERS[begin..=end].chars().step_by(step).map(String::from).collect()
            }
            Range::Numbers { begin, end, step, width } => {
                let mut out = Vec::new();
                let mut n = begin;
                while n <= end {
                    out.push(format!("{n:0width$}"));
                    n = match n.checked_add(step) {
                        Some(next) => next,
                        None => break,
                    };
                }
                out
            }
        }
    }
}

/// The first range of `name` as (head, range, tail), or `None` without one.
fn first_range(name: &str) -> Result<Option<(&str, Range, &str)>, HostEntryError> {
    let Some((open, close)) = range_at(name) else {
        return Ok(None);
    };
    let (head, spec, tail) = (&name[..open], &name[open + 1..close], &name[close + 1..]);
    let bounds: Vec<&str> = spec.split(':').collect();
    let bad = |why: &'static str| HostEntryError::Range { name: name.to_string(), why };
    let (beg, end, step) = match bounds.as_slice() {
        [b, e] => (*b, *e, "1"),
        [b, e, s] => (*b, *e, *s),
        _ => return Err(bad("expected begin:end or begin:end:step")),
    };
    let beg = if beg.is_empty() { "0" } else { beg };
    if end.is_empty() {
        return Err(bad("the end is missing"));
    }
    let step: u64 = step.parse().ok().filter(|s| *s > 0).ok_or_else(|| bad("the step must be a positive number"))?;
    let letter = |s: &str| s.len() == 1 && s.chars().all(|c| c.is_ascii_alphabetic());
    let range = if letter(beg) && letter(end) {
        let (b, e) = (LETTERS.find(beg).unwrap_or(0), LETTERS.find(end).unwrap_or(0));
        if b > e {
            return Err(bad("the begin is after the end"));
        }
        Range::Letters { begin: b, end: e, step: usize::try_from(step).unwrap_or(usize::MAX) }
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
        Range::Numbers { begin: b, end: e, step, width }
    };
    Ok(Some((head, range, tail)))
}

/// How many names `name` expands to, counted without expanding (saturating).
fn count(name: &str) -> Result<u64, HostEntryError> {
    match first_range(name)? {
        None => Ok(1),
        Some((_, range, tail)) => Ok(range.len().saturating_mul(count(tail)?)),
    }
}

fn expand_ranges(name: &str) -> Result<Vec<String>, HostEntryError> {
    // Counted first: `vm-[0:99999999]` must be refused, not allocated, even
    // when --limit selects one host (see MAX_RANGE_HOSTS).
    let n = count(name)?;
    if n > MAX_RANGE_HOSTS {
        return Err(HostEntryError::TooMany { name: name.to_string(), count: n });
    }
    let Some((head, range, tail)) = first_range(name)? else {
        return Ok(vec![name.to_string()]);
    };
    let mut out = Vec::new();
    for item in range.items() {
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
        assert!(expand("web[3:1]").unwrap_err().to_string().contains("begin is after the end"));
        assert!(expand("web[01:3]").unwrap_err().to_string().contains("equal length"));
        assert!(expand("web[1:]").unwrap_err().to_string().contains("end is missing"));
        assert!(expand("web:abc").unwrap_err().to_string().contains("not a port"));
    }

    #[test]
    fn a_range_over_the_cap_is_refused_before_it_is_expanded() {
        let err = expand("vm-[0:99999999]").unwrap_err().to_string();
        assert!(err.contains("expands to 100000000 hosts") && err.contains("10000"), "{err}");
        // Two ranges multiply: 200 × 100 > 10,000, though each is small.
        let err = expand("r[0:199]-[0:99]").unwrap_err().to_string();
        assert!(err.contains("expands to 20000 hosts"), "{err}");
        assert_eq!(expand("vm-[1:10000]").expect("at the cap").0.len(), 10_000);
        assert_eq!(expand("n[0:18446744073709551615:9223372036854775808]").expect("no overflow").0.len(), 2);
        // The whole u64 range counts as more than the cap, not as zero hosts.
        let err = expand("vm-[0:18446744073709551615]").unwrap_err().to_string();
        assert!(err.contains("10000"), "{err}");
    }
}
