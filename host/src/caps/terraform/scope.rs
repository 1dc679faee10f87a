//! The `terraform` capability's scope: its grant section
//! (`[...grants.terraform]`: [`TerraformGrant`], the module root), what of a
//! call the grant looks at ([`TerraformCall`]: the module), and the rule: the
//! module must be a plain directory name under the module root. Checked
//! through [`crate::caps::policy::check`] like every call.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::caps::policy::{Caller, Grant, GrantError, OutOfScope};

/// `[...grants.terraform]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerraformGrant {
    /// The directory holding the module directories the plugin may use.
    pub module_root: PathBuf,
}

/// The scope-relevant arguments of a terraform call.
#[derive(Debug, Clone, Copy)]
pub struct TerraformCall<'a> {
    /// The module directory name under the module root; `None` for `info`,
    /// which touches no module.
    pub module: Option<&'a str>,
}

impl Grant for TerraformGrant {
    type Call<'a> = TerraformCall<'a>;

    fn validate(&self) -> Result<(), GrantError> {
        if !self.module_root.is_absolute() {
            return Err(GrantError {
                key: "terraform.module_root",
                value: self.module_root.display().to_string(),
                problem: "must be an absolute path".into(),
            });
        }
        Ok(())
    }

    fn check(&self, caller: &Caller<'_>, call: &TerraformCall<'_>) -> Result<(), OutOfScope> {
        let Some(module) = call.module else { return Ok(()) };
        let plain = !module.is_empty()
            && Path::new(module).components().all(|c| matches!(c, Component::Normal(_)))
            && !module.contains('/');
        if !plain {
            return Err(format!(
                "module `{module}` must be a directory name under {}.terraform.module_root",
                caller.origin
            )
            .into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::policy::check;
    use crate::caps::policy::fixture::scope;
    use crate::caps::{Call, Grants};

    #[test]
    fn terraform_modules_must_be_plain_directory_names() {
        let g: Grants = toml::from_str("[terraform]\nmodule_root = \"/srv/tf\"").expect("grants");
        for bad in ["../etc", "a/b", "", "/abs", ".", "..", "a\\b/.."] {
            assert!(check(&g, "p", &scope(), &Call::Terraform(TerraformCall { module: Some(bad) })).is_err(), "{bad}");
        }
        check(&g, "p", &scope(), &Call::Terraform(TerraformCall { module: Some("test-0") })).expect("plain name");
        check(&g, "p", &scope(), &Call::Terraform(TerraformCall { module: None })).expect("info");
    }
}

#[cfg(test)]
mod validate_tests {
    use crate::caps::Grants;

    #[test]
    fn a_relative_module_root_is_refused_at_load() {
        let g: Grants = toml::from_str("[terraform]\nmodule_root = \"tf\"").expect("grants");
        let err = g.validate().expect_err("relative");
        assert!(err.to_string().contains("terraform.module_root"), "{err}");
    }
}
