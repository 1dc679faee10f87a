//! A loaded plugin as the workflow engine sees it: the [`crate::workflow::Backend`]
//! seam. Each call is bound to the VM named by its first argument (a `vm-spec`
//! record), so the plugin's checkpoint and SSH scopes cover that VM only.
//!
//! The `lifecycle` exports go through the generated bindings
//! ([`super::lifecycle`]): the VM is read from the typed `VmSpec`, so a WIT
//! rename of its fields is a compile error. Exports beyond `lifecycle` go by
//! name ([`LoadedPlugin::invoke`]), as do all of an integration plugin's
//! (`kind = "integration"`): the same capability context, bound the same way
//! (a first argument that is a `vm-spec` binds that VM; otherwise no VM).

use std::sync::Arc;

use anyhow::anyhow;
use rhai::Dynamic;
use rhai::serde::from_dynamic;
use wasmtime::component::Val;

use super::LoadedPlugin;
use super::lifecycle::{LifecycleCall, returned_error};
use crate::builtin::catalogue::PluginKind;
use crate::caps::context::CapCtx;
use crate::caps::policy::{RunScope, ScopedVm};
use crate::caps::run::RunData;
use crate::contract::bindings::cradle::host::types::VmSpec;
use crate::workflow::{Backend, CallError, ExportSig, RunContext, from_val};

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

    fn kind(&self) -> &'static str {
        match self.plugin.admitted.kind {
            PluginKind::Backend => "backend",
            PluginKind::Integration => "plugin",
        }
    }

    fn exports(&self) -> Vec<ExportSig> {
        self.plugin.admitted.exports.clone()
    }

    fn call(&self, run: &RunContext, func: &str, args: Vec<Val>) -> Result<Option<Val>, anyhow::Error> {
        // An export beyond `lifecycle`: its first argument binds the VM when
        // it is a `vm-spec` record, read through the typed record.
        let vm = args.first().map(from_val).and_then(|first| from_dynamic::<VmSpec>(&first).ok());
        let caps = self.caps(run, vm.as_ref())?;
        Ok(self.plugin.invoke(caps, func, &args)?)
    }

    fn call_typed(&self, run: &RunContext, func: &str, args: &[Dynamic]) -> Option<Result<Dynamic, CallError>> {
        // An integration plugin has no lifecycle: every call goes by name,
        // even one whose name a lifecycle function has.
        if self.plugin.admitted.kind != PluginKind::Backend {
            return None;
        }
        let call = match LifecycleCall::parse(func, args)? {
            Ok(call) => call,
            Err(e) => return Some(Err(e)),
        };
        let outcome = self
            .caps(run, Some(call.vm()))
            .and_then(|caps| Ok(self.plugin.lifecycle(caps, func, |guest, store| call.invoke(guest, store))?));
        Some(match outcome {
            Err(e) => Err(CallError::Failed(e)),
            Ok(Err(returned)) => Err(returned_error(returned)),
            Ok(Ok(value)) => value.to_script(),
        })
    }
}

impl PluginBackend {
    /// The capability context of one call about `vm` (none: no VM in scope).
    fn caps(&self, run: &RunContext, vm: Option<&VmSpec>) -> Result<CapCtx, anyhow::Error> {
        let name = &self.plugin.name;
        let data = run.data::<RunData>().ok_or_else(|| anyhow!("plugin `{name}` was called outside a cradle run"))?;
        let vm = vm.map(vm_binding).map(|mut vm| {
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
        Ok(CapCtx {
            caller: name.clone(),
            origin: format!("plugins.{name}.grants"),
            grants: self.plugin.grants.clone(),
            scope: Arc::new(scope),
            vm: vm.map(|v| v.name),
            run: data.run.clone(),
            services: data.services.clone(),
            clock: None,
        })
    }
}

/// The VM a call is about, from its `vm-spec`. Its SSH login, ownership and
/// replacement flag are filled in from the run, never from the spec.
pub fn vm_binding(spec: &VmSpec) -> ScopedVm {
    ScopedVm { name: spec.name.clone(), vmid: spec.vmid, ssh: None, owned: false, allow_replacement: false }
}
