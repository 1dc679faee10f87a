//! Hardening: network.
