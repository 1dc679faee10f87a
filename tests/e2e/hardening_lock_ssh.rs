//! Hardening (issue 8): lock_ssh. Tests are added by the work on that part.
