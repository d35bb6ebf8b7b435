//! A secret a hosted API's GCE VM reads as itself, in Secret Manager: the deployer creates it
//! (automatic replication), adds the value as a version, and binds
//! `roles/secretmanager.secretAccessor` on this one secret to the VM's service account (the API's
//! own, [`super::gcp_iam`]), and to no one else; the VM
//! reads `versions/latest` with its metadata server's token (the `cloud-platform` scope). Older
//! versions are destroyed once a new one is added. Used for the API's keys
//! (`anycloud_workflows::hosting::keys`) and for the checkpoint bucket's key when the bucket is on another
//! provider (docs/hosting.md, "Placement"). Every call tolerates "already exists" and "already gone", so a retried step
//! finishes what an earlier attempt began.

use std::time::Duration;

use google_cloud_gax::error::Error;
use google_cloud_iam_v1::model::{Binding, Policy};
use google_cloud_secretmanager_v1::client::SecretManagerService;
use google_cloud_secretmanager_v1::model::secret_version::State as SecretVersionState;
use google_cloud_secretmanager_v1::model::{Replication, Secret, SecretPayload, replication::Automatic};

use crate::cloud::{CLUSTER_TAG, CloudError};

/// The role that reads a secret's versions, and nothing else.
const ACCESSOR: &str = "roles/secretmanager.secretAccessor";

/// Each attempt's deadline (the client sets none).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// A Secret Manager client with these credentials, at `endpoint` when given (the credential's
/// override: a private endpoint, the tests' fake front).
pub async fn client(
    credentials: Option<google_cloud_auth::credentials::Credentials>,
    endpoint: Option<&str>,
) -> Result<SecretManagerService, String> {
    let mut builder = SecretManagerService::builder().with_attempt_timeout(ATTEMPT_TIMEOUT);
    if let Some(credentials) = credentials {
        builder = builder.with_credentials(credentials);
    }
    if let Some(endpoint) = endpoint {
        builder = builder.with_endpoint(endpoint.trim_end_matches('/'));
    }
    builder
        .build()
        .await
        .map_err(|err| format!("building the Secret Manager client: {}", anycloud_engine::error_chain(&err)))
}

fn classify(context: &str, err: &Error) -> CloudError {
    if let Some(code) = err.http_status_code() {
        let message = err.status().map_or_else(|| super::gcp_errors::not_google(err), |s| s.message.clone());
        let text = format!("{context}: Secret Manager answered HTTP {code}: {message}");
        // A service account just made may be unknown to Secret Manager for a few seconds.
        return if code == 429 || code >= 500 || super::gcp_iam::not_yet_known(code, &message) {
            CloudError::Retryable(text)
        } else if code == 403 {
            CloudError::Terminal(format!(
                "{text}; hosting an API needs the Secret Manager API enabled and secretmanager.secrets.create, \
                 .setIamPolicy, .delete, .versions.add, .versions.access, .versions.list and .versions.destroy"
            ))
        } else {
            CloudError::Terminal(text)
        };
    }
    if err.is_binding() || err.is_serialization() || err.is_authentication() {
        return CloudError::terminal(context, err);
    }
    CloudError::retryable(context, err)
}

/// Creates secret `name` in `project` unless it exists, adds `value` as its latest version unless
/// it already is, destroys every older version, and lets `reader` (a service account's e-mail)
/// read it; answers `projects/P/secrets/NAME`.
pub async fn store(
    client: &SecretManagerService,
    project: &str,
    owner: &str,
    name: &str,
    value: &str,
    reader: &str,
) -> Result<String, CloudError> {
    let secret = format!("projects/{project}/secrets/{name}");
    let created = client
        .create_secret()
        .set_parent(format!("projects/{project}"))
        .set_secret_id(name)
        .set_secret(
            Secret::new()
                .set_replication(Replication::new().set_automatic(Automatic::default()))
                .set_labels([(CLUSTER_TAG, owner)]),
        )
        .send()
        .await;
    match created {
        Ok(_) => {}
        Err(err) if err.http_status_code() == Some(409) => {}
        Err(err) => return Err(classify(&format!("creating secret {secret}"), &err)),
    }
    let_read(client, &secret, reader).await?;
    let latest = client.access_secret_version().set_name(format!("{secret}/versions/latest")).send().await;
    let holds = latest.ok().and_then(|answer| answer.payload).is_some_and(|payload| payload.data == value.as_bytes());
    let current = if holds {
        format!("{secret}/versions/latest")
    } else {
        client
            .add_secret_version()
            .set_parent(&secret)
            .set_payload(SecretPayload::new().set_data(value.as_bytes().to_vec()))
            .send()
            .await
            .map_err(|err| classify(&format!("adding a version to secret {secret}"), &err))?
            .name
    };
    destroy_older(client, &secret, &current).await?;
    Ok(secret)
}

