//! [`Bucket`] on Google Cloud Storage, through the official `google-cloud-storage` crate (its
//! JSON API over HTTP), plus direct JSON API calls for deletes (`GcsBucket::json_api`; the
//! bucket's own creation and removal, in `provision_gcs.rs`, use it too).
//!
//! | call    | request                                                                    |
//! |---------|----------------------------------------------------------------------------|
//! | get     | `GET /storage/v1/b/B/o/KEY?alt=media`                                      |
//! | create  | `POST /upload/storage/v1/b/B/o?uploadType=multipart&ifGenerationMatch=0`   |
//! | replace | `POST /upload/storage/v1/b/B/o?uploadType=multipart&ifGenerationMatch=GEN` |
//! | delete  | `DELETE /storage/v1/b/B/o/KEY`                                             |
//!
//! A conditional write that loses answers 412, [`BucketError::Conflict`]; a delete's 404 is
//! success (already gone). An object's [`Version`] is its generation, in decimal
//! (`x-goog-generation` on a read, the `generation` of the object resource a write answers).
//!
//! Every call first checks, once, that the bucket belongs to the key's project
//! (`gcs_owner.rs`).
//!
//! Retries: reads retry inside the crate (its default policy: transient errors, for up to five
//! minutes), and it checks every full read against the object's CRC32C. Writes are sent once:
//! a failed write is [`BucketError::Failed`] and the caller decides whether to try again.

// Why writes are never retried here. A conditional write whose response is lost may have
// happened. Retried, the same write then fails its own precondition: a `create` that did create
// the object answers 412, as if another writer had got there first. The crate would retry a
// write with `ifGenerationMatch` set (it counts it as idempotent) and turn that success into a
// Conflict; the fencing layered on these calls must not be told it lost a race it won. So every
// write runs under gax's `NeverRetry`: an ambiguous failure reaches the caller as `Failed`, and
// the caller re-reads the object (its generation says whose write it is). `NeverRetry` rather
// than `with_idempotency(false)`: the latter still retries failures before the request leaves
// (connecting, credentials) for the default five minutes, and a write to an unreachable
// endpoint should fail at once so that the caller's own policy decides.
//
// Why single-shot uploads only. The crate switches to a resumable upload at a size threshold,
// and retries resumable uploads whatever the policy says (a session is finalized at most once,
// so that retry is safe, at the price of two round trips per write). The threshold is set to
// `usize::MAX`: every object, snapshots of a few hundred MB included, goes in one
// `uploadType=multipart` request under the no-retry rule above, and the test suite's fake GCS
// needs to serve only that upload.

use bytes::Bytes;
use google_cloud_gax::retry_policy::RetryPolicyExt as _;
use google_cloud_storage::client::Storage;

use crate::bucket::{Bucket, BucketError, BucketUrl, StoreKind, Version, error_chain};

/// The public endpoint of Cloud Storage.
const DEFAULT_ENDPOINT: &str = "https://storage.googleapis.com";

/// How long a read is retried (transient errors only) before it fails.
const READ_RETRY_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A GCS bucket, as the checkpoint uses it.
#[derive(Debug)]
pub struct GcsBucket {
    storage: Storage,
    /// `projects/_/buckets/{bucket}`, the form `google-cloud-storage` takes.
    bucket_path: String,
    /// The bare bucket name, for the JSON API paths and messages.
    pub(crate) bucket: String,
    /// Scheme, host and port, without a trailing `/`.
    endpoint: String,
    credentials: google_cloud_auth::credentials::Credentials,
    /// Signs URLs: locally with a service-account key, else through IAM `signBlob` as the
    /// Application Default Credentials' account.
    signer: Option<google_cloud_auth::signer::Signer>,
    http: reqwest::Client,
    /// Who the calls run as, for messages: a service account's email or "Application Default
    /// Credentials".
    pub(crate) principal: String,
    /// The service-account key's `project_id`: where `ensure` creates the bucket, and the
    /// project the bucket must belong to. `None` with Application Default Credentials.
    pub(crate) project: Option<String>,
    /// Whether the calls run as Application Default Credentials (no key).
    pub(crate) adc: bool,
    /// Set once the bucket is known to be the project's (`gcs_owner.rs`).
    pub(crate) owner_checked: tokio::sync::OnceCell<()>,
}

