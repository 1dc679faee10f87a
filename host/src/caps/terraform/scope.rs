//! The `terraform` capability's scope: its grant section
//! (`[...grants.terraform]`: [`TerraformGrant`], the module root), what of a
//! call the grant looks at ([`TerraformCall`]: the module, whether it plans a
//! destroy), and the rules: the module must be a plain directory name under
//! the module root, and a destroy plan needs `destructive = true` (as the
//! Proxmox grant's destroy does). Checked through
//! [`crate::caps::policy::check`] like every call.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::caps::policy::{Caller, Grant, GrantError, OutOfScope};

/// `[...grants.terraform]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerraformGrant {
    /// The directory holding the module directories the plugin may use
    /// (relative to cradle.toml; absolute once the configuration is loaded).
    pub module_root: PathBuf,
    /// Whether `plan` may make a destroy plan (`cradle remove`).
    #[serde(default)]
    pub destructive: bool,
}

/// The scope-relevant arguments of a terraform call.
#[derive(Debug, Clone, Copy)]
pub struct TerraformCall<'a> {
    /// The module directory name under the module root; `None` for `info`,
    /// which touches no module.
    pub module: Option<&'a str>,
    /// The call makes a destroy plan.
    pub destroy: bool,
}

impl Grant for TerraformGrant {
    type Call<'a> = TerraformCall<'a>;

    fn validate(&self) -> Result<(), GrantError> {
        if !self.module_root.is_absolute() {
            return Err(GrantError {
                key: "terraform.module_root",
                value: self.module_root.display().to_string(),
                problem: "must be an absolute path (a cradle.toml path is resolved against its directory)".into(),
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
        if call.destroy && !self.destructive {
            return Err(format!(
                "a destroy plan of module `{module}` is destructive and {}.terraform.destructive is not true",
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
            assert!(
                check(&g, "p", &scope(), &Call::Terraform(TerraformCall { module: Some(bad), destroy: false }))
                    .is_err(),
                "{bad}"
            );
        }
        check(&g, "p", &scope(), &Call::Terraform(TerraformCall { module: Some("test-0"), destroy: false }))
            .expect("plain name");
        check(&g, "p", &scope(), &Call::Terraform(TerraformCall { module: None, destroy: false })).expect("info");
    }

    #[test]
    fn a_destroy_plan_needs_the_destructive_grant() {
        let call = Call::Terraform(TerraformCall { module: Some("web-1"), destroy: true });
        let plain: Grants = toml::from_str("[terraform]\nmodule_root = \"/srv/tf\"").expect("grants");
        let err = check(&plain, "plugins.terraform.grants", &scope(), &call).expect_err("denied");
        assert!(err.scope.contains("plugins.terraform.grants.terraform.destructive"), "{}", err.scope);
        let destructive: Grants =
            toml::from_str("[terraform]\nmodule_root = \"/srv/tf\"\ndestructive = true").expect("grants");
        check(&destructive, "p", &scope(), &call).expect("granted");
    }
}

#[cfg(test)]
mod validate_tests {
    use crate::caps::Grants;

    #[test]
    fn a_module_root_left_relative_is_refused() {
        let g: Grants = toml::from_str("[terraform]\nmodule_root = \"tf\"").expect("grants");
        let err = g.validate().expect_err("relative");
        assert!(err.to_string().contains("terraform.module_root"), "{err}");
    }
}