/// Makes `reader` (a service account's e-mail) the one member of the secret's policy, as
/// `roles/secretmanager.secretAccessor` (`secret` is `projects/P/secrets/NAME`): the policy is
/// replaced whole, so any other reader, the deployer's own account included, is removed.
pub async fn let_read(client: &SecretManagerService, secret: &str, reader: &str) -> Result<(), CloudError> {
    let policy = Policy::new()
        .set_bindings([Binding::new().set_role(ACCESSOR).set_members([format!("serviceAccount:{reader}")])]);
    client
        .set_iam_policy()
        .set_resource(secret)
        .set_policy(policy)
        .send()
        .await
        .map_err(|err| classify(&format!("letting {reader} read secret {secret}"), &err))?;
    Ok(())
}

/// Destroys every enabled version of `secret` but the newest (`current` names it, or is
/// `.../versions/latest`), so that no earlier value stays readable.
async fn destroy_older(client: &SecretManagerService, secret: &str, current: &str) -> Result<(), CloudError> {
    let listed = client
        .list_secret_versions()
        .set_parent(secret)
        .send()
        .await
        .map_err(|err| classify(&format!("listing the versions of secret {secret}"), &err))?;
    let number = |name: &str| name.rsplit('/').next().and_then(|n| n.parse::<u64>().ok());
    let newest = number(current).or_else(|| listed.versions.iter().filter_map(|v| number(&v.name)).max());
    for version in &listed.versions {
        let older = number(&version.name).zip(newest).is_some_and(|(n, newest)| n < newest);
        if older && version.state == SecretVersionState::Enabled {
            match client.destroy_secret_version().set_name(&version.name).send().await {
                Ok(_) => {}
                // Destroyed meanwhile (another attempt of this step).
                Err(err) if matches!(err.http_status_code(), Some(400 | 404)) => {}
                Err(err) => return Err(classify(&format!("destroying {}", version.name), &err)),
            }
        }
    }
    Ok(())
}

/// What the latest version of secret `name` in `project` holds, read with the deployer's
/// credentials; `None` when there is no such secret or version.
pub async fn read(client: &SecretManagerService, project: &str, name: &str) -> Result<Option<String>, CloudError> {
    let secret = format!("projects/{project}/secrets/{name}");
    match client.access_secret_version().set_name(format!("{secret}/versions/latest")).send().await {
        Ok(answer) => {
            let data = answer.payload.map(|payload| payload.data).unwrap_or_default();
            String::from_utf8(data.to_vec())
                .map(Some)
                .map_err(|_| CloudError::Terminal(format!("secret {secret} does not hold text")))
        }
        Err(err) if err.http_status_code() == Some(404) => Ok(None),
        Err(err) => Err(classify(&format!("reading secret {secret}"), &err)),
    }
}

/// Deletes secret `name` of `project` with every version. Already gone is success.
pub async fn delete(client: &SecretManagerService, project: &str, name: &str) -> Result<(), CloudError> {
    let secret = format!("projects/{project}/secrets/{name}");
    match client.delete_secret().set_name(&secret).send().await {
        Ok(()) => Ok(()),
        Err(err) if err.http_status_code() == Some(404) => Ok(()),
        Err(err) => Err(classify(&format!("deleting secret {secret}"), &err)),
    }
}

/// Reads the latest version of `secret` (`projects/P/secrets/NAME`) as this machine:
/// Application Default Credentials (on a GCE VM its service account, through the metadata
/// server), at `endpoint` when given.
pub async fn read_as_vm(secret: &str, endpoint: Option<&str>) -> Result<String, String> {
    let client = client(None, endpoint).await?;
    let answer = client
        .access_secret_version()
        .set_name(format!("{secret}/versions/latest"))
        .send()
        .await
        .map_err(|err| classify(&format!("reading secret {secret}"), &err).to_string())?;
    let data = answer.payload.map(|payload| payload.data).unwrap_or_default();
    String::from_utf8(data.to_vec()).map_err(|_| format!("secret {secret} does not hold text"))
}
