//! The bucket of a hosted API on GCS, made by `ensure` and removed by `destroy` (`provision.rs`
//! holds what S3 and GCS share). `ensure` creates the bucket in the service-account key's
//! project unless it exists, adopts it when it is that project's (`gcs_owner.rs`), and either way leaves
//! it versioned, private (uniform bucket-level access, public access prevention enforced) and
//! deleting a generation [`NONCURRENT_DAYS`] days after it stopped being live. `destroy` deletes
//! every generation first: GCS deletes only an empty bucket.
//!
//! | step           | request                                           | answer                          |
//! |----------------|---------------------------------------------------|---------------------------------|
//! | ensure: look   | `GET /storage/v1/b/B`                             | 200 adopt, 404 create, 403 no   |
//! | ensure: owner  | `GET /storage/v1/b?project=P&prefix=B`            | adopt only if B is P's          |
//! | ensure: create | `POST /storage/v1/b?project=P`                    | 200 created, 409 look again     |
//! | ensure: settle | `PATCH /storage/v1/b/B?ifMetagenerationMatch=M`   | only what an adopted one lacks  |
//! | destroy: list  | `GET /storage/v1/b/B/o?versions=true&pageToken=T` | every generation, page by page  |
//! | destroy: empty | `DELETE /storage/v1/b/B/o/KEY?generation=G`       | each one; 404: already gone     |
//! | destroy: drop  | `DELETE /storage/v1/b/B`                          | 404: already gone               |
//!
//! All of them go through `GcsBucket::json_api` (the crate's credentials, the JSON API).

// Why a 409 on create looks again. Between the look and the create, someone may have created
// the bucket: another project (the name is global), or our own earlier create whose answer was
// lost. GCS answers 409 to both, so a second look tells them apart: 200 means these credentials
// can use the bucket, and it is adopted if it is the key's project's (another project may have
// opened it to them: `gcs_owner.rs`).
//
// Why an adopted bucket is patched only where it falls short. A bucket's lifecycle is one list
// of rules: writing ours alone would drop the rules the owner of an adopted bucket set, so the
// rules read are kept and ours is added. A PATCH with nothing to change is not sent: a second
// `ensure` changes nothing (not even the metageneration), and credentials that may read the
// bucket's settings but not change them can still adopt a bucket that is already right. The
// PATCH names the metageneration it read (`ifMetagenerationMatch`), so that a change made in
// between is not overwritten: 412 is `Failed`, and the next `ensure` reads again.

use serde_json::{Value, json};

use crate::bucket::BucketError;
use crate::gcs::{Call, GcsBucket, google_message, names_missing_bucket, percent_encode};
use crate::gcs_owner::bucket_path;
use crate::provision::{Made, NONCURRENT_DAYS};

impl GcsBucket {
    /// Creates the bucket unless these credentials own it, versioned and private.
    ///
    /// A missing bucket is created in the project of the service-account key (its `project_id`);
    /// with Application Default Credentials there is no project, and only an existing bucket can
    /// be adopted. An existing bucket is adopted only if it is the key's project's (a key that
    /// names no project adopts none). An adopted bucket is given whatever of the settings it lacks, its other
    /// lifecycle rules kept. Every step is idempotent: a retry after a failure finishes what the
    /// first call began.
    pub async fn ensure(&self) -> Result<Made, BucketError> {
        let resource = match self.look().await? {
            Some(resource) => resource,
            None => match self.insert().await? {
                Inserted::Created => {
                    self.made_by_project();
                    return Ok(Made::Created);
                }
                Inserted::NameTaken => self.look().await?.ok_or_else(|| {
                    BucketError::Refused(format!(
                        "the GCS bucket name `{}` is taken (bucket names are global: another project may own it); \
                         name another bucket",
                        self.bucket
                    ))
                })?,
            },
        };
        // Nothing is changed on a bucket before it is known to be the key's project's.
        if !self.owner_known() {
            self.owned_by_project(&resource).await?;
            self.made_by_project();
        }
        self.settle(&resource).await?;
        Ok(Made::Adopted)
    }

