//! What a provider reads of a credential: the part that is safe to show, and the name and
//! provider that [`crate::Clouds::open`] opens an account with.

use serde::{Deserialize, Serialize};

use crate::cloud::ProviderKind;
use crate::sim_settings::SimSettings;

/// The identity a machine-identity credential shows ([`PublicPart::machine`]): it holds no key.
pub const MACHINE_IDENTITY: &str = "machine";

/// The parts of a credential that are safe to show.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PublicPart {
    /// AWS access key id, GCP client e-mail, or the sim account name.
    pub identity: String,
    /// GCP project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Region for the verification call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Endpoint override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// sim: fault injection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<SimSettings>,
    /// The credential holds no key: the API acts as the machine it runs on (on AWS its
    /// instance profile, on GCP its service account), as a deployed API does with its hosting
    /// credential (docs/hosting.md, "Least privilege").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub machine: bool,
}

/// A credential as [`crate::Clouds`] reads it: its name (for messages), provider and public part.
#[derive(Debug, Clone, Copy)]
pub struct CredentialRef<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its provider.
    pub provider: ProviderKind,
    /// What is safe to show, endpoint override included.
    pub public: &'a PublicPart,
}
