//! Hardening (issue 8): budget. Tests are added by the work on that part.
