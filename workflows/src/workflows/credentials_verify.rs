//! `credentials.verify`: asks the provider whether a saved credential works, with one cheap read
//! call, and records the verdict on the credential.
//!
//! ```text
//! ask_provider -> record_verdict
//! ```
//!
//! A provider that refuses the credential is a verdict (`invalid`, with its message), not a
//! failure. A provider that cannot be reached is retried with backoff ([`retry::cloud_calls`]);
//! when retries run out the run parks for an operator and the credential stays `verifying`. Each
//! attempt has 2 minutes; a cancel stops the attempt in flight. Neither step changes anything at
//! the provider, so neither has an undo. docs/workflows/credentials-verify.md says more.

use anycloud_engine::{Step, StepCtx, StepError, StepKey, Steps, Workflow};
use serde::{Deserialize, Serialize};

use crate::cloud::CloudError;
use crate::cloud::Verdict;
use crate::db::credentials::{self, CredentialStatus, OpenError};
use crate::workflows::deps::Deps;
use crate::workflows::retry;

/// The workflow, with what its steps need.
pub struct VerifyCredential {
    /// Database, sealer, clouds.
    pub deps: Deps,
}

/// Which credential to verify.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerifyInput {
    /// Its name.
    pub name: String,
}

/// The provider's verdict.
pub type VerifyOutput = Verdict;

/// The provider's answer, checkpointed.
const ASK_PROVIDER: StepKey<Verdict> = StepKey::new("ask_provider");
/// The status recorded on the credential.
const RECORD_VERDICT: StepKey<CredentialStatus> = StepKey::new("record_verdict");

impl VerifyCredential {
    /// The resource key runs on this credential share.
    pub fn resource_key(name: &str) -> String {
        format!("credential/{name}")
    }
}

impl Workflow for VerifyCredential {
    const KIND: &'static str = "credentials.verify";
    const VERSION: u32 = 1;
    type Input = VerifyInput;
    type Output = VerifyOutput;

