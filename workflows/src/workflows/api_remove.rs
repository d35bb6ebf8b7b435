//! `api.remove`: takes a deployed API off its cloud (`anycloud api stop|delete`).
//!
//! ```text
//! terminate_vm -> release_address -> delete_network -> delete_vm_identity -> delete_storage_secret
//!   -> delete_bucket -> mark_removed
//! ```
//!
//! Everything is found by the API's owner tag or name, so a removal after a half-finished deploy
//! finds what the deploy left. The secret holding the key of a bucket on another provider goes
//! with the VM (its name derives from the API's owner id). The bucket, and with it the API's state
//! and the secret holding the keys that state is sealed with ([`crate::hosting::keys`]), is kept unless
//! the removal was asked to delete it (`--delete-bucket`): another deploy on the same bucket
//! restores the same API. The VM's reserved address is released with the VM (a stop and a delete
//! alike): an address kept while nothing runs would be billed and owned by no live record, and a
//! redeploy reserves a new one, whose URL the CLI stores. No step has an undo: a removal only goes forward, and each step is
//! retried until the provider confirms.

use anycloud_engine::{Step, StepCtx, StepError, StepKey, Steps, Workflow};
use serde::{Deserialize, Serialize};

use crate::cloud::{Cloud, Placement};
use crate::db::hosted_apis::{self, HostedApi, Phase};
use crate::hosting;
use crate::hosting::bucket::{ApiBucket, step_error};
use crate::workflows::deps::Deps;
use crate::workflows::retry;

/// The workflow, with what its steps need.
pub struct RemoveApi {
    /// Database, sealer, clouds.
    pub deps: Deps,
}

/// Which API to remove, and whether its bucket goes too.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoveInput {
    /// The record's id.
    pub api_id: String,
    /// Its name (for people reading `inspect`).
    pub name: String,
    /// Its checkpoint bucket.
    pub bucket: String,
    /// Delete the checkpoint bucket and everything in it.
    pub delete_bucket: bool,
}

/// What was removed, and what stays.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RemoveOutput {
    /// The bucket, when it was kept.
    pub kept_bucket: Option<String>,
}

const TERMINATE_VM: StepKey<()> = StepKey::new("terminate_vm");
const RELEASE_ADDRESS: StepKey<()> = StepKey::new("release_address");
const DELETE_NETWORK: StepKey<()> = StepKey::new("delete_network");
const DELETE_VM_IDENTITY: StepKey<()> = StepKey::new("delete_vm_identity");
const DELETE_STORAGE_SECRET: StepKey<()> = StepKey::new("delete_storage_secret");
/// How many object versions were deleted with the bucket (`None`: the bucket was kept).
const DELETE_BUCKET: StepKey<Option<usize>> = StepKey::new("delete_bucket");
const MARK_REMOVED: StepKey<()> = StepKey::new("mark_removed");

impl Workflow for RemoveApi {
    const KIND: &'static str = "api.remove";
    /// v2: `delete_storage_secret`; v3: `release_address`. A run of an older version is not
    /// registered any more: the engine parks it (`needs-attention`) rather than run another step
    /// list under it; cancel it and stop the API again.
    const VERSION: u32 = 3;
    type Input = RemoveInput;
    type Output = RemoveOutput;