impl GcsBucket {
    /// A client for the bucket of `url` (its prefix is not applied here: keys are full object
    /// names).
    ///
    /// `service_account_json` is a service-account key file's JSON; `None` uses Application
    /// Default Credentials (on a GCE VM, the service account attached to the VM, through the
    /// metadata server). `endpoint` overrides `https://storage.googleapis.com` (a private
    /// endpoint; the tests' fake). With a key nothing is sent yet: a bad key shows at the first
    /// call. With ADC on a VM, building asks the metadata server for the universe domain (off
    /// GCE that lookup fails and `googleapis.com` is assumed).
    pub async fn new(
        url: &BucketUrl,
        service_account_json: Option<&str>,
        endpoint: Option<&str>,
    ) -> Result<Self, BucketError> {
        if url.store != StoreKind::Gcs {
            return Err(BucketError::Refused(format!("checkpoint bucket `{url}` is not a GCS bucket (gs://...)")));
        }
        let (credentials, principal, project) = match service_account_json {
            Some(json) => service_account_credentials(json)?,
            None => {
                let credentials = google_cloud_auth::credentials::Builder::default().build().map_err(|err| {
                    BucketError::Refused(format!(
                        "no Google credentials for checkpoint bucket `{url}`: {}; give a service-account key, \
                         or run where Application Default Credentials exist (a GCE VM with a service account, \
                         GOOGLE_APPLICATION_CREDENTIALS)",
                        error_chain(&err)
                    ))
                })?;
                (credentials, "Application Default Credentials".to_owned(), None)
            }
        };
        let endpoint = endpoint.unwrap_or(DEFAULT_ENDPOINT).trim_end_matches('/').to_owned();
        let storage = Storage::builder()
            .with_endpoint(endpoint.clone())
            .with_credentials(credentials.clone())
            .with_resumable_upload_threshold(usize::MAX)
            .build()
            .await
            .map_err(|err| {
                BucketError::Failed(format!("building the GCS client for `{url}`: {}", error_chain(&err)))
            })?;
        let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(60)).build().map_err(|err| {
            BucketError::Failed(format!("building the HTTP client for `{url}`: {}", error_chain(&err)))
        })?;
        let signer = match service_account_json {
            Some(json) => serde_json::from_str::<serde_json::Value>(json)
                .ok()
                .and_then(|key| google_cloud_auth::credentials::service_account::Builder::new(key).build_signer().ok()),
            None => google_cloud_auth::credentials::Builder::default().build_signer().ok(),
        };
        Ok(Self {
            storage,
            bucket_path: format!("projects/_/buckets/{}", url.bucket),
            bucket: url.bucket.clone(),
            endpoint,
            credentials,
            signer,
            http,
            principal,
            project,
            adc: service_account_json.is_none(),
            owner_checked: tokio::sync::OnceCell::new(),
        })
    }

    /// What a failed call means to the checkpoint.
    fn classify(&self, call: Call, key: &str, err: &google_cloud_storage::Error) -> BucketError {
        if err.is_authentication()
            && let Some(source) = std::error::Error::source(err)
            && let Some(credentials) = source.downcast_ref::<google_cloud_auth::errors::CredentialsError>()
        {
            return self.credentials_failed(&format!("{} `gs://{}/{key}`", call.verb(), self.bucket), credentials);
        }
        let message = err.status().map(|s| s.message.as_str()).unwrap_or_default();
        let payload = err.http_payload().map(|p| String::from_utf8_lossy(p).into_owned()).unwrap_or_default();
        // An answer that is not a Google API error is told by its size, never shown: an
        // endpoint override could fill it with what it read from elsewhere.
        let chain = match (err.http_status_code(), err.status()) {
            (Some(status), None) => format!("HTTP {status}: {}", google_message(&payload)),
            _ => error_chain(err),
        };
        self.classify_status(call, key, err.http_status_code(), &format!("{message} {payload}"), &chain)
    }

    /// A V4 signed URL that lets its holder `GET` object `key` (and nothing else) until `ttl`
    /// has passed, signed as this bucket's service account, path style on the bucket's
    /// endpoint (<https://cloud.google.com/storage/docs/access-control/signed-urls>).
    pub async fn signed_get_url(&self, key: &str, ttl: std::time::Duration) -> Result<String, BucketError> {
        let Some(signer) = &self.signer else {
            return Err(BucketError::Refused(format!(
                "the credentials of {} cannot sign URLs for `gs://{}/{key}`: give a service-account key",
                self.principal, self.bucket
            )));
        };
        google_cloud_storage::builder::storage::SignedUrlBuilder::for_object(self.bucket_path.clone(), key)
            .with_method(http::Method::GET)
            .with_expiration(ttl)
            .with_endpoint(self.endpoint.clone())
            .sign_with(signer)
            .await
            .map_err(|err| {
                BucketError::Failed(format!("signing a URL for `gs://{}/{key}`: {}", self.bucket, error_chain(&err)))
            })
    }

    /// The credentials produced no headers for the call `what` ("delete `gs://B/KEY`"):
    /// `Refused` when that will not change by itself (a malformed key), `Failed` when it may (the
    /// metadata server not answering yet).
    fn credentials_failed(&self, what: &str, err: &google_cloud_auth::errors::CredentialsError) -> BucketError {
        let (bucket, principal) = (&self.bucket, &self.principal);
        if err.is_transient() {
            BucketError::Failed(format!("{what}: {}", error_chain(err)))
        } else {
            BucketError::Refused(format!(
                "the credentials of {principal} cannot authorize calls to GCS bucket `gs://{bucket}`: {}; check the \
                 service-account key, or the VM's service account",
                error_chain(err)
            ))
        }
    }

    pub(crate) fn classify_status(
        &self,
        call: Call,
        key: &str,
        status: Option<u16>,
        body: &str,
        chain: &str,
    ) -> BucketError {
        let bucket = &self.bucket;
        let principal = &self.principal;
        match status {
            Some(412) => BucketError::Conflict(key.to_owned()),
            // An upload never answers 404 for its object, only for its bucket; a read or a delete
            // answers 404 for both, and only the message tells them apart.
            Some(404) if call == Call::Write || names_missing_bucket(body) => BucketError::Refused(format!(
                "GCS bucket `gs://{bucket}` does not exist (HTTP 404 on `{key}`): create it, or check the bucket name \
                 of the checkpoint URL"
            )),
            Some(401) => BucketError::Refused(format!(
                "GCS refused the credentials of {principal} for bucket `gs://{bucket}` (HTTP 401 on `{key}`): check \
                 that the service-account key is valid and not deleted, or that the VM's service account has the \
                 cloud-platform scope ({chain})"
            )),
            Some(403) => BucketError::Refused(format!(
                "{principal} may not use GCS bucket `gs://{bucket}` (HTTP 403 on `{key}`): grant it \
                 roles/storage.objectAdmin on the bucket ({chain})"
            )),
            Some(status) if !chain.starts_with("HTTP ") => {
                BucketError::Failed(format!("{} `gs://{bucket}/{key}`: HTTP {status}: {chain}", call.verb()))
            }
            _ => BucketError::Failed(format!("{} `gs://{bucket}/{key}`: {chain}", call.verb())),
        }
    }

    async fn write(&self, key: &str, body: Bytes, if_generation_match: i64) -> Result<Version, BucketError> {
        let object = self
            .storage
            .write_object(&self.bucket_path, key, body)
            .set_if_generation_match(if_generation_match)
            // Not retried by the crate: see the note at the top of this file.
            .with_retry_policy(google_cloud_gax::retry_policy::NeverRetry)
            .send_unbuffered()
            .await
            .map_err(|err| self.classify(Call::Write, key, &err))?;
        Ok(Version(object.generation.to_string()))
    }

    /// Deletes one object through the JSON API.
    ///
    /// The crate's object delete lives in `StorageControl`, which speaks gRPC to
    /// `storage.googleapis.com`: a second protocol and endpoint to reach from the VM, and one the
    /// test suite's fake GCS (JSON API only) does not serve. A delete is one bodiless request, so
    /// it goes through [`Self::json_api`] as `DELETE /storage/v1/b/{bucket}/o/{object}`. Deleting
    /// is idempotent, so "already gone" (404 for the object) is success, and the caller may simply
    /// call again after a failure.
    async fn delete_one(&self, key: &str) -> Result<(), BucketError> {
        let path = format!("b/{}/o/{}", percent_encode(&self.bucket), percent_encode(key));
        let what = format!("delete `gs://{}/{key}`", self.bucket);
        let (status, body) = self.json_api(reqwest::Method::DELETE, &path, &[], None, &what).await?;
        if (200..300).contains(&status) {
            return Ok(());
        }
        let chain = format!("HTTP {status}: {}", google_message(&body));
        match self.classify_status(Call::Delete, key, Some(status), &body, &chain) {
            BucketError::Failed(_) if status == 404 => Ok(()),
            err => Err(err),
        }
    }

    /// Sends one request to the JSON API, `{endpoint}/storage/v1/{path}?{query}` with `body` as
    /// JSON, authorized by the same google-cloud-auth credentials as the crate's calls; answers
    /// the response's status and body. `what` names the call in errors ("delete `gs://B/KEY`").
    /// Only a request that got no answer (no credentials, no connection) is an error here: every
    /// status, 2xx or not, is the caller's to read.
    pub(crate) async fn json_api(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&serde_json::Value>,
        what: &str,
    ) -> Result<(u16, String), BucketError> {
        let headers = match self.credentials.headers(Default::default()).await {
            Ok(google_cloud_auth::credentials::CacheableResource::New { data, .. }) => data,
            Ok(google_cloud_auth::credentials::CacheableResource::NotModified) => {
                return Err(BucketError::Failed(format!("{what}: the credentials returned no headers")));
            }
            Err(err) => return Err(self.credentials_failed(what, &err)),
        };
        let url = format!("{}/storage/v1/{path}", self.endpoint);
        let mut request = self.http.request(method, url).headers(headers).query(query);
        if let Some(body) = body {
            request = request.json(body);
        }
        let no_answer = |err: reqwest::Error| BucketError::Failed(format!("{what}: {}", error_chain(&err)));
        let response = request.send().await.map_err(no_answer)?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(no_answer)?;
        Ok((status, body))
    }
}

