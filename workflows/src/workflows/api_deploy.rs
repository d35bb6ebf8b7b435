//! `api.deploy`: puts an API on a cloud VM that keeps its state in a bucket.
//!
//! ```text
//! pin_placement -> ensure_bucket -> ship_binary -> store_keys -> ensure_network
//!   -> store_storage_secret -> ensure_vm_identity -> reserve_address -> launch -> wait_until_answers
//!   -> save_hosting_credential -> mark_ready
//! ```
//!
//! The `deploy_api` operation writes the record and this run in one transaction. The bucket is
//! made first (created, or adopted when the storage credential owns it: a redeploy on the same
//! bucket restores the same API), then the API's keys (its token, the key that seals its
//! database's secrets, the CA its TLS certificate is issued from) are put in the hosting
//! provider's secret store, never in the bucket beside the database they unseal
//! ([`crate::hosting::keys`]). The VM reads them as itself (an instance profile, a service account),
//! so its user-data carries nothing secret. A bucket on another
//! provider than the VM is reached with the storage credential's key, which the VM reads as
//! itself from its own provider's secret store (`store_storage_secret`, [`crate::hosting::storage_key`]).
//! The VM is reached at a reserved address (`reserve_address`: an Elastic IP, a static external
//! address) that survives its stop, start and replacement; its certificate and URL name it.
//! The binary the VM runs is checked against the machine type's architecture before anything is
//! made (`pin_placement`); one the deploy ships is copied from where the deploying API staged it
//! into the bucket (`ship_binary`, by its SHA-256), and the VM fetches it through a signed URL
//! that expires after [`SIGNED_URL_TTL`] and grants that one GET ([`crate::hosting::binary`]).
//! The last step waits until the API answers over HTTPS through the pinned CA. On a terminal
//! failure or a cancel the undos run in reverse: the VM, the reserved address, the VM identity,
//! the storage secret and the network rules go, and a bucket this run created is deleted with
//! everything in it, and its keys' secret with it (an adopted one is kept, with its keys); the
//! record stays `failed`.

use std::time::Duration;

use anycloud_checkpoint::Layout;
use anycloud_checkpoint::provision::Made;
use anycloud_engine::{Check, Effect, Step, StepCtx, StepError, StepKey, Steps, Workflow};
use serde::{Deserialize, Serialize};

use crate::cloud::{Address, Cloud, LaunchSpec, Network, Placement, Role, Vm};
use crate::db::credentials;
use crate::db::hosted_apis::{self, HostedApi, Phase};
use crate::hosting;
use crate::hosting::binary::BinarySource;
use crate::hosting::bucket::{ApiBucket, step_error};
use crate::hosting::identity::{CA_CERT_FILE, CA_KEY_FILE, TOKEN_FILE};
use crate::hosting::keys::ApiKeys;
use crate::hosting::storage_key::StorageKey;
use crate::hosting::user_data::{Download, HostedApi as Script};
use crate::providers::endpoint::EndpointPolicy;
use crate::secrets::SEALING_KEY_FILE;
use crate::workflows::deps::{AccountError, Deps};
use crate::workflows::retry;

/// The workflow, with what its steps need.
pub struct DeployApi {
    /// Database, sealer, clouds.
    pub deps: Deps,
}

/// Which API to deploy (its spec is in its record).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeployInput {
    /// The record's id.
    pub api_id: String,
    /// Its name (for people reading `inspect`).
    pub name: String,
}

/// Where the deployed API answers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeployOutput {
    /// `https://ADDRESS:PORT`.
    pub url: String,
}

/// What `store_keys` checkpoints: the CA's certificate (public) and where the keys are, never a key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeysStored {
    /// The CA clients pin.
    pub ca_pem: String,
    /// The secret holding the keys (an ARN, `projects/P/secrets/NAME`).
    pub secret: String,
}

/// The files an earlier version of the deploy left in the bucket, beside the database: the keys
/// `store_keys` takes over from them once, then deletes.
const LEGACY_KEY_FILES: [&str; 3] = [TOKEN_FILE, SEALING_KEY_FILE, CA_KEY_FILE];

