//! Who else may use a GCS bucket: the bucket's own IAM policy, read and written back whole with
//! the etag read (read-modify-write), so that a binding someone else added in between is never
//! overwritten: GCS refuses a stale etag with 412, and the cycle runs again.
//!
//! | step  | request                                                  | answer                       |
//! |-------|----------------------------------------------------------|------------------------------|
//! | read  | `GET /storage/v1/b/B/iam?optionsRequestedPolicyVersion=3` | the bindings and their etag |
//! | write | `PUT /storage/v1/b/B/iam` (`bindings`, `etag`, `version`) | 412: changed since, again    |
//!
//! A hosted API on GCP reaches its bucket as its own service account: the deployer (the storage
//! credential, which owns the bucket) binds that account to the bucket, not to the project, and
//! removes the binding with the API. Only that member's place in the policy changes.

use serde_json::{Value, json};

use crate::bucket::BucketError;
use crate::gcs::{GcsBucket, google_message, names_missing_bucket};
use crate::gcs_owner::bucket_path;

/// How many read-modify-write cycles run before the caller is told to try again.
const CYCLES: u32 = 5;

impl GcsBucket {
    /// Makes `member` (`serviceAccount:EMAIL`) hold exactly `roles` on the bucket (unconditioned
    /// bindings), and no other role there. Nothing is written when the policy already says so.
    /// The bucket must be the key's project's (checked first, as for every other call).
    pub async fn let_member_use(&self, member: &str, roles: &[&str]) -> Result<(), BucketError> {
        self.check_owner().await?;
        self.change_policy(member, roles).await.map(|_| ())
    }

