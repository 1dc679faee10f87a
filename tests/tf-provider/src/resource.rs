//! The Terraform side of a VM resource, shared by both flavours: a flavour supplies
//! its schema, plan rules and API operations ([`VmFlavour`]); [`VmResource`] turns them
//! into tf-provider's [`Resource`].
//!
//! Contract: plans never call the API. Read, create, update and delete connect with
//! the flavour's environment first; a connection or API failure becomes one error
//! diagnostic (summary `<resource type>: cannot <verb> the VM`, detail naming the call
//! and PVE's answer), task warnings become warning diagnostics. Read answers `None`
//! (the VM left the state) only when the VM is verifiably gone; on any error it keeps
//! the prior state. A create that failed after the clone still returns the state, so
//! Terraform records the half-made VM (tainted) instead of losing it.

use std::marker::PhantomData;

use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tf_provider::schema::Schema;
use tf_provider::value::ValueEmpty;
use tf_provider::{AttributePath, Diagnostics, Resource};

use crate::api::Pve;
use crate::common::{connect, error, warn_all};
use crate::creds::Flavour;

/// What a flavour provides.
#[async_trait]
pub trait VmFlavour: Send + Sync + 'static {
    /// The resource's state (also its config and plan).
    type State: Serialize + DeserializeOwned + Clone + Send + Sync + 'static;
    /// The resource type name, for diagnostics.
    const TYPE_NAME: &'static str;
    /// Whose environment variables to read.
    const FLAVOUR: Flavour;

    /// The schema.
    fn schema() -> Schema;
    /// The planned new object: computed values unknown; errors for what cannot be created.
    fn plan_create(diags: &mut Diagnostics, proposed: Self::State) -> Self::State;
    /// The planned change (diff suppressions applied) and the paths forcing a replacement.
    fn plan_update(prior: &Self::State, proposed: Self::State) -> (Self::State, Vec<AttributePath>);
    /// Read the VM back (`None`: it is gone).
    async fn refresh(pve: &Pve, prior: Self::State) -> Result<Option<Self::State>, String>;
    /// Create the VM. `Err((Some(state), e))`: it exists but is incomplete.
    async fn create(
        pve: &Pve,
        planned: &Self::State,
        warnings: &mut Vec<String>,
    ) -> Result<Self::State, (Option<Self::State>, String)>;
    /// Change the VM in place.
    async fn update(
        pve: &Pve,
        prior: &Self::State,
        planned: &Self::State,
        warnings: &mut Vec<String>,
    ) -> Result<Self::State, String>;
    /// Delete the VM (already gone is success); returns task warnings.
    async fn delete(pve: &Pve, prior: &Self::State) -> Result<Vec<String>, String>;
}

/// A flavour as a tf-provider resource.
pub struct VmResource<F>(PhantomData<F>);

impl<F> VmResource<F> {
    /// The resource.
    pub fn new() -> Self {
        VmResource(PhantomData)
    }
}

#[async_trait]
impl<F: VmFlavour> Resource for VmResource<F> {
    type State<'a> = F::State;
    type PrivateState<'a> = ValueEmpty;
    type ProviderMetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        Some(F::schema())
    }

    async fn read<'a>(
        &self,
        diags: &mut Diagnostics,
        state: F::State,
        private_state: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<(F::State, ValueEmpty)> {
        let result = match connect(F::FLAVOUR) {
            Ok(pve) => F::refresh(&pve, state.clone()).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(Some(s)) => Some((s, private_state)),
            Ok(None) => None,
            Err(e) => {
                error(diags, format!("{}: cannot read the VM", F::TYPE_NAME), e, None);
                Some((state, private_state))
            }
        }
    }

    async fn plan_create<'a>(
        &self,
        diags: &mut Diagnostics,
        proposed: F::State,
        _config: F::State,
        _meta: ValueEmpty,
    ) -> Option<(F::State, ValueEmpty)> {
        Some((F::plan_create(diags, proposed), ValueEmpty::default()))
    }

    async fn plan_update<'a>(
        &self,
        _diags: &mut Diagnostics,
        prior: F::State,
        proposed: F::State,
        _config: F::State,
        prior_private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<(F::State, ValueEmpty, Vec<AttributePath>)> {
        let (planned, replace) = F::plan_update(&prior, proposed);
        Some((planned, prior_private, replace))
    }

    async fn plan_destroy<'a>(
        &self,
        _diags: &mut Diagnostics,
        _prior: F::State,
        prior_private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<ValueEmpty> {
        Some(prior_private)
    }

    async fn create<'a>(
        &self,
        diags: &mut Diagnostics,
        planned: F::State,
        _config: F::State,
        private_state: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<(F::State, ValueEmpty)> {
        let pve = match connect(F::FLAVOUR) {
            Ok(p) => p,
            Err(e) => {
                error(diags, format!("{}: cannot create the VM", F::TYPE_NAME), e, None);
                return None;
            }
        };
        let mut warnings = Vec::new();
        let result = F::create(&pve, &planned, &mut warnings).await;
        warn_all(diags, F::TYPE_NAME, warnings);
        match result {
            Ok(s) => Some((s, private_state)),
            Err((partial, e)) => {
                error(diags, format!("{}: cannot create the VM", F::TYPE_NAME), e, None);
                partial.map(|s| (s, private_state))
            }
        }
    }

    async fn update<'a>(
        &self,
        diags: &mut Diagnostics,
        prior: F::State,
        planned: F::State,
        _config: F::State,
        private_state: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<(F::State, ValueEmpty)> {
        let mut warnings = Vec::new();
        let result = match connect(F::FLAVOUR) {
            Ok(pve) => F::update(&pve, &prior, &planned, &mut warnings).await,
            Err(e) => Err(e),
        };
        warn_all(diags, F::TYPE_NAME, warnings);
        match result {
            Ok(s) => Some((s, private_state)),
            Err(e) => {
                error(diags, format!("{}: cannot update the VM", F::TYPE_NAME), e, None);
                None
            }
        }
    }

    async fn destroy<'a>(
        &self,
        diags: &mut Diagnostics,
        prior: F::State,
        _private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<()> {
        let result = match connect(F::FLAVOUR) {
            Ok(pve) => F::delete(&pve, &prior).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(w) => {
                warn_all(diags, F::TYPE_NAME, w);
                Some(())
            }
            Err(e) => {
                error(diags, format!("{}: cannot delete the VM", F::TYPE_NAME), e, None);
                None
            }
        }
    }
}
