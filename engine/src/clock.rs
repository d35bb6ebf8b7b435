//! Time as the store keeps it: milliseconds since the Unix epoch ([`Millis`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::store::Millis;

/// Now.
pub(crate) fn now_ms() -> Millis {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis() as Millis)
}

/// `delay` after `now`.
pub(crate) fn after(now: Millis, delay: Duration) -> Millis {
    now.saturating_add(delay.as_millis() as Millis)
}

/// How long ago `started` was at `now` (zero if the clock went back).
pub(crate) fn since(started: Millis, now: Millis) -> Duration {
    Duration::from_millis((now - started).max(0) as u64)
}
