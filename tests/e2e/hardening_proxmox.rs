//! Hardening (issue 8): proxmox. Tests are added by the work on that part.