    /// Removes `member` from every binding of the bucket's policy. A bucket that is gone holds
    /// no binding: success.
    pub async fn forget_member(&self, member: &str) -> Result<(), BucketError> {
        match self.change_policy(member, &[]).await {
            Err(BucketError::Refused(message)) if message.contains("does not exist") => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// The bucket's bindings, as GCS answers them.
    pub async fn bindings(&self) -> Result<Vec<Value>, BucketError> {
        let (_, policy) = self.read_policy().await?;
        Ok(policy["bindings"].as_array().cloned().unwrap_or_default())
    }

    async fn read_policy(&self) -> Result<(String, Value), BucketError> {
        let bucket = &self.bucket;
        let what = format!("read the IAM policy of GCS bucket `gs://{bucket}`");
        let path = format!("{}/iam", bucket_path(bucket));
        let query = [("optionsRequestedPolicyVersion", "3")];
        let (status, body) = self.json_api(reqwest::Method::GET, &path, &query, None, &what).await?;
        match status {
            200 => {}
            404 if names_missing_bucket(&body) => {
                return Err(BucketError::Refused(format!("GCS bucket `gs://{bucket}` does not exist")));
            }
            _ => return Err(self.policy_failure(&what, status, &body)),
        }
        let policy: Value = serde_json::from_str(&body)
            .map_err(|err| BucketError::Failed(format!("{what}: the answer is not a policy ({err}); try again")))?;
        Ok((path, policy))
    }

    /// One or more cycles of read, change, write; `true` when something was written.
    async fn change_policy(&self, member: &str, roles: &[&str]) -> Result<bool, BucketError> {
        let bucket = &self.bucket;
        let what = format!("let {member} hold {roles:?} on GCS bucket `gs://{bucket}`");
        for _ in 0..CYCLES {
            let (path, policy) = self.read_policy().await?;
            let read = policy["bindings"].as_array().cloned().unwrap_or_default();
            let Some(bindings) = with_exactly(&read, member, roles) else { return Ok(false) };
            let version = policy["version"].as_i64().unwrap_or(1);
            let body = json!({ "bindings": bindings, "etag": policy["etag"], "version": version });
            let (status, answer) = self.json_api(reqwest::Method::PUT, &path, &[], Some(&body), &what).await?;
            match status {
                200 => return Ok(true),
                // Someone changed the policy since it was read: read it again.
                412 => continue,
                _ => return Err(self.policy_failure(&what, status, &answer)),
            }
        }
        Err(BucketError::Failed(format!("{what}: the policy changed under each of {CYCLES} cycles; try again")))
    }

    fn policy_failure(&self, what: &str, status: u16, body: &str) -> BucketError {
        let principal = &self.principal;
        if status == 403 || status == 401 {
            return BucketError::Refused(format!(
                "{principal} may not {what} (HTTP {status}: {}): grant it storage.buckets.getIamPolicy and \
                 storage.buckets.setIamPolicy on the bucket (roles/storage.admin has them)",
                google_message(body)
            ));
        }
        BucketError::Failed(format!("{what}: HTTP {status}: {}", google_message(body)))
    }
}

/// `bindings` with `member` in exactly the unconditioned bindings of `roles` and no other,
/// bindings left empty dropped; `None` when nothing changes.
fn with_exactly(bindings: &[Value], member: &str, roles: &[&str]) -> Option<Vec<Value>> {
    let mut out = Vec::with_capacity(bindings.len() + roles.len());
    let mut placed: Vec<&str> = Vec::new();
    for binding in bindings {
        let mut binding = binding.clone();
        let role = binding["role"].as_str().unwrap_or_default().to_owned();
        let ours = binding["condition"].is_null() && roles.contains(&role.as_str()) && !placed.contains(&role.as_str());
        let mut members: Vec<Value> = binding["members"].as_array().cloned().unwrap_or_default();
        members.retain(|m| m.as_str() != Some(member));
        if ours {
            members.push(json!(member));
            if let Some(role) = roles.iter().copied().find(|r| *r == role) {
                placed.push(role);
            }
        }
        if !members.is_empty() {
            binding["members"] = Value::Array(members);
            out.push(binding);
        }
    }
    for role in roles.iter().filter(|r| !placed.contains(*r)) {
        out.push(json!({ "role": role, "members": [member] }));
    }
    let key = |list: &[Value]| {
        let mut list: Vec<String> = list
            .iter()
            .map(|b| {
                let mut members: Vec<String> =
                    b["members"].as_array().into_iter().flatten().map(|m| m.to_string()).collect();
                members.sort();
                format!("{}|{}|{}", b["role"], b["condition"], members.join(","))
            })
            .collect();
        list.sort();
        list
    };
    (key(&out) != key(bindings)).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_member_holds_exactly_its_roles_and_others_keep_theirs() {
        let me = "serviceAccount:a@p.iam.gserviceaccount.com";
        let read = vec![
            json!({"role": "roles/storage.legacyBucketOwner", "members": ["projectOwner:1"]}),
            json!({"role": "roles/storage.objectViewer", "members": [me, "user:x@example.com"]}),
        ];
        let roles = ["roles/storage.objectUser", "roles/storage.legacyBucketReader"];
        let written = with_exactly(&read, me, &roles).unwrap_or_else(|| panic!("a change"));
        let mine: Vec<&str> = written
            .iter()
            .filter(|b| b["members"].as_array().is_some_and(|m| m.iter().any(|m| m == me)))
            .filter_map(|b| b["role"].as_str())
            .collect();
        assert_eq!(mine, ["roles/storage.objectUser", "roles/storage.legacyBucketReader"]);
        assert!(written.contains(&json!({"role": "roles/storage.objectViewer", "members": ["user:x@example.com"]})));
        assert!(with_exactly(&written, me, &roles).is_none(), "twice is once");
        let forgotten = with_exactly(&written, me, &[]).unwrap_or_else(|| panic!("a change"));
        assert_eq!(forgotten.len(), 2, "{forgotten:?}");
        assert!(!serde_json::to_string(&forgotten).unwrap_or_default().contains(me));
    }
}
