//! How many long-lived streams an API holds at once: followed logs (`logs --follow`) and exec
//! sessions. Each holds a connection to a cluster for as long as its client wants (a follow has
//! no end of its own, an exec ends after its idle limit), so their number is bounded instead:
//! beyond [`MAX_STREAMS`], a new one is refused with `429 TOO_MANY_STREAMS` and `Retry-After`,
//! before anything is opened.

use std::sync::Arc;

use axum::http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::ApiError;

/// The most followed logs and exec sessions an API holds at once.
pub const MAX_STREAMS: usize = 100;

/// `Retry-After` of a `TOO_MANY_STREAMS` answer.
const RETRY_AFTER: u32 = 10;

/// The streams an API holds.
#[derive(Clone)]
pub struct Streams(Arc<Semaphore>);

impl Default for Streams {
    fn default() -> Self {
        Self::new()
    }
}

/// One stream's place, given back when dropped.
pub type StreamSlot = OwnedSemaphorePermit;

impl Streams {
    /// Room for [`MAX_STREAMS`].
    pub fn new() -> Self {
        Self(Arc::new(Semaphore::new(MAX_STREAMS)))
    }

    /// A place for one more stream (`what`, for the refusal), or `429 TOO_MANY_STREAMS`.
    pub fn hold(&self, what: &str) -> Result<StreamSlot, ApiError> {
        self.0.clone().try_acquire_owned().map_err(|_| ApiError {
            retry_after: Some(RETRY_AFTER),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "TOO_MANY_STREAMS",
                format!(
                    "this API already holds {MAX_STREAMS} followed logs and exec sessions, its most, and refused \
                     {what}; end one of them (or wait for one to end) and try again"
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_stream_after_the_last_is_refused_until_one_ends() {
        let streams = super::Streams::new();
        let held: Vec<_> = (0..super::MAX_STREAMS).map(|_| streams.hold("a follow").unwrap()).collect();
        let refused = streams.hold("a follow of `web`").unwrap_err();
        assert_eq!((refused.status.as_u16(), refused.code, refused.retry_after), (429, "TOO_MANY_STREAMS", Some(10)));
        assert!(refused.message.contains("a follow of `web`"), "{}", refused.message);
        drop(held);
        assert!(streams.hold("a follow").is_ok());
    }
}
