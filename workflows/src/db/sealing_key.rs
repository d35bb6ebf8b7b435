//! The `sealing_key` table: proof of which key seals this database's secrets, so that an API
//! started with another key (another data directory's `secret.key`, a wrong
//! `ANYCLOUD_SECRET_KEY`) stops at once instead of failing every step that opens a secret.
//!
//! The same check brings older databases up to date: a value sealed before seals were bound to
//! their place (table, column, row; `crate::secrets`) is re-sealed for its place, in place, so
//! that every value opens only where it is stored. It runs at every start, before anything
//! reads a secret; a value that does not open is left as it is (it is refused when read).

use anycloud_engine::{execute, with_pool};

use super::{Db, SEALED_COLUMNS, SealedColumn};
use crate::secrets::{Place, SecretBox, SecretError};

/// The text sealed as proof.
const PROOF: &[u8] = b"anycloud: this database's secrets are sealed with this key";

/// Where the proof is sealed (the table's one row).
const PROOF_PLACE: Place<'static> = Place { table: "sealing_key", column: "sealed", row: "1" };

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

/// Records that `sealer` seals this database's secrets (on first use), or checks that it does;
/// then re-seals for its place every value sealed without one. Answers how many were re-sealed.
pub async fn check(db: &Db, sealer: &SecretBox) -> Result<u64, KeyCheckError> {
    let proof = sealer.seal(PROOF_PLACE, PROOF);
    let stored: String = with_pool!(db.pool(), |pool| {
        sqlx::query("INSERT INTO sealing_key (id, sealed) VALUES (1, $1) ON CONFLICT (id) DO NOTHING")
            .bind(&proof)
            .execute(pool)
            .await?;
        sqlx::query_scalar("SELECT sealed FROM sealing_key WHERE id = 1").fetch_one(pool).await
    })?;
    match sealer.open(PROOF_PLACE, &stored) {
        Ok(opened) if opened == PROOF => {}
        Err(SecretError::Unbound { .. }) => {
            // A proof from before places: it proves the key if it opens; then it is bound too.
            let rebound = sealer.rebind(PROOF_PLACE, &stored).ok().flatten().ok_or(KeyCheckError::OtherKey)?;
            if sealer.open(PROOF_PLACE, &rebound).ok().as_deref() != Some(PROOF) {
                return Err(KeyCheckError::OtherKey);
            }
            execute!(db.pool(), "UPDATE sealing_key SET sealed = $1 WHERE id = 1 AND sealed = $2", &rebound, &stored)?;
        }
        _ => return Err(KeyCheckError::OtherKey),
    }
    let mut rebound = 0;
    for column in SEALED_COLUMNS {
        rebound += rebind_column(db, sealer, column).await?;
    }
    if rebound > 0 {
        tracing::info!(rebound, "re-sealed secrets sealed before their place was bound");
    }
    Ok(rebound)
}

/// Re-seals for its place every value of `column` sealed without one; each is replaced only if
/// it is still the value read.
async fn rebind_column(db: &Db, sealer: &SecretBox, column: SealedColumn) -> Result<u64, sqlx::Error> {
    let SealedColumn { table, key, column: name } = column;
    let select = sqlx::AssertSqlSafe(format!(
        "SELECT {key}, {name} FROM {table} WHERE {name} IS NOT NULL AND {name} NOT LIKE 'v2:%'"
    ));
    let rows: Vec<(String, String)> = with_pool!(db.pool(), |pool| sqlx::query_as(select).fetch_all(pool).await)?;
    let mut rebound = 0;
    for (row, sealed) in rows {
        let place = column.place(&row);
        match sealer.rebind(place, &sealed) {
            Ok(Some(bound)) => {
                let update =
                    sqlx::AssertSqlSafe(format!("UPDATE {table} SET {name} = $1 WHERE {key} = $2 AND {name} = $3"));
                rebound += execute!(db.pool(), update, &bound, &row, &sealed)?;
            }
            Ok(None) => {}
            Err(err) => tracing::warn!(%place, error = %err, "a sealed value does not open: left as it is"),
        }
    }
    Ok(rebound)
}