/// The VM's name within its owner.
const VM_NAME: &str = "api";

/// How long the URL a VM fetches a shipped binary through is valid: long enough for a VM to
/// boot and fetch it, short enough that a copy of its user-data is soon worth nothing (the
/// binary is not secret; its SHA-256 in the user-data protects it). A VM that reboots later
/// keeps the binary it installed (the script checks its sum and fetches nothing).
pub const SIGNED_URL_TTL: Duration = Duration::from_secs(15 * 60);

/// Where the VM goes, as the provider checked it.
const PIN_PLACEMENT: StepKey<Placement> = StepKey::new("pin_placement");
/// Whether the bucket was created or adopted.
const ENSURE_BUCKET: StepKey<Made> = StepKey::new("ensure_bucket");
/// The key of the binary the deploy shipped to the bucket; `None` when the operator hosts it.
const SHIP_BINARY: StepKey<Option<String>> = StepKey::new("ship_binary");
/// The keys are in the hosting provider's secret store, and the token sealed in the record.
const STORE_KEYS: StepKey<KeysStored> = StepKey::new("store_keys");
/// The API's network rules.
const ENSURE_NETWORK: StepKey<Network> = StepKey::new("ensure_network");
/// The secret holding the storage credential's key (its ARN or resource name), when the bucket is
/// on another provider than the VM; `None` otherwise.
const STORE_STORAGE_SECRET: StepKey<Option<String>> = StepKey::new("store_storage_secret");
/// Who the VM acts as.
const ENSURE_VM_IDENTITY: StepKey<String> = StepKey::new("ensure_vm_identity");
/// The VM's stable public address.
const RESERVE_ADDRESS: StepKey<Address> = StepKey::new("reserve_address");
/// The VM as launched.
const LAUNCH: StepKey<Vm> = StepKey::new("launch");
/// Where it answers.
const WAIT_UNTIL_ANSWERS: StepKey<String> = StepKey::new("wait_until_answers");
/// The hosting credential is saved and valid on the API (its clusters' control planes go there).
const SAVE_HOSTING_CREDENTIAL: StepKey<()> = StepKey::new("save_hosting_credential");
/// Marked ready.
const MARK_READY: StepKey<()> = StepKey::new("mark_ready");

impl Workflow for DeployApi {
    const KIND: &'static str = "api.deploy";
    /// v2: `save_hosting_credential`; v3: `store_storage_secret`; v4: `ship_binary` and
    /// `reserve_address`; v5: `store_keys` (in the secret store) instead of `store_identity` (in
    /// the bucket). A run of an older version is not registered any more: the engine parks it
    /// (`needs-attention`, naming the version) rather than run another step list under it; cancel
    /// it and deploy again.
    const VERSION: u32 = 5;
    type Input = DeployInput;
    type Output = DeployOutput;

    fn steps() -> Steps<Self> {
        let cloud = retry::cloud_calls;
        Steps::new()
            .then(
                Step::action(PIN_PLACEMENT, pin_placement)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(pin_placement_undo),
            )
            .then(
                Step::action(ENSURE_BUCKET, ensure_bucket)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(ensure_bucket_undo)
                    .undo_retry(retry::sweeps()),
            )
            .then(
                Step::action(SHIP_BINARY, ship_binary)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(ship_binary_undo)
                    .undo_retry(retry::sweeps()),
            )
            .then(
                Step::action(STORE_KEYS, store_keys)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(store_keys_undo)
                    .undo_retry(retry::sweeps()),
            )
            .then(
                Step::action(ENSURE_NETWORK, ensure_network)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(ensure_network_undo)
                    .undo_retry(retry::sweeps()),
            )
            .then(
                Step::action(STORE_STORAGE_SECRET, store_storage_secret)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(store_storage_secret_undo)
                    .undo_retry(retry::sweeps()),
            )
            .then(
                Step::action(ENSURE_VM_IDENTITY, ensure_vm_identity)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(ensure_vm_identity_undo)
                    .undo_retry(retry::sweeps()),
            )
            .then(
                Step::action(RESERVE_ADDRESS, reserve_address)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(reserve_address_undo)
                    .undo_retry(retry::sweeps()),
            )
            .then(
                Step::action(LAUNCH, launch)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(launch_undo)
                    .undo_retry(retry::sweeps()),
            )
            .then(
                Step::poll(WAIT_UNTIL_ANSWERS, wait_until_answers)
                    .every(Duration::from_secs(2))
                    .timeout(retry::ready_timeout())
                    .attempt_timeout(retry::QUICK_ATTEMPT),
            )
            .then(
                Step::poll(SAVE_HOSTING_CREDENTIAL, save_hosting_credential)
                    .every(Duration::from_secs(1))
                    .timeout(retry::ready_timeout())
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT),
            )
            .then(Step::action(MARK_READY, mark_ready))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<DeployOutput, StepError> {
        Ok(DeployOutput { url: ctx.output(WAIT_UNTIL_ANSWERS)? })
    }
}

