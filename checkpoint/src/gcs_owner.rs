//! Whose a GCS bucket is: a bucket is used only when it belongs to the project of the
//! service-account key that calls it. GCS has no per-call owner condition (S3's
//! `ExpectedBucketOwner`), so a `GcsBucket` checks once, before its first call (and `ensure`
//! before it adopts or changes anything): the bucket's `projectNumber` must be that of the
//! key's project, read from the project's own bucket list.
//!
//! | step  | request                                        | answer                                   |
//! |-------|------------------------------------------------|------------------------------------------|
//! | look  | `GET /storage/v1/b/B`                          | its `projectNumber`; 404 missing, 403 no |
//! | list  | `GET /storage/v1/b?project=P&prefix=B`         | B is listed, with the same number        |
//!
//! A bucket someone else made under the name and opened to these credentials (bucket sniping)
//! is not in the key's project's list: refused, never read, written or adopted. The list needs
//! `storage.buckets.list` on the project (in `roles/storage.admin`, which creating the bucket
//! needs anyway).
//!
//! With Application Default Credentials (a hosted API's VM reading its own bucket as its
//! service account) there is no key, so no project to compare with, and the check is left to
//! the deployer: `api.deploy` ran it with the storage credential's key when it made or adopted
//! the bucket.

use serde_json::Value;

use crate::bucket::BucketError;
use crate::gcs::{GcsBucket, google_message, percent_encode};

impl GcsBucket {
    /// Checks, once, that the bucket is the key's project's (see the module's notes). A bucket
    /// that does not exist is refused as such.
    pub async fn check_owner(&self) -> Result<(), BucketError> {
        self.owner_checked
            .get_or_try_init(|| async {
                let Some(resource) = self.look().await? else {
                    return Err(BucketError::Refused(format!(
                        "GCS bucket `gs://{}` does not exist: create it, or check the bucket name of the checkpoint URL",
                        self.bucket
                    )));
                };
                self.owned_by_project(&resource).await
            })
            .await
            .copied()
    }

    /// Records that the bucket is the project's without asking (these credentials just made it).
    pub(crate) fn made_by_project(&self) {
        let _ = self.owner_checked.set(());
    }

    /// Whether the project's check already passed.
    pub(crate) fn owner_known(&self) -> bool {
        self.owner_checked.initialized()
    }

    /// Checks that `resource` (the bucket as GCS answered it) is the key's project's; passes
    /// with Application Default Credentials (see the module's notes).
    pub(crate) async fn owned_by_project(&self, resource: &Value) -> Result<(), BucketError> {
        let (bucket, principal) = (&self.bucket, &self.principal);
        if self.adc {
            return Ok(());
        }
        let Some(project) = &self.project else {
            return Err(BucketError::Refused(format!(
                "the service-account key of {principal} names no project, so whose GCS bucket `gs://{bucket}` is \
                 cannot be checked; give a key with its project_id (`gcloud iam service-accounts keys create`)"
            )));
        };
        let number = resource["projectNumber"].as_str().unwrap_or_default();
        if number.is_empty() {
            return Err(BucketError::Failed(format!(
                "GCS answered GCS bucket `gs://{bucket}` without its projectNumber; try again"
            )));
        }
        let what = format!("list the buckets of project `{project}` to check that it owns `gs://{bucket}`");
        let query = [("project", project.as_str()), ("prefix", bucket.as_str())];
        let (status, body) = self.json_api(reqwest::Method::GET, "b", &query, None, &what).await?;
        match status {
            200 => {}
            403 => {
                return Err(BucketError::Refused(format!(
                    "{principal} may not {what} (HTTP 403: {}): grant it storage.buckets.list on the project \
                     (roles/storage.admin has it)",
                    google_message(&body)
                )));
            }
            _ => return Err(BucketError::Failed(format!("{what}: HTTP {status}: {}", google_message(&body)))),
        }
        let listed: Value = serde_json::from_str(&body).map_err(|err| {
            BucketError::Failed(format!("{what}: the answer is not a bucket list ({err}); try again"))
        })?;
        let items = listed["items"].as_array().map(Vec::as_slice).unwrap_or_default();
        // The bucket named exactly `bucket` sorts first among those it prefixes: on the first page.
        let ours = items.iter().find(|item| item["name"].as_str() == Some(bucket.as_str()));
        match ours.and_then(|item| item["projectNumber"].as_str()) {
            Some(listed) if listed == number => Ok(()),
            _ => Err(BucketError::Refused(format!(
                "GCS bucket `gs://{bucket}` belongs to project number {number}, not to project `{project}` of \
                 {principal}: bucket names are global, and another project made this one; it is not used: name \
                 another bucket"
            ))),
        }
    }
}

/// The JSON API path of the bucket, under `/storage/v1/`.
pub(crate) fn bucket_path(bucket: &str) -> String {
    format!("b/{}", percent_encode(bucket))
}
