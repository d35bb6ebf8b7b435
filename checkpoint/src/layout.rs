//! Where things live in the bucket, and the one object that says which generation is current.
//!
//! ```text
//! PREFIX/HEAD                                  {"format":1,"generation":"00000007-3f9a1c2e",...}
//! PREFIX/generations/GEN/snapshot              the database file when GEN began
//! PREFIX/generations/GEN/wal/0000000000        committed WAL bytes, in order, from 0 up;
//! PREFIX/generations/GEN/wal/0000000001          the first missing number ends the generation,
//! PREFIX/generations/GEN/wal/0000000002 (seal)   or a seal written there by whoever took over
//! PREFIX/identity/token, identity/secret.key   the API's bearer token and sealing key
//! ```
//!
//! Every object but `HEAD` is written once, with create-if-absent. `HEAD` is replaced only with
//! replace-if-unchanged. That is the whole fence: an API that took the bucket over sealed the
//! previous generation at its next WAL number (so the previous writer's next ship fails) and
//! moved `HEAD` (so a concurrent taker's move fails).

use serde::{Deserialize, Serialize};

/// The bucket's layout under one prefix.
#[derive(Clone, Debug)]
pub struct Layout {
    prefix: String,
}

/// The current generation, as `HEAD` says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// The layout's version: 1.
    pub format: u32,
    /// The current generation's name: a count, then a random suffix.
    pub generation: String,
    /// Which API began it (its id).
    pub api: String,
    /// When (RFC 3339, for people).
    pub began_at: String,
}

impl Head {
    /// The count part of the generation's name.
    pub fn number(&self) -> u64 {
        self.generation.split('-').next().and_then(|n| n.parse().ok()).unwrap_or(0)
    }
}

/// The name of the generation after one numbered `previous`.
pub fn next_generation(previous: u64) -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{:08}-{}", previous + 1, &suffix[..8])
}

impl Layout {
    /// The layout under `prefix` (empty, or ending in `/`).
    pub fn new(prefix: &str) -> Self {
        Self { prefix: prefix.to_owned() }
    }

    /// The object naming the current generation.
    pub fn head(&self) -> String {
        format!("{}HEAD", self.prefix)
    }

    /// A generation's snapshot.
    pub fn snapshot(&self, generation: &str) -> String {
        format!("{}generations/{generation}/snapshot", self.prefix)
    }

    /// A generation's WAL segment number `n`.
    pub fn segment(&self, generation: &str, n: u64) -> String {
        format!("{}generations/{generation}/wal/{n:010}", self.prefix)
    }

    /// A file of the API's identity.
    pub fn identity(&self, file: &str) -> String {
        format!("{}identity/{file}", self.prefix)
    }
}
