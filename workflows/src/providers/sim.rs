//! The simulated cloud: a local cloud for the quick start and for deterministic tests. It
//! keeps its state beside the API's (table `sim_api_calls`), so its injected faults behave
//! the same across API restarts. Everything it returns says it is simulated.

use anycloud_engine::store::Pool;
use anycloud_engine::with_pool;
use serde::{Deserialize, Serialize};

use super::Verdict;

/// Fault injection for one simulated account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimSettings {
    /// The first this many API calls fail with a transient error (HTTP 503).
    #[serde(default)]
    pub fail_first: u32,
    /// Every call is rejected with this message, as a cloud rejects bad keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reject: Option<String>,
    /// Each call takes this long.
    #[serde(default)]
    pub latency_ms: u64,
}

/// A transient failure of the simulated cloud.
#[derive(Debug, thiserror::Error)]
#[error("simulated cloud: 503 Service Unavailable (injected fault {call} of {of})")]
pub struct Unavailable {
    call: u32,
    of: u32,
}

/// A failure of the simulated cloud's own bookkeeping.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// An injected transient fault.
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
    /// Its state could not be read or written.
    #[error("simulated cloud state")]
    State(#[from] sqlx::Error),
}

/// The simulated cloud, on the API's database.
#[derive(Clone, Debug)]
pub struct SimCloud {
    pool: Pool,
}

impl SimCloud {
    /// The simulated cloud whose state lives in `pool`.
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }

    /// The cheapest read call: lists the simulated regions, as DescribeRegions would.
    pub async fn describe_regions(&self, account: &str, settings: &SimSettings) -> Result<Verdict, SimError> {
        if settings.latency_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(settings.latency_ms)).await;
        }
        let call = self.count_call(account).await?;
        if call <= settings.fail_first {
            return Err(Unavailable { call, of: settings.fail_first }.into());
        }
        if let Some(message) = &settings.reject {
            return Ok(Verdict::Rejected { message: format!("simulated cloud: {message}") });
        }
        Ok(Verdict::Accepted { detail: "simulated cloud: 3 regions (sim-east-1, sim-west-1, sim-north-1)".into() })
    }

    /// Counts a call to `account` and returns its number (1 for the first).
    async fn count_call(&self, account: &str) -> Result<u32, sqlx::Error> {
        let calls: i64 = with_pool!(&self.pool, |pool| {
            sqlx::query_scalar(
                "INSERT INTO sim_api_calls (account, calls) VALUES ($1, 1) \
                 ON CONFLICT (account) DO UPDATE SET calls = sim_api_calls.calls + 1 RETURNING calls",
            )
            .bind(account)
            .fetch_one(pool)
            .await
        })?;
        Ok(calls as u32)
    }
}
