//! Whether the disk under the data directory takes writes, checked before `api serve` writes
//! anything there. On a full or read-only disk the API would start, answer reads and refuse
//! every write (`STORAGE_FULL`, `STORAGE_READ_ONLY`); a process that has not started yet says so
//! at once instead, and exits 2.

use std::path::Path;

use anycloud_engine::{DiskSpace, StoreFault};

use crate::exit::{CliError, NOT_OBSERVED};

/// Refuses a data directory on a full (less than 1 MiB free) or read-only disk. The directory
/// need not exist yet: its nearest existing parent is where it would be made.
pub fn check(data_dir: &Path) -> Result<(), CliError> {
    let Some(existing) = data_dir.ancestors().find(|dir| dir.exists()) else {
        return Ok(());
    };
    // A disk that cannot be looked at is left to the writes that follow, which say why.
    let Ok(disk) = DiskSpace::of(existing) else {
        return Ok(());
    };
    match disk.fault() {
        None => Ok(()),
        Some(StoreFault::DiskFull) => Err(CliError::new(
            NOT_OBSERVED,
            "STORAGE_FULL",
            format!(
                "the disk holding the data directory {} is full ({} KiB free; the API needs at least 1 MiB): free \
                 space on it, then start the API again",
                data_dir.display(),
                disk.free_bytes / 1024
            ),
        )),
        Some(StoreFault::ReadOnly) => Err(CliError::new(
            NOT_OBSERVED,
            "STORAGE_READ_ONLY",
            format!(
                "the data directory {} is on a read-only file system: remount it read-write (or give --data-dir on \
                 a writable disk), then start the API again",
                data_dir.display()
            ),
        )),
    }
}
