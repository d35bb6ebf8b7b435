//! The clouds Anycloud acts on, each behind the [`Cloud`] trait ([`cloud`]): AWS (aws-sdk-ec2),
//! GCP (google-cloud-compute-v1), and the simulated cloud, which lives in its own crate
//! (`anycloud-sim`) and reaches the domain through [`SimulatedCloud`]. [`Clouds::open`] is the
//! one place that picks an implementation for a credential: a new provider is one more arm there.
//!
//! This is the only crate that names a cloud SDK: the domain (`anycloud-workflows`) sees a
//! provider as a [`Cloud`], and re-exports this crate as its `providers` module.

pub mod arch;
pub mod aws;
mod aws_addresses;
pub mod aws_cloud;
mod aws_ec2;
pub mod aws_iam;
pub mod aws_secrets;
pub mod cloud;
pub mod credential;
pub mod endpoint;
pub mod gcp;
mod gcp_addresses;
pub mod gcp_cloud;
mod gcp_errors;
pub mod gcp_iam;
pub mod gcp_names;
pub mod gcp_secrets;
pub mod shown;
pub mod sim_settings;

use std::sync::Arc;

use crate::cloud::{Cloud, CloudError, KubeEndpoint, ProviderKind, Vm};
use crate::credential::CredentialRef;
use endpoint::EndpointPolicy;
use sim_settings::SimSettings;

/// The simulated cloud, as the domain sees it: accounts that are [`Cloud`]s.
pub trait SimulatedCloud: Send + Sync {
    /// The account a `sim` credential names.
    fn account(&self, identity: &str, settings: SimSettings) -> Result<Box<dyn Cloud>, CloudError>;

    /// Where the simulated control-plane VM's Kubernetes API answers (the same in every
    /// account).
    fn kube_endpoint(&self, control_plane: &Vm) -> KubeEndpoint;
}

/// Opens the cloud account a credential names.
#[derive(Clone, Default)]
pub struct Clouds {
    simulated: Option<Arc<dyn SimulatedCloud>>,
    endpoints: EndpointPolicy,
    /// A deployed API's owner id, tagged on everything it makes ([`crate::cloud::OWNER_TAG`]).
    owner: Option<String>,
}

impl std::fmt::Debug for Clouds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clouds")
            .field("simulated", &self.simulated.is_some())
            .field("endpoints", &self.endpoints)
            .field("owner", &self.owner)
            .finish()
    }
}

impl Clouds {
    /// AWS and GCP, and the simulated cloud when one is given; endpoint overrides `https://`
    /// to public hosts only.
    pub fn new(simulated: Option<Arc<dyn SimulatedCloud>>) -> Self {
        Self { simulated, endpoints: EndpointPolicy::default(), owner: None }
    }

    /// The same, tagging what it makes on AWS with `owner` (a deployed API's owner id, given to
    /// its `api serve` as `--owner`): its VM's role may change only resources so tagged.
    #[must_use]
    pub fn with_owner(mut self, owner: Option<String>) -> Self {
        self.owner = owner;
        self
    }

    /// The same, with the endpoints `policy` allows (the operator's setting on the API).
    #[must_use]
    pub fn with_endpoint_policy(mut self, policy: EndpointPolicy) -> Self {
        self.endpoints = policy;
        self
    }

    /// Whether this API runs the simulated cloud (a local API, or one the simulated cloud hosts).
    pub fn simulated(&self) -> bool {
        self.simulated.is_some()
    }

    /// Which endpoint overrides this API accepts.
    pub fn endpoint_policy(&self) -> EndpointPolicy {
        self.endpoints
    }

    /// Refuses a credential whose endpoint override this API does not accept (one saved while
    /// it was started with `--allow-insecure-endpoints`, used after a start without).
    pub fn check_endpoint(&self, credential: CredentialRef<'_>) -> Result<(), CloudError> {
        match &credential.public.endpoint {
            Some(url) => endpoint::check(&format!("credential `{}`", credential.name), url, self.endpoints)
                .map_err(CloudError::Terminal),
            None => Ok(()),
        }
    }

    /// The account of `credential` (its secret opened), acting in `region`.
    pub async fn open(
        &self,
        credential: CredentialRef<'_>,
        secret: &str,
        region: &str,
    ) -> Result<Box<dyn Cloud>, CloudError> {
        self.check_endpoint(credential)?;
        let public = credential.public;
        Ok(match credential.provider {
            ProviderKind::Aws => {
                Box::new(aws_cloud::AwsCloud::new(public, secret, region).owned_by(self.owner.clone()))
            }
            ProviderKind::Gcp => Box::new(gcp_cloud::GcpCloud::new(public, secret).await?),
            ProviderKind::Sim => match &self.simulated {
                Some(sim) => sim.account(&public.identity, public.sim.clone().unwrap_or_default())?,
                None => {
                    return Err(CloudError::Terminal(format!(
                        "credential `{}` is of the simulated cloud, which this API does not run",
                        credential.name
                    )));
                }
            },
        })
    }

    /// Where the Kubernetes API of a control-plane VM of `provider` answers. Its address is the
    /// VM's, not the account's: a job's every check reaches its cluster without opening (and
    /// decrypting) a credential, and a cluster stays reachable while its credential is being
    /// verified again or has been replaced.
    pub fn kube_endpoint(&self, provider: ProviderKind, control_plane: &Vm) -> Result<KubeEndpoint, CloudError> {
        match (provider, &self.simulated) {
            (ProviderKind::Aws | ProviderKind::Gcp, _) => Ok(KubeEndpoint::k3s(control_plane)),
            (ProviderKind::Sim, Some(sim)) => Ok(sim.kube_endpoint(control_plane)),
            (ProviderKind::Sim, None) => Err(CloudError::Terminal(format!(
                "control plane {} is of the simulated cloud, which this API does not run",
                control_plane.provider_id
            ))),
        }
    }
}

/// Reads secret `secret` (an ARN on AWS, `projects/P/secrets/NAME` on GCP) as this machine, from
/// the secret store of `hosting`, at `endpoint` when given: what a hosted API's VM does at start.
pub async fn read_secret_as_vm(hosting: ProviderKind, secret: &str, endpoint: Option<&str>) -> Result<String, String> {
    match hosting {
        ProviderKind::Aws => aws_secrets::read_as_vm(secret, endpoint).await,
        ProviderKind::Gcp => gcp_secrets::read_as_vm(secret, endpoint).await,
        ProviderKind::Sim => Err("the simulated cloud has no secret store".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credential::PublicPart;

    /// A credential saved while the API allowed plain HTTP is refused once it no longer does:
    /// the setting is the running API's, not the request's that saved the credential.
    #[tokio::test]
    async fn a_stored_endpoint_is_checked_against_the_running_apis_setting() {
        let public = PublicPart {
            identity: "AKIAEXAMPLE".into(),
            endpoint: Some("http://127.0.0.1:5000".into()),
            ..PublicPart::default()
        };
        let credential = CredentialRef { name: "moto", provider: ProviderKind::Aws, public: &public };
        let refused = Clouds::new(None).open(credential, "secret", "us-east-1").await.err();
        assert!(
            matches!(&refused, Some(CloudError::Terminal(m)) if m.starts_with("credential `moto`: endpoint") && m.contains("plain HTTP")),
            "{:?}",
            refused.map(|err| err.to_string())
        );
        let allowed = Clouds::new(None).with_endpoint_policy(EndpointPolicy::AllowInsecure);
        assert!(allowed.open(credential, "secret", "us-east-1").await.is_ok());
    }
}
