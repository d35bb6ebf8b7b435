//! One function per user-visible operation, each in its own file. An operation validates the
//! request, takes the locks it needs, submits its workflow run and writes its records in one
//! transaction, and returns a typed answer ([`crate::api`]) or a typed refusal
//! ([`crate::refusal`]). The HTTP handlers only decode, call one of these, and encode.
//!
//! | operation | file | run it submits |
//! | --- | --- | --- |
//! | save a credential | `save_credential.rs` | `credentials.verify` |
//! | delete a credential | `delete_credential.rs` | none |
//! | list and show credentials | `show_credentials.rs` | none |
//! | create a cluster | `create_cluster.rs` | `cluster.create` |
//! | delete a cluster | `delete_cluster.rs` | `cluster.delete` |
//! | list and show clusters | `show_clusters.rs` | none |
//! | list, inspect, retry, resume, cancel workflows | `workflows.rs` | none |

mod create_cluster;
mod delete_cluster;
mod delete_credential;
mod save_credential;
mod show_clusters;
mod show_credentials;
mod workflows;

use std::sync::Arc;

use anycloud_engine::Engine;

use crate::deps::Deps;

/// The API's operations, on its engine and its dependencies. Cheap to clone.
#[derive(Clone)]
pub struct Operations {
    engine: Arc<Engine>,
    deps: Deps,
    /// The API may create clusters (a hosted API); a local one may not.
    hosted: bool,
    /// The API's id, for the messages that name it.
    api_id: Arc<str>,
}

impl Operations {
    /// The operations of the API `api_id` (hosted or local), on `engine`.
    pub fn new(engine: Arc<Engine>, deps: Deps, api_id: &str, hosted: bool) -> Self {
        Self { engine, deps, hosted, api_id: api_id.into() }
    }

    /// The engine the operations submit to.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}