/// The record.
async fn record(ctx: &StepCtx<DeployApi>) -> Result<HostedApi, StepError> {
    ctx.workflow().deps.hosted_api(&ctx.input().api_id).await
}

/// The record, the hosting account and the pinned placement.
async fn hosting(ctx: &StepCtx<DeployApi>) -> Result<(HostedApi, Box<dyn Cloud>, Placement), StepError> {
    let api = record(ctx).await?;
    let cloud = ctx.workflow().deps.cloud(&api.credential, &api.region).await?;
    Ok((api, cloud, ctx.output(PIN_PLACEMENT)?))
}

/// Asks the hosting provider whether the region and machine type exist, and picks the image.
async fn pin_placement(ctx: StepCtx<DeployApi>) -> Result<Placement, StepError> {
    let result: Result<Placement, StepError> = async {
        let api = record(&ctx).await?;
        let cloud = ctx.workflow().deps.cloud(&api.credential, &api.region).await?;
        let placement = cloud.placement(&api.owner(), &api.region, &api.vm_type).await?;
        check_architecture(&api, cloud.as_ref()).await?;
        Ok(placement)
    }
    .await;
    if let Err(err) = &result
        && err.is_terminal()
    {
        let reason = format!("deploy failed: step `pin_placement` failed: {err}; nothing was made at the provider");
        hosted_apis::set_phase(&ctx.workflow().deps.db, &ctx.input().api_id, Phase::Failed, Some(&reason)).await?;
    }
    result
}

/// Fails (terminal) unless the binary the VM would run is built for the machine type.
async fn check_architecture(api: &HostedApi, cloud: &dyn Cloud) -> Result<(), StepError> {
    let source = binary(api)?;
    let runs = cloud.vm_architectures(&api.region, &api.vm_type).await?;
    if source.arches().iter().any(|arch| runs.contains(arch)) {
        return Ok(());
    }
    let names = |arches: &[hosting::binary::Arch]| arches.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(", ");
    Err(StepError::terminal_msg(match source {
        BinarySource::Shipped { arch, .. } => format!(
            "machine type {} runs {} and the binary this deploy ships is built for {arch}: deploy with --binary FILE, \
             an anycloud built for {}, or pick a machine type of {arch}",
            api.vm_type,
            names(&runs),
            names(&runs)
        ),
        BinarySource::Hosted { .. } => format!(
            "machine type {} runs {} and --binary-sha256 names a binary for {} only: add {}=SHA256 of the binary \
             your --binary-url serves for it, or ship one with --binary FILE",
            api.vm_type,
            names(&runs),
            names(&source.arches()),
            names(&runs)
        ),
    }))
}

/// The recorded binary.
fn binary(api: &HostedApi) -> Result<BinarySource, StepError> {
    BinarySource::of_record(&api.binary_url, api.binary_sha256.as_deref())
        .map_err(|why| StepError::terminal_msg(format!("API `{}`: {why}", api.name)))
}