    fn steps() -> Steps<Self> {
        Steps::new()
            .then(
                Step::action(ASK_PROVIDER, ask_provider)
                    .retry(retry::cloud_calls())
                    .attempt_timeout(retry::QUICK_ATTEMPT),
            )
            .then(Step::action(RECORD_VERDICT, record_verdict))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<Verdict, StepError> {
        ctx.output(ASK_PROVIDER)
    }
}

async fn ask_provider(ctx: StepCtx<VerifyCredential>) -> Result<Verdict, StepError> {
    let deps = &ctx.workflow().deps;
    let name = &ctx.input().name;
    let (credential, secret) = match credentials::open(&deps.db, &deps.sealer, name).await {
        Ok(Some(found)) => found,
        Ok(None) => return Err(StepError::terminal_msg(format!("credential `{name}` was deleted"))),
        Err(OpenError::Secret(err)) => {
            return Ok(Verdict::Rejected {
                message: format!("{}; save the credential again", anycloud_engine::error_chain(&err)),
            });
        }
        Err(OpenError::Store(err)) => return Err(StepError::retryable(err).context("reading the credential")),
    };
    let region = credential.public.region.clone().unwrap_or_default();
    let cloud = match deps.clouds.open(credential.cloud_ref(), &secret, &region).await {
        Ok(cloud) => cloud,
        // Keys that cannot even make a client (a malformed service-account key) are refused.
        Err(CloudError::Terminal(message)) => return Ok(Verdict::Rejected { message }),
        Err(err) => return Err(err.into()),
    };
    Ok(cloud.verify().await?)
}

async fn record_verdict(ctx: StepCtx<VerifyCredential>) -> Result<CredentialStatus, StepError> {
    let verdict = ctx.output(ASK_PROVIDER)?;
    let (status, message) = match &verdict {
        Verdict::Accepted { detail } => (CredentialStatus::Valid, detail.as_str()),
        Verdict::Rejected { message } => (CredentialStatus::Invalid, message.as_str()),
    };
    credentials::set_status(&ctx.workflow().deps.db, &ctx.input().name, status, Some(message), crate::now_ms()).await?;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cloud::ProviderKind;
    use crate::db::credentials::PublicPart;
    use crate::test_support::{FakeAnswer, TestWorld};

    /// A world whose fake cloud answers `answer`, with a `sim` credential `fake` saved (`verifying`).
    async fn world_with_credential(answer: FakeAnswer) -> TestWorld {
        let world = TestWorld::new(answer).await;
        let record = credentials::NewRecord {
            name: "fake".into(),
            provider: ProviderKind::Sim,
            public: PublicPart { identity: "fake".into(), ..PublicPart::default() },
            secret: "s3cret".into(),
        };
        let mut tx = world.deps.db.begin().await.unwrap();
        credentials::insert_in(&mut tx, &record, &world.deps.sealer, "run", 1).await.unwrap();
        tx.commit().await.unwrap();
        world
    }

    /// Saves a `sim` credential whose fake cloud answers `answer`, verifies it, and returns the
    /// credential as recorded.
    async fn verify_with(answer: FakeAnswer) -> credentials::Credential {
        let world = world_with_credential(answer).await;
        let workflow = Arc::new(VerifyCredential { deps: world.deps.clone() });
        let engine = world.engine(anycloud_engine::Registry::new().with(workflow)).await;
        let run = engine.submit::<VerifyCredential>(&VerifyInput { name: "fake".into() }, None).await.unwrap();
        let ended = engine.wait(run, std::time::Duration::from_secs(20)).await.unwrap();
        assert_eq!(ended.status, anycloud_engine::RunStatus::Succeeded, "{ended:?}");
        engine.shutdown(std::time::Duration::from_secs(5)).await;
        credentials::get(&world.deps.db, "fake").await.unwrap().unwrap()
    }

    #[tokio::test]
    async fn an_accepted_credential_is_valid() {
        let credential = verify_with(FakeAnswer::Accept).await;
        assert_eq!(credential.status, CredentialStatus::Valid);
        assert_eq!(credential.status_message.as_deref(), Some("fake cloud: accepted"));
    }

    #[tokio::test]
    async fn a_refusal_is_a_verdict_not_a_failure() {
        let credential = verify_with(FakeAnswer::Reject).await;
        assert_eq!(credential.status, CredentialStatus::Invalid);
        assert_eq!(credential.status_message.as_deref(), Some("fake cloud: keys refused"));
    }

    #[tokio::test]
    async fn keys_that_cannot_make_a_client_are_refused() {
        let credential = verify_with(FakeAnswer::CannotOpen).await;
        assert_eq!(credential.status, CredentialStatus::Invalid);
        assert_eq!(credential.status_message.as_deref(), Some("fake cloud: malformed key"));
    }

    #[tokio::test]
    async fn every_step_run_twice_still_records_one_verdict() {
        let world = world_with_credential(FakeAnswer::Accept).await;
        let workflow = Arc::new(VerifyCredential { deps: world.deps.clone() });
        let input = VerifyInput { name: "fake".into() };
        let verdict =
            anycloud_engine::testing::actions_succeed_idempotently(world.store(), workflow, &input).await.unwrap();
        assert!(matches!(verdict, Verdict::Accepted { .. }), "{verdict:?}");
        let credential = credentials::get(&world.deps.db, "fake").await.unwrap().unwrap();
        assert_eq!(credential.status, CredentialStatus::Valid);
    }

    /// Neither step changes anything at the provider, so neither has an undo: a run failed at
    /// any step leaves the credential `verifying`, as it was. A cancel that lands after
    /// `record_verdict` did its work leaves the verdict it recorded (it is true either way).
    #[tokio::test]
    async fn a_failure_or_cancel_at_every_step_leaves_the_credential_as_it_was() {
        let world = world_with_credential(FakeAnswer::Accept).await;
        let workflow = Arc::new(VerifyCredential { deps: world.deps.clone() });
        let input = VerifyInput { name: "fake".into() };
        let status = || async { credentials::get(&world.deps.db, "fake").await.unwrap().unwrap().status };
        let unchanged = |step: &'static str| async move {
            match status().await {
                CredentialStatus::Verifying => Ok(()),
                other => Err(format!("after a failure at `{step}` the credential is {other:?}")),
            }
        };
        anycloud_engine::testing::action_failure_can_unwind(world.store(), workflow.clone(), &input, unchanged)
            .await
            .unwrap();
        let as_before_or_true = |step: &'static str| async move {
            match (step, status().await) {
                (_, CredentialStatus::Verifying) | ("record_verdict", CredentialStatus::Valid) => Ok(()),
                (step, other) => Err(format!("after a cancel at `{step}` the credential is {other:?}")),
            }
        };
        anycloud_engine::testing::cancel_in_flight_can_unwind(world.store(), workflow, &input, as_before_or_true)
            .await
            .unwrap();
    }
}
