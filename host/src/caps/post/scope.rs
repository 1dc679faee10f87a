//! The `post` capability's scope: its grant section (`[...grants.post]`:
//! [`PostGrant`], the projects and task templates a caller may run), what of
//! a call the grant looks at ([`PostCall`]: the project and the template),
//! and the rule comparing them: the project must be listed in `projects`
//! and the template in `templates`. Template ids are the server's own
//! (unique across its projects), so listing both names exactly which
//! playbooks the caller may start; an empty list grants nothing.
//!
//! Checked through [`crate::caps::policy::check`] like every call, before the
//! provider is asked.

use serde::Deserialize;

use crate::caps::policy::{Caller, Grant, GrantError, OutOfScope};

/// `[...grants.post]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostGrant {
    /// The projects whose templates may run (ids).
    #[serde(default)]
    pub projects: Vec<u32>,
    /// The task templates that may run (ids).
    #[serde(default)]
    pub templates: Vec<u32>,
}

/// The scope-relevant arguments of a post call.
#[derive(Debug, Clone, Copy)]
pub struct PostCall {
    /// The project.
    pub project: u32,
    /// The task template.
    pub template: u32,
}

fn list(ids: &[u32]) -> String {
    if ids.is_empty() { "none".into() } else { ids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ") }
}

impl Grant for PostGrant {
    type Call<'a> = PostCall;

    fn validate(&self) -> Result<(), GrantError> {
        if let Some(zero) = self.projects.iter().chain(&self.templates).find(|id| **id == 0) {
            return Err(GrantError {
                key: "post.projects/templates",
                value: zero.to_string(),
                problem: "is not an id (Semaphore's ids start at 1)".into(),
            });
        }
        Ok(())
    }

    fn check(&self, caller: &Caller<'_>, call: &PostCall) -> Result<(), OutOfScope> {
        let origin = caller.origin;
        if !self.projects.contains(&call.project) {
            return Err(format!(
                "project {} is not in {origin}.post.projects ({})",
                call.project,
                list(&self.projects)
            )
            .into());
        }
        if !self.templates.contains(&call.template) {
            return Err(format!(
                "template {} (project {}) is not in {origin}.post.templates ({})",
                call.template,
                call.project,
                list(&self.templates)
            )
            .into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::Call;
    use crate::caps::policy::fixture::{allowed, denied};

    fn run(project: u32, template: u32) -> Call<'static> {
        Call::Post(PostCall { project, template })
    }

    #[test]
    fn a_project_not_granted_is_denied_naming_the_key() {
        let msg = denied(run(2, 7));
        assert!(msg.contains("project 2 is not in plugins.direct.grants.post.projects (1)"), "{msg}");
        allowed(run(1, 7));
    }

    #[test]
    fn a_template_not_granted_is_denied_even_in_a_granted_project() {
        let msg = denied(run(1, 8));
        assert!(msg.contains("template 8 (project 1) is not in plugins.direct.grants.post.templates (7)"), "{msg}");
    }

    #[test]
    fn post_without_a_grant_section_is_denied_naming_the_section() {
        let grants: crate::caps::Grants = toml::from_str("[dns]\nzones = [\"lab.example.\"]\n").expect("grants");
        let scope = crate::caps::policy::fixture::scope();
        let denied = crate::caps::policy::check(&grants, "workflow.grants", &scope, &run(1, 7)).expect_err("no grant");
        assert!(denied.to_string().contains("add [workflow.grants.post]"), "{denied}");
    }

    #[test]
    fn a_grant_id_of_zero_is_refused_when_read() {
        let e = PostGrant { projects: vec![1], templates: vec![0] }.validate().expect_err("0");
        assert_eq!(e.value, "0");
    }
}
