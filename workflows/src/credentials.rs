//! Credentials: the account a provider acts on. The secret part is sealed before it is stored
//! and is opened only inside a provider call; the public part is what lists show.

use anycloud_engine::store::{Pool, WriteTx};
use anycloud_engine::{with_pool, with_tx};
use serde::{Deserialize, Serialize};

use crate::names::check_dns_label;
use crate::providers::ProviderKind;
use crate::secrets::SecretBox;

/// Verification state of a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CredentialStatus {
    /// The `credentials.verify` workflow has not concluded yet.
    Verifying,
    /// The provider accepted it.
    Valid,
    /// The provider rejected it; `status_message` says why, in the provider's words.
    Invalid,
}

impl CredentialStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Verifying => "verifying",
            Self::Valid => "valid",
            Self::Invalid => "invalid",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "valid" => Self::Valid,
            "invalid" => Self::Invalid,
            _ => Self::Verifying,
        }
    }
}

/// What a user submits to save a credential.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewCredential {
    /// DNS-label name.
    pub name: String,
    /// `aws`, `gcp` or `sim`.
    pub provider: String,
    /// AWS: the access key id.
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// AWS: the secret access key.
    #[serde(default)]
    pub secret_access_key: Option<String>,
    /// GCP: the service-account key file's JSON.
    #[serde(default)]
    pub service_account_json: Option<String>,
    /// Region used for the verification call (AWS; default `us-east-1`).
    #[serde(default)]
    pub region: Option<String>,
    /// Another endpoint for the provider's API (a local peer such as moto, or a private endpoint).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// sim: fault injection.
    #[serde(default)]
    pub sim: Option<crate::providers::sim::SimSettings>,
}

/// The parts of a credential that are safe to show.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    pub sim: Option<crate::providers::sim::SimSettings>,
}

/// A stored credential, without its secret.
#[derive(Debug, Clone, Serialize)]
pub struct Credential {
    /// Name.
    pub name: String,
    /// Provider.
    pub provider: ProviderKind,
    /// What is safe to show.
    pub public: PublicPart,
    /// Verification state.
    pub status: CredentialStatus,
    /// The provider's words when it rejected the credential, or why verification waits.
    pub status_message: Option<String>,
    /// The `credentials.verify` run.
    pub verify_run: Option<String>,
    /// Saved at (ms since the epoch).
    pub created_at: i64,
    /// Changed at.
    pub updated_at: i64,
}

/// A credential checked and split into what is shown and what is sealed.
pub struct ValidCredential {
    /// Name.
    pub name: String,
    /// Provider.
    pub provider: ProviderKind,
    /// Shown.
    pub public: PublicPart,
    /// Sealed before storing: AWS secret key, or the GCP service-account JSON.
    pub secret: String,
}

impl NewCredential {
    /// Checks the request; the error says what is wrong and how to fix it.
    pub fn validate(self) -> Result<ValidCredential, String> {
        check_dns_label("credential", &self.name)?;
        let provider: ProviderKind = self.provider.parse()?;
        if provider != ProviderKind::Sim && self.sim.is_some() {
            return Err(format!("credential `{}`: sim settings apply only to --provider sim", self.name));
        }
        if let Some(endpoint) = &self.endpoint {
            check_endpoint(&self.name, endpoint)?;
        }
        let present = |value: &Option<String>| value.as_deref().is_some_and(|v| !v.trim().is_empty());
        let (public, secret) = match provider {
            ProviderKind::Aws => {
                if !present(&self.access_key_id) {
                    return Err(format!(
                        "credential `{}`: the AWS access key id is missing; pass --access-key-id or set AWS_ACCESS_KEY_ID",
                        self.name
                    ));
                }
                if !present(&self.secret_access_key) {
                    return Err(format!(
                        "credential `{}`: the AWS secret access key is missing; pass --secret-access-key or set \
                         AWS_SECRET_ACCESS_KEY",
                        self.name
                    ));
                }
                let public = PublicPart {
                    identity: self.access_key_id.unwrap_or_default().trim().to_owned(),
                    region: Some(self.region.unwrap_or_else(|| "us-east-1".to_owned())),
                    endpoint: self.endpoint,
                    ..PublicPart::default()
                };
                (public, self.secret_access_key.unwrap_or_default())
            }
            ProviderKind::Gcp => {
                let json = self.service_account_json.unwrap_or_default();
                let key = crate::providers::gcp::ServiceAccountKey::parse(&json)
                    .map_err(|why| format!("credential `{}`: {why}", self.name))?;
                let public = PublicPart {
                    identity: key.client_email,
                    project: Some(key.project_id),
                    endpoint: self.endpoint,
                    ..PublicPart::default()
                };
                (public, json)
            }
            ProviderKind::Sim => {
                let public = PublicPart {
                    identity: format!("sim-account-{}", self.name),
                    sim: Some(self.sim.unwrap_or_default()),
                    ..PublicPart::default()
                };
                // The simulated cloud takes any token; one is sealed like a real secret would be.
                (public, format!("sim-token-{}", uuid::Uuid::new_v4().simple()))
            }
        };
        Ok(ValidCredential { name: self.name, provider, public, secret })
    }
}

