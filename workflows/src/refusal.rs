//! How an operation says no: a [`Refusal`] (a stable [`Code`], and a sentence that names the
//! resource and says what to do) when the request cannot be done as asked, changing nothing; or
//! a failure of the API itself. The HTTP server turns a code's [`Class`] into a status, in one
//! place.

use anycloud_engine::{EngineError, Store, StoreFault};

/// What kind of no a refusal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The request is wrong as given (HTTP 400).
    BadInput,
    /// The resource it names does not exist (HTTP 404).
    NotFound,
    /// The resource's state forbids it now (HTTP 409).
    Conflict,
    /// Something the API depends on cannot answer now; try again (HTTP 503).
    Unavailable,
}

macro_rules! codes {
    ($($(#[$doc:meta])* $variant:ident = $text:literal, $class:ident;)+) => {
        /// A refusal's stable, machine-readable code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Code {
            $($(#[$doc])* $variant,)+
        }

        impl Code {
            /// Every code.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)+];

            /// The code as the API and the CLI show it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$variant => $text,)+
                }
            }

            /// What kind of no it is.
            pub fn class(self) -> Class {
                match self {
                    $(Code::$variant => Class::$class,)+
                }
            }
        }
    };
}

codes! {
    /// Creating a cluster needs a hosted API.
    HostedApiRequired = "HOSTED_API_REQUIRED", BadInput;
    /// The cluster's spec is wrong as given.
    InvalidCluster = "INVALID_CLUSTER", BadInput;
    /// The provider refused the region or the machine type.
    InvalidPlacement = "INVALID_PLACEMENT", BadInput;
    /// The provider could not be asked; try again.
    ProviderUnavailable = "PROVIDER_UNAVAILABLE", Unavailable;
    /// A live cluster has that name.
    ClusterExists = "CLUSTER_EXISTS", Conflict;
    /// No cluster has that name.
    ClusterNotFound = "CLUSTER_NOT_FOUND", NotFound;
    /// Deployments still run on the cluster.
    ClusterInUse = "CLUSTER_IN_USE", Conflict;
    /// The credential is wrong as given.
    InvalidCredential = "INVALID_CREDENTIAL", BadInput;
    /// A credential has that name.
    CredentialExists = "CREDENTIAL_EXISTS", Conflict;
    /// No credential has that name.
    CredentialNotFound = "CREDENTIAL_NOT_FOUND", NotFound;
    /// The provider refused the credential.
    CredentialInvalid = "CREDENTIAL_INVALID", BadInput;
    /// The credential is still being verified.
    CredentialNotVerified = "CREDENTIAL_NOT_VERIFIED", Conflict;
    /// A workflow or a live cluster uses the credential.
    CredentialInUse = "CREDENTIAL_IN_USE", Conflict;
    /// No workflow has that id.
    WorkflowNotFound = "WORKFLOW_NOT_FOUND", NotFound;
    /// The text is not a workflow id.
    InvalidWorkflowId = "INVALID_WORKFLOW_ID", BadInput;
    /// The workflow's state forbids the action.
    InvalidWorkflowState = "INVALID_WORKFLOW_STATE", Conflict;
    /// The status filter names no status.
    InvalidStatus = "INVALID_STATUS", BadInput;
    /// The page size is out of range.
    InvalidLimit = "INVALID_LIMIT", BadInput;
    /// The workload's spec is wrong as given (image, command, environment, CPUs, memory).
    InvalidWorkload = "INVALID_WORKLOAD", BadInput;
    /// The cluster exists but is not ready, or is being deleted.
    ClusterNotReady = "CLUSTER_NOT_READY", Conflict;
    /// A deployment has that name.
    DeploymentExists = "DEPLOYMENT_EXISTS", Conflict;
    /// No deployment has that id or name.
    DeploymentNotFound = "DEPLOYMENT_NOT_FOUND", NotFound;
    /// The deployment is of another kind than the command acts on.
    WrongDeploymentKind = "WRONG_DEPLOYMENT_KIND", BadInput;
    /// The deployment's container has not started (no logs, nothing to exec in).
    DeploymentNotStarted = "DEPLOYMENT_NOT_STARTED", Conflict;
    /// The deployment's container has ended (nothing to exec in).
    DeploymentEnded = "DEPLOYMENT_ENDED", Conflict;
    /// The deployment has not ended (it cannot be resubmitted yet).
    DeploymentNotEnded = "DEPLOYMENT_NOT_ENDED", Conflict;
    /// What was asked is not supported for cluster-backed services yet (public URLs, logs, exec,
    /// live Pod health, checkpoint buckets).
    NotSupportedForServices = "NOT_SUPPORTED_FOR_CLUSTER_SERVICES", BadInput;
    /// The service's shape is wrong as given (port, replicas, progress deadline).
    InvalidService = "INVALID_SERVICE", BadInput;
    /// The cluster's Kubernetes API did not answer; try again.
    ClusterUnreachable = "CLUSTER_UNREACHABLE", Unavailable;
    /// The API is stopping.
    ShuttingDown = "SHUTTING_DOWN", Unavailable;
    /// The API's database cannot be reached or written now (restarting, connections cut, disk
    /// read-only); the request changed nothing.
    DatabaseUnavailable = "DATABASE_UNAVAILABLE", Unavailable;
    /// The disk under the API's SQLite database is full: writes are refused, reads answer.
    StorageFull = "STORAGE_FULL", Unavailable;
    /// The API's SQLite database is on a read-only disk: writes are refused, reads answer.
    StorageReadOnly = "STORAGE_READ_ONLY", Unavailable;
    /// The hosted API's spec is wrong as given (name, bucket, port, credentials).
    InvalidHostedApi = "INVALID_HOSTED_API", BadInput;
    /// A live hosted API has that name.
    HostedApiExists = "HOSTED_API_EXISTS", Conflict;
    /// No hosted API has that name.
    HostedApiNotFound = "HOSTED_API_NOT_FOUND", NotFound;
    /// The hosted API is not ready (still deploying, failed, or being removed).
    HostedApiNotReady = "HOSTED_API_NOT_READY", Conflict;
    /// The secret is wrong as given (name, keys, values, size, registry).
    InvalidSecret = "INVALID_SECRET", BadInput;
    /// A secret has that name.
    SecretExists = "SECRET_EXISTS", Conflict;
    /// No secret has that name.
    SecretNotFound = "SECRET_NOT_FOUND", NotFound;
    /// A deployment that has not ended takes the secret.
    SecretInUse = "SECRET_IN_USE", Conflict;
    /// A registry secret given where an env secret goes (`--secret`), or the reverse.
    WrongSecretKind = "WRONG_SECRET_KIND", BadInput;
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request refused as asked. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The stable code.
    pub code: Code,
    /// What was wrong, with which resource, and what to do.
    pub message: String,
}

impl Refusal {
    /// A refusal with this code and sentence.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    /// The API's database did not answer (`DATABASE_UNAVAILABLE`).
    pub fn database_unavailable() -> Self {
        Self::new(
            Code::DatabaseUnavailable,
            "the API cannot reach its database (it is restarting, unreachable or read-only), so this request changed \
             nothing; runs in flight wait and continue once it is back. Try again in a few seconds",
        )
    }
}

impl Refusal {
    /// The API's database refused a write because its disk is full or read-only
    /// (`STORAGE_FULL`, `STORAGE_READ_ONLY`).
    pub fn storage(fault: StoreFault) -> Self {
        match fault {
            StoreFault::DiskFull => Self::new(
                Code::StorageFull,
                "the disk holding the API's database is full, so this request changed nothing (reads still answer); \
                 free space on it (`anycloud api status` and the API's log name the data directory): runs in flight \
                 wait and continue once there is room",
            ),
            StoreFault::ReadOnly => Self::new(
                Code::StorageReadOnly,
                "the API's database is on a read-only disk, so this request changed nothing (reads still answer); \
                 make its data directory writable again: runs in flight wait and continue once it is",
            ),
        }
    }
}

/// Why an operation did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum OperationError {
    /// Refused: nothing changed.
    #[error("{}", .0.message)]
    Refused(Refusal),
    /// The API itself failed (its database, its engine); nothing acknowledged changed.
    #[error("the API failed")]
    Failed(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl From<Refusal> for OperationError {
    fn from(refusal: Refusal) -> Self {
        Self::Refused(refusal)
    }
}

impl OperationError {
    /// The API failed because of `err`; a database that cannot be reached or written is a
    /// refusal (`DATABASE_UNAVAILABLE`, `STORAGE_FULL`, `STORAGE_READ_ONLY`: try again), not the
    /// API's own failure.
    pub fn failed(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        let err = err.into();
        if let Some(fault) = StoreFault::of(&*err) {
            tracing::warn!(error = %anycloud_engine::error_chain(&*err), "the database refused a write: {}", fault.as_str());
            Self::Refused(Refusal::storage(fault))
        } else if Store::is_unreachable(&*err) {
            tracing::warn!(error = %anycloud_engine::error_chain(&*err), "the database is unreachable");
            Self::Refused(Refusal::database_unavailable())
        } else {
            Self::Failed(err)
        }
    }
}

impl From<sqlx::Error> for OperationError {
    fn from(err: sqlx::Error) -> Self {
        Self::failed(err)
    }
}

impl From<EngineError> for OperationError {
    fn from(err: EngineError) -> Self {
        let refused = |code, message: String| Self::Refused(Refusal::new(code, message));
        match err {
            EngineError::UnknownRun(id) => refused(
                Code::WorkflowNotFound,
                format!("workflow {id} does not exist; `anycloud workflow list` shows the workflows that do"),
            ),
            EngineError::InvalidState { .. } => refused(Code::InvalidWorkflowState, err.to_string()),
            EngineError::ShuttingDown => {
                refused(Code::ShuttingDown, "the API is shutting down; try again when it is back".into())
            }
            other => Self::failed(other),
        }
    }
}
