//! Hardening (issue 8): network. Tests are added by the work on that part.
