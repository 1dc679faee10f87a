//! `--limit` host patterns, evaluated like Ansible's `InventoryManager`:
//!
//! - terms are separated by `:` or `,` (both mean union; IPv6 names are not patterns);
//! - a plain term adds hosts, `&term` intersects, `!term` excludes; plain terms are
//!   applied first, then intersections, then exclusions, whatever their order; only
//!   `&`/`!` terms means "start from `all`";
//! - a term is a host name, a group name (its hosts and its descendants' hosts),
//!   `all` / `*`, or a glob with `*` and `?` matched against group names and,
//!   when no group matched or the term has a glob character or a `.`, host names.
//!
//! The result is in inventory order. Refused with a message: a term that names no
//! host or group (a typo in `!prod` must never widen a run), a pattern that selects
//! nothing, regex terms (`~...`), subscripts (`web[0]`), `@retry` files.

use std::collections::HashSet;

use super::{ALL, HostName, Inventory, InventoryError};

impl Inventory {
    /// The hosts `pattern` selects, in inventory order; `None` selects every host.
    /// Selecting nothing is an error, as is a term that names no host or group.
    pub fn select(&self, pattern: Option<&str>) -> Result<Vec<HostName>, InventoryError> {
        let selected = match pattern {
            None if self.order.is_empty() => {
                return Err(InventoryError::Pattern {
                    pattern: "all".into(),
                    message: format!("{} has no hosts", self.source.display()),
                    close: Vec::new(),
                });
            }
            None => self.order.iter().copied().collect(),
            Some(p) => self.evaluate(p)?,
        };
        Ok(self.order.iter().filter(|h| selected.contains(h)).map(|&h| HostName(self.hosts[h].name.clone())).collect())
    }

    fn evaluate(&self, pattern: &str) -> Result<HashSet<usize>, InventoryError> {
        let fail = |message: String, close: Vec<String>| InventoryError::Pattern {
            pattern: pattern.to_string(),
            message,
            close,
        };
        let terms: Vec<&str> = pattern.split([',', ':']).map(str::trim).filter(|t| !t.is_empty()).collect();
        if terms.is_empty() {
            return Err(fail("the pattern is empty; name hosts or groups, or use all".into(), Vec::new()));
        }
        let mut plain: Vec<&str> = terms.iter().copied().filter(|t| !t.starts_with(['&', '!'])).collect();
        if plain.is_empty() {
            plain.push("all");
        }
        let mut ordered: Vec<(char, &str)> = plain.into_iter().map(|t| ('+', t)).collect();
        ordered.extend(terms.iter().filter_map(|t| t.strip_prefix('&')).map(|t| ('&', t.trim())));
        ordered.extend(terms.iter().filter_map(|t| t.strip_prefix('!')).map(|t| ('!', t.trim())));

        let mut hosts: HashSet<usize> = HashSet::new();
        for (op, term) in ordered {
            if term.starts_with('~') {
                return Err(fail(
                    format!("`{term}`: regular expressions are not supported; use * and ? globs"),
                    vec![],
                ));
            }
            if term.starts_with('@') {
                return Err(fail(format!("`{term}`: limit files are not supported; list the hosts"), vec![]));
            }
            if term.contains(['[', ']']) {
                return Err(fail(
                    format!(
                        "`{term}`: subscripts and [..] classes are not supported; name the hosts or use * and ? globs"
                    ),
                    vec![],
                ));
            }
            let matched = self.match_term(term).ok_or_else(|| {
                fail(format!("`{term}` matches no host or group of {}", self.source.display()), close_names(self, term))
            })?;
            match op {
                '&' => hosts.retain(|h| matched.contains(h)),
                '!' => hosts.retain(|h| !matched.contains(h)),
                _ => hosts.extend(matched),
            }
        }
        if hosts.is_empty() {
            return Err(fail(
                "the pattern selects no host (its exclusions or intersections remove every host)".into(),
                vec![],
            ));
        }
        Ok(hosts)
    }

    /// The hosts `term` names, or `None` when it names no host or group.
    fn match_term(&self, term: &str) -> Option<HashSet<usize>> {
        if term == "all" || term == "*" {
            return Some(self.group_host_ix(ALL).into_iter().collect());
        }
        if let Some(&h) = self.host_ix.get(term) {
            return Some(HashSet::from([h]));
        }
        let mut out = HashSet::new();
        let mut any = false;
        for (g, group) in self.groups.iter().enumerate() {
            if glob(term, &group.name) {
                any = true;
                out.extend(self.group_host_ix(g));
            }
        }
        if !any || term.contains(['*', '?', '.']) {
            for (h, host) in self.hosts.iter().enumerate() {
                if glob(term, &host.name) {
                    any = true;
                    out.insert(h);
                }
            }
        }
        any.then_some(out)
    }
}

/// `*` matches any run of characters, `?` one character; everything else literally.
pub(crate) fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Up to five host or group names close to `wanted` (edit distance, prefix).
pub(crate) fn close_names(inv: &Inventory, wanted: &str) -> Vec<String> {
    let wanted = wanted.trim_start_matches(['!', '&']);
    let limit = (wanted.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, String)> = inv
        .groups
        .iter()
        .map(|g| g.name.clone())
        .chain(inv.hosts.iter().map(|h| h.name.clone()))
        .filter_map(|name| {
            let d = distance(wanted, &name);
            let prefix = !wanted.is_empty() && (name.starts_with(wanted) || wanted.starts_with(&name));
            (d <= limit || prefix).then_some((d, name))
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(5).map(|(_, n)| n).collect()
}

fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
