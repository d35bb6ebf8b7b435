//! The clouds Anycloud acts on. Each provider module speaks its cloud's real API through the
//! cloud's own SDK (`aws`, `gcp`) or the simulated cloud's (`sim`).

pub mod account;
pub mod aws;
pub mod aws_cloud;
pub mod gcp;
pub mod gcp_cloud;
pub mod sim;
pub mod sim_kube;

use serde::{Deserialize, Serialize};

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
