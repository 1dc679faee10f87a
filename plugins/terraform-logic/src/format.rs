//! `format_version` handling shared by plans and states.
//!
//! Terraform's JSON output format is versioned `"MAJOR.MINOR"`: minor bumps only add
//! properties (consumers ignore unknown ones), a major bump is incompatible and must
//! be refused. Plans observed so far carry `1.0`, `1.1` or `1.2`, state output `1.0`.

/// Whether `version` is a `"1.MINOR"` format this crate understands.
pub(crate) fn is_supported(version: &str) -> bool {
    match version.split_once('.') {
        Some((major, minor)) => major == "1" && !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::is_supported;

    #[test]
    fn major_one_with_any_minor_is_supported() {
        for version in ["1.0", "1.1", "1.2", "1.17"] {
            assert!(is_supported(version), "{version}");
        }
    }

    #[test]
    fn other_majors_and_malformed_versions_are_not_supported() {
        for version in ["2.0", "0.1", "1", "1.", "1.x", "", "v1.2", "1.2.3", " 1.2"] {
            assert!(!is_supported(version), "{version}");
        }
    }
}
