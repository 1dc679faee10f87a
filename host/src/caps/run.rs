//! One run's host-side data, carried through the workflow engine's
//! [`crate::workflow::RunContext`] to host modules and backend calls.

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
    /// The environment's name.
    pub environment: String,
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
