//! The Anycloud domain: the records the API keeps (credentials, and clusters and deployments as
//! they come), the cloud providers, and the workflows that act on them, written on
//! `anycloud-engine`.
//!
//! - [`credentials`]: saving, listing and opening credentials; secrets sealed by [`secrets`].
//! - [`providers`]: AWS (aws-sdk-ec2), GCP (google-cloud-compute-v1) and the simulated cloud.
//! - [`verify_credential`]: the `credentials.verify` workflow.
//! - [`clusters`]: cluster, VM and deployment records; [`cluster_create`] and [`cluster_delete`]:
//!   the workflows that act on them through the [`cloud::Cloud`] interface and [`kube_api`].

pub mod cloud;
pub mod cluster_create;
pub mod cluster_delete;
pub mod cluster_deps;
pub mod cluster_secrets;
pub mod clusters;
pub mod credentials;
pub mod kube_api;
pub mod names;
pub mod providers;
pub mod secrets;
pub mod user_data;
pub mod verify_credential;

use anycloud_engine::{EngineError, Store};

/// Brings the domain's tables up to date in the engine's database.
pub async fn migrate(store: &Store) -> Result<(), EngineError> {
    match store.pool() {
        anycloud_engine::Pool::Sqlite(pool) => {
            let mut migrator = sqlx::migrate!("./migrations/sqlite");
            migrator.set_ignore_missing(true);
            migrator.run(pool).await.map_err(EngineError::Migrate)
        }
        anycloud_engine::Pool::Postgres(pool) => {
            let mut migrator = sqlx::migrate!("./migrations/postgres");
            migrator.set_ignore_missing(true);
            migrator.run(pool).await.map_err(EngineError::Migrate)
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
