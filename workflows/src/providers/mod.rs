//! The clouds Anycloud acts on, each behind the [`Cloud`] trait: AWS (aws-sdk-ec2), GCP
//! (google-cloud-compute-v1), and the simulated cloud, which lives in its own crate
//! (`anycloud-sim`) and reaches the domain through [`SimulatedCloud`]. [`Clouds::open`] is the
//! one place that picks an implementation for a credential: a new provider is one more arm there.

pub mod aws;
mod aws_addresses;
pub mod aws_cloud;
pub mod aws_iam;
pub mod aws_secrets;
pub mod gcp;
mod gcp_addresses;
pub mod gcp_cloud;
pub mod gcp_secrets;
pub mod sim_settings;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cloud::{Cloud, CloudError};
use crate::db::credentials::Credential;
use sim_settings::SimSettings;

/// Which cloud a credential belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Amazon Web Services (EC2).
    Aws,
    /// Google Cloud (Compute Engine).
    Gcp,
    /// The local simulated cloud.
    Sim,
}

impl ProviderKind {
    /// The name users type.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Aws => "aws",
            Self::Gcp => "gcp",
            Self::Sim => "sim",
        }
    }
}

impl std::str::FromStr for ProviderKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "aws" => Ok(Self::Aws),
            "gcp" => Ok(Self::Gcp),
            "sim" => Ok(Self::Sim),
            other => Err(format!("unknown provider `{other}`: use aws, gcp or sim")),
        }
    }
}

impl TryFrom<String> for ProviderKind {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl std::fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a provider said of a credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "verdict")]
pub enum Verdict {
    /// Accepted; `detail` says what the check saw (e.g. how many regions it may use).
    Accepted {
        /// What the check saw.
        detail: String,
    },
    /// Rejected, in the provider's own words.
    Rejected {
        /// The provider's message.
        message: String,
    },
}

/// The simulated cloud, as the domain sees it: accounts that are [`Cloud`]s.
pub trait SimulatedCloud: Send + Sync {
    /// The account a `sim` credential names.
    fn account(&self, identity: &str, settings: SimSettings) -> Result<Box<dyn Cloud>, CloudError>;
}

/// Opens the cloud account a credential names.
#[derive(Clone, Default)]
pub struct Clouds {
    simulated: Option<Arc<dyn SimulatedCloud>>,
}

impl std::fmt::Debug for Clouds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clouds").field("simulated", &self.simulated.is_some()).finish()
    }
}

impl Clouds {
    /// AWS and GCP, and the simulated cloud when one is given.
    pub fn new(simulated: Option<Arc<dyn SimulatedCloud>>) -> Self {
        Self { simulated }
    }

    /// The account of `credential` (its secret opened), acting in `region`.
    pub async fn open(
        &self,
        credential: &Credential,
        secret: &str,
        region: &str,
    ) -> Result<Box<dyn Cloud>, CloudError> {
        let public = &credential.public;
        Ok(match credential.provider {
            ProviderKind::Aws => Box::new(aws_cloud::AwsCloud::new(public, secret, region)),
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
}
