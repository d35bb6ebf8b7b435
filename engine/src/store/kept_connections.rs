//! On PostgreSQL, the connections that the engine's one-statement writes (checkpoints, lone
//! submits) run on, kept by the store itself rather than by sqlx's pool.
//!
//! sqlx pings a connection every time it goes back to its pool (a `Sync` message and the
//! server's `ReadyForQuery`) to flush whatever a query dropped half-way left on it. A checkpoint
//! is one statement, so through the pool every step cost a second round trip and a second
//! wake-up of the server's backend process. A kept connection goes back to the idle list only
//! after its statement answered in full, so nothing is left on it to flush; one whose statement
//! failed or was dropped half-way is closed, with the idle ones, and never reused.
//!
//! ```text
//!   checkpoint ── take ──> idle kept connection (or a new one, up to the pool's size)
//!        │                   └── statement answered ──> back to idle   (no ping)
//!        │                   └── failed or dropped  ──> closed, and the idle ones with it
//!        └── all in use ──> sqlx's pool, as any other query (pinged on its way back)
//! ```

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};

/// Runs `$body` (a query's future, whose answer borrows nothing) with `$executor` bound to a
/// connection of `$connections` (an `Option<&KeptConnections>`), given back once the query
/// answered, or to `$pool` when none is free or there are none; yields its answer, returning
/// early with its error.
macro_rules! on_kept_connection {
    ($connections:expr, $pool:expr, |$executor:ident| $body:expr) => {{
        let taken = match $connections {
            Some(connections) => connections.take().await?,
            None => None,
        };
        match taken {
            Some(mut taken) => {
                let $executor = taken.conn();
                let answer = $body.await?;
                taken.give_back();
                answer
            }
            None => {
                let $executor = $pool;
                $body.await?
            }
        }
    }};
}
pub(crate) use on_kept_connection;

/// The connections, idle and in use.
#[derive(Debug)]
pub(crate) struct KeptConnections {
    options: PgConnectOptions,
    idle: Mutex<Vec<PgConnection>>,
    /// Open now: idle or taken.
    open: AtomicUsize,
    most: usize,
    closed: AtomicBool,
    /// How long a new connection may take to open, as sqlx's pool waits for one.
    connect_timeout: Duration,
}

/// A connection taken for one write. Dropped without [`Taken::give_back`] (its statement
/// failed, or its future was dropped half-way), it is closed, and so are the idle ones: a
/// failure that broke one (the server restarted) has most likely broken them all.
pub(crate) struct Taken<'a> {
    conn: Option<PgConnection>,
    from: &'a KeptConnections,
    /// Counted among the open ones until it is back among the idle.
    counted: bool,
}

impl KeptConnections {
    pub(crate) fn new(options: PgConnectOptions, most: usize, connect_timeout: Duration) -> Self {
        Self {
            options,
            idle: Mutex::new(Vec::new()),
            open: AtomicUsize::new(0),
            most,
            closed: AtomicBool::new(false),
            connect_timeout,
        }
    }

    /// An idle connection, or a new one while fewer than `most` are open; `None` when that many
    /// are in use.
    pub(crate) async fn take(&self) -> Result<Option<Taken<'_>>, sqlx::Error> {
        if self.closed.load(Ordering::Acquire) {
            return Err(sqlx::Error::PoolClosed);
        }
        if let Some(conn) = self.idle().pop() {
            return Ok(Some(Taken { conn: Some(conn), from: self, counted: true }));
        }
        let opened =
            self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| (open < self.most).then_some(open + 1));
        if opened.is_err() {
            return Ok(None);
        }
        // Counted from here: a failed or dropped connect gives its place back.
        let mut taken = Taken { conn: None, from: self, counted: true };
        let connect = self.options.connect();
        taken.conn = Some(match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(conn) => conn?,
            Err(_) => return Err(sqlx::Error::PoolTimedOut),
        });
        Ok(Some(taken))
    }

    /// Closes the idle connections; those in use close when they come back, and later takes fail.
    pub(crate) async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let idle = std::mem::take(&mut *self.idle());
        for conn in idle {
            self.open.fetch_sub(1, Ordering::AcqRel);
            let _ = conn.close().await;
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<PgConnection>> {
        self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Taken<'_> {
    pub(crate) fn conn(&mut self) -> &mut PgConnection {
        self.conn.as_mut().expect("a taken connection is present until given back")
    }

    /// Puts the connection back among the idle ones: its statement answered in full.
    pub(crate) fn give_back(mut self) {
        if self.from.closed.load(Ordering::Acquire) {
            return;
        }
        if let Some(conn) = self.conn.take() {
            self.from.idle().push(conn);
            self.counted = false;
        }
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        self.from.open.fetch_sub(1, Ordering::AcqRel);
        if self.conn.take().is_some() {
            let idle = std::mem::take(&mut *self.from.idle());
            self.from.open.fetch_sub(idle.len(), Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    fn connections(most: usize) -> KeptConnections {
        let options = PgConnectOptions::from_str(&crate::testing::postgres_url()).expect("the test database's URL");
        KeptConnections::new(options, most, Duration::from_secs(5))
    }

    async fn backend(taken: &mut Taken<'_>) -> i32 {
        sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(taken.conn()).await.expect("ask the backend's pid")
    }

    async fn taken(connections: &KeptConnections) -> Taken<'_> {
        connections.take().await.expect("PostgreSQL answers (scripts/test starts it)").expect("a free connection")
    }

    #[tokio::test]
    async fn a_connection_given_back_is_taken_again_and_one_dropped_is_not() {
        let connections = connections(2);
        let mut first = taken(&connections).await;
        let pid = backend(&mut first).await;
        first.give_back();
        let mut again = taken(&connections).await;
        assert_eq!(backend(&mut again).await, pid, "the connection given back is the next one taken");
        // Dropped without being given back, as when its statement failed or its future was
        // dropped half-way: closed, so the next take opens another.
        drop(again);
        let mut next = taken(&connections).await;
        assert_ne!(backend(&mut next).await, pid, "a connection not given back is never taken again");
        next.give_back();
        connections.close().await;
    }

    #[tokio::test]
    async fn no_more_than_most_are_open_and_none_after_close() {
        let connections = connections(1);
        let held = taken(&connections).await;
        assert!(connections.take().await.expect("no error").is_none(), "a second one beyond `most`");
        drop(held);
        let again = taken(&connections).await;
        again.give_back();
        connections.close().await;
        assert_eq!(connections.open.load(Ordering::Acquire), 0, "close closes the idle ones");
        assert!(matches!(connections.take().await, Err(sqlx::Error::PoolClosed)), "a take after close fails");
    }
}
