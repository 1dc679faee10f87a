//! DHCP in the simulated cluster, from the UniFi stand-in (filled in with the guest side).
