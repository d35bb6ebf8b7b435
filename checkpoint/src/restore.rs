//! Taking a bucket over: the database as the bucket has it, laid on the local disk, and the
//! previous writer's generation sealed so that it can write no more.
//!
//! The local disk is never trusted: whatever it holds may be older than the bucket (another API
//! ran since) or newer (commits nobody acknowledged). Everything acknowledged is in the bucket.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::try_join_all;

use crate::CheckpointError;
use crate::bucket::{Bucket, BucketError, Version};
use crate::layout::{Head, Layout};
use crate::object::{self, Kind};

/// WAL segments fetched at once.
const FETCH_AHEAD: u64 = 16;

/// What a restore found; [`crate::Checkpointer::start`] begins the next generation from it.
#[derive(Debug)]
pub struct Restored {
    /// The `HEAD` taken over and its version; `None` for a bucket that held no state.
    pub head: Option<(Head, Version)>,
    /// WAL segments replayed.
    pub segments: u64,
    /// Bytes read from the bucket.
    pub bytes: u64,
    /// How long it took.
    pub elapsed: Duration,
    /// Objects of the previous generation, to delete once the next one is current.
    pub(crate) previous_objects: Vec<String>,
    /// Identity files the bucket did not hold yet.
    pub(crate) missing_identity: Vec<String>,
}

/// The local files a restore writes.
#[derive(Clone, Debug)]
pub struct LocalFiles {
    /// The SQLite database (its `-wal` and `-shm` sit beside it).
    pub database: PathBuf,
    /// Where identity files live.
    pub identity_dir: PathBuf,
    /// The identity files kept in the bucket (`token`, `secret.key`).
    pub identity: Vec<String>,
}

impl LocalFiles {
    /// The database's WAL file.
    pub fn wal(&self) -> PathBuf {
        with_suffix(&self.database, "-wal")
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Lays the bucket's state on the local disk and seals the generation it came from. `api`
/// names the taker in the seal.
pub async fn restore(
    bucket: &dyn Bucket,
    layout: &Layout,
    files: &LocalFiles,
    api: &str,
) -> Result<Restored, CheckpointError> {
    let started = Instant::now();
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let path = with_suffix(&files.database, suffix);
        match std::fs::remove_file(&path) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                return Err(CheckpointError::Local(format!("removing {}: {err}", path.display())));
            }
            _ => {}
        }
    }
    let mut bytes = 0u64;
    let Some((head_object, head_version)) = bucket.get(&layout.head()).await? else {
        // A first start; a deployer may have put identity files (the token, the TLS CA) first.
        let (missing_identity, identity_bytes) = restore_identity(bucket, layout, files).await?;
        return Ok(Restored {
            head: None,
            segments: 0,
            bytes: identity_bytes,
            elapsed: started.elapsed(),
            previous_objects: Vec::new(),
            missing_identity,
        });
    };
    bytes += head_object.len() as u64;
    let head: Head = serde_json::from_slice(&head_object).map_err(|err| CheckpointError::Damaged {
        key: layout.head(),
        why: format!("it is not a checkpoint HEAD ({err})"),
    })?;
    if head.format != 1 {
        return Err(CheckpointError::Damaged {
            key: layout.head(),
            why: format!("it is of format {}, which this version does not read; run a newer anycloud", head.format),
        });
    }

    let snapshot_key = layout.snapshot(&head.generation);
    let Some(snapshot) = fetch(bucket, &snapshot_key).await? else {
        // Deleted by a compaction or a takeover that moved HEAD after we read it.
        if bucket.get(&layout.head()).await?.is_some_and(|(_, version)| version != head_version) {
            return Err(CheckpointError::Fenced(
                "another API took the checkpoint bucket over while this one was restoring from it".into(),
            ));
        }
        return Err(CheckpointError::Damaged {
            key: snapshot_key,
            why: format!("it is missing, yet HEAD names generation {}", head.generation),
        });
    };
    bytes += snapshot.len() as u64;
    let database = open(&snapshot_key, Kind::Snapshot, &snapshot)?;
    let mut previous_objects = vec![snapshot_key];

    let mut wal = Vec::new();
    let mut next = 0u64;
    'segments: loop {
        let keys: Vec<String> = (next..next + FETCH_AHEAD).map(|n| layout.segment(&head.generation, n)).collect();
        let batch = try_join_all(keys.iter().map(|key| fetch(bucket, key))).await?;
        for (key, found) in keys.into_iter().zip(batch) {
            match found {
                Some(segment) => {
                    bytes += segment.len() as u64;
                    match object::open(&segment) {
                        Ok((Kind::Wal, payload)) => {
                            wal.extend_from_slice(&payload);
                            previous_objects.push(key);
                        }
                        Ok((Kind::Seal, _)) => break 'segments,
                        Ok((other, _)) => {
                            return Err(CheckpointError::Damaged { key, why: format!("it holds a {other:?}") });
                        }
                        Err(damage) => return Err(CheckpointError::Damaged { key, why: damage.to_string() }),
                    }
                    next += 1;
                }
                None => {
                    // The end: seal it here, so that the writer of this generation, if it still
                    // runs, fails its next ship. If it shipped first, read on.
                    match bucket.create(&key, object::seal(Kind::Seal, api.as_bytes())).await {
                        // The seal itself is never deleted: it is what keeps the previous
                        // writer out.
                        Ok(_) => break 'segments,
                        Err(BucketError::Conflict(_)) => continue 'segments,
                        Err(err) => return Err(err.into()),
                    }
                }
            }
        }
    }

    write_private(&files.database, &database)?;
    if !wal.is_empty() {
        write_private(&files.wal(), &wal)?;
    }
    let (missing_identity, identity_bytes) = restore_identity(bucket, layout, files).await?;
    bytes += identity_bytes;
    Ok(Restored {
        head: Some((head, head_version)),
        segments: next,
        bytes,
        elapsed: started.elapsed(),
        previous_objects,
        missing_identity,
    })
}

/// Writes the identity files the bucket has; answers the names it lacks and the bytes read.
async fn restore_identity(
    bucket: &dyn Bucket,
    layout: &Layout,
    files: &LocalFiles,
) -> Result<(Vec<String>, u64), CheckpointError> {
    let mut missing = Vec::new();
    let mut bytes = 0;
    for name in &files.identity {
        let key = layout.identity(name);
        match fetch(bucket, &key).await? {
            Some(found) => {
                bytes += found.len() as u64;
                write_private(&files.identity_dir.join(name), &open(&key, Kind::Identity, &found)?)?;
            }
            None => missing.push(name.clone()),
        }
    }
    Ok((missing, bytes))
}

async fn fetch(bucket: &dyn Bucket, key: &str) -> Result<Option<Bytes>, CheckpointError> {
    Ok(bucket.get(key).await?.map(|(body, _)| body))
}

fn open(key: &str, kind: Kind, found: &Bytes) -> Result<Bytes, CheckpointError> {
    object::open_as(kind, found)
        .map_err(|damage| CheckpointError::Damaged { key: key.to_owned(), why: damage.to_string() })
}

/// Writes a file only its owner can read, and syncs it.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let written = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path).and_then(
        |mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        },
    );
    written.map_err(|err| CheckpointError::Local(format!("writing {}: {err}", path.display())))
}