#[async_trait::async_trait]
impl Bucket for GcsBucket {
    async fn get(&self, key: &str) -> Result<Option<(Bytes, Version)>, BucketError> {
        self.check_owner().await?;
        // The crate retries reads for up to 5 minutes; a restore that cannot reach its bucket
        // should say so sooner (the checkpointer retries on its own).
        let policy = google_cloud_storage::retry_policy::RetryableErrors.with_time_limit(READ_RETRY_LIMIT);
        let read = self.storage.read_object(&self.bucket_path, key).with_retry_policy(policy);
        let mut response = match read.send().await {
            Ok(response) => response,
            Err(err) => {
                return match self.classify(Call::Read, key, &err) {
                    BucketError::Failed(_) if err.http_status_code() == Some(404) => Ok(None),
                    err => Err(err),
                };
            }
        };
        let generation = response.object().generation;
        let mut body = Vec::new();
        // The crate checks the CRC32C of the whole object at the last chunk: a mismatch is an
        // error there, never bytes handed back.
        while let Some(chunk) = response.next().await {
            let chunk = chunk.map_err(|err| self.classify(Call::Read, key, &err))?;
            body.extend_from_slice(&chunk);
        }
        Ok(Some((Bytes::from(body), Version(generation.to_string()))))
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, BucketError> {
        self.check_owner().await?;
        // Generation 0 matches only an object that does not exist.
        self.write(key, body, 0).await
    }

    async fn replace(&self, key: &str, body: Bytes, version: &Version) -> Result<Version, BucketError> {
        self.check_owner().await?;
        let generation = version.0.parse::<i64>().ok().filter(|g| *g > 0).ok_or_else(|| {
            BucketError::Failed(format!(
                "replace `gs://{}/{key}`: version `{}` is not a GCS generation (a positive integer)",
                self.bucket, version.0
            ))
        })?;
        self.write(key, body, generation).await
    }

    async fn delete(&self, keys: &[String]) -> Result<(), BucketError> {
        if keys.is_empty() {
            return Ok(());
        }
        self.check_owner().await?;
        for key in keys {
            self.delete_one(key).await?;
        }
        Ok(())
    }
}

/// Which kind of call failed: a 404 means different things to each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    Read,
    Write,
    Delete,
}

