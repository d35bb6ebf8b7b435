//! `credentials.verify`: asks the provider whether a saved credential works, with one cheap
//! read call, and records the verdict on the credential.
//!
//! ask_provider -> record_verdict
//!
//! A provider that refuses the credential is a verdict (`invalid`, with its message), not a
//! failure. A provider that cannot be reached is retried with backoff; when retries run out
//! the run parks for an operator, and the credential stays `verifying`.

use std::time::Duration;

use anycloud_engine::store::Pool;
use anycloud_engine::{OnExhausted, RetryPolicy, Step, StepCtx, StepError, Steps, Workflow};
use serde::{Deserialize, Serialize};

use crate::credentials::{self, CredentialStatus, OpenError};
use crate::providers::sim::SimCloud;
use crate::providers::{ProviderKind, Verdict, aws, gcp};
use crate::secrets::SecretBox;

/// The workflow, with what its steps need.
pub struct VerifyCredential {
    /// The API's database.
    pub pool: Pool,
    /// Opens the credential's secret.
    pub sealer: SecretBox,
    /// The simulated cloud.
    pub sim: SimCloud,
}

/// Which credential to verify.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerifyInput {
    /// Its name.
    pub name: String,
}

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
    type Output = Verdict;

    fn steps() -> Steps<Self> {
        let provider_calls = RetryPolicy {
            initial_delay: Duration::from_secs(1),
            multiplier: 2.0,
            max_delay: Duration::from_secs(30),
            jitter: 0.2,
            max_attempts: Some(8),
            max_elapsed: Some(Duration::from_secs(10 * 60)),
            on_exhausted: OnExhausted::Park,
        };
        Steps::new()
            .then(Step::action("ask_provider", ask_provider).retry(provider_calls))
            .then(Step::action("record_verdict", record_verdict))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<Verdict, StepError> {
        ctx.output("ask_provider")
    }
}

async fn ask_provider(ctx: StepCtx<VerifyCredential>) -> Result<Verdict, StepError> {
    let deps = ctx.workflow();
    let name = &ctx.input().name;
    let (credential, secret) = match credentials::open(&deps.pool, &deps.sealer, name).await {
        Ok(Some(found)) => found,
        Ok(None) => return Err(StepError::terminal_msg(format!("credential `{name}` was deleted"))),
        Err(OpenError::Secret(err)) => {
            return Ok(Verdict::Rejected {
                message: format!("{}; save the credential again", anycloud_engine::error_chain(&err)),
            });
        }
        Err(OpenError::Store(err)) => return Err(StepError::retryable(err).context("reading the credential")),
    };
    let public = &credential.public;
    match credential.provider {
        ProviderKind::Aws => aws::verify(public, &secret)
            .await
            .map_err(|err| StepError::retryable(err).context("calling EC2 DescribeRegions")),
        ProviderKind::Gcp => match gcp::verify(public, &secret).await {
            Ok(verdict) => Ok(verdict),
            Err(err @ gcp::GcpError::Credentials(_)) => {
                Ok(Verdict::Rejected { message: anycloud_engine::error_chain(&err) })
            }
            Err(err) => Err(StepError::retryable(err)),
        },
        ProviderKind::Sim => {
            let settings = public.sim.clone().unwrap_or_default();
            deps.sim.describe_regions(&public.identity, &settings).await.map_err(StepError::retryable)
        }
    }
}

async fn record_verdict(ctx: StepCtx<VerifyCredential>) -> Result<CredentialStatus, StepError> {
    let verdict: Verdict = ctx.output("ask_provider")?;
    let (status, message) = match &verdict {
        Verdict::Accepted { detail } => (CredentialStatus::Valid, detail.as_str()),
        Verdict::Rejected { message } => (CredentialStatus::Invalid, message.as_str()),
    };
    credentials::set_status(&ctx.workflow().pool, &ctx.input().name, status, Some(message), crate::now_ms()).await?;
    Ok(status)
}