/// The shipped binary's key in the bucket, under the API's prefix.
fn binary_key(api: &HostedApi, sha256: &str) -> Result<String, StepError> {
    let url = anycloud_checkpoint::BucketUrl::parse(&api.bucket).map_err(StepError::terminal_msg)?;
    Ok(hosting::binary::object_key(&url.prefix, sha256))
}

/// Copies the binary the deploy ships from where the deploying API staged it into the bucket,
/// unless the bucket holds it already (by its SHA-256: a second deploy of the same binary, or
/// this step again after a crash); an object under its key with other bytes is replaced.
async fn ship_binary(ctx: StepCtx<DeployApi>) -> Result<Option<String>, StepError> {
    let api = record(&ctx).await?;
    let BinarySource::Shipped { sha256, .. } = binary(&api)? else { return Ok(None) };
    let key = binary_key(&api, &sha256)?;
    let (bucket, _) = ApiBucket::open(&ctx.workflow().deps, &api).await?;
    let existing = bucket.objects().get(&key).await.map_err(step_error)?;
    if let Some((bytes, _)) = &existing
        && hosting::binary::sha256_hex(bytes) == sha256
    {
        return Ok(Some(key));
    }
    let path = hosting::binary::staged_path(&ctx.workflow().deps.binaries, &sha256);
    let body = match tokio::fs::read(&path).await {
        Ok(body) => bytes::Bytes::from(body),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(StepError::terminal_msg(format!(
                "the binary {sha256} this deploy ships is no longer staged on this API ({} is gone: its disk was \
                 replaced?); run `anycloud api serve` again, which uploads it again",
                path.display()
            )));
        }
        Err(err) => return Err(StepError::retryable_msg(format!("reading {}: {err}", path.display()))),
    };
    if hosting::binary::sha256_hex(&body) != sha256 {
        return Err(StepError::terminal_msg(format!(
            "the staged binary {} does not have its SHA-256 {sha256} any more; run `anycloud api serve` again",
            path.display()
        )));
    }
    match existing {
        Some((_, version)) => bucket.objects().replace(&key, body, &version).await.map_err(step_error)?,
        None => bucket.objects().create(&key, body).await.map_err(step_error)?,
    };
    Ok(Some(key))
}

/// Deletes the shipped binary from the bucket (nothing there is success; a bucket this run
/// created goes with everything in it anyway).
async fn ship_binary_undo(ctx: StepCtx<DeployApi>, _shipped: Effect<Option<String>>) -> Result<(), StepError> {
    let api = record(&ctx).await?;
    let BinarySource::Shipped { sha256, .. } = binary(&api)? else { return Ok(()) };
    let key = binary_key(&api, &sha256)?;
    let (bucket, _) = ApiBucket::open(&ctx.workflow().deps, &api).await?;
    match bucket.objects().delete(&[key]).await {
        Ok(()) => Ok(()),
        // The bucket itself is gone (its own undo ran first, or someone deleted it).
        Err(err) if err.to_string().contains("does not exist") || err.to_string().contains("NoSuchBucket") => Ok(()),
        Err(err) => Err(step_error(err)),
    }
}

/// Marks the API `failed`, with the cause; it runs last in every unwind.
async fn pin_placement_undo(ctx: StepCtx<DeployApi>, _placement: Effect<Placement>) -> Result<(), StepError> {
    let what = match (ctx.cancelled(), ctx.unwind_reason()) {
        (true, _) => "the deploy was cancelled".to_owned(),
        (false, Some(cause)) => format!("the deploy failed ({cause})"),
        (false, None) => "the deploy failed".to_owned(),
    };
    let reason = format!(
        "{what} and was unwound: no VM, reserved address, network rule, VM identity or storage secret is left (a bucket it created is \
         deleted, one it found is kept); `anycloud workflow inspect {}` shows every step",
        ctx.run_id()
    );
    hosted_apis::set_phase(&ctx.workflow().deps.db, &ctx.input().api_id, Phase::Failed, Some(&reason)).await?;
    Ok(())
}

