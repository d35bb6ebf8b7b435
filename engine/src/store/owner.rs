//! One live process per engine owner name.
//!
//! Leases are held under an owner name, and an engine that starts under a name takes back at
//! once every run held under it (its predecessor is dead). That is only safe if two live
//! processes can never hold the same name, so an engine holds an exclusive lock on its name for
//! as long as it lives, one the operating system or the database drops the moment the process
//! dies (a SIGKILL included):
//!
//! - SQLite: an exclusive file lock (`flock`) on a file beside the database, `DB.owner-NAME.lock`;
//! - PostgreSQL: a session advisory lock on a connection of its own, in a key space
//!   (`pg_advisory_lock(int, int)`) apart from the one submissions use.
//!
//! A second process under a held name is refused ([`EngineError::OwnerInUse`]).

use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};

use super::handle::Store;
use super::pool::Pool;
use crate::error::EngineError;

/// The first key of the PostgreSQL advisory locks on owner names ("AnyC").
const OWNER_LOCK_CLASS: i32 = 0x416e_7943;

/// How long a start waits for a name held by a process that is dying (its lock is released a
/// moment after the process is gone: PostgreSQL notices the closed connection).
const WAIT_FOR_DYING_HOLDER: Duration = Duration::from_secs(3);

/// An exclusive hold on an owner name; dropping it releases the name (closing the file or the
/// connection releases the lock).
#[derive(Debug)]
pub(crate) enum OwnerLock {
    /// The locked file.
    File(#[expect(dead_code, reason = "held for its drop, which releases the lock")] std::fs::File),
    /// The connection that holds the advisory lock.
    Postgres(PgConnection),
    /// An in-memory SQLite database: no other process can open it.
    Private,
}

impl OwnerLock {
    /// Whether the hold is still in place. PostgreSQL drops a session's advisory lock with its
    /// connection: a server restart or a cut connection loses it while the engine lives on.
    pub(crate) async fn is_held(&mut self) -> bool {
        match self {
            Self::Postgres(conn) => conn.ping().await.is_ok(),
            Self::File(_) | Self::Private => true,
        }
    }
}

impl Store {
    /// Takes the exclusive hold on `owner`, or says that a live process holds it.
    pub(crate) async fn lock_owner(&self, owner: &str) -> Result<OwnerLock, EngineError> {
        let deadline = Instant::now() + WAIT_FOR_DYING_HOLDER;
        loop {
            if let Some(lock) = self.try_lock_owner(owner).await? {
                return Ok(lock);
            }
            if Instant::now() >= deadline {
                return Err(EngineError::OwnerInUse(owner.to_owned()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn try_lock_owner(&self, owner: &str) -> Result<Option<OwnerLock>, EngineError> {
        match &self.pool {
            Pool::Sqlite(_) => {
                let Some(database) = &self.sqlite_path else { return Ok(Some(OwnerLock::Private)) };
                let mut name = database.as_os_str().to_owned();
                name.push(format!(".owner-{}.lock", file_safe(owner)));
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&name)
                    .map_err(|err| EngineError::Store(sqlx::Error::Io(err)))?;
                match file.try_lock() {
                    Ok(()) => Ok(Some(OwnerLock::File(file))),
                    Err(std::fs::TryLockError::WouldBlock) => Ok(None),
                    Err(std::fs::TryLockError::Error(err)) => Err(EngineError::Store(sqlx::Error::Io(err))),
                }
            }
            Pool::Postgres(pool) => {
                let mut conn = pool.acquire().await?.detach();
                let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, hashtext($2))")
                    .bind(OWNER_LOCK_CLASS)
                    .bind(owner)
                    .fetch_one(&mut conn)
                    .await?;
                if locked {
                    Ok(Some(OwnerLock::Postgres(conn)))
                } else {
                    let _ = conn.close().await;
                    Ok(None)
                }
            }
        }
    }
}

/// The owner name as a file name: letters, digits, `-`, `_` and `.` kept, anything else hex.
fn file_safe(owner: &str) -> String {
    owner
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.".contains(&b) { (b as char).to_string() } else { format!("%{b:02x}") }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn owner_names_become_file_names() {
        assert_eq!(super::file_safe("api-dev"), "api-dev");
        assert_eq!(super::file_safe("a/b c"), "a%2fb%20c");
    }
}
