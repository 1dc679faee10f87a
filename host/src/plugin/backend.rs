//! A loaded plugin as the workflow engine sees it: the [`crate::workflow::Backend`]
//! seam. Each call is bound to the VM named by its first argument (a `vm-spec`
//! record), so the plugin's checkpoint and SSH scopes cover that VM only.

use std::sync::Arc;

use anyhow::anyhow;
use wasmtime::component::Val;

use super::LoadedPlugin;
use crate::caps::context::CapCtx;
use crate::caps::policy::{RunScope, ScopedVm};
use crate::caps::run::RunData;
use crate::workflow::{Backend, ExportSig, RunContext};

/// A plugin exposed to workflows.
#[derive(Debug, Clone)]
pub struct PluginBackend {
    plugin: Arc<LoadedPlugin>,
}

impl PluginBackend {
    /// Wrap a loaded plugin.
    pub fn new(plugin: Arc<LoadedPlugin>) -> PluginBackend {
        PluginBackend { plugin }
    }

    /// The plugin.
    pub fn plugin(&self) -> &Arc<LoadedPlugin> {
        &self.plugin
    }
}

impl Backend for PluginBackend {
    fn name(&self) -> &str {
        &self.plugin.name
    }

    fn exports(&self) -> Vec<ExportSig> {
        self.plugin.admitted.exports.clone()
    }

    fn call(&self, run: &RunContext, func: &str, args: Vec<Val>) -> Result<Option<Val>, anyhow::Error> {
        let name = &self.plugin.name;
        let data = run.data::<RunData>().ok_or_else(|| anyhow!("backend `{name}` was called outside a cradle run"))?;
        let vm = args.first().and_then(vm_binding).map(|mut vm| {
            // SSH logins and the replacement flag come from the run's scope
            // (the inventory), never from the call's arguments; the run owns
            // the VM when its workflow holds the VM's lock.
            let in_run = data.scope.vms.iter().find(|v| v.name == vm.name);
            vm.ssh = in_run.and_then(|v| v.ssh.clone());
            vm.allow_replacement = in_run.is_some_and(|v| v.allow_replacement);
            vm.owned = data.run.workflow_holds(&crate::caps::lock::lock_key(&data.services.cluster_id, &vm.name));
            vm
        });
        let scope = RunScope { vms: vm.iter().cloned().collect(), nodes: data.scope.nodes.clone(), operator: false };
        let caps = CapCtx {
            caller: name.clone(),
            origin: format!("plugins.{name}.grants"),
            grants: self.plugin.grants.clone(),
            scope: Arc::new(scope),
            vm: vm.map(|v| v.name),
            run: data.run.clone(),
            services: data.services.clone(),
            clock: None,
        };
        Ok(self.plugin.invoke(caps, func, &args)?)
    }
}

/// The VM a call is about: a record argument with `name` and `vmid` fields
/// (a `vm-spec`). Its SSH login, ownership and replacement flag are filled in
/// from the run.
pub fn vm_binding(arg: &Val) -> Option<ScopedVm> {
    let Val::Record(fields) = arg else { return None };
    let field = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v);
    let Some(Val::String(name)) = field("name") else { return None };
    let Some(Val::U32(vmid)) = field("vmid") else { return None };
    Some(ScopedVm { name: name.clone(), vmid: *vmid, ssh: None, owned: false, allow_replacement: false })
}
