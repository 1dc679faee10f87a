//! `[post.NAME]` in `cradle.toml`: one post-provision task provider an
//! environment names with `post = "NAME"`.
//!
//! Contract: the provider reaches its server through a named endpoint of
//! `[endpoints]` (its URL, `ca_file` and API token, `auth = "bearer"`),
//! which the loader checks exists; the token stays the host's and never
//! reaches a plugin or script. `poll_ms` is how often a running task is
//! asked about (Semaphore has no long poll; 2000 ms by default).

use serde::Deserialize;

/// `[post.NAME]`: a task runner cradle starts post-provision tasks on.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostProviderConfig {
    /// The provider: `semaphore` (Semaphore UI task templates).
    pub kind: PostProviderKind,
    /// The endpoint (a key of `[endpoints]`) with the server's URL
    /// (`https://semaphore.example`, the API below `/api/`) and API token.
    pub endpoint: String,
    /// Milliseconds between two looks at a running task (default 2000).
    #[serde(default = "default_poll_ms")]
    pub poll_ms: u64,
}

/// The task runners cradle speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PostProviderKind {
    /// Semaphore UI (task templates of a project).
    Semaphore,
}

fn default_poll_ms() -> u64 {
    2000
}

/// The bounds of `poll_ms`: often enough to notice the end, seldom enough
/// not to load the server.
pub const POLL_MS_RANGE: std::ops::RangeInclusive<u64> = 10..=600_000;

impl PostProviderConfig {
    /// Check what needs neither the network nor the secret; the message names
    /// the key (relative to `[post.NAME]`).
    pub fn validate(&self) -> Result<(), String> {
        if self.endpoint.trim().is_empty() {
            return Err("endpoint is empty; name the [endpoints.NAME] of the Semaphore server".into());
        }
        if !POLL_MS_RANGE.contains(&self.poll_ms) {
            return Err(format!(
                "poll_ms = {} is outside {}..={} (milliseconds between two looks at a running task)",
                self.poll_ms,
                POLL_MS_RANGE.start(),
                POLL_MS_RANGE.end()
            ));
        }
        Ok(())
    }
}
