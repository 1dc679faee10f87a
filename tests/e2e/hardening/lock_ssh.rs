//! Hardening: lock_ssh.