/// Creates the bucket (or adopts the storage credential's own), versioned and private.
async fn ensure_bucket(ctx: StepCtx<DeployApi>) -> Result<Made, StepError> {
    let api = record(&ctx).await?;
    let (bucket, access) = ApiBucket::open(&ctx.workflow().deps, &api).await?;
    let made = bucket.ensure(access.region.as_deref()).await.map_err(step_error)?;
    let shown = match made {
        Made::Created => "created",
        Made::Adopted => "adopted",
    };
    hosted_apis::set_bucket_made(&ctx.workflow().deps.db, &api.id, Some(shown)).await?;
    Ok(made)
}

/// Deletes the bucket and all it holds if this run created it; an adopted bucket is kept.
async fn ensure_bucket_undo(ctx: StepCtx<DeployApi>, made: Effect<Made>) -> Result<(), StepError> {
    let api = record(&ctx).await?;
    // A cut-short attempt may have created it: the record says what the attempt saw.
    let created = match made.done() {
        Some(made) => made == Made::Created,
        None => api.bucket_made.as_deref() == Some("created"),
    };
    if created {
        let (bucket, _) = ApiBucket::open(&ctx.workflow().deps, &api).await?;
        bucket.destroy().await.map_err(step_error)?;
    }
    hosted_apis::set_bucket_made(&ctx.workflow().deps.db, &api.id, None).await?;
    Ok(())
}

/// Puts the API's keys in the hosting provider's secret store: those the secret already holds (a
/// redeploy on this bucket), else those an earlier version of the deploy left in the bucket,
/// else new ones. Then deletes any key file from the bucket, and keeps the token sealed in the
/// record.
async fn store_keys(ctx: StepCtx<DeployApi>) -> Result<KeysStored, StepError> {
    let (api, cloud, _) = hosting(&ctx).await?;
    let (bucket, _) = ApiBucket::open(&ctx.workflow().deps, &api).await?;
    let url = anycloud_checkpoint::BucketUrl::parse(&api.bucket).map_err(StepError::terminal_msg)?;
    let layout = Layout::new(&url.prefix);
    let name = hosting::keys::secret_name(api.provider, &api.bucket);
    let keys = match cloud.read_vm_secret(&name).await? {
        Some(text) => ApiKeys::from_json(&text, &name).map_err(StepError::terminal_msg)?,
        None => match legacy_keys(&bucket, &layout).await? {
            Some(keys) => keys,
            None => ApiKeys::generate(&api.name).map_err(StepError::retryable)?,
        },
    };
    let secret = cloud.store_vm_secret(&api.owner(), &name, &keys.to_json()).await?;
    let legacy: Vec<String> = LEGACY_KEY_FILES.iter().map(|file| layout.identity(file)).collect();
    bucket.objects().delete(&legacy).await.map_err(step_error)?;
    let identity = keys.identity();
    let opened = serde_json::to_vec(&identity).map_err(StepError::terminal)?;
    let sealed = ctx.workflow().deps.sealer.seal(hosted_apis::IDENTITY.place(&api.id), &opened);
    hosted_apis::set_identity(&ctx.workflow().deps.db, &api.id, Some(&sealed), Some(&identity.ca_cert_pem)).await?;
    Ok(KeysStored { ca_pem: keys.ca_cert_pem, secret })
}

/// The keys an earlier version of the deploy put in the bucket, when they are all there.
async fn legacy_keys(bucket: &ApiBucket, layout: &Layout) -> Result<Option<ApiKeys>, StepError> {
    let mut texts = Vec::new();
    for file in [TOKEN_FILE, SEALING_KEY_FILE, CA_CERT_FILE, CA_KEY_FILE] {
        match bucket.objects().get(&layout.identity(file)).await.map_err(step_error)? {
            Some((bytes, _)) => texts.push(String::from_utf8_lossy(&bytes).trim().to_owned()),
            None => return Ok(None),
        }
    }
    let [token, sealing_key, ca_cert_pem, ca_key_pem] = <[String; 4]>::try_from(texts)
        .map_err(|_| StepError::terminal_msg("the bucket's key files could not be read"))?;
    Ok(Some(ApiKeys {
        token,
        sealing_key,
        ca_cert_pem: format!("{ca_cert_pem}\n"),
        ca_key_pem: format!("{ca_key_pem}\n"),
    }))
}