    fn steps() -> Steps<Self> {
        Steps::new()
            .then(Step::action(TERMINATE_VM, terminate_vm).retry(retry::sweeps()).attempt_timeout(retry::CLOUD_ATTEMPT))
            .then(
                Step::action(RELEASE_ADDRESS, release_address)
                    .retry(retry::sweeps())
                    .attempt_timeout(retry::CLOUD_ATTEMPT),
            )
            .then(
                Step::action(DELETE_NETWORK, delete_network)
                    .retry(retry::sweeps())
                    .attempt_timeout(retry::CLOUD_ATTEMPT),
            )
            .then(
                Step::action(DELETE_VM_IDENTITY, delete_vm_identity)
                    .retry(retry::sweeps())
                    .attempt_timeout(retry::CLOUD_ATTEMPT),
            )
            .then(
                Step::action(DELETE_STORAGE_SECRET, delete_storage_secret)
                    .retry(retry::sweeps())
                    .attempt_timeout(retry::CLOUD_ATTEMPT),
            )
            .then(
                Step::action(DELETE_BUCKET, delete_bucket).retry(retry::sweeps()).attempt_timeout(retry::CLOUD_ATTEMPT),
            )
            .then(Step::action(MARK_REMOVED, mark_removed))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<RemoveOutput, StepError> {
        let deleted = ctx.output(DELETE_BUCKET)?;
        Ok(RemoveOutput { kept_bucket: deleted.is_none().then(|| ctx.input().bucket.clone()) })
    }
}

/// The record, the hosting account and where its VM is (the placement `api.deploy` pinned: the
/// provider picks it the same way again).
async fn hosting(ctx: &StepCtx<RemoveApi>) -> Result<(HostedApi, Box<dyn Cloud>, Placement), StepError> {
    let api = ctx.workflow().deps.hosted_api(&ctx.input().api_id).await?;
    let cloud = ctx.workflow().deps.cloud(&api.credential, &api.region).await?;
    let placement = cloud.placement(&api.owner(), &api.region, &api.vm_type).await?;
    Ok((api, cloud, placement))
}

async fn terminate_vm(ctx: StepCtx<RemoveApi>) -> Result<(), StepError> {
    let (_, cloud, placement) = hosting(&ctx).await?;
    ctx.workflow().deps.sweep_unrecorded(cloud.as_ref(), &placement).await
}

/// Releases the VM's reserved address (every address with the API's tag), now that the VM is
/// gone; succeeds once the provider lists none.
async fn release_address(ctx: StepCtx<RemoveApi>) -> Result<(), StepError> {
    let (_, cloud, placement) = hosting(&ctx).await?;
    ctx.workflow().deps.release_addresses(cloud.as_ref(), &placement).await
}

async fn delete_network(ctx: StepCtx<RemoveApi>) -> Result<(), StepError> {
    let (_, cloud, placement) = hosting(&ctx).await?;
    ctx.workflow().deps.remove_network(cloud.as_ref(), &placement, "the API's").await
}

async fn delete_vm_identity(ctx: StepCtx<RemoveApi>) -> Result<(), StepError> {
    let (api, cloud, _) = hosting(&ctx).await?;
    crate::workflows::api_deploy::forget_vm_identity(&ctx.workflow().deps, &api, cloud.as_ref()).await?;
    Ok(cloud.delete_vm_identity(&api.owner()).await?)
}

/// Deletes the secret holding the key of a bucket on another provider (gone is success).
async fn delete_storage_secret(ctx: StepCtx<RemoveApi>) -> Result<(), StepError> {
    let (api, cloud, _) = hosting(&ctx).await?;
    if hosting::storage_key::travels(&api) {
        cloud.delete_vm_secret(&hosting::storage_key::secret_name(api.provider, &api.owner())).await?;
    }
    Ok(())
}

/// Deletes the bucket and, once it is gone, the keys its database was sealed with; a kept bucket
/// keeps its keys (a later deploy on it finds them).
async fn delete_bucket(ctx: StepCtx<RemoveApi>) -> Result<Option<usize>, StepError> {
    if !ctx.input().delete_bucket {
        return Ok(None);
    }
    // No placement: deleting the bucket and its keys' secret needs the account, not a region's
    // machine types and image.
    let api = ctx.workflow().deps.hosted_api(&ctx.input().api_id).await?;
    let cloud = ctx.workflow().deps.cloud(&api.credential, &api.region).await?;
    let (bucket, _) = ApiBucket::open(&ctx.workflow().deps, &api).await?;
    let deleted = bucket.destroy().await.map_err(step_error)?;
    cloud.delete_vm_secret(&hosting::keys::secret_name(api.provider, &api.bucket)).await?;
    Ok(Some(deleted))
}

async fn mark_removed(ctx: StepCtx<RemoveApi>) -> Result<(), StepError> {
    let db = &ctx.workflow().deps.db;
    let api_id = &ctx.input().api_id;
    let kept = if ctx.input().delete_bucket { "its bucket was deleted" } else { "its bucket is kept" };
    hosted_apis::set_phase(db, api_id, Phase::Removed, Some(kept)).await?;
    hosted_apis::set_identity(db, api_id, None, None).await?;
    Ok(())
}
