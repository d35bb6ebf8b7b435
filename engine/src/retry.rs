//! Retry policies. The engine computes each delay and stores the next attempt time in the
//! run's row, so a restart neither resets backoff nor forgets a pending retry.

use std::time::Duration;

use rand::Rng;

/// How a step is retried after a retryable error.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Delay before the second attempt.
    pub initial_delay: Duration,
    /// Each further delay is the previous one times this.
    pub multiplier: f64,
    /// No delay is longer than this.
    pub max_delay: Duration,
    /// Spread each delay by up to this fraction either way (0.0 to 1.0), so that many runs
    /// failing together do not retry together.
    pub jitter: f64,
    /// Give up after this many attempts in all (`None`: no limit by count).
    pub max_attempts: Option<u32>,
    /// Give up once this much time has passed since the first attempt (`None`: no limit).
    pub max_elapsed: Option<Duration>,
    /// What happens when retries run out.
    pub on_exhausted: OnExhausted,
}

/// What the engine does with a run whose step has used up its retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum OnExhausted {
    /// Undo the completed steps and end `failed`.
    Unwind,
    /// Stop as `needs-attention`, keeping everything done so far, for an operator.
    Park,
}

impl Default for RetryPolicy {
    /// 1 s, doubling to at most 1 min, ±20 %, 8 attempts, then unwind.
    fn default() -> Self {
        Self {
            initial_delay: Duration::from_secs(1),
            multiplier: 2.0,
            max_delay: Duration::from_secs(60),
            jitter: 0.2,
            max_attempts: Some(8),
            max_elapsed: None,
            on_exhausted: OnExhausted::Unwind,
        }
    }
}

impl RetryPolicy {
    /// One attempt only: the first error ends the step.
    pub fn never() -> Self {
        Self { max_attempts: Some(1), ..Self::default() }
    }

    /// The same delay between every attempt, up to `max_attempts`.
    pub fn fixed(delay: Duration, max_attempts: u32) -> Self {
        Self {
            initial_delay: delay,
            multiplier: 1.0,
            max_delay: delay,
            jitter: 0.0,
            max_attempts: Some(max_attempts),
            ..Self::default()
        }
    }

    /// Sets what happens when retries run out.
    #[must_use]
    pub fn on_exhausted(mut self, on_exhausted: OnExhausted) -> Self {
        self.on_exhausted = on_exhausted;
        self
    }

    /// Whether no attempt may follow `attempts` failed ones, `elapsed` after the first began.
    pub fn is_exhausted(&self, attempts: u32, elapsed: Duration) -> bool {
        self.max_attempts.is_some_and(|max| attempts >= max) || self.max_elapsed.is_some_and(|max| elapsed >= max)
    }

    /// The delay after the `failures`-th failed attempt (1 for the first failure).
    pub fn delay_after(&self, failures: u32) -> Duration {
        let exponent = failures.saturating_sub(1).min(64) as i32;
        let base = self.initial_delay.as_secs_f64() * self.multiplier.powi(exponent);
        let capped = base.min(self.max_delay.as_secs_f64());
        let jitter = self.jitter.clamp(0.0, 1.0);
        let factor = if jitter > 0.0 { rand::rng().random_range(1.0 - jitter..=1.0 + jitter) } else { 1.0 };
        Duration::from_secs_f64((capped * factor).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_cap() {
        let policy = RetryPolicy { jitter: 0.0, ..RetryPolicy::default() };
        assert_eq!(policy.delay_after(1), Duration::from_secs(1));
        assert_eq!(policy.delay_after(2), Duration::from_secs(2));
        assert_eq!(policy.delay_after(4), Duration::from_secs(8));
        assert_eq!(policy.delay_after(30), Duration::from_secs(60));
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let policy = RetryPolicy { jitter: 0.5, ..RetryPolicy::default() };
        for _ in 0..100 {
            let delay = policy.delay_after(2).as_secs_f64();
            assert!((1.0..=3.0).contains(&delay), "{delay}");
        }
    }

    #[test]
    fn exhaustion_by_count_or_time() {
        let policy =
            RetryPolicy { max_elapsed: Some(Duration::from_secs(10)), ..RetryPolicy::fixed(Duration::ZERO, 3) };
        assert!(!policy.is_exhausted(2, Duration::from_secs(1)));
        assert!(policy.is_exhausted(3, Duration::from_secs(1)));
        assert!(policy.is_exhausted(1, Duration::from_secs(10)));
    }
}
