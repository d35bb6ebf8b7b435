//! Opens the cloud account a credential names, as a [`Cloud`] the cluster workflows can use.

use anycloud_engine::store::Pool;

use super::ProviderKind;
use super::aws_cloud::AwsCloud;
use super::gcp_cloud::GcpCloud;
use super::sim::SimCloud;
use crate::cloud::{Cloud, CloudError};
use crate::credentials::{self, CredentialStatus, OpenError};
use crate::secrets::SecretBox;

/// The cloud account of credential `name`, acting in `region`.
pub async fn open(
    pool: &Pool,
    sealer: &SecretBox,
    sim: &SimCloud,
    name: &str,
    region: &str,
) -> Result<Box<dyn Cloud>, CloudError> {
    let (credential, secret) = match credentials::open(pool, sealer, name).await {
        Ok(Some(found)) => found,
        Ok(None) => {
            return Err(CloudError::Terminal(format!(
                "credential `{name}` does not exist; `anycloud credentials list` shows the saved ones"
            )));
        }
        Err(err @ OpenError::Secret(_)) => return Err(CloudError::terminal(&format!("credential `{name}`"), &err)),
        Err(err @ OpenError::Store(_)) => return Err(CloudError::retryable(&format!("credential `{name}`"), &err)),
    };
    match credential.status {
        CredentialStatus::Valid => {}
        CredentialStatus::Invalid => {
            return Err(CloudError::Terminal(format!(
                "credential `{name}` is invalid: {}; save it again with working keys",
                credential.status_message.unwrap_or_default()
            )));
        }
        CredentialStatus::Verifying => {
            return Err(CloudError::Retryable(format!(
                "credential `{name}` is still being verified; wait for `anycloud credentials list` to show it valid"
            )));
        }
    }
    let public = &credential.public;
    Ok(match credential.provider {
        ProviderKind::Aws => Box::new(AwsCloud::new(public, &secret, region)),
        ProviderKind::Gcp => Box::new(GcpCloud::new(public, &secret).await?),
        ProviderKind::Sim => Box::new(sim.account(&public.identity, public.sim.clone().unwrap_or_default())),
    })
}