#[cfg(test)]
mod tests {
    use anycloud_engine::execute;

    use super::*;
    use crate::cloud::ProviderKind;
    use crate::db::credentials::{self, NewRecord, OpenError, PublicPart};
    use crate::test_support::{FakeAnswer, TestWorld};

    async fn add(db: &Db, sealer: &SecretBox, name: &str, secret: &str) {
        let record = NewRecord {
            name: name.into(),
            provider: ProviderKind::Sim,
            public: PublicPart::default(),
            secret: secret.into(),
        };
        let mut tx = db.begin().await.unwrap();
        credentials::insert_in(&mut tx, &record, sealer, "run", 0).await.unwrap();
        tx.commit().await.unwrap();
    }

    async fn stored(db: &Db, name: &str) -> String {
        with_pool!(db.pool(), |pool| {
            sqlx::query_scalar("SELECT secret FROM credentials WHERE name = $1").bind(name).fetch_one(pool).await
        })
        .unwrap()
    }

    async fn store(db: &Db, name: &str, sealed: &str) {
        execute!(db.pool(), "UPDATE credentials SET secret = $2 WHERE name = $1", name, sealed).unwrap();
    }

    #[tokio::test]
    async fn a_database_sealed_without_places_is_rebound_at_start_and_a_moved_value_does_not_open() {
        let world = TestWorld::new(FakeAnswer::Accept).await;
        let (db, sealer) = (&world.deps.db, &world.deps.sealer);
        // A database from before places: its proof and its secrets sealed without one.
        execute!(db.pool(), "INSERT INTO sealing_key (id, sealed) VALUES (1, $1)", sealer.seal_unbound(PROOF)).unwrap();
        for (name, secret) in [("alpha", "alpha-secret"), ("beta", "beta-secret")] {
            add(db, sealer, name, secret).await;
            store(db, name, &sealer.seal_unbound(secret.as_bytes())).await;
        }
        let err = credentials::open(db, sealer, "alpha").await.unwrap_err();
        assert!(matches!(err, OpenError::Secret(SecretError::Unbound { .. })), "{err:?}");

        assert_eq!(check(db, sealer).await.unwrap(), 2);
        for (name, secret) in [("alpha", "alpha-secret"), ("beta", "beta-secret")] {
            assert!(stored(db, name).await.starts_with("v2:"));
            let (_, opened) = credentials::open(db, sealer, name).await.unwrap().unwrap();
            assert_eq!(opened, secret);
        }
        // The proof is bound too, and a second start finds nothing left to do.
        let proof: String = with_pool!(db.pool(), |pool| {
            sqlx::query_scalar("SELECT sealed FROM sealing_key WHERE id = 1").fetch_one(pool).await
        })
        .unwrap();
        assert_eq!(sealer.open(PROOF_PLACE, &proof).unwrap(), PROOF);
        assert_eq!(check(db, sealer).await.unwrap(), 0);

        // alpha's secret copied into beta's row does not open there.
        store(db, "beta", &stored(db, "alpha").await).await;
        let err = credentials::open(db, sealer, "beta").await.unwrap_err();
        let OpenError::Secret(err @ SecretError::Open { .. }) = err else { panic!("{err:?}") };
        assert!(err.to_string().contains("credentials.secret of row `beta`"), "{err}");
        // An unbound value written after the start is refused, not opened.
        store(db, "beta", &sealer.seal_unbound(b"beta-secret")).await;
        let err = credentials::open(db, sealer, "beta").await.unwrap_err();
        assert!(matches!(err, OpenError::Secret(SecretError::Unbound { .. })), "{err:?}");
    }

    #[tokio::test]
    async fn another_key_is_refused_and_its_values_are_left_alone() {
        let world = TestWorld::new(FakeAnswer::Accept).await;
        let db = &world.deps.db;
        let other = SecretBox::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        execute!(db.pool(), "INSERT INTO sealing_key (id, sealed) VALUES (1, $1)", other.seal_unbound(PROOF)).unwrap();
        assert!(matches!(check(db, &world.deps.sealer).await, Err(KeyCheckError::OtherKey)));
    }
}