/// Forgets the sealed identity, and deletes the keys' secret with a bucket this run created (an
/// adopted bucket's database is sealed with them: they stay). Deletes the VM's identity too: on
/// GCP storing a secret made the API's service account (the secret's one reader), and an unwind
/// that stops short of `ensure_vm_identity`'s undo would leave it (found by `tests/api_steps.rs`);
/// a later deploy makes it again and binds the kept secret to it.
async fn store_keys_undo(ctx: StepCtx<DeployApi>, _stored: Effect<KeysStored>) -> Result<(), StepError> {
    let (api, cloud, _) = hosting(&ctx).await?;
    if api.bucket_made.as_deref() == Some("created") {
        cloud.delete_vm_secret(&hosting::keys::secret_name(api.provider, &api.bucket)).await?;
    }
    cloud.delete_vm_identity(&api.owner()).await?;
    hosted_apis::set_identity(&ctx.workflow().deps.db, &api.id, None, None).await?;
    Ok(())
}

async fn ensure_network(ctx: StepCtx<DeployApi>) -> Result<Network, StepError> {
    let (api, cloud, placement) = hosting(&ctx).await?;
    let port = api.public_port().map_err(StepError::terminal_msg)?;
    Ok(cloud.ensure_api_network(&placement, port).await?)
}

/// Sweeps the VMs (none may use the rules any more), then deletes the rules.
async fn ensure_network_undo(ctx: StepCtx<DeployApi>, _network: Effect<Network>) -> Result<(), StepError> {
    let (_, cloud, placement) = hosting(&ctx).await?;
    ctx.workflow().deps.sweep_unrecorded(cloud.as_ref(), &placement).await?;
    ctx.workflow().deps.remove_network(cloud.as_ref(), &placement, "the API's").await
}

/// When the bucket is on another provider: puts the storage credential's key in the hosting
/// provider's secret store, readable by the VM's identity alone (created, or a new version).
async fn store_storage_secret(ctx: StepCtx<DeployApi>) -> Result<Option<String>, StepError> {
    let (api, cloud, _) = hosting(&ctx).await?;
    if !hosting::storage_key::travels(&api) {
        return Ok(None);
    }
    let name = &api.storage_credential;
    let (credential, secret) = match credentials::open(&ctx.workflow().deps.db, &ctx.workflow().deps.sealer, name).await
    {
        Ok(Some(found)) => found,
        Ok(None) => return Err(AccountError::NoCredential(name.clone()).into()),
        Err(err) => return Err(AccountError::Unreadable(name.clone(), err).into()),
    };
    let key =
        StorageKey::of(credential.provider, &credential.public.identity, secret).map_err(StepError::terminal_msg)?;
    let secret_name = hosting::storage_key::secret_name(api.provider, &api.owner());
    Ok(Some(cloud.store_vm_secret(&api.owner(), &secret_name, &key.to_json()).await?))
}

/// Deletes the secret (nothing there is success).
async fn store_storage_secret_undo(ctx: StepCtx<DeployApi>, _stored: Effect<Option<String>>) -> Result<(), StepError> {
    let (api, cloud, _) = hosting(&ctx).await?;
    if hosting::storage_key::travels(&api) {
        cloud.delete_vm_secret(&hosting::storage_key::secret_name(api.provider, &api.owner())).await?;
    }
    Ok(())
}

