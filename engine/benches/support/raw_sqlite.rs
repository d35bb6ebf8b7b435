//! A second bare-commit figure for SQLite, through a raw client: `rusqlite`, which drives the
//! same bundled SQLite library as sqlx (one `libsqlite3-sys` in the build), without sqlx's
//! worker thread, channels and async pool in between.
//!
//! The client opens its own file, `raw.db`, in the directory of the engine's database, with the
//! engine store's settings (`engine/src/store/connect.rs`): WAL, `synchronous=FULL`, a busy
//! timeout of 30 s and foreign keys on. Each client is an OS thread with its own connection that
//! loops over `BEGIN IMMEDIATE`, the single-row insert of the sqlx bare commits into its own
//! `bench_commits` table, and `COMMIT`, with the statements prepared once. At concurrency 16 the
//! sixteen connections contend for SQLite's one write lock, and a writer that finds it taken
//! waits in SQLite's busy handler (which sleeps 1 ms, 2 ms, 5 ms, ... up to 100 ms between
//! tries); the engine's store instead queues its writers on a pool of one connection.
//!
//! The busy handler is no queue: the thread that has just committed begins again at once and
//! takes the lock before the sleepers wake, so at concurrency 16 a few threads make nearly every
//! commit and the others wait out the whole window (in the smoke runs on this machine, 2 and 5
//! of the 16 committed in a 1 s window, and in one of them a single thread made 7,401 of the
//! 7,555 commits). The figure is then the rate of the file's one write lock, not that of sixteen
//! clients served in turn, and its latencies are those of the commits that ended: the sleepers'
//! waits, still open when the window closes, are in none of them. [`RawSqlite::commits`] counts
//! the clients that committed in the window, and the bench prints that count beside the figure.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use super::machine::Cpu;
use super::{PAYLOAD, Res, Sample};

/// The raw client's database: a file of its own, opened afresh for each measured window.
#[derive(Debug, Clone)]
pub struct RawSqlite {
    path: PathBuf,
}

impl RawSqlite {
    /// Creates the database `raw.db` in `dir` (the engine database's directory) and its table.
    pub fn create(dir: &std::path::Path) -> Res<Self> {
        let raw = Self { path: dir.join("raw.db") };
        raw.connect()?
            .execute_batch("CREATE TABLE IF NOT EXISTS bench_commits (id INTEGER PRIMARY KEY, payload TEXT)")?;
        Ok(raw)
    }

    /// A connection with the engine store's settings.
    fn connect(&self) -> Res<Connection> {
        connect(&self.path)
    }

    /// The client's settings, read back from a connection, on one line.
    pub fn describe(&self) -> Res<String> {
        let conn = self.connect()?;
        let pragma = |name: &str| conn.pragma_query_value(None, name, |row| row.get::<_, rusqlite::types::Value>(0));
        let text = |value: rusqlite::types::Value| match value {
            rusqlite::types::Value::Integer(n) => n.to_string(),
            rusqlite::types::Value::Text(text) => text,
            other => format!("{other:?}"),
        };
        let sync = match pragma("synchronous")? {
            rusqlite::types::Value::Integer(2) => "FULL".to_owned(),
            other => text(other),
        };
        Ok(format!(
            "raw client: rusqlite on SQLite {}, journal_mode={}, synchronous={sync}, busy_timeout={} ms, \
             foreign_keys={}; its own file {} in the same directory, one connection per client thread",
            rusqlite::version(),
            text(pragma("journal_mode")?),
            text(pragma("busy_timeout")?),
            text(pragma("foreign_keys")?),
            self.path.file_name().map_or_else(String::new, |name| name.to_string_lossy().into_owned())
        ))
    }

    /// Bare commits on `concurrency` threads, each with its own connection, through a warm-up
    /// and a measured window, as `measure` in `engine.rs` times the sqlx ones: the latencies of
    /// the commits that end inside the window, and how many clients made at least one of them.
    /// Blocks the calling thread.
    pub fn commits(&self, concurrency: usize, warmup: Duration, window: Duration) -> Res<(Sample, usize)> {
        let conns = (0..concurrency).map(|_| self.connect()).collect::<Res<Vec<_>>>()?;
        let start = Instant::now() + warmup;
        let end = start + window;
        std::thread::scope(|scope| {
            let sampler = scope.spawn(move || {
                std::thread::sleep(start.saturating_duration_since(Instant::now()));
                let first = Cpu::now();
                std::thread::sleep(end.saturating_duration_since(Instant::now()));
                first.used(Cpu::now(), end - start)
            });
            let clients: Vec<_> =
                conns.into_iter().map(|conn| scope.spawn(move || client(&conn, start, end))).collect();
            let (mut latencies, mut committed) = (Vec::new(), 0);
            for client in clients {
                let own = client.join().map_err(|_| "a raw SQLite client thread panicked")??;
                committed += usize::from(!own.is_empty());
                latencies.extend(own);
            }
            let (cpu_process, cpu_machine) = sampler.join().map_err(|_| "the CPU sampler thread panicked")?;
            let sample = Sample { latencies, window: end - start, cpu_process, cpu_machine };
            Ok::<_, Box<dyn Error + Send + Sync>>((sample, committed))
        })
    }
}

/// A connection to `path` with the engine store's settings (`engine/src/store/connect.rs`).
pub fn connect(path: &Path) -> Res<Connection> {
    // Read-write, create, no mutex, URIs: the flags sqlx opens its connections with too.
    let conn = Connection::open_with_flags(path, OpenFlags::default())?;
    let journal: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if !journal.eq_ignore_ascii_case("wal") {
        return Err(format!("the raw client's journal_mode is {journal}, not wal").into());
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.busy_timeout(Duration::from_secs(30))?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

/// One client thread: commits in a loop until `end`; returns the latencies of those that ended
/// in `[start, end)`. Finishes the commit it is in when the window closes (not counted).
fn client(conn: &Connection, start: Instant, end: Instant) -> Res<Vec<Duration>> {
    let mut begin = conn.prepare("BEGIN IMMEDIATE")?;
    let mut insert = conn.prepare("INSERT INTO bench_commits (payload) VALUES (?1)")?;
    let mut commit = conn.prepare("COMMIT")?;
    let mut latencies = Vec::new();
    loop {
        let began = Instant::now();
        if began >= end {
            return Ok(latencies);
        }
        begin.execute([])?;
        insert.execute([PAYLOAD])?;
        commit.execute([])?;
        let ended = Instant::now();
        if ended >= start && ended < end {
            latencies.push(ended - began);
        }
    }
}
