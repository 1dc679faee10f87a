//! (tests follow)
