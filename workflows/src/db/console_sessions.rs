//! The `console_codes` and `console_sessions` tables: the web console's single-use sign-in
//! codes and the sessions they are traded for. Only SHA-256 hashes of the codes and session ids
//! are stored ([`hash`]), so that reading the database (or a snapshot of it) signs no one in.

use anycloud_engine::{execute, with_pool};
use sha2::{Digest, Sha256};

use super::Db;

/// The SHA-256 of a code or session id, in hex: what the tables keep.
pub fn hash(secret: &str) -> String {
    Sha256::digest(secret.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Keeps a new code (its hash) until `expires_at`, and drops the codes and sessions that have
/// expired by `now`.
pub async fn add_code(db: &Db, code_hash: &str, expires_at: i64, now: i64) -> Result<(), sqlx::Error> {
    execute!(db.pool(), "DELETE FROM console_codes WHERE expires_at <= $1", now)?;
    execute!(db.pool(), "DELETE FROM console_sessions WHERE expires_at <= $1", now)?;
    execute!(db.pool(), "INSERT INTO console_codes (code_hash, expires_at) VALUES ($1, $2)", code_hash, expires_at)?;
    Ok(())
}

/// Spends the code and opens a session in its place: `false` (and nothing written) if the code
/// is unknown, spent or expired. Deleting the code is what makes it single-use: of two
/// requests with one code, one deletes the row and the other finds none.
pub async fn trade_code(
    db: &Db,
    code_hash: &str,
    session_hash: &str,
    now: i64,
    session_expires_at: i64,
) -> Result<bool, sqlx::Error> {
    let spent =
        execute!(db.pool(), "DELETE FROM console_codes WHERE code_hash = $1 AND expires_at > $2", code_hash, now)?;
    if spent != 1 {
        return Ok(false);
    }
    execute!(
        db.pool(),
        "INSERT INTO console_sessions (session_hash, created_at, expires_at) VALUES ($1, $2, $3)",
        session_hash,
        now,
        session_expires_at
    )?;
    Ok(true)
}

/// Whether the session is open at `now`.
pub async fn is_open(db: &Db, session_hash: &str, now: i64) -> Result<bool, sqlx::Error> {
    let found: Option<i64> = with_pool!(db.reader(), |pool| {
        sqlx::query_scalar("SELECT expires_at FROM console_sessions WHERE session_hash = $1 AND expires_at > $2")
            .bind(session_hash)
            .bind(now)
            .fetch_optional(pool)
            .await
    })?;
    Ok(found.is_some())
}

/// Ends a session (signing out).
pub async fn close(db: &Db, session_hash: &str) -> Result<(), sqlx::Error> {
    execute!(db.pool(), "DELETE FROM console_sessions WHERE session_hash = $1", session_hash)?;
    Ok(())
}
