//! The disk under a SQLite store: full, or read-only. Either way the database refuses writes
//! and still answers reads, and the writes that were refused changed nothing (SQLite rolls the
//! transaction back; the database stays whole). The engine's drivers try their commits again
//! and the claim loop claims again, so runs continue once the disk takes writes again; callers
//! that cannot wait (an API request) say which of the two it is and what to do.
//!
//! SQLite reports a full disk as `SQLITE_FULL` (13) and a read-only one as `SQLITE_READONLY`
//! (8, with extended codes for a read-only file, directory or mount). [`DiskSpace`] looks at the
//! disk itself, for a report (health) that must not wait for a write to fail.

use std::path::Path;

/// Why a SQLite store cannot write now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreFault {
    /// No room left on the disk.
    DiskFull,
    /// The disk, the directory or the database file is read-only.
    ReadOnly,
}

/// Free space under which a disk counts as full: a checkpoint writes a few pages to the WAL,
/// and SQLite grows its files in steps of a few pages.
const LOW_SPACE: u64 = 1 << 20;

impl StoreFault {
    /// The fault `err`, or an error in its chain of causes, reports, if it is one of these.
    pub fn of(err: &(dyn std::error::Error + 'static)) -> Option<Self> {
        let mut cause = Some(err);
        while let Some(err) = cause {
            if let Some(fault) = err.downcast_ref::<sqlx::Error>().and_then(Self::of_sqlx) {
                return Some(fault);
            }
            if let Some(fault) = err.downcast_ref::<std::io::Error>().and_then(Self::of_io) {
                return Some(fault);
            }
            cause = err.source();
        }
        None
    }

    /// The fault a sqlx error reports.
    pub(crate) fn of_sqlx(err: &sqlx::Error) -> Option<Self> {
        match err {
            sqlx::Error::Database(db) if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() => {
                // Extended result codes: the primary code is the low byte.
                match db.code()?.parse::<i32>().ok()? & 0xff {
                    13 => Some(Self::DiskFull),
                    8 => Some(Self::ReadOnly),
                    _ => None,
                }
            }
            sqlx::Error::Io(err) => Self::of_io(err),
            _ => None,
        }
    }

    fn of_io(err: &std::io::Error) -> Option<Self> {
        match err.kind() {
            std::io::ErrorKind::StorageFull => Some(Self::DiskFull),
            std::io::ErrorKind::ReadOnlyFilesystem => Some(Self::ReadOnly),
            _ => None,
        }
    }

    /// `disk-full` or `read-only`, as health and logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DiskFull => "disk-full",
            Self::ReadOnly => "read-only",
        }
    }
}

impl std::fmt::Display for StoreFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::DiskFull => {
                "the disk holding the database is full: free space on it; writes are refused meanwhile (the \
                 database stays whole) and runs continue once there is room"
            }
            Self::ReadOnly => {
                "the database is on a read-only disk (or its file or directory is read-only): make it writable; \
                 writes are refused meanwhile and runs continue once it is"
            }
        })
    }
}

/// What the file system under a path says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskSpace {
    /// Bytes an unprivileged writer may still use.
    pub free_bytes: u64,
    /// Mounted read-only.
    pub read_only: bool,
}

impl DiskSpace {
    /// The file system holding `path`.
    pub fn of(path: &Path) -> std::io::Result<Self> {
        let stat = rustix::fs::statvfs(path)?;
        Ok(Self {
            free_bytes: stat.f_bavail.saturating_mul(stat.f_frsize),
            read_only: stat.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY),
        })
    }

    /// The fault a store on it would meet: read-only, or less than 1 MiB free.
    pub fn fault(&self) -> Option<StoreFault> {
        if self.read_only {
            Some(StoreFault::ReadOnly)
        } else if self.free_bytes < LOW_SPACE {
            Some(StoreFault::DiskFull)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DiskSpace, StoreFault};

    #[test]
    fn a_full_or_read_only_file_system_is_a_fault_and_a_cut_connection_is_not() {
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        assert_eq!(StoreFault::of(&sqlx::Error::Io(full)), Some(StoreFault::DiskFull));
        let read_only = std::io::Error::from(std::io::ErrorKind::ReadOnlyFilesystem);
        assert_eq!(StoreFault::of(&crate::EngineError::from(sqlx::Error::Io(read_only))), Some(StoreFault::ReadOnly));
        let cut = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(StoreFault::of(&sqlx::Error::Io(cut)), None);
        assert_eq!(StoreFault::of(&sqlx::Error::PoolTimedOut), None);
    }

    #[test]
    fn a_disk_with_less_than_a_mebibyte_free_is_full() {
        assert_eq!(DiskSpace { free_bytes: 1 << 19, read_only: false }.fault(), Some(StoreFault::DiskFull));
        assert_eq!(DiskSpace { free_bytes: 1 << 30, read_only: true }.fault(), Some(StoreFault::ReadOnly));
        assert_eq!(DiskSpace { free_bytes: 1 << 30, read_only: false }.fault(), None);
        let here = DiskSpace::of(std::path::Path::new(".")).expect("statvfs of the crate's directory");
        assert!(here.free_bytes > 0);
    }
}
