//! Making waiting runs due now: what [`crate::Engine::changed`] asks when a watch reports that
//! something a run polls for may have changed.

use super::handle::Store;
use super::pool::BeginWrite;
use super::records::Millis;

/// The waiting runs of a resource key, checked at `$2` instead of later. A run in a check, a
/// back-off or a lease is left alone: its driver is told in memory, and a back-off keeps its
/// delay. Served by the `(resource_key, status, seq)` index.
const MAKE_DUE: &str = "UPDATE engine_runs SET next_at = $2 \
     WHERE resource_key = $1 AND status = 'waiting' AND finished_at IS NULL AND lease_owner IS NULL \
       AND next_at > $2";

impl Store {
    /// Makes the waiting runs of each of `resource_keys` due at `now`, in one transaction;
    /// returns how many there were. The timeline is left as it is: the check that follows writes
    /// what it finds.
    pub(crate) async fn make_due(&self, resource_keys: &[&str], now: Millis) -> Result<u64, sqlx::Error> {
        crate::with_pool!(&self.pool, |pool| {
            let mut tx = pool.begin_write().await?;
            let mut due = 0;
            for resource_key in resource_keys {
                due += sqlx::query(MAKE_DUE).bind(resource_key).bind(now).execute(&mut *tx).await?.rows_affected();
            }
            tx.commit().await?;
            Ok(due)
        })
    }
}
