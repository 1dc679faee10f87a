//! Guest host-key generation on the control node (the Trust rule: the guest's
//! SSH host key is made here, pre-seeded through user-data `ssh_keys` and pinned
//! before the first connection).
//!
//! [`generate_host_key`] makes an ed25519 key in-process: 32 bytes from the
//! kernel's random source (`/dev/urandom`; unreadable is an error, never a
//! weaker fallback), encoded in OpenSSH's own formats (the `openssh-key-v1`
//! private key, unencrypted, and the `ssh-ed25519 AAAA… comment` line). No
//! `ssh-keygen` process and no temporary file: the private half only ever
//! exists in memory, as a [`Secret`] (registered with the redactor, printed
//! as `[redacted]`). The tests check the encoding with the real `ssh-keygen -y`.

use std::fs;
use std::io::Read;

use data_encoding::BASE64;

use super::known_hosts::PublicKey;
use crate::contract::CapError;
use crate::secrets::Secret;

/// A host key made for a guest.
#[derive(Debug, Clone)]
pub struct GeneratedHostKey {
    /// The private key in OpenSSH format (for user-data `ssh_keys`).
    pub private_openssh: Secret,
    /// The public key line (`ssh-ed25519 AAAA… comment`).
    pub public: String,
}

impl GeneratedHostKey {
    /// The public key's `SHA256:…` fingerprint.
    pub fn fingerprint(&self) -> Result<String, CapError> {
        super::fingerprint(&self.public)
    }
}

const KEY_TYPE: &str = "ssh-ed25519";

/// Generates an ed25519 host key with `comment` (e.g. the VM's canonical name).
pub async fn generate_host_key(comment: &str) -> Result<GeneratedHostKey, CapError> {
    if comment.chars().any(char::is_control) || comment.len() > 200 {
        return Err(CapError::invalid("ssh: a host key comment must be one line of at most 200 characters"));
    }
    let mut seed = [0u8; 32];
    let mut check = [0u8; 4];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut seed).and_then(|()| f.read_exact(&mut check)))
        .map_err(|e| CapError::failed(format!("ssh: cannot read /dev/urandom to make a host key: {e}")))?;
    let key = ed25519_dalek::SigningKey::from_bytes(&seed);
    let public = key.verifying_key().to_bytes();
    let private = private_openssh(&seed, &public, comment, check);
    seed.fill(0);
    let line = format!("{KEY_TYPE} {} {comment}", BASE64.encode(&public_blob(&public)));
    PublicKey::parse(&line)?;
    Ok(GeneratedHostKey { private_openssh: Secret::new(private), public: line.trim_end().to_string() })
}

/// An SSH wire `string`: u32 length, then the bytes.
fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn public_blob(public: &[u8; 32]) -> Vec<u8> {
    let mut blob = Vec::new();
    put_string(&mut blob, KEY_TYPE.as_bytes());
    put_string(&mut blob, public);
    blob
}

/// The `openssh-key-v1` private key file (PROTOCOL.key in OpenSSH): no
/// cipher, no KDF, one key; the private section carries two equal check
/// ints, the key, the comment and padding to the 8-byte block size.
fn private_openssh(seed: &[u8; 32], public: &[u8; 32], comment: &str, check: [u8; 4]) -> String {
    let mut section = Vec::new();
    section.extend_from_slice(&check);
    section.extend_from_slice(&check);
    put_string(&mut section, KEY_TYPE.as_bytes());
    put_string(&mut section, public);
    let mut pair = Vec::with_capacity(64);
    pair.extend_from_slice(seed);
    pair.extend_from_slice(public);
    put_string(&mut section, &pair);
    pair.fill(0);
    put_string(&mut section, comment.as_bytes());
    let mut pad = 1u8;
    while section.len() % 8 != 0 {
        section.push(pad);
        pad += 1;
    }
    let mut file = b"openssh-key-v1\0".to_vec();
    put_string(&mut file, b"none");
    put_string(&mut file, b"none");
    put_string(&mut file, b"");
    file.extend_from_slice(&1u32.to_be_bytes());
    put_string(&mut file, &public_blob(public));
    put_string(&mut file, &section);
    section.fill(0);
    let body = BASE64.encode(&file);
    file.fill(0);
    let mut text = String::from("-----BEGIN OPENSSH PRIVATE KEY-----\n");
    for chunk in body.as_bytes().chunks(70) {
        text.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        text.push('\n');
    }
    text.push_str("-----END OPENSSH PRIVATE KEY-----\n");
    text
}

/// 16 hex digits from the kernel's random source (time and a counter if it is unreadable).
pub(crate) fn random_hex() -> String {
    let mut b = [0u8; 8];
    if fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).is_err() {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        b = ((nanos as u64) ^ n.rotate_left(32)).to_be_bytes();
    }
    hex::encode(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread().build().expect("rt").block_on(f)
    }

    /// The real `ssh-keygen -y` reads the private key and derives the same
    /// public key: the encoding is what OpenSSH (and sshd on the guest) reads.
    #[test]
    fn openssh_reads_the_private_key_and_derives_the_same_public_key() {
        let key = block_on(generate_host_key("cradle-test-0")).expect("key");
        assert!(key.public.starts_with("ssh-ed25519 AAAA") && key.public.ends_with(" cradle-test-0"), "{}", key.public);
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("key");
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, key.private_openssh.expose().as_bytes()))
            .expect("write key");
        let out = std::process::Command::new("ssh-keygen").arg("-y").arg("-f").arg(&path).output().expect("ssh-keygen");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let derived = String::from_utf8_lossy(&out.stdout);
        let mine: Vec<&str> = key.public.split(' ').take(2).collect();
        let theirs: Vec<&str> = derived.trim().split(' ').take(2).collect();
        assert_eq!(mine, theirs);
        // The comment inside the private key is ours too (`ssh-keygen -l` shows it).
        let listed = std::process::Command::new("ssh-keygen").arg("-l").arg("-f").arg(&path).output().expect("-l");
        assert!(String::from_utf8_lossy(&listed.stdout).contains("cradle-test-0"));
    }

    #[test]
    fn two_keys_differ_and_a_multiline_comment_is_refused() {
        let a = block_on(generate_host_key("a")).expect("a");
        let b = block_on(generate_host_key("a")).expect("b");
        assert_ne!(a.public, b.public);
        assert_ne!(a.private_openssh.expose(), b.private_openssh.expose());
        assert!(block_on(generate_host_key("x\ny")).is_err());
    }
}
