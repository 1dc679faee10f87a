//! The typed forms of a change's `actions` and `action_reason`.

use std::fmt;

/// A resource change's `change.actions`, as Terraform's implementation defines them
/// (`internal/plans/action.go`; nine values, two more than its documentation lists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `["no-op"]`: nothing to do (also move-only and import-only entries).
    NoOp,
    /// `["create"]`.
    Create,
    /// `["read"]`: a data source read deferred to apply.
    Read,
    /// `["update"]`: in place.
    Update,
    /// `["delete","create"]`: replace, destroying the existing object first.
    DeleteThenCreate,
    /// `["create","delete"]`: replace with `create_before_destroy`.
    CreateThenDelete,
    /// `["delete"]`.
    Delete,
    /// `["forget"]`: drop from state, keep the real object.
    Forget,
    /// `["create","forget"]`: replace a tainted object, forgetting (orphaning) the old one.
    CreateThenForget,
    /// Anything else, verbatim. Terraform prints an unknown internal action under
    /// its raw name, so an unrecognised value is always treated as unsafe.
    Unknown(Vec<String>),
}

impl Action {
    /// Classify a `change.actions` array.
    pub fn from_strings(actions: &[String]) -> Self {
        let parts: Vec<&str> = actions.iter().map(String::as_str).collect();
        match parts.as_slice() {
            ["no-op"] => Self::NoOp,
            ["create"] => Self::Create,
            ["read"] => Self::Read,
            ["update"] => Self::Update,
            ["delete", "create"] => Self::DeleteThenCreate,
            ["create", "delete"] => Self::CreateThenDelete,
            ["delete"] => Self::Delete,
            ["forget"] => Self::Forget,
            ["create", "forget"] => Self::CreateThenForget,
            _ => Self::Unknown(actions.to_vec()),
        }
    }

    /// `["delete","create"]` or `["create","delete"]`: the existing object is destroyed
    /// and a new one created.
    pub fn is_replace(&self) -> bool {
        matches!(self, Self::DeleteThenCreate | Self::CreateThenDelete)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoOp => f.write_str("no-op"),
            Self::Create => f.write_str("create"),
            Self::Read => f.write_str("read"),
            Self::Update => f.write_str("update in place"),
            Self::DeleteThenCreate => f.write_str("replace (delete, then create)"),
            Self::CreateThenDelete => f.write_str("replace (create, then delete)"),
            Self::Delete => f.write_str("delete"),
            Self::Forget => f.write_str("forget (drop from state, keep the object)"),
            Self::CreateThenForget => f.write_str("replace (create, then forget the old object)"),
            Self::Unknown(actions) => write!(f, "unrecognised actions {actions:?}"),
        }
    }
}

/// A resource change's `action_reason`: a display hint that "may change over time",
/// so unrecognised values are kept, not refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionReason {
    /// `replace_because_tainted`: the object is tainted in state.
    ReplaceBecauseTainted,
    /// `replace_because_cannot_update`: a changed attribute forces a new object (`replace_paths` says which).
    ReplaceBecauseCannotUpdate,
    /// `replace_by_request`: `terraform plan -replace=ADDR`.
    ReplaceByRequest,
    /// `replace_by_triggers`: `lifecycle.replace_triggered_by`.
    ReplaceByTriggers,
    /// Any other value (`delete_because_*`, `read_because_*`, future ones), verbatim.
    Other(String),
}

impl ActionReason {
    /// Classify an `action_reason` string.
    pub fn parse(reason: &str) -> Self {
        match reason {
            "replace_because_tainted" => Self::ReplaceBecauseTainted,
            "replace_because_cannot_update" => Self::ReplaceBecauseCannotUpdate,
            "replace_by_request" => Self::ReplaceByRequest,
            "replace_by_triggers" => Self::ReplaceByTriggers,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Whether the reason explains a replacement (including unknown `replace_*` reasons).
    pub fn is_replace(&self) -> bool {
        match self {
            Self::Other(other) => other.starts_with("replace_"),
            _ => true,
        }
    }
}

impl fmt::Display for ActionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ReplaceBecauseTainted => f.write_str("the object is tainted in state"),
            Self::ReplaceBecauseCannotUpdate => f.write_str("an attribute cannot be updated in place"),
            Self::ReplaceByRequest => f.write_str("replacement was requested with -replace"),
            Self::ReplaceByTriggers => f.write_str("lifecycle.replace_triggered_by fired"),
            Self::Other(other) => write!(f, "Terraform's reason `{other}`"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Action, ActionReason};

    fn strings(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn all_nine_terraform_actions_are_recognised() {
        let cases = [
            (vec!["no-op"], Action::NoOp),
            (vec!["create"], Action::Create),
            (vec!["read"], Action::Read),
            (vec!["update"], Action::Update),
            (vec!["delete", "create"], Action::DeleteThenCreate),
            (vec!["create", "delete"], Action::CreateThenDelete),
            (vec!["delete"], Action::Delete),
            (vec!["forget"], Action::Forget),
            (vec!["create", "forget"], Action::CreateThenForget),
        ];
        for (parts, want) in cases {
            assert_eq!(Action::from_strings(&strings(&parts)), want);
        }
    }

    #[test]
    fn unrecognised_or_reordered_actions_are_unknown() {
        for parts in
            [vec![], vec!["Delete"], vec!["update", "create"], vec!["delete", "create", "delete"], vec!["open"]]
        {
            let actions = strings(&parts);
            assert_eq!(Action::from_strings(&actions), Action::Unknown(actions.clone()));
        }
    }

    #[test]
    fn only_the_two_replace_pairs_are_replacements() {
        assert!(Action::DeleteThenCreate.is_replace());
        assert!(Action::CreateThenDelete.is_replace());
        assert!(!Action::CreateThenForget.is_replace());
        assert!(!Action::Delete.is_replace());
    }

    #[test]
    fn replace_reasons_are_recognised_including_future_ones() {
        assert_eq!(ActionReason::parse("replace_because_tainted"), ActionReason::ReplaceBecauseTainted);
        assert!(ActionReason::parse("replace_by_triggers").is_replace());
        assert!(ActionReason::parse("replace_because_something_new").is_replace());
        assert!(!ActionReason::parse("delete_because_no_resource_config").is_replace());
        assert!(!ActionReason::parse("read_because_config_unknown").is_replace());
    }
}