/// An endpoint override must be an http(s) URL with a host, or every later call fails.
fn check_endpoint(name: &str, endpoint: &str) -> Result<(), String> {
    let rest = endpoint.strip_prefix("https://").or_else(|| endpoint.strip_prefix("http://"));
    let host = rest.map(|rest| rest.split(['/', '?', '#']).next().unwrap_or(""));
    match host {
        Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => Ok(()),
        _ => Err(format!(
            "credential `{name}`: endpoint `{endpoint}` is not an http(s) URL; pass one such as \
             https://ec2.eu-west-1.amazonaws.com, or leave --endpoint out to use the provider's own"
        )),
    }
}

#[derive(sqlx::FromRow)]
struct CredentialRow {
    name: String,
    provider: String,
    public: String,
    status: String,
    status_message: Option<String>,
    verify_run: Option<String>,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<CredentialRow> for Credential {
    type Error = sqlx::Error;

    fn try_from(row: CredentialRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            name: row.name,
            provider: row.provider.parse().map_err(|err: String| sqlx::Error::Decode(err.into()))?,
            public: serde_json::from_str(&row.public).map_err(|err| sqlx::Error::Decode(err.into()))?,
            status: CredentialStatus::parse(&row.status),
            status_message: row.status_message,
            verify_run: row.verify_run,
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

#[derive(sqlx::FromRow)]
struct SealedRow {
    #[sqlx(flatten)]
    row: CredentialRow,
    secret: String,
}

const COLUMNS: &str = "name, provider, public, status, status_message, verify_run, created_at, updated_at";

/// Whether a credential of this name exists (read inside the caller's transaction).
pub async fn exists_in(tx: &mut WriteTx, name: &str) -> Result<bool, sqlx::Error> {
    let found: Option<String> = with_tx!(tx, |tx| {
        sqlx::query_scalar("SELECT name FROM credentials WHERE name = $1").bind(name).fetch_optional(&mut **tx).await
    })?;
    Ok(found.is_some())
}

/// Inserts a credential as `verifying`, its secret sealed, inside the caller's transaction.
pub async fn insert_in(
    tx: &mut WriteTx,
    credential: &ValidCredential,
    sealer: &SecretBox,
    verify_run: &str,
    now: i64,
) -> Result<(), sqlx::Error> {
    let public = serde_json::to_string(&credential.public).map_err(|err| sqlx::Error::Encode(err.into()))?;
    let secret = sealer.seal(credential.secret.as_bytes());
    with_tx!(tx, |tx| {
        sqlx::query(
            "INSERT INTO credentials (name, provider, public, secret, status, verify_run, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, 'verifying', $5, $6, $6)",
        )
        .bind(&credential.name)
        .bind(credential.provider.as_str())
        .bind(&public)
        .bind(&secret)
        .bind(verify_run)
        .bind(now)
        .execute(&mut **tx)
        .await
        .map(|done| done.rows_affected())
    })?;
    Ok(())
}

/// One credential, without its secret.
pub async fn get(pool: &Pool, name: &str) -> Result<Option<Credential>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!("SELECT {COLUMNS} FROM credentials WHERE name = $1"));
    let row: Option<CredentialRow> =
        with_pool!(pool, |pool| sqlx::query_as(sql).bind(name).fetch_optional(pool).await)?;
    row.map(Credential::try_from).transpose()
}

/// Every credential, by name.
pub async fn list(pool: &Pool) -> Result<Vec<Credential>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!("SELECT {COLUMNS} FROM credentials ORDER BY name"));
    let rows: Vec<CredentialRow> = with_pool!(pool, |pool| sqlx::query_as(sql).fetch_all(pool).await)?;
    rows.into_iter().map(Credential::try_from).collect()
}

/// The credential with its secret opened, for a provider call.
pub async fn open(pool: &Pool, sealer: &SecretBox, name: &str) -> Result<Option<(Credential, String)>, OpenError> {
    let sql = sqlx::AssertSqlSafe(format!("SELECT {COLUMNS}, secret FROM credentials WHERE name = $1"));
    let row: Option<SealedRow> = with_pool!(pool, |pool| sqlx::query_as(sql).bind(name).fetch_optional(pool).await)?;
    let Some(SealedRow { row, secret: sealed }) = row else {
        return Ok(None);
    };
    let credential = Credential::try_from(row)?;
    let secret = String::from_utf8(sealer.open(&sealed)?).map_err(|_| crate::secrets::SecretError::Open)?;
    Ok(Some((credential, secret)))
}

/// Why a credential could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The database failed.
    #[error("reading the credential")]
    Store(#[from] sqlx::Error),
    /// The secret did not open.
    #[error("opening the credential's secret")]
    Secret(#[from] crate::secrets::SecretError),
}

/// Records the verification's verdict.
pub async fn set_status(
    pool: &Pool,
    name: &str,
    status: CredentialStatus,
    message: Option<&str>,
    now: i64,
) -> Result<(), sqlx::Error> {
    with_pool!(pool, |pool| {
        sqlx::query("UPDATE credentials SET status = $2, status_message = $3, updated_at = $4 WHERE name = $1")
            .bind(name)
            .bind(status.as_str())
            .bind(message)
            .bind(now)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })?;
    Ok(())
}

/// Deletes a credential inside the caller's transaction. Returns whether it existed.
pub async fn delete_in(tx: &mut WriteTx, name: &str) -> Result<bool, sqlx::Error> {
    let deleted = with_tx!(tx, |tx| {
        sqlx::query("DELETE FROM credentials WHERE name = $1")
            .bind(name)
            .execute(&mut **tx)
            .await
            .map(|done| done.rows_affected())
    })?;
    Ok(deleted > 0)
}
