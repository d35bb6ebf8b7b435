//! Making waiting runs due now: what [`crate::Engine::changed`] asks when a watch reports that
//! something a run polls for may have changed.

use super::handle::Store;
use super::records::Millis;

/// The waiting runs of the resource keys in the JSON array `$1`, checked at `$2` instead of
/// later, in one statement whatever the number of keys: [PostgreSQL, SQLite], which differ only
/// in how they read the array. A run in a check, a back-off or a lease is left alone: its
/// driver is told in memory, and a back-off keeps its delay. Served by the `(resource_key,
/// status, seq)` index, one probe per key.
const MAKE_DUE: [&str; 2] = [
    "UPDATE engine_runs SET next_at = $2 \
     WHERE resource_key IN (SELECT jsonb_array_elements_text($1::jsonb)) AND status = 'waiting' \
       AND finished_at IS NULL AND lease_owner IS NULL AND next_at > $2",
    "UPDATE engine_runs SET next_at = $2 \
     WHERE resource_key IN (SELECT value FROM json_each($1)) AND status = 'waiting' \
       AND finished_at IS NULL AND lease_owner IS NULL AND next_at > $2",
];

impl Store {
    /// Makes the waiting runs of each of `resource_keys` due at `now`, in one statement; returns
    /// how many there were. The timeline is left as it is: the check that follows writes what it
    /// finds. On SQLite it commits with the runs' checkpoints (`write_statement.rs`).
    pub(crate) async fn make_due(&self, resource_keys: &[&str], now: Millis) -> Result<u64, sqlx::Error> {
        let keys = serde_json::to_string(resource_keys).map_err(|err| sqlx::Error::Encode(Box::new(err)))?;
        let sql = MAKE_DUE[usize::from(!self.is_postgres())];
        crate::write_statement!(self, sql, keys, now)
    }
}