impl Call {
    fn verb(self) -> &'static str {
        match self {
            Call::Read => "read",
            Call::Write => "write",
            Call::Delete => "delete",
        }
    }
}

/// google-cloud-auth credentials for a service-account key file, its email and its project.
///
/// Service-account credentials sign a JWT locally for each request (no token exchange with
/// `oauth2.googleapis.com`), so they work against any endpoint, the fake included. The same few
/// lines as `anycloud_workflows::providers::gcp::credentials`, which this crate does not depend on.
fn service_account_credentials(
    json: &str,
) -> Result<(google_cloud_auth::credentials::Credentials, String, Option<String>), BucketError> {
    let refused = |detail: String| {
        BucketError::Refused(format!(
            "the service-account key for the checkpoint bucket is not usable: {detail}; give the JSON key file \
             of a service account (`gcloud iam service-accounts keys create`)"
        ))
    };
    let key: serde_json::Value = serde_json::from_str(json).map_err(|err| refused(err.to_string()))?;
    let principal = key["client_email"].as_str().unwrap_or("the service account").to_owned();
    let project = key["project_id"].as_str().filter(|p| !p.is_empty()).map(str::to_owned);
    let credentials = google_cloud_auth::credentials::service_account::Builder::new(key)
        .build()
        .map_err(|err| refused(error_chain(&err)))?;
    Ok((credentials, principal, project))
}