    /// The bucket's resource; `None` if there is no such bucket.
    pub(crate) async fn look(&self) -> Result<Option<Value>, BucketError> {
        let (bucket, principal) = (&self.bucket, &self.principal);
        let what = format!("look up GCS bucket `gs://{bucket}`");
        let (status, body) = self.json_api(reqwest::Method::GET, &bucket_path(bucket), &[], None, &what).await?;
        match status {
            200 => serde_json::from_str(&body).map(Some).map_err(|err| {
                BucketError::Failed(format!("{what}: the answer is not a bucket resource ({err}); try again"))
            }),
            404 => Ok(None),
            403 => Err(BucketError::Refused(format!(
                "GCS bucket `gs://{bucket}` exists and {principal} may not use it (HTTP 403: {}): bucket names are \
                 global, so another project may own it; name another bucket, or, if the bucket is yours, grant \
                 {principal} roles/storage.admin on it",
                google_message(&body)
            ))),
            _ => Err(self.bucket_call_failed(&what, status, &body)),
        }
    }

    /// Creates the bucket with every setting, in the key's project.
    async fn insert(&self) -> Result<Inserted, BucketError> {
        let (bucket, principal) = (&self.bucket, &self.principal);
        let Some(project) = &self.project else {
            return Err(BucketError::Refused(format!(
                "GCS bucket `gs://{bucket}` does not exist, and {principal} names no project to create it in: \
                 creating a bucket needs a service-account key (the bucket is made in its project_id); give one, or \
                 create the bucket yourself and try again"
            )));
        };
        let what = format!("create GCS bucket `gs://{bucket}` in project `{project}`");
        let mut body = settings();
        body["name"] = json!(bucket);
        let (status, answer) =
            self.json_api(reqwest::Method::POST, "b", &[("project", project)], Some(&body), &what).await?;
        match status {
            200 => Ok(Inserted::Created),
            409 => Ok(Inserted::NameTaken),
            403 => Err(BucketError::Refused(format!(
                "{principal} may not create buckets in project `{project}` (HTTP 403: {}): grant it \
                 roles/storage.admin on the project, or create the bucket `gs://{bucket}` yourself and try again",
                google_message(&answer)
            ))),
            _ => Err(self.bucket_call_failed(&what, status, &answer)),
        }
    }

    /// Gives an adopted bucket what it lacks of [`settings`] (see the note at the top).
    async fn settle(&self, resource: &Value) -> Result<(), BucketError> {
        let Some(patch) = missing_settings(resource) else {
            return Ok(());
        };
        let (bucket, principal) = (&self.bucket, &self.principal);
        let what = format!("make GCS bucket `gs://{bucket}` versioned and private");
        let metageneration = resource["metageneration"].as_str().unwrap_or_default();
        let query: &[(&str, &str)] =
            if metageneration.is_empty() { &[] } else { &[("ifMetagenerationMatch", metageneration)] };
        let (status, body) =
            self.json_api(reqwest::Method::PATCH, &bucket_path(bucket), query, Some(&patch), &what).await?;
        match status {
            200 => Ok(()),
            412 => Err(BucketError::Failed(format!(
                "{what}: its settings changed while they were being read (HTTP 412); try again"
            ))),
            403 => Err(BucketError::Refused(format!(
                "{principal} may not change the settings of GCS bucket `gs://{bucket}` (HTTP 403: {}): grant it \
                 roles/storage.admin on the bucket, or turn on its versioning, uniform bucket-level access and \
                 public access prevention yourself",
                google_message(&body)
            ))),
            _ => Err(self.bucket_call_failed(&what, status, &body)),
        }
    }

