//! Hardening: reliability.
