//! SSH key helpers: generate ed25519 keys (OpenSSH text) from the OS RNG.
//!
//! Failure mode: encoding errors are returned as text; callers decide whether a guest
//! without a key simply does not answer SSH.

use russh::keys::ssh_key::LineEnding;
use russh::keys::ssh_key::private::Ed25519Keypair;

/// A fresh ed25519 private key in OpenSSH format.
pub fn generate_ed25519_openssh() -> Result<String, String> {
    let seed: [u8; 32] = crate::model::ids::random_bytes();
    let key = russh::keys::PrivateKey::from(Ed25519Keypair::from_seed(&seed));
    key.to_openssh(LineEnding::LF).map(|s| s.to_string()).map_err(|e| e.to_string())
}

/// The OpenSSH public line of a private key text.
pub fn public_openssh(private: &str) -> Result<String, String> {
    let key = russh::keys::PrivateKey::from_openssh(private).map_err(|e| e.to_string())?;
    key.public_key().to_openssh().map_err(|e| e.to_string())
}
