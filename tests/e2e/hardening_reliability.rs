//! Hardening (issue 8): reliability. Tests are added by the work on that part.
