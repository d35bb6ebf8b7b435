//! Reading SQLite's write-ahead log as it grows, a whole committed transaction at a time.
//!
//! In WAL mode SQLite appends each transaction's pages to `DB-wal` as frames and marks the last
//! frame of a transaction as a commit frame. Between two checkpoints (and only the checkpointer
//! checkpoints: the API opens its database with `wal_autocheckpoint=0`) committed frames are
//! never rewritten, so the bytes up to the last commit frame can be copied to the bucket and,
//! concatenated after the snapshot they extend, make a WAL that SQLite's own recovery replays.
//!
//! A frame counts only if its salt matches the header's and its checksum chains from the
//! previous frame's (the rule SQLite's recovery applies), so a frame still being written, or
//! one left from before a WAL restart, is never shipped. The format is in
//! <https://www.sqlite.org/fileformat2.html#walformat>.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The WAL header's size.
pub const HEADER_LEN: usize = 32;
/// A frame header's size.
const FRAME_HEADER_LEN: usize = 24;

/// Where shipping has got to in one WAL file.
#[derive(Clone, Debug, Default)]
pub struct WalCursor {
    /// The header this cursor follows; `None` before the file has one.
    header: Option<Header>,
    /// Bytes of the file already taken (the header included).
    offset: u64,
    /// The running checksum at `offset`.
    checksum: (u32, u32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Header {
    bytes: [u8; HEADER_LEN],
    page_size: usize,
    big_endian: bool,
}

/// The WAL is not the one the cursor followed: it was restarted or replaced by a checkpoint
/// the cursor did not see. What was committed before may be in the database file only.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// The file changed under the cursor.
    #[error("the WAL was restarted behind the checkpointer's back")]
    Restarted,
    /// Reading failed.
    #[error("reading the WAL: {0}")]
    Io(#[from] std::io::Error),
}

impl WalCursor {
    /// Bytes of the file already taken.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The bytes committed since the last call (the header first, on the first call), or `None`
    /// if no transaction was committed since.
    pub fn take_committed(&mut self, wal: &Path) -> Result<Option<Vec<u8>>, WalError> {
        let mut file = match std::fs::File::open(wal) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return if self.offset == 0 { Ok(None) } else { Err(WalError::Restarted) };
            }
            Err(err) => return Err(err.into()),
        };
        let mut head = [0u8; HEADER_LEN];
        let length = file.metadata()?.len();
        if length < HEADER_LEN as u64 {
            return if self.offset == 0 { Ok(None) } else { Err(WalError::Restarted) };
        }
        file.read_exact(&mut head)?;
        let mut out = Vec::new();
        let mut state = self.clone();
        match &state.header {
            Some(header) if header.bytes == head => {}
            Some(_) => return Err(WalError::Restarted),
            None => {
                let Some(header) = Header::parse(head) else { return Ok(None) };
                state.checksum = checksum(header.big_endian, &head[..24], (0, 0));
                if state.checksum != (be32(&head[24..28]), be32(&head[28..32])) {
                    return Ok(None);
                }
                state.header = Some(header);
                state.offset = HEADER_LEN as u64;
                out.extend_from_slice(&head);
            }
        }
        if length < state.offset {
            return Err(WalError::Restarted);
        }
        let Some(header) = state.header.clone() else { return Ok(None) };
        file.seek(SeekFrom::Start(state.offset))?;
        let mut tail = Vec::with_capacity(usize::try_from(length - state.offset).unwrap_or(0));
        file.read_to_end(&mut tail)?;

        let frame_len = FRAME_HEADER_LEN + header.page_size;
        let (mut sum, mut at, mut committed_at) = (state.checksum, 0usize, None);
        let mut committed_sum = sum;
        while at + frame_len <= tail.len() {
            let frame = &tail[at..at + frame_len];
            if frame[8..16] != header.bytes[16..24] {
                break;
            }
            sum = checksum(header.big_endian, &frame[..8], sum);
            sum = checksum(header.big_endian, &frame[FRAME_HEADER_LEN..], sum);
            if sum != (be32(&frame[16..20]), be32(&frame[20..24])) {
                break;
            }
            at += frame_len;
            if be32(&frame[4..8]) != 0 {
                committed_at = Some(at);
                committed_sum = sum;
            }
        }
        let Some(end) = committed_at else {
            // The header alone is worth nothing to a restore: wait for a commit.
            return Ok(None);
        };
        out.extend_from_slice(&tail[..end]);
        state.offset += end as u64;
        state.checksum = committed_sum;
        *self = state;
        Ok(Some(out))
    }
}

