//! The provider: an empty configuration block and the two resource types.
//!
//! Contract: the provider schema has no attributes (the real providers' settings come
//! from the environment, see [`crate::creds`]), so `provider "proxmox" {}` works and
//! configuring never fails; the environment is read by each resource operation, for
//! the flavour of that resource. Served under the name `proxmox`, the resources are
//! `proxmox_vm_qemu` (telmate) and `proxmox_virtual_environment_vm` (bpg); one binary
//! serves both source addresses.

use std::collections::HashMap;

use async_trait::async_trait;
use tf_provider::schema::{Block, Description, Schema};
use tf_provider::value::ValueEmpty;
use tf_provider::{DynamicDataSource, DynamicResource, Provider};

use crate::bpg::Bpg;
use crate::resource::VmResource;
use crate::telmate::Telmate;

/// The provider.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProxmoxProvider;

#[async_trait]
impl Provider for ProxmoxProvider {
    type Config<'a> = ValueEmpty;
    type MetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut tf_provider::Diagnostics) -> Option<Schema> {
        let block = Block {
            version: 0,
            description: Description::plain("Proxmox VE (test provider: credentials come from the environment)"),
            ..Default::default()
        };
        Some(Schema { version: 0, block })
    }

    fn get_resources(
        &self,
        _diags: &mut tf_provider::Diagnostics,
    ) -> Option<HashMap<String, Box<dyn DynamicResource>>> {
        let mut m: HashMap<String, Box<dyn DynamicResource>> = HashMap::new();
        m.insert("vm_qemu".into(), Box::new(VmResource::<Telmate>::new()));
        m.insert("virtual_environment_vm".into(), Box::new(VmResource::<Bpg>::new()));
        Some(m)
    }

    fn get_data_sources(
        &self,
        _diags: &mut tf_provider::Diagnostics,
    ) -> Option<HashMap<String, Box<dyn DynamicDataSource>>> {
        Some(HashMap::new())
    }
}
