//! What a deployment runs, as its record and each of its revisions keep it, and as requests
//! carry it: the image, the command, the environment, the resources and the secrets it takes.

use serde::{Deserialize, Serialize};

use super::secrets::SecretUse;

/// What a deployment runs: everything `resubmit` needs to run it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Spec {
    /// The container image reference.
    pub image: String,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// The container's environment, in order, without duplicate names.
    pub env: Vec<EnvVar>,
    /// CPUs as a Kubernetes quantity (`500m`, `2`).
    pub cpus: Option<String>,
    /// Memory as a Kubernetes quantity (`512Mi`).
    pub memory: Option<String>,
    /// The secrets it takes (env and registry), each pinned to a version; never a value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretUse>,
}

/// One environment variable of a workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvVar {
    /// Its name (`[A-Za-z_][A-Za-z0-9_]*`).
    pub name: String,
    /// Its value.
    pub value: String,
}
