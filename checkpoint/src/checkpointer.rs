//! The running checkpoint: one task that ships every committed transaction to the bucket, a
//! [`Checkpointer::flush`] that answers once everything committed before it is there, and
//! compaction into a new generation when the log outgrows the snapshot.
//!
//! ```text
//!  API handler: commit ──> flush() ─┐                        ┌─> answer the request
//!  engine step: commit              │ (group commit: one      │
//!                                   ▼  ship serves them all)  │
//!  checkpointer task: read DB-wal up to its last commit frame ─> create generations/G/wal/N ─┘
//!                     every second too, for the engine's own commits
//! ```

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sqlx::Connection;
use tokio::sync::{mpsc, oneshot, watch};

use crate::CheckpointError;
use crate::bucket::{Bucket, BucketError, Version};
use crate::layout::{Head, Layout, next_generation};
use crate::object::{self, Kind};
use crate::restore::{LocalFiles, Restored};
use crate::wal::{WalCursor, WalError};

/// How often commits nobody waits for (the engine's step checkpoints) are shipped.
pub const SHIP_EVERY: Duration = Duration::from_secs(1);
/// A generation is compacted once its log has grown past the snapshot's size and this.
pub const COMPACT_AFTER: u64 = 16 * 1024 * 1024;

/// Figures for `api status` and the benchmarks.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Stats {
    /// The current generation.
    pub generation: String,
    /// Its snapshot's size.
    pub snapshot_bytes: u64,
    /// WAL segments shipped in it.
    pub segments: u64,
    /// WAL bytes shipped in it.
    pub wal_bytes: u64,
    /// Generations begun by this process.
    pub generations_begun: u64,
    /// WAL segments shipped by this process, over all its generations.
    pub segments_shipped: u64,
    /// WAL bytes shipped by this process, over all its generations.
    pub shipped_bytes: u64,
    /// What they took in the bucket (deflated, with each object's header).
    pub stored_bytes: u64,
    /// Snapshot bytes uploaded by this process.
    pub snapshot_bytes_uploaded: u64,
    /// The last ship's error, if the last ship failed.
    pub last_error: Option<String>,
}

/// The handle the API holds.
#[derive(Clone)]
pub struct Checkpointer {
    requests: mpsc::UnboundedSender<oneshot::Sender<Result<(), String>>>,
    fenced: watch::Receiver<Option<String>>,
    stats: Arc<Mutex<Stats>>,
    stop: mpsc::Sender<oneshot::Sender<()>>,
}

struct Shipper {
    bucket: Arc<dyn Bucket>,
    layout: Layout,
    files: LocalFiles,
    api: String,
    conn: sqlx::SqliteConnection,
    head: Option<(Head, Version)>,
    cursor: WalCursor,
    /// A segment whose write failed, with the cursor after it: written again as it was.
    pending: Option<(Vec<u8>, WalCursor)>,
    /// The next WAL segment's number in the current generation.
    next_segment: u64,
    /// `None` when a new generation must begin before anything more is shipped.
    generation: Option<String>,
    objects: Vec<String>,
    stats: Arc<Mutex<Stats>>,
}

impl Checkpointer {
    /// Begins a new generation from what [`crate::restore`] laid down (the database may have
    /// been migrated since) and starts shipping. Fails if another API took the bucket meanwhile.
    pub async fn start(
        bucket: Arc<dyn Bucket>,
        layout: Layout,
        files: LocalFiles,
        api: &str,
        restored: Restored,
    ) -> Result<Self, CheckpointError> {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&files.database)
            .busy_timeout(Duration::from_secs(30))
            .pragma("wal_autocheckpoint", "0");
        let conn = sqlx::SqliteConnection::connect_with(&options)
            .await
            .map_err(|err| CheckpointError::Local(format!("opening {}: {err}", files.database.display())))?;
        for name in &restored.missing_identity {
            let path = files.identity_dir.join(name);
            let bytes = match std::fs::read(&path) {
                Ok(bytes) => bytes,
                // Kept elsewhere (a sealing key given in the environment): not ours to ship.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => return Err(CheckpointError::Local(format!("reading {}: {err}", path.display()))),
            };
            match bucket.create(&layout.identity(name), object::seal(Kind::Identity, &bytes)).await {
                Ok(_) | Err(BucketError::Conflict(_)) => {}
                Err(err) => return Err(err.into()),
            }
        }
        let stats = Arc::new(Mutex::new(Stats::default()));
        let mut shipper = Shipper {
            bucket,
            layout,
            files,
            api: api.to_owned(),
            conn,
            head: restored.head,
            cursor: WalCursor::default(),
            pending: None,
            next_segment: 0,
            generation: None,
            objects: restored.previous_objects,
            stats: stats.clone(),
        };
        shipper.begin_generation().await?;
        let (requests, queue) = mpsc::unbounded_channel();
        let (fence, fenced) = watch::channel(None);
        let (stop, stopping) = mpsc::channel(1);
        tokio::spawn(shipper.run(queue, fence, stopping));
        Ok(Self { requests, fenced, stats, stop })
    }

    /// Returns once every transaction committed before the call is in the bucket: what an API
    /// awaits before it answers a request that changed something.
    pub async fn flush(&self) -> Result<(), String> {
        let (done, answer) = oneshot::channel();
        self.requests.send(done).map_err(|_| "the checkpointer has stopped".to_owned())?;
        answer.await.map_err(|_| "the checkpointer has stopped".to_owned())?
    }

    /// Resolves with the reason once another API has taken the bucket over: this one must stop
    /// at once, whatever it was doing.
    pub async fn fenced(&self) -> String {
        let mut fenced = self.fenced.clone();
        loop {
            if let Some(reason) = fenced.borrow_and_update().clone() {
                return reason;
            }
            if fenced.changed().await.is_err() {
                return "the checkpointer has stopped".to_owned();
            }
        }
    }

    /// Current figures.
    pub fn stats(&self) -> Stats {
        self.stats.lock().map(|stats| stats.clone()).unwrap_or_default()
    }

    /// Ships what is left and stops shipping (a clean shutdown, after the engine stopped).
    pub async fn stop(&self) {
        let (done, stopped) = oneshot::channel();
        if self.stop.send(done).await.is_ok() {
            let _ = stopped.await;
        }
    }
}

