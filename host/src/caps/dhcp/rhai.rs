//! `dhcp::*` for workflow scripts, through the same adapter as a plugin's
//! call (checked against `[workflow.grants.dhcp]`, journaled):
//!
//! - `dhcp::reserve(network, mac, ip, name)` → `#{network, mac, ip, name}`;
//!   `network` is a subnet in CIDR form, or `""` for the network whose subnet
//!   holds `ip`.
//! - `dhcp::release(network, mac)` → `true` when a reservation was removed.
//! - `dhcp::lookup(network, mac)` → the reservation, or `()`.
//!
//! Failures throw `#{kind, message}` like every host module (`conflict` for a
//! MAC the controller knows otherwise).

use rhai::{Dynamic, FuncRegistration, ImmutableString, Map, Module, NativeCallContext};

use crate::caps::script_glue::Res;
use crate::caps::script_run::{caps, wit_throw};
use crate::contract::bindings::cradle::host::dhcp::{Host, Reservation};

fn to_map(r: Reservation) -> Map {
    let mut m = Map::new();
    m.insert("network".into(), r.network.into());
    m.insert("mac".into(), r.mac.into());
    m.insert("ip".into(), r.ip.into());
    m.insert("name".into(), r.name.into());
    m
}

/// The `dhcp` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("reserve").set_into_module(
        &mut m,
        |ctx: NativeCallContext,
         network: ImmutableString,
         mac: ImmutableString,
         ip: ImmutableString,
         name: ImmutableString|
         -> Res<Map> {
            Host::reserve(&mut caps(&ctx)?, network.to_string(), mac.to_string(), ip.to_string(), name.to_string())
                .map(to_map)
                .map_err(wit_throw)
        },
    );
    FuncRegistration::new("release").set_into_module(
        &mut m,
        |ctx: NativeCallContext, network: ImmutableString, mac: ImmutableString| -> Res<bool> {
            Host::release(&mut caps(&ctx)?, network.to_string(), mac.to_string()).map_err(wit_throw)
        },
    );
    FuncRegistration::new("lookup").set_into_module(
        &mut m,
        |ctx: NativeCallContext, network: ImmutableString, mac: ImmutableString| -> Res<Dynamic> {
            let found = Host::lookup(&mut caps(&ctx)?, network.to_string(), mac.to_string()).map_err(wit_throw)?;
            Ok(found.map_or(Dynamic::UNIT, |r| to_map(r).into()))
        },
    );
    m
}
