//! Google Cloud, through google-cloud-compute-v1 with a service-account key. The endpoint can
//! be overridden (a private endpoint, or the test suite's fake Compute server).

use serde::Deserialize;

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

/// The service-account key could not be turned into credentials.
#[derive(Debug, thiserror::Error)]
#[error("building credentials from the service-account key")]
pub struct CredentialsError(#[source] Box<dyn std::error::Error + Send + Sync>);

/// Credentials for a service-account key, for every Compute client of this key.
///
/// google-cloud-auth's service-account credentials need no network: each request carries a
/// self-signed JWT (RS256, signed locally with the key's PKCS#8 `private_key`, scope
/// `cloud-platform`), not a token exchanged with `oauth2.googleapis.com`. They therefore work
/// unchanged against an overridden endpoint (a private endpoint, the test suite's fake Compute
/// server), and a malformed key fails here or at the first call, never on a network round trip.
pub fn credentials(
    service_account_json: &str,
) -> Result<google_cloud_auth::credentials::Credentials, CredentialsError> {
    let key: serde_json::Value =
        serde_json::from_str(service_account_json).map_err(|err| CredentialsError(err.into()))?;
    google_cloud_auth::credentials::service_account::Builder::new(key)
        .build()
        .map_err(|err| CredentialsError(err.into()))
}