    /// Deletes every object generation, then the bucket. Already gone: Ok.
    ///
    /// Answers how many generations were deleted (live and noncurrent). An object written while
    /// the bucket is being emptied makes the bucket's delete fail (`Failed`): stop whatever
    /// writes to it, and call again.
    pub async fn destroy(&self) -> Result<usize, BucketError> {
        // Nothing is deleted from a bucket that is not the key's project's.
        if !self.owner_known() {
            let Some(resource) = self.look().await? else { return Ok(0) };
            self.owned_by_project(&resource).await?;
            self.made_by_project();
        }
        let mut deleted = 0;
        let mut page_token: Option<String> = None;
        loop {
            let Some(page) = self.list_generations(page_token.as_deref()).await? else {
                return Ok(deleted);
            };
            for generation in &page.items {
                match self.delete_generation(generation).await? {
                    Removed::Generation => deleted += 1,
                    Removed::Nothing => {}
                    Removed::BucketGone => return Ok(deleted),
                }
            }
            match page.next_page_token {
                Some(token) => page_token = Some(token),
                None => break,
            }
        }
        self.drop_bucket().await?;
        Ok(deleted)
    }

    /// One page of the bucket's generations, live and noncurrent; `None` if there is no bucket.
    async fn list_generations(&self, page_token: Option<&str>) -> Result<Option<ObjectsPage>, BucketError> {
        let bucket = &self.bucket;
        let what = format!("list the objects of GCS bucket `gs://{bucket}`");
        let mut query = vec![("versions", "true")];
        query.extend(page_token.map(|token| ("pageToken", token)));
        let path = format!("{}/o", bucket_path(bucket));
        let (status, body) = self.json_api(reqwest::Method::GET, &path, &query, None, &what).await?;
        match status {
            200 => serde_json::from_str(&body).map(Some).map_err(|err| {
                BucketError::Failed(format!("{what}: the answer is not an object list ({err}); try again"))
            }),
            404 => Ok(None),
            _ => Err(self.bucket_call_failed(&what, status, &body)),
        }
    }

    /// Deletes one generation for good (a versioned bucket keeps no copy of it).
    async fn delete_generation(&self, object: &ListedGeneration) -> Result<Removed, BucketError> {
        let (bucket, key) = (&self.bucket, &object.name);
        let what = format!("delete `gs://{bucket}/{key}` generation {}", object.generation);
        let path = format!("{}/o/{}", bucket_path(bucket), percent_encode(key));
        let query = [("generation", object.generation.as_str())];
        let (status, body) = self.json_api(reqwest::Method::DELETE, &path, &query, None, &what).await?;
        match status {
            200..300 => Ok(Removed::Generation),
            404 if names_missing_bucket(&body) => Ok(Removed::BucketGone),
            404 => Ok(Removed::Nothing),
            _ => {
                let chain = format!("HTTP {status}: {}", google_message(&body));
                Err(self.classify_status(Call::Delete, key, Some(status), &body, &chain))
            }
        }
    }

    /// Deletes the emptied bucket.
    async fn drop_bucket(&self) -> Result<(), BucketError> {
        let bucket = &self.bucket;
        let what = format!("delete GCS bucket `gs://{bucket}`");
        let (status, body) = self.json_api(reqwest::Method::DELETE, &bucket_path(bucket), &[], None, &what).await?;
        match status {
            200..300 | 404 => Ok(()),
            409 => Err(BucketError::Failed(format!(
                "{what}: it is not empty although every generation listed was deleted, so something wrote to it \
                 meanwhile (an API still using it?); stop that, and delete again"
            ))),
            _ => Err(self.bucket_call_failed(&what, status, &body)),
        }
    }

    /// A bucket-level call answered `status`: `Refused` when asking again will not change it,
    /// `Failed` otherwise.
    fn bucket_call_failed(&self, what: &str, status: u16, body: &str) -> BucketError {
        let (principal, message) = (&self.principal, google_message(body));
        match status {
            400 => BucketError::Refused(format!(
                "GCS rejected the request to {what} (HTTP 400: {message}); fix what it names and try again"
            )),
            401 => BucketError::Refused(format!(
                "GCS refused the credentials of {principal} ({what}: HTTP 401: {message}): check that the \
                 service-account key is valid and not deleted, or that the VM's service account has the \
                 cloud-platform scope"
            )),
            403 => BucketError::Refused(format!(
                "{principal} may not {what} (HTTP 403: {message}): grant it roles/storage.admin on the bucket"
            )),
            _ => BucketError::Failed(format!("{what}: HTTP {status}: {message}")),
        }
    }
}

