//! Google Cloud, through google-cloud-compute-v1 with a service-account key. The endpoint can
//! be overridden (a private endpoint, or the test suite's fake Compute server).

use google_cloud_compute_v1::client::Zones;
use serde::Deserialize;

use super::Verdict;
use crate::credentials::PublicPart;

/// The fields of a service-account key file that Anycloud needs to see.
#[derive(Debug, Deserialize)]
pub struct ServiceAccountKey {
    /// Must be `service_account`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The project the account belongs to.
    pub project_id: String,
    /// The account.
    pub client_email: String,
    /// The PEM key (checked for presence only; it stays sealed).
    pub private_key: String,
}

impl ServiceAccountKey {
    /// Parses and checks a key file's JSON; the error says what is wrong with it.
    pub fn parse(json: &str) -> Result<Self, String> {
        if json.trim().is_empty() {
            return Err("the GCP service-account key is missing; pass --service-account-file PATH (a key file \
                        downloaded from IAM > Service accounts > Keys)"
                .into());
        }
        let value: serde_json::Value = serde_json::from_str(json).map_err(|err| {
            format!("the GCP service-account key file is not JSON ({err}); download a JSON key from IAM")
        })?;
        // The type first, so that a user's ADC file (`authorized_user`) gets its own answer.
        match value.get("type").and_then(serde_json::Value::as_str) {
            Some("service_account") => {}
            Some(other) => {
                return Err(format!(
                    "the GCP key file is of type `{other}`; only service-account keys can be imported \
                     (not user ADC or other credential files)"
                ));
            }
            None => return Err("the GCP key file has no `type`; download a service-account JSON key from IAM".into()),
        }
        let key: Self = serde_json::from_value(value).map_err(|err| {
            format!(
                "the GCP service-account key file is not a service-account key ({err}); download a JSON key from IAM"
            )
        })?;
        if key.private_key.trim().is_empty() || key.project_id.trim().is_empty() {
            return Err("the GCP service-account key file has no private_key or project_id".into());
        }
        Ok(key)
    }
}

/// Why the Compute API could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum GcpError {
    /// The key could not be turned into credentials.
    #[error("building credentials from the service-account key")]
    Credentials(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The client could not be built.
    #[error("building the Compute client")]
    Client(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The call failed in a way worth retrying.
    #[error("calling Compute Engine")]
    Call(#[source] google_cloud_compute_v1::Error),
}

/// Credentials for a service-account key, for every Compute client of this key.
///
/// google-cloud-auth's service-account credentials need no network: each request carries a
/// self-signed JWT (RS256, signed locally with the key's PKCS#8 `private_key`, scope
/// `cloud-platform`), not a token exchanged with `oauth2.googleapis.com`. They therefore work
/// unchanged against an overridden endpoint (a private endpoint, the test suite's fake Compute
/// server), and a malformed key fails here or at the first call, never on a network round trip.
pub fn credentials(service_account_json: &str) -> Result<google_cloud_auth::credentials::Credentials, GcpError> {
    let key: serde_json::Value =
        serde_json::from_str(service_account_json).map_err(|err| GcpError::Credentials(err.into()))?;
    google_cloud_auth::credentials::service_account::Builder::new(key)
        .build()
        .map_err(|err| GcpError::Credentials(err.into()))
}

/// A Zones client for this key.
pub async fn zones_client(public: &PublicPart, service_account_json: &str) -> Result<Zones, GcpError> {
    let credentials = credentials(service_account_json)?;
    let mut builder = Zones::builder().with_credentials(credentials);
    if let Some(endpoint) = &public.endpoint {
        builder = builder.with_endpoint(endpoint.clone());
    }
    builder.build().await.map_err(|err| GcpError::Client(err.into()))
}

/// The cheapest read call: one page of the project's zones. A refusal (401, 403, 404 on the
/// project, or an authentication failure) is a verdict; anything else is an error to retry.
pub async fn verify(public: &PublicPart, service_account_json: &str) -> Result<Verdict, GcpError> {
    let client = zones_client(public, service_account_json).await?;
    let project = public.project.clone().unwrap_or_default();
    match client.list().set_project(&project).set_max_results(50_u32).send().await {
        Ok(list) => Ok(Verdict::Accepted {
            detail: format!("Compute Engine zones.list: {} zones visible in project {project}", list.items.len()),
        }),
        Err(err) if err.is_authentication() || matches!(err.http_status_code(), Some(401 | 403 | 404)) => {
            let message = match err.status() {
                Some(status) => format!("Compute Engine refused the key: {}", status.message),
                None => format!("Compute Engine refused the key: {err}"),
            };
            Ok(Verdict::Rejected { message })
        }
        Err(err) => Err(GcpError::Call(err)),
    }
}
