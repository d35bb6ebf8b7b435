//! Deleting a credential that nothing uses: no workflow runs on it, and no live cluster's
//! capacity is in its account (deleting it would leave that cluster's VMs with nobody able to
//! remove them).

use anycloud_engine::Store;

use crate::db::clusters;
use crate::db::credentials::{self, Hold};
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::CredentialDeleted;
use crate::workflows::credentials_verify::VerifyCredential;

use super::Operations;
use super::show_credentials::credential_not_found;

impl Operations {
    /// Deletes the credential, holding its row so that a cluster create that would use it
    /// either commits first (and is seen here) or finds it gone.
    pub async fn delete_credential(&self, name: &str) -> Result<CredentialDeleted, OperationError> {
        let mut tx = self.deps.db.begin().await?;
        credentials::hold_in(&mut tx, name, Hold::Exclusive).await?.ok_or_else(|| credential_not_found(name))?;
        let busy = Store::unfinished_runs_in(&mut tx, &VerifyCredential::resource_key(name)).await?;
        if let Some((run, status)) = busy.first() {
            return Err(Refusal::new(
                Code::CredentialInUse,
                format!(
                    "credential `{name}` is in use by workflow {run} ({status}); wait for it to end, or cancel it \
                     with `anycloud workflow cancel {run}`, then delete again"
                ),
            )
            .into());
        }
        let apis = crate::db::hosted_apis::live_on_credential_in(&mut tx, name).await?;
        if let Some(first) = apis.first() {
            return Err(Refusal::new(
                Code::CredentialInUse,
                format!(
                    "credential `{name}` hosts (or keeps the state of) {} API(s): {}; remove them first (`anycloud api                      delete {first}`), then the credential: without it nobody could remove their VMs",
                    apis.len(),
                    apis.join(", ")
                ),
            )
            .into());
        }
        let clusters = clusters::live_on_credential_in(&mut tx, name).await?;
        if let Some(first) = clusters.first() {
            return Err(Refusal::new(
                Code::CredentialInUse,
                format!(
                    "credential `{name}` holds the capacity or the control plane of {} cluster(s): {}; delete them first (`anycloud \
                     cluster delete {first}`), then the credential: without it nobody could remove their VMs",
                    clusters.len(),
                    clusters.join(", ")
                ),
            )
            .into());
        }
        credentials::delete_in(&mut tx, name).await?;
        tx.commit().await?;
        Ok(CredentialDeleted { deleted: name.to_owned() })
    }
}