impl Header {
    fn parse(bytes: [u8; HEADER_LEN]) -> Option<Self> {
        let magic = be32(&bytes[0..4]);
        if magic & !1 != 0x377f_0682 {
            return None;
        }
        let page_size = match be32(&bytes[8..12]) {
            1 => 65536,
            size if size.is_power_of_two() && (512..=32768).contains(&size) => size as usize,
            _ => return None,
        };
        Some(Self { bytes, page_size, big_endian: magic & 1 == 1 })
    }
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// SQLite's WAL checksum: over 32-bit words (big- or little-endian as the magic says), two at a
/// time, continuing from `(s0, s1)`.
fn checksum(big_endian: bool, data: &[u8], (mut s0, mut s1): (u32, u32)) -> (u32, u32) {
    let word = |bytes: &[u8]| {
        let bytes = [bytes[0], bytes[1], bytes[2], bytes[3]];
        if big_endian { u32::from_be_bytes(bytes) } else { u32::from_le_bytes(bytes) }
    };
    for pair in data.chunks_exact(8) {
        s0 = s0.wrapping_add(word(&pair[..4])).wrapping_add(s1);
        s1 = s1.wrapping_add(word(&pair[4..])).wrapping_add(s0);
    }
    (s0, s1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::{Connection, Executor};

    async fn open(path: &Path) -> sqlx::SqliteConnection {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .pragma("wal_autocheckpoint", "0");
        sqlx::SqliteConnection::connect_with(&options).await.unwrap_or_else(|err| panic!("{err}"))
    }

    /// Commits shipped a few at a time, laid after the database file as it was, replay to the
    /// same database: that is the whole restore.
    #[tokio::test]
    async fn shipped_transactions_replay_to_the_same_database() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let db = dir.path().join("a.db");
        let wal = dir.path().join("a.db-wal");
        let mut conn = open(&db).await;
        conn.execute("CREATE TABLE t (n INTEGER, pad TEXT)").await.unwrap_or_else(|err| panic!("{err}"));
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").await.unwrap_or_else(|err| panic!("{err}"));
        let snapshot = std::fs::read(&db).unwrap_or_else(|err| panic!("{err}"));

        let mut cursor = WalCursor::default();
        assert!(cursor.take_committed(&wal).unwrap_or_else(|err| panic!("{err}")).is_none());
        let mut shipped = Vec::new();
        for n in 0..50 {
            sqlx::query("INSERT INTO t VALUES (?, hex(randomblob(1500)))")
                .bind(n)
                .execute(&mut conn)
                .await
                .unwrap_or_else(|err| panic!("{err}"));
            if n % 7 == 0 {
                shipped.extend(cursor.take_committed(&wal).unwrap_or_else(|err| panic!("{err}")).unwrap_or_default());
            }
        }
        shipped.extend(cursor.take_committed(&wal).unwrap_or_else(|err| panic!("{err}")).unwrap_or_default());
        assert!(cursor.take_committed(&wal).unwrap_or_else(|err| panic!("{err}")).is_none());
        // An open transaction's frames are not shipped.
        conn.execute("BEGIN; INSERT INTO t VALUES (999, hex(randomblob(90000)));")
            .await
            .unwrap_or_else(|err| panic!("{err}"));
        assert!(cursor.take_committed(&wal).unwrap_or_else(|err| panic!("{err}")).is_none());

        let restored = dir.path().join("b.db");
        std::fs::write(&restored, &snapshot).unwrap_or_else(|err| panic!("{err}"));
        std::fs::write(dir.path().join("b.db-wal"), &shipped).unwrap_or_else(|err| panic!("{err}"));
        let mut copy = open(&restored).await;
        let (count, sum): (i64, i64) = sqlx::query_as("SELECT count(*), sum(n) FROM t")
            .fetch_one(&mut copy)
            .await
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!((count, sum), (50, (0..50).sum()));

        // A checkpoint that truncates the WAL behind the cursor is noticed.
        conn.execute("COMMIT").await.unwrap_or_else(|err| panic!("{err}"));
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").await.unwrap_or_else(|err| panic!("{err}"));
        assert!(matches!(cursor.take_committed(&wal), Err(WalError::Restarted)));
    }
}