/// How a create went when GCS answered.
enum Inserted {
    /// The bucket is new, with every setting.
    Created,
    /// A bucket of that name exists (ours or not: look again to know).
    NameTaken,
}

/// What deleting one generation did.
enum Removed {
    /// Deleted it.
    Generation,
    /// It was already gone.
    Nothing,
    /// The whole bucket is gone.
    BucketGone,
}

/// One page of `GET /storage/v1/b/B/o?versions=true` (a `storage#objects`), as far as read.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectsPage {
    /// Absent when the page is empty.
    #[serde(default)]
    items: Vec<ListedGeneration>,
    next_page_token: Option<String>,
}

/// One generation of one object, as listed.
#[derive(serde::Deserialize)]
struct ListedGeneration {
    name: String,
    /// An int64, which the JSON API writes as a decimal string.
    generation: String,
}

/// The settings of every checkpoint bucket: versioned (a damaged object can be put back from an
/// earlier generation), readable only through IAM (no ACLs, never public), and a generation
/// deleted [`NONCURRENT_DAYS`] after it stopped being live.
fn settings() -> Value {
    json!({
        "versioning": {"enabled": true},
        "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": true}, "publicAccessPrevention": "enforced"},
        "lifecycle": {"rule": [{
            "action": {"type": "Delete"},
            "condition": {"daysSinceNoncurrentTime": NONCURRENT_DAYS, "isLive": false},
        }]},
    })
}

/// The PATCH body that gives a bucket resource what it lacks of [`settings`], its own lifecycle
/// rules kept; `None` if it lacks nothing.
fn missing_settings(resource: &Value) -> Option<Value> {
    let wanted = settings();
    let mut patch = serde_json::Map::new();
    if resource["versioning"]["enabled"] != true {
        patch.insert("versioning".to_owned(), wanted["versioning"].clone());
    }
    let iam = &resource["iamConfiguration"];
    if iam["uniformBucketLevelAccess"]["enabled"] != true || iam["publicAccessPrevention"] != "enforced" {
        patch.insert("iamConfiguration".to_owned(), wanted["iamConfiguration"].clone());
    }
    let mut rules = resource["lifecycle"]["rule"].as_array().cloned().unwrap_or_default();
    let ours = &wanted["lifecycle"]["rule"][0];
    if !rules.contains(ours) {
        rules.push(ours.clone());
        patch.insert("lifecycle".to_owned(), json!({ "rule": rules }));
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_with_every_setting_needs_no_patch() {
        let mut resource = settings();
        resource["metageneration"] = json!("3");
        resource["iamConfiguration"]["bucketPolicyOnly"] = json!({"enabled": true});
        assert_eq!(missing_settings(&resource), None);
    }

    #[test]
    fn a_bare_bucket_is_given_every_setting() {
        let resource = json!({"kind": "storage#bucket", "name": "b", "iamConfiguration": {
            "uniformBucketLevelAccess": {"enabled": true}, "publicAccessPrevention": "inherited"}});
        assert_eq!(missing_settings(&resource), Some(settings()));
    }

    #[test]
    fn an_adopted_bucket_keeps_its_own_lifecycle_rules() {
        let theirs =
            json!({"action": {"type": "SetStorageClass", "storageClass": "NEARLINE"}, "condition": {"age": 90}});
        let mut resource = settings();
        resource["lifecycle"] = json!({"rule": [theirs]});
        let patch = missing_settings(&resource).unwrap_or_else(|| panic!("our rule is missing"));
        assert_eq!(patch, json!({"lifecycle": {"rule": [theirs, settings()["lifecycle"]["rule"][0]]}}));
    }

    #[test]
    fn google_errors_show_their_message() {
        let body = r#"{"error":{"code":403,"message":"x does not have storage.buckets.get access","errors":[]}}"#;
        assert_eq!(google_message(body), "x does not have storage.buckets.get access");
        // Any other body is not shown: an endpoint could fill it with what it read elsewhere.
        assert_eq!(google_message(" Bad Gateway\n"), "an answer that is not a Google API error (13 bytes, not shown)");
    }
}
