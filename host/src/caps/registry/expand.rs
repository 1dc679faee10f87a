//! `capabilities!`, the generator behind the registry ([`super`]): it turns
//! the registry's lines into the capability list, the grants, the call enum,
//! the dispatch to each capability's rules and the Rhai module list. Each
//! generated item's doc says what it is; the per-capability docs come from
//! the lines. Paths are `$crate::caps::<folder>::scope::<Type>` and
//! `$crate::caps::<folder>::rhai::module`, so a line needs nothing imported.

macro_rules! capabilities {
    (
        always {
            $(
                $(#[doc = $adoc:literal])*
                $AV:ident = $afolder:ident($acall:ident $(<$alt:lifetime>)?) $(, rhai $arhai:ident)?;
            )*
        }
        granted {
            $(
                $(#[doc = $doc:literal])*
                $V:ident = $folder:ident($grant:ident, $call:ident $(<$lt:lifetime>)?) $(, rhai $rhai:ident)?;
            )*
        }
        scripts {
            $( $sname:ident = $($spath:ident)::+; )*
        }
    ) => {
        /// One host capability: a WIT interface a plugin may import, in
        /// registry (WIT) order.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Capability {
            $( $(#[doc = $adoc])* $AV, )*
            $( $(#[doc = $doc])* $V, )*
        }

        impl Capability {
            /// Every capability, in registry (WIT) order.
            pub const ALL: [Capability; [$(stringify!($AV),)* $(stringify!($V),)*].len()] =
                [$(Capability::$AV,)* $(Capability::$V,)*];

            /// The interface name inside the package (`proxmox`), which is
            /// also the grant section's key and the capability's folder.
            pub fn name(self) -> &'static str {
                match self {
                    $( Capability::$AV => stringify!($afolder), )*
                    $( Capability::$V => stringify!($folder), )*
                }
            }
        }

        /// All grants of one plugin or of the workflows, as written in
        /// `cradle.toml` under `[plugins.NAME.grants]` / `[workflow.grants]`.
        ///
        /// A missing section means the capability is not granted at all: a
        /// plugin that imports it is refused before instantiation. Inside a
        /// section, an empty list denies everything and `"*"` allows
        /// everything, so widening a grant is always an explicit edit. Values
        /// are parsed once (serde, then [`Grants::validate`]);
        /// [`policy::check`](crate::caps::policy::check) only compares.
        #[derive(Debug, Clone, Default, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct Grants {
            $(
                $(#[doc = $doc])*
                #[doc = ""]
                #[doc = concat!(
                    "`[...grants.", stringify!($folder), "]`: [`", stringify!($grant), "`](crate::caps::",
                    stringify!($folder), "::scope::", stringify!($grant), ")."
                )]
                #[serde(default)]
                pub $folder: Option<$crate::caps::$folder::scope::$grant>,
            )*
            /// `true` for a built-in plugin's default grants (no `[plugins.NAME]` in
            /// cradle.toml), so a denial can say that a section must be written.
            #[serde(skip)]
            pub builtin_defaults: bool,
        }

        impl Grants {
            /// Whether the capability is granted at all (`log` always is).
            pub fn allows(&self, cap: Capability) -> bool {
                match cap {
                    $( Capability::$AV => true, )*
                    $( Capability::$V => self.$folder.is_some(), )*
                }
            }

            /// Check values that serde cannot (absolute paths, zone spelling):
            /// each granted section's
            /// [`Grant::validate`](crate::caps::policy::Grant::validate), in
            /// registry order.
            pub fn validate(&self) -> Result<(), $crate::caps::policy::GrantError> {
                $(
                    if let Some(grant) = &self.$folder {
                        $crate::caps::policy::Grant::validate(grant)?;
                    }
                )*
                Ok(())
            }

            /// The rules of `call`'s own capability, with its grant section
            /// ([`Grant::check`](crate::caps::policy::Grant::check)); only
            /// [`policy::check`](crate::caps::policy::check) calls this,
            /// after the shared rules.
            pub(in crate::caps) fn check_granted(
                &self,
                caller: &$crate::caps::policy::Caller<'_>,
                call: &Call<'_>,
            ) -> Result<(), $crate::caps::policy::OutOfScope> {
                match call {
                    $( Call::$AV(_) => Ok(()), )*
                    $(
                        Call::$V(call) => match &self.$folder {
                            Some(grant) => $crate::caps::policy::Grant::check(grant, caller, call),
                            // Not reached: `policy::check` asks `allows` first.
                            None => Err($crate::caps::policy::OutOfScope(String::new())),
                        },
                    )*
                }
            }
        }

        /// The scope-relevant arguments of one host call: one variant per
        /// capability, wrapping the call type of its `scope.rs`.
        #[derive(Debug, Clone)]
        pub enum Call<'a> {
            $( $(#[doc = $adoc])* $AV($crate::caps::$afolder::scope::$acall $(<$alt>)?), )*
            $( $(#[doc = $doc])* $V($crate::caps::$folder::scope::$call $(<$lt>)?), )*
        }

        impl Call<'_> {
            /// The capability this call belongs to.
            pub fn capability(&self) -> Capability {
                match self {
                    $( Call::$AV(_) => Capability::$AV, )*
                    $( Call::$V(_) => Capability::$V, )*
                }
            }
        }

        /// Every Rhai module workflow scripts import, by the name they import
        /// it as: each capability's `rhai.rs` that has one, then the
        /// script-only modules.
        pub fn script_modules() -> Vec<(String, rhai::Shared<rhai::Module>)> {
            vec![
                $( $( (stringify!($arhai).to_string(), rhai::Shared::new($crate::caps::$afolder::rhai::module())), )? )*
                $( $( (stringify!($rhai).to_string(), rhai::Shared::new($crate::caps::$folder::rhai::module())), )? )*
                $( (stringify!($sname).to_string(), rhai::Shared::new($crate::caps::$($spath)::+())), )*
            ]
        }
    };
}
