//! The nesting cap of YAML/JSON inventory and vars files, checked on the raw
//! text before the YAML parser sees it.
//!
//! Why before: libyaml scans the whole document into events before
//! serde_yaml_ng applies its own depth limit (128), and its scanner is
//! quadratic in the depth of flow collections (`[[[[...`, `{a: {a: ...`):
//! measured with a debug build, 20 KB of `[` nesting takes 3.3 s and 200 KB
//! about 280 s (the issue saw 88 s), while block nesting (indentation,
//! `- - - x`) and flat files of the same size parse in well under a second.
//! Counting brackets and indentation is linear (about 10 ms for 200 KB), so a
//! file nested deeper than [`MAX_DEPTH`] is refused at once with its line.
//!
//! What counts as one level: an indentation step of block context (a deeper
//! key or `- ` entry), each further `- ` or `? ` entry on the same line (a
//! compact nested sequence, `- - - x`) and each open `[` or `{` of a flow
//! collection. Quoted scalars, comments and the content of block scalars
//! (`|`, `>`) are skipped. The count approximates YAML's depth (a `- ` entry
//! and its mapping are one level here, two for YAML, so serde_yaml_ng's own
//! limit still applies beyond); flow nesting, the costly case, is counted
//! exactly. A `[` inside a plain scalar such as the host range `web[01:03]`
//! opens no level: only a `[` that starts a node does, including one after a
//! node's tag or anchor (`x: !!seq [`, `x: &a [`).

/// The deepest nesting of groups (`children:`) and variable values accepted.
pub(crate) const MAX_DEPTH: usize = 64;

/// `Err((line, depth))` at the first line where the nesting exceeds [`MAX_DEPTH`].
pub(crate) fn check(text: &str) -> Result<(), (usize, usize)> {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    // Inside a quoted scalar that continues on the next line.
    let mut quote: Option<char> = None;
    // Lines more indented than this belong to a block scalar.
    let mut block_scalar: Option<usize> = None;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let indent = line.len() - line.trim_start_matches(' ').len();
        let body = &line[indent..];
        if let Some(parent) = block_scalar {
            if body.is_empty() || indent > parent {
                continue;
            }
            block_scalar = None;
        }
        if quote.is_none() && flow == 0 {
            if body.is_empty() || body.starts_with('#') {
                continue;
            }
            while indents.last().is_some_and(|&top| top > indent) {
                indents.pop();
            }
            if indents.last().is_none_or(|&top| top < indent) {
                indents.push(indent);
            }
        }
        let chars: Vec<char> = body.chars().collect();
        let mut at_node_start = true;
        // Inside a node property (a `!tag` or an `&anchor`): the node itself
        // starts after it, so `x: !!seq [[[` counts its brackets.
        let mut in_property = false;
        // Compact block entries after the first on this line (`- - - x`):
        // each opens a sequence one level deeper without a new line.
        let mut compact = 0usize;
        let mut first_entry = true;
        let mut j = 0;
        while j < chars.len() {
            let c = chars[j];
            if let Some(q) = quote {
                if c == q {
                    if q == '\'' && chars.get(j + 1) == Some(&'\'') {
                        j += 2;
                        continue;
                    }
                    quote = None;
                } else if c == '\\' && q == '"' {
                    j += 1;
                }
                j += 1;
                continue;
            }
            let after_space = j == 0 || chars[j - 1].is_whitespace();
            match c {
                '#' if after_space => break,
                '\'' | '"' if at_node_start => quote = Some(c),
                '-' | '?' if at_node_start && flow == 0 && chars.get(j + 1).is_none_or(|n| n.is_whitespace()) => {
                    if !first_entry {
                        compact += 1;
                        if indents.len() + compact > MAX_DEPTH {
                            return Err((line_no, indents.len() + compact));
                        }
                    }
                    first_entry = false;
                }
                '[' | '{' if at_node_start || in_property || flow > 0 => {
                    flow += 1;
                    if indents.len() + compact + flow > MAX_DEPTH {
                        return Err((line_no, indents.len() + compact + flow));
                    }
                }
                ']' | '}' if flow > 0 => flow -= 1,
                '|' | '>' if at_node_start && flow == 0 => {
                    block_scalar = Some(indent);
                    break;
                }
                _ => {}
            }
            // A node starts after indentation, `- `, `: `, `? ` and, in flow
            // context, after `,` or an opening bracket.
            let property_ends = in_property && matches!(c, ' ' | '\t' | '[' | '{' | ',');
            in_property = match c {
                '!' | '&' if at_node_start => true,
                _ => in_property && !property_ends,
            };
            at_node_start = match c {
                ' ' | '\t' => {
                    at_node_start || property_ends || (j > 0 && matches!(chars[j - 1], ':' | '-' | '?' | ','))
                }
                '!' | '&' if in_property => false,
                '-' | '?' if flow == 0 && chars.get(j + 1).is_none_or(|n| n.is_whitespace()) => at_node_start,
                '[' | '{' | ',' => flow > 0,
                _ => false,
            };
            j += 1;
        }
        if indents.len() + flow > MAX_DEPTH {
            return Err((line_no, indents.len() + flow));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_inventories_pass() {
        let text = "all:\n  children:\n    test:\n      hosts:\n        test-[0:3]:\n          ansible_host: '10.0.0.1'\n      vars: { a: [1, {b: \"[[[\"}], c: it's }\n      motd: |\n        [[[[[[[[\n        {{{{{{\n# [[[[[[\n";
        assert_eq!(check(text), Ok(()));
    }

    #[test]
    fn deep_flow_nesting_is_refused_with_its_line() {
        let text = format!("all:\n  vars:\n    x: {}{}\n", "[".repeat(70), "]".repeat(70));
        let (line, depth) = check(&text).expect_err("too deep");
        assert_eq!(line, 3);
        assert!(depth > MAX_DEPTH);
    }

    #[test]
    fn deep_block_nesting_is_refused() {
        let mut text = String::from("all:\n");
        for d in 1..100 {
            text.push_str(&format!("{}children:\n{}g{d}:\n", "  ".repeat(2 * d - 1), "  ".repeat(2 * d)));
        }
        assert!(check(&text).is_err());
    }

    #[test]
    fn a_tag_or_anchor_before_a_flow_collection_still_counts_its_brackets() {
        for prop in ["!!seq", "&a", "!local", "&a !!seq"] {
            let text = format!("all:\n  vars:\n    x: {prop} {}{}\n", "[".repeat(70), "]".repeat(70));
            let (line, depth) = check(&text).expect_err(prop);
            assert_eq!(line, 3, "{prop}");
            assert!(depth > MAX_DEPTH, "{prop}");
            let inner = format!("all:\n  vars:\n    x: [{prop} {}{}]\n", "[".repeat(70), "]".repeat(70));
            assert!(check(&inner).is_err(), "{prop} inside a flow collection");
        }
        assert_eq!(check("all:\n  vars:\n    x: !!seq [a, &b [c], *b]\n    y: web!a[01:03]\n"), Ok(()));
    }

    #[test]
    fn compact_block_sequences_on_one_line_count_as_levels() {
        let text = format!("all:\n  vars:\n    x:\n      {}x\n", "- ".repeat(70));
        let (line, depth) = check(&text).expect_err("too deep");
        assert_eq!(line, 4);
        assert!(depth > MAX_DEPTH);
        assert_eq!(check("all:\n  vars:\n    x:\n      - - a\n        - b\n      - -1\n"), Ok(()));
    }
}
