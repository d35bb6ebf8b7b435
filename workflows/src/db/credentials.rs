//! The `credentials` table: the account a provider acts on. The secret part is sealed before it
//! is stored and is opened only inside a provider call; the public part is what lists show.

use anycloud_engine::{WriteTx, execute, execute_in, with_pool, with_tx};
use serde::{Deserialize, Serialize};

use super::{Db, SealedColumn};
use crate::cloud::ProviderKind;
use crate::secrets::SecretBox;

/// Where a credential's secret is sealed: its `secret`, keyed by its name.
pub const SECRET: SealedColumn = SealedColumn { table: "credentials", key: "name", column: "secret" };

/// Verification state of a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// The stored and shown name.
    pub fn as_str(self) -> &'static str {
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

pub use anycloud_providers::credential::{CredentialRef, MACHINE_IDENTITY, PublicPart};

/// A stored credential, without its secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

impl Credential {
    /// What [`crate::providers::Clouds`] reads of it to open its account.
    pub fn cloud_ref(&self) -> CredentialRef<'_> {
        CredentialRef { name: &self.name, provider: self.provider, public: &self.public }
    }
}

/// A credential to store: checked, and split into what is shown and what is sealed.
pub struct NewRecord {
    /// Name.
    pub name: String,
    /// Provider.
    pub provider: ProviderKind,
    /// Shown.
    pub public: PublicPart,
    /// Sealed before storing: AWS secret key, or the GCP service-account JSON.
    pub secret: String,
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

/// How a transaction holds a credential's row until it ends (PostgreSQL row locks; SQLite has one
/// writer at a time, which holds the whole database).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Others may hold it shared too, but nobody may delete it (a cluster create).
    Shared,
    /// Nobody else may hold it (a delete).
    Exclusive,
}

/// The credential of this name, held as `hold` says until the caller's transaction ends, so that
/// a delete and a cluster create that uses the credential cannot interleave.
pub async fn hold_in(tx: &mut WriteTx, name: &str, hold: Hold) -> Result<Option<Credential>, sqlx::Error> {
    let lock = match (tx.is_postgres(), hold) {
        (false, _) => "",
        (true, Hold::Shared) => " FOR SHARE",
        (true, Hold::Exclusive) => " FOR UPDATE",
    };
    let sql = sqlx::AssertSqlSafe(format!("SELECT {COLUMNS} FROM credentials WHERE name = $1{lock}"));
    let row: Option<CredentialRow> = with_tx!(tx, |tx| sqlx::query_as(sql).bind(name).fetch_optional(&mut **tx).await)?;
    row.map(Credential::try_from).transpose()
}

/// Inserts a credential as `verifying`, its secret sealed, inside the caller's transaction. A
/// credential of the same name makes it fail with a unique violation.
pub async fn insert_in(
    tx: &mut WriteTx,
    credential: &NewRecord,
    sealer: &SecretBox,
    verify_run: &str,
    now: i64,
) -> Result<(), sqlx::Error> {
    let public = serde_json::to_string(&credential.public).map_err(|err| sqlx::Error::Encode(err.into()))?;
    let secret = sealer.seal(SECRET.place(&credential.name), credential.secret.as_bytes());
    execute_in!(
        tx,
        "INSERT INTO credentials (name, provider, public, secret, status, verify_run, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, 'verifying', $5, $6, $6)",
        &credential.name,
        credential.provider.as_str(),
        &public,
        &secret,
        verify_run,
        now
    )?;
    Ok(())
}

/// One credential, without its secret.
pub async fn get(db: &Db, name: &str) -> Result<Option<Credential>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!("SELECT {COLUMNS} FROM credentials WHERE name = $1"));
    let row: Option<CredentialRow> =
        with_pool!(db.reader(), |pool| sqlx::query_as(sql).bind(name).fetch_optional(pool).await)?;
    row.map(Credential::try_from).transpose()
}

/// A page of the credentials by name: the first `limit` after the name `after`.
pub async fn list(db: &Db, after: Option<&str>, limit: u32) -> Result<Vec<Credential>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!("SELECT {COLUMNS} FROM credentials WHERE name > $1 ORDER BY name LIMIT $2"));
    let after = after.unwrap_or("");
    let rows: Vec<CredentialRow> =
        with_pool!(db.reader(), |pool| sqlx::query_as(sql).bind(after).bind(i64::from(limit)).fetch_all(pool).await)?;
    rows.into_iter().map(Credential::try_from).collect()
}

/// The credential with its secret opened, for a provider call.
pub async fn open(db: &Db, sealer: &SecretBox, name: &str) -> Result<Option<(Credential, String)>, OpenError> {
    let sql = sqlx::AssertSqlSafe(format!("SELECT {COLUMNS}, secret FROM credentials WHERE name = $1"));
    let row: Option<SealedRow> =
        with_pool!(db.reader(), |pool| sqlx::query_as(sql).bind(name).fetch_optional(pool).await)?;
    let Some(SealedRow { row, secret: sealed }) = row else {
        return Ok(None);
    };
    let credential = Credential::try_from(row)?;
    let place = SECRET.place(name);
    let secret = String::from_utf8(sealer.open(place, &sealed)?)
        .map_err(|_| crate::secrets::SecretError::Open { place: place.to_string() })?;
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

/// Records the verification's verdict; the message (the provider's words) is kept as
/// `providers::endpoint::answer_text` keeps an answer: bounded, without control characters.
pub async fn set_status(
    db: &Db,
    name: &str,
    status: CredentialStatus,
    message: Option<&str>,
    now: i64,
) -> Result<(), sqlx::Error> {
    execute!(
        db.pool(),
        "UPDATE credentials SET status = $2, status_message = $3, updated_at = $4 WHERE name = $1",
        name,
        status.as_str(),
        message.map(crate::providers::endpoint::answer_text),
        now
    )?;
    Ok(())
}

/// Deletes a credential inside the caller's transaction.
pub async fn delete_in(tx: &mut WriteTx, name: &str) -> Result<(), sqlx::Error> {
    execute_in!(tx, "DELETE FROM credentials WHERE name = $1", name)?;
    Ok(())
}