/// The `message` of a Google API error body (`{"error":{"code","message"}}`), at most 300
/// characters; any other body is told by its size, never shown.
pub(crate) fn google_message(body: &str) -> String {
    let parsed = serde_json::from_str::<serde_json::Value>(body).ok();
    match parsed.as_ref().and_then(|error| error["error"]["message"].as_str()) {
        Some(message) => message.chars().take(300).map(|c| if c.is_control() { ' ' } else { c }).collect(),
        None => format!("an answer that is not a Google API error ({} bytes, not shown)", body.len()),
    }
}

/// Whether a 404's message is GCS's "The specified bucket does not exist." rather than its
/// "No such object: BUCKET/KEY".
pub(crate) fn names_missing_bucket(body: &str) -> bool {
    body.to_ascii_lowercase().contains("bucket does not exist")
}

/// Percent-encodes all but RFC 3986's unreserved characters, as the crate does for object
/// names in paths (`/` becomes `%2F`).
pub(crate) fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_encoded_as_the_crate_encodes_them() {
        assert_eq!(percent_encode("apis/team-1/snap_0.db~"), "apis%2Fteam-1%2Fsnap_0.db~");
        assert_eq!(percent_encode("a b%+é"), "a%20b%25%2B%C3%A9");
    }

    #[test]
    fn a_404_names_the_bucket_only_when_the_bucket_is_missing() {
        assert!(names_missing_bucket("The specified bucket does not exist."));
        assert!(!names_missing_bucket("No such object: b/apis/x"));
    }

    #[tokio::test]
    async fn a_bad_key_or_an_s3_url_is_refused_before_any_call() {
        let gs = BucketUrl::parse("gs://team-state").unwrap_or_else(|err| panic!("{err}"));
        let err = GcsBucket::new(&gs, Some("{not json"), Some("http://127.0.0.1:9")).await.err();
        assert!(matches!(&err, Some(BucketError::Refused(m)) if m.contains("service-account key")), "{err:?}");
        let s3 = BucketUrl::parse("s3://team-state").unwrap_or_else(|err| panic!("{err}"));
        let err = GcsBucket::new(&s3, None, None).await.err();
        assert!(matches!(&err, Some(BucketError::Refused(m)) if m.contains("not a GCS bucket")), "{err:?}");
    }
}