async fn ensure_vm_identity(ctx: StepCtx<DeployApi>) -> Result<String, StepError> {
    let (api, cloud, _) = hosting(&ctx).await?;
    let secrets: Vec<String> =
        std::iter::once(ctx.output(STORE_KEYS)?.secret).chain(ctx.output(STORE_STORAGE_SECRET)?).collect();
    let identity = cloud.ensure_vm_identity(&api.owner(), &api.bucket, &secrets).await?;
    // On GCP the bucket names the API's service account in its own policy, set by the storage
    // credential that owns the bucket.
    if let Some(member) = cloud.bucket_member(&api.owner())
        && !hosting::storage_key::travels(&api)
    {
        let (bucket, _) = ApiBucket::open(&ctx.workflow().deps, &api).await?;
        bucket.let_vm_use(&member).await.map_err(step_error)?;
    }
    Ok(identity)
}

async fn ensure_vm_identity_undo(ctx: StepCtx<DeployApi>, _identity: Effect<String>) -> Result<(), StepError> {
    let (api, cloud, placement) = hosting(&ctx).await?;
    // An instance profile still attached to a VM cannot be deleted.
    ctx.workflow().deps.sweep_unrecorded(cloud.as_ref(), &placement).await?;
    forget_vm_identity(&ctx.workflow().deps, &api, cloud.as_ref()).await?;
    cloud.delete_vm_identity(&api.owner()).await?;
    Ok(())
}

/// Removes the bucket's binding to the VM's identity, where the deploy made one (a bucket that
/// is gone holds none).
pub(crate) async fn forget_vm_identity(deps: &Deps, api: &HostedApi, cloud: &dyn Cloud) -> Result<(), StepError> {
    if let Some(member) = cloud.bucket_member(&api.owner())
        && !hosting::storage_key::travels(api)
    {
        let (bucket, _) = ApiBucket::open(deps, api).await?;
        bucket.forget_vm(&member).await.map_err(step_error)?;
    }
    Ok(())
}

/// Finds or reserves the VM's stable public address (tagged or labelled with the API's owner id
/// and the VM's name).
async fn reserve_address(ctx: StepCtx<DeployApi>) -> Result<Address, StepError> {
    let (_, cloud, placement) = hosting(&ctx).await?;
    Ok(cloud.ensure_address(&placement, VM_NAME).await?)
}

/// Sweeps the VM (an address in use cannot be released), then releases every address with the
/// API's tag, until the provider lists none.
async fn reserve_address_undo(ctx: StepCtx<DeployApi>, _address: Effect<Address>) -> Result<(), StepError> {
    let (_, cloud, placement) = hosting(&ctx).await?;
    ctx.workflow().deps.sweep_unrecorded(cloud.as_ref(), &placement).await?;
    ctx.workflow().deps.release_addresses(cloud.as_ref(), &placement).await
}

/// Launches the VM whose boot script installs `anycloud` and serves the API from the bucket.
async fn launch(ctx: StepCtx<DeployApi>) -> Result<Vm, StepError> {
    let (api, cloud, placement) = hosting(&ctx).await?;
    let (bucket, access) = ApiBucket::open(&ctx.workflow().deps, &api).await?;
    let port = api.public_port().map_err(StepError::terminal_msg)?;
    let storage_secret = ctx.output(STORE_STORAGE_SECRET)?;
    let keys_secret = ctx.output(STORE_KEYS)?.secret;
    // The VM reads its secrets from its own provider, at the hosting credential's endpoint.
    let secret_endpoint = credentials::get(&ctx.workflow().deps.db, &api.credential)
        .await?
        .and_then(|credential| credential.public.endpoint);
    let address = ctx.output(RESERVE_ADDRESS)?;
    // A fresh signed URL at each attempt: the VM fetches it within minutes of its launch.
    let download = match binary(&api)? {
        BinarySource::Shipped { sha256, arch } => {
            let key = ctx.output(SHIP_BINARY)?.unwrap_or(binary_key(&api, &sha256)?);
            let url = bucket.signed_get(&key, SIGNED_URL_TTL).await.map_err(step_error)?;
            Download { url, sums: hosting::binary::Sums::from([(arch, sha256)]), https_only: false }
        }
        BinarySource::Hosted { url, sums } => Download { url, sums, https_only: true },
    };
    let owner = api.owner();
    let script = hosting::user_data::hosted_api(&Script {
        id: &api.name,
        owner: &owner,
        provider: api.provider,
        port,
        bucket: &api.bucket,
        bucket_region: access.region.as_deref(),
        bucket_endpoint: access.endpoint.as_deref(),
        keys_secret: &keys_secret,
        storage_secret: storage_secret.as_deref(),
        secret_endpoint: secret_endpoint.as_deref(),
        binary: &download,
        address: &address.ip,
        hosting_credential: &api.credential,
        region: &api.region,
        vm_type: &api.vm_type,
        allow_insecure_endpoints: ctx.workflow().deps.clouds.endpoint_policy() == EndpointPolicy::AllowInsecure,
    });
    let network = ctx.output(ENSURE_NETWORK)?;
    let spec = LaunchSpec {
        placement: &placement,
        name: VM_NAME.into(),
        role: Role::HostedApi,
        user_data: script,
        token: ctx.idempotency_key(),
        network: &network,
        vm_identity: Some(ctx.output(ENSURE_VM_IDENTITY)?),
        reads_secret: true,
        address: Some(&address),
    };
    let vm = cloud.launch(&spec).await?;
    ctx.workflow().deps.after_launch().await;
    Ok(vm)
}

