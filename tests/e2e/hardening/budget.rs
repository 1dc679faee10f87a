//! Hardening: budget.
