//! Fixtures shared by the `cradle` crate's unit tests (a dev-dependency
//! there) and the end-to-end tests in `cradle-tests`. Test code only: it
//! panics on any setup failure, naming what went wrong.

pub mod ansible;
pub mod bind;
pub mod chromium;
pub mod etcd;
pub mod netbox;