/// Sweeps every VM with the API's tag.
async fn launch_undo(ctx: StepCtx<DeployApi>, _launched: Effect<Vm>) -> Result<(), StepError> {
    let (_, cloud, placement) = hosting(&ctx).await?;
    ctx.workflow().deps.sweep_unrecorded(cloud.as_ref(), &placement).await
}

/// Waits until the VM has its reserved address and the API answers `GET /v1/health` there over
/// HTTPS, trusting only its CA.
async fn wait_until_answers(ctx: StepCtx<DeployApi>) -> Result<Check<String>, StepError> {
    let (api, cloud, placement) = hosting(&ctx).await?;
    let launched = ctx.output(LAUNCH)?;
    let live = cloud.list_vms(&placement).await?;
    let Some(vm) = live.into_iter().find(|vm| vm.provider_id == launched.provider_id) else {
        return Err(StepError::terminal_msg(format!(
            "the API's VM {} is gone (terminated outside anycloud?)",
            launched.provider_id
        )));
    };
    let reserved = ctx.output(RESERVE_ADDRESS)?;
    if !cloud.attach_address(&placement, &reserved, &vm).await? {
        return Ok(Check::NotYet(format!(
            "VM {} ({}) does not have its reserved address {} yet",
            vm.provider_id, vm.state, reserved.ip
        )));
    }
    let address = ctx.workflow().deps.hosted_api_address(&reserved.ip);
    let url = format!("https://{address}:{}", api.port);
    let ca_pem = ctx.output(STORE_KEYS)?.ca_pem;
    match crate::hosting::identity::health(&url, &ca_pem).await {
        Ok(()) => Ok(Check::Ready(url)),
        Err(why) => Ok(Check::NotYet(format!(
            "VM {} ({}): the API does not answer at {url} yet: {why}",
            vm.provider_id, vm.state
        ))),
    }
}

/// Saves the hosting credential on the API, which places its clusters' control planes with it,
/// and waits until the API has verified it from its VM.
async fn save_hosting_credential(ctx: StepCtx<DeployApi>) -> Result<Check<()>, StepError> {
    let api = record(&ctx).await?;
    let url = ctx.output(WAIT_UNTIL_ANSWERS)?;
    let ca_pem = ctx.output(STORE_KEYS)?.ca_pem;
    crate::hosting::credential::hand_over(&ctx.workflow().deps, &api, &url, &ca_pem).await
}

async fn mark_ready(ctx: StepCtx<DeployApi>) -> Result<(), StepError> {
    let url = ctx.output(WAIT_UNTIL_ANSWERS)?;
    hosted_apis::set_ready(&ctx.workflow().deps.db, &ctx.input().api_id, &url).await?;
    Ok(())
}
