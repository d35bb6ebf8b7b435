//! The `sealing_key` table: proof of which key seals this database's secrets, so that an API
//! started with another key (another data directory's `secret.key`, a wrong
//! `ANYCLOUD_SECRET_KEY`) stops at once instead of failing every step that opens a secret.

use anycloud_engine::with_pool;

use super::Db;
use crate::secrets::SecretBox;

/// The text sealed as proof.
const PROOF: &[u8] = b"anycloud: this database's secrets are sealed with this key";

/// Why the key does not fit.
#[derive(Debug, thiserror::Error)]
pub enum KeyCheckError {
    /// The database failed.
    #[error("reading the database's key proof")]
    Store(#[from] sqlx::Error),
    /// Another key sealed this database's secrets.
    #[error(
        "this database's secrets were sealed with another key: start the API with the `secret.key` of the data \
         directory that first used this database (or the same ANYCLOUD_SECRET_KEY)"
    )]
    OtherKey,
}

/// Records that `sealer` seals this database's secrets (on first use), or checks that it does.
pub async fn check(db: &Db, sealer: &SecretBox) -> Result<(), KeyCheckError> {
    let proof = sealer.seal(PROOF);
    let stored: String = with_pool!(db.pool(), |pool| {
        sqlx::query("INSERT INTO sealing_key (id, sealed) VALUES (1, $1) ON CONFLICT (id) DO NOTHING")
            .bind(&proof)
            .execute(pool)
            .await?;
        sqlx::query_scalar("SELECT sealed FROM sealing_key WHERE id = 1").fetch_one(pool).await
    })?;
    match sealer.open(&stored) {
        Ok(opened) if opened == PROOF => Ok(()),
        _ => Err(KeyCheckError::OtherKey),
    }
}