impl Shipper {
    async fn run(
        mut self,
        mut queue: mpsc::UnboundedReceiver<oneshot::Sender<Result<(), String>>>,
        fence: watch::Sender<Option<String>>,
        mut stopping: mpsc::Receiver<oneshot::Sender<()>>,
    ) {
        let mut tick = tokio::time::interval(SHIP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failures = 0u32;
        loop {
            let mut waiters = Vec::new();
            let mut stop = None;
            tokio::select! {
                Some(waiter) = queue.recv() => waiters.push(waiter),
                _ = tick.tick() => {}
                Some(done) = stopping.recv() => stop = Some(done),
            }
            while let Ok(waiter) = queue.try_recv() {
                waiters.push(waiter);
            }
            let result = self.step().await;
            let answer = result.as_ref().map(|_| ()).map_err(ToString::to_string);
            for waiter in waiters {
                let _ = waiter.send(answer.clone());
            }
            if let Ok(mut stats) = self.stats.lock() {
                stats.last_error = answer.clone().err();
            }
            match result {
                Ok(()) => failures = 0,
                Err(CheckpointError::Fenced(reason)) => {
                    tracing::error!(%reason, "another API took the checkpoint bucket over; this one must stop");
                    let _ = fence.send(Some(reason));
                    return;
                }
                Err(err) => {
                    failures += 1;
                    tracing::warn!(error = %err, failures, "checkpoint ship failed; retrying");
                    // Back off while the bucket fails, but never longer than a request would wait.
                    let pause = Duration::from_millis(100 * 2u64.pow(failures.min(5)));
                    tokio::time::sleep(pause).await;
                }
            }
            if let Some(done) = stop {
                let _ = done.send(());
                return;
            }
        }
    }

    /// One round: begin a generation if one is due, else ship what was committed.
    async fn step(&mut self) -> Result<(), CheckpointError> {
        if self.generation.is_none() {
            return self.begin_generation().await;
        }
        self.ship().await?;
        let due = self.stats.lock().is_ok_and(|stats| stats.wal_bytes > COMPACT_AFTER.max(stats.snapshot_bytes));
        if due {
            self.begin_generation().await?;
        }
        Ok(())
    }

    /// Ships the transactions committed since the last ship as the next segment. A segment
    /// whose write failed is written again as it was (not with more appended), so that a
    /// conflict can tell our own lost-answer write from somebody else's.
    async fn ship(&mut self) -> Result<(), CheckpointError> {
        let Some(generation) = self.generation.clone() else { return Ok(()) };
        let (bytes, cursor) = match self.pending.take() {
            Some(pending) => pending,
            None => {
                let mut cursor = self.cursor.clone();
                match cursor.take_committed(&self.files.wal()) {
                    Ok(Some(bytes)) => (bytes, cursor),
                    Ok(None) => return Ok(()),
                    Err(WalError::Restarted) => {
                        // Something checkpointed behind our back: the log no longer covers what
                        // the database holds, so only a new snapshot can.
                        tracing::warn!("the WAL restarted unexpectedly; beginning a new generation");
                        return self.begin_generation().await;
                    }
                    Err(WalError::Io(err)) => {
                        return Err(CheckpointError::Local(format!("reading the WAL: {err}")));
                    }
                }
            }
        };
        let key = self.layout.segment(&generation, self.next_segment);
        let body = object::seal(Kind::Wal, &bytes);
        let stored = body.len();
        match self.bucket.create(&key, body).await {
            Ok(_) => {}
            Err(BucketError::Conflict(_)) => {
                match self.bucket.get(&key).await?.map(|(found, _)| object::open(&found)) {
                    // Our own write, whose answer was lost.
                    Some(Ok((Kind::Wal, payload))) if payload[..] == bytes[..] => {}
                    Some(Ok((Kind::Seal, by))) => {
                        return Err(CheckpointError::Fenced(format!(
                            "API `{}` took the checkpoint bucket over (it sealed generation {generation} at {key})",
                            String::from_utf8_lossy(&by)
                        )));
                    }
                    _ => {
                        return Err(CheckpointError::Fenced(format!(
                            "another writer wrote {key}, the next segment of this API's generation"
                        )));
                    }
                }
            }
            Err(err) => {
                self.pending = Some((bytes, cursor));
                return Err(err.into());
            }
        }
        self.advance(cursor, &key, bytes.len(), stored);
        Ok(())
    }

    fn advance(&mut self, cursor: WalCursor, key: &str, len: usize, stored: usize) {
        self.cursor = cursor;
        self.next_segment += 1;
        self.objects.push(key.to_owned());
        if let Ok(mut stats) = self.stats.lock() {
            stats.segments += 1;
            stats.segments_shipped += 1;
            stats.wal_bytes += len as u64;
            stats.shipped_bytes += len as u64;
            stats.stored_bytes += stored as u64;
        }
    }

    /// Folds the WAL into the database file, uploads that as the next generation's snapshot,
    /// and moves `HEAD` to it; then deletes the generation before.
    async fn begin_generation(&mut self) -> Result<(), CheckpointError> {
        self.generation = None;
        let started = Instant::now();
        self.truncate_wal().await?;
        self.cursor = WalCursor::default();
        self.pending = None;
        self.next_segment = 0;
        // Nobody else checkpoints, so the file stays as it is until our next truncate.
        let database = std::fs::read(&self.files.database)
            .map_err(|err| CheckpointError::Local(format!("reading {}: {err}", self.files.database.display())))?;
        let number = self.head.as_ref().map_or(0, |(head, _)| head.number());
        let generation = next_generation(number);
        let snapshot = self.layout.snapshot(&generation);
        self.bucket.create(&snapshot, object::seal(Kind::Snapshot, &database)).await?;
        // Deleted with the rest if this generation never becomes current.
        self.objects.push(snapshot.clone());
        let head = Head {
            format: 1,
            generation: generation.clone(),
            api: self.api.clone(),
            began_at: jiff::Timestamp::now().to_string(),
        };
        let body = Bytes::from(serde_json::to_vec(&head).map_err(|err| CheckpointError::Local(err.to_string()))?);
        let written = match &self.head {
            None => self.bucket.create(&self.layout.head(), body).await,
            Some((_, version)) => self.bucket.replace(&self.layout.head(), body, version).await,
        };
        let version = match written {
            Ok(version) => version,
            Err(BucketError::Conflict(_)) => match self.bucket.get(&self.layout.head()).await? {
                // Our own write, whose answer was lost.
                Some((found, version)) if serde_json::from_slice::<Head>(&found).ok().as_ref() == Some(&head) => {
                    version
                }
                found => {
                    let holder = found
                        .and_then(|(found, _)| serde_json::from_slice::<Head>(&found).ok())
                        .map_or_else(|| "another API".to_owned(), |head| format!("API `{}`", head.api));
                    return Err(CheckpointError::Fenced(format!(
                        "{holder} moved the checkpoint bucket's HEAD first: it holds the bucket now"
                    )));
                }
            },
            Err(err) => return Err(err.into()),
        };
        let mut previous = std::mem::take(&mut self.objects);
        previous.retain(|key| *key != snapshot);
        self.objects.push(snapshot);
        self.head = Some((head, version));
        self.generation = Some(generation.clone());
        if let Ok(mut stats) = self.stats.lock() {
            *stats = Stats {
                generation: generation.clone(),
                snapshot_bytes: database.len() as u64,
                segments: 0,
                wal_bytes: 0,
                generations_begun: stats.generations_begun + 1,
                segments_shipped: stats.segments_shipped,
                shipped_bytes: stats.shipped_bytes,
                stored_bytes: stats.stored_bytes,
                snapshot_bytes_uploaded: stats.snapshot_bytes_uploaded + database.len() as u64,
                last_error: None,
            };
        }
        tracing::info!(
            %generation,
            snapshot_bytes = database.len(),
            ms = started.elapsed().as_millis() as u64,
            "checkpoint generation begun"
        );
        if !previous.is_empty() {
            let bucket = self.bucket.clone();
            tokio::spawn(async move {
                if let Err(err) = bucket.delete(&previous).await {
                    tracing::warn!(error = %err, "deleting the previous checkpoint generation failed; it stays");
                }
            });
        }
        Ok(())
    }

    /// `PRAGMA wal_checkpoint(TRUNCATE)`, retried while readers hold the old log.
    async fn truncate_wal(&mut self) -> Result<(), CheckpointError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (busy, _, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
                .fetch_one(&mut self.conn)
                .await
                .map_err(|err| CheckpointError::Local(format!("checkpointing the WAL: {err}")))?;
            if busy == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(CheckpointError::Local("the WAL stayed busy for 30 s; will retry".into()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
