//! One run's host-side data, carried through the workflow engine's
//! [`crate::workflow::RunContext`] to host modules and backend calls.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::caps::Grants;
use crate::caps::context::{CapCtx, RunHandle, Services};
use crate::caps::policy::RunScope;
use crate::workflow::BackendHandle;

/// What every capability call of a run needs.
#[derive(Clone)]
pub struct RunData {
    /// The run (id, journal, held locks).
    pub run: Arc<RunHandle>,
    /// The environment's services.
    pub services: Arc<Services>,
    /// The workflow's own grants (`[workflow.grants]`).
    pub workflow_grants: Arc<Grants>,
    /// The run's VMs and the cluster's nodes.
    pub scope: Arc<RunScope>,
    /// The environment's backend, as scripts see it (`cradle::backend()`).
    pub backend: Option<BackendHandle>,
    /// The grants of that backend plugin (`[plugins.NAME.grants]`, or a
    /// built-in's defaults), so `cradle::check_grants` can hold a VM against
    /// them before the first side effect, with the same policy check the
    /// plugin's calls will meet.
    pub backend_grants: Option<BackendGrants>,
    /// The environment's integration plugins by role (`cradle::plugin("ROLE")`).
    pub plugins: Arc<PluginRoles>,
    /// The environment's name.
    pub environment: String,
}

/// The integration plugins a run's environment gives each role: its
/// `[environments.NAME] plugins` entries over the integration plugins'
/// own names (`Config::roles`).
#[derive(Debug, Clone, Default)]
pub struct PluginRoles {
    /// Role → the plugin's handle.
    pub roles: BTreeMap<String, BackendHandle>,
    /// The configuration file, for the message of a role with no plugin.
    pub config: String,
}

impl PluginRoles {
    /// The plugin of `role`, or a message naming the environment, the role
    /// and how to give the role a plugin.
    pub fn get(&self, environment: &str, role: &str) -> Result<BackendHandle, String> {
        self.roles.get(role).cloned().ok_or_else(|| {
            let known = if self.roles.is_empty() {
                "none".to_string()
            } else {
                self.roles.keys().cloned().collect::<Vec<_>>().join(", ")
            };
            format!(
                "cradle::plugin(\"{role}\"): environment `{environment}` has no plugin for role `{role}` (roles: {known}); \
                 in {}, map it with [environments.{environment}] plugins = {{ {role} = \"NAME\" }}, or configure \
                 [plugins.{role}] with kind = \"integration\"",
                self.config
            )
        })
    }
}

/// A backend plugin's name and grants.
#[derive(Debug, Clone)]
pub struct BackendGrants {
    /// The plugin's name in cradle.toml (`direct`).
    pub name: String,
    /// What it is granted.
    pub grants: Arc<Grants>,
}

impl RunData {
    /// The capability context for calls made by the workflow script itself.
    pub fn workflow_caps(&self, vm: Option<String>) -> CapCtx {
        CapCtx {
            caller: "workflow".into(),
            origin: "workflow.grants".into(),
            grants: self.workflow_grants.clone(),
            scope: self.scope.clone(),
            vm,
            run: self.run.clone(),
            services: self.services.clone(),
            clock: None,
        }
    }
}

impl std::fmt::Debug for RunData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunData")
            .field("run", &self.run.run_id)
            .field("environment", &self.environment)
            .finish_non_exhaustive()
    }
}
