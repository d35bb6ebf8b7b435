//! An API whose SQLite state lives in a bucket (`api serve --checkpoint-bucket s3://B`): what a
//! hosted API's VM runs. At start it restores from the bucket and takes it over; while it runs,
//! a request that changed something is answered only once its commit is in the bucket; if
//! another API takes the bucket over, this one stops at once.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use anycloud_checkpoint::{
    Bucket, BucketUrl, Checkpointer, Layout, LocalFiles, Restored, S3Access, S3Bucket, StoreKind,
};

use anycloud_workflows::cloud::ProviderKind;
use anycloud_workflows::hosting::identity::{CA_CERT_FILE, CA_KEY_FILE, TOKEN_FILE};
use anycloud_workflows::hosting::keys::ApiKeys;
use anycloud_workflows::hosting::storage_key::StorageKey;

use super::AppState;
use super::error::ApiError;
use crate::exit::{CliError, NOT_OBSERVED};

/// The exit status of an API that another API fenced out of its bucket.
pub const FENCED_EXIT: i32 = 3;

/// Where a checkpointed API keeps its state.
#[derive(Clone, Debug)]
pub struct CheckpointOptions {
    /// The bucket and prefix.
    pub url: BucketUrl,
    /// Another endpoint than the store's public one.
    pub endpoint: Option<String>,
    /// The S3 region.
    pub region: Option<String>,
    /// Where the bucket's key is, when the bucket is on another provider than this VM.
    pub storage_secret: Option<VmSecret>,
    /// Where a hosted API's keys are (its token, sealing key and TLS CA).
    pub keys_secret: Option<VmSecret>,
}

/// A secret of a hosted API in its VM's own provider's secret store (`api.deploy` put it there,
/// readable by the VM's identity): the API's keys, or the key of a bucket on another provider.
#[derive(Clone, Debug)]
pub struct VmSecret {
    /// The provider whose store holds it: the VM's.
    pub store: ProviderKind,
    /// An ARN (AWS), `projects/P/secrets/NAME` (GCP).
    pub secret: String,
    /// The store's endpoint, when not the public one.
    pub endpoint: Option<String>,
}

/// A bucket taken over: its state is on the local disk, ready for the store to open.
pub struct TakenOver {
    bucket: Arc<dyn Bucket>,
    layout: Layout,
    files: LocalFiles,
    restored: Restored,
}

/// The files that travel with the state: the port of the simulated control planes' endpoint
/// (which their kubeconfigs and records name). Nothing secret: the API's token, its sealing key
/// and its CA key never go to the bucket beside the database they unseal. A deployed API reads
/// them from its provider's secret store at every start ([`write_keys`]); an API run by hand
/// keeps them on its own disk, and an operator who restores it elsewhere brings `token` and
/// `secret.key` (without them the restored database does not open: `SECRET_KEY_MISMATCH`).
const IDENTITY: [&str; 1] = ["sim-kube-port"];

fn failed(code: &str, url: &BucketUrl, err: impl std::fmt::Display) -> CliError {
    CliError::new(NOT_OBSERVED, code, format!("checkpoint bucket {url}: {err}"))
}

/// Restores the bucket's state into `data_dir` (replacing what was there) and seals the
/// generation it came from.
pub async fn restore(options: &CheckpointOptions, api: &str, data_dir: &Path) -> Result<TakenOver, CliError> {
    let url = &options.url;
    let key = match &options.storage_secret {
        Some(secret) => Some(storage_key(secret, url).await?),
        None => None,
    };
    let bucket: Arc<dyn Bucket> = match (url.store, key) {
        (StoreKind::S3, key) => {
            let keys = match key {
                Some(StorageKey::Aws { access_key_id, secret_access_key }) => Some((access_key_id, secret_access_key)),
                Some(other) => return Err(mismatched(url, &other)),
                None => None,
            };
            let access = S3Access { keys, region: options.region.clone(), endpoint: options.endpoint.clone() };
            Arc::new(S3Bucket::new(url, &access).await)
        }
        (StoreKind::Gcs, key) => {
            let json = match key {
                Some(StorageKey::Gcp { service_account_json }) => Some(service_account_json),
                Some(other) => return Err(mismatched(url, &other)),
                None => None,
            };
            Arc::new(
                anycloud_checkpoint::GcsBucket::new(url, json.as_deref(), options.endpoint.as_deref())
                    .await
                    .map_err(|err| failed("CHECKPOINT_UNAVAILABLE", url, err))?,
            )
        }
    };
    let layout = Layout::new(&url.prefix);
    let files = LocalFiles {
        database: data_dir.join("anycloud.db"),
        identity_dir: data_dir.to_owned(),
        identity: IDENTITY.iter().map(|name| (*name).to_owned()).collect(),
    };
    let keys = match &options.keys_secret {
        Some(secret) => Some(api_keys(secret, url).await?),
        None => None,
    };
    let restored = anycloud_checkpoint::restore(bucket.as_ref(), &layout, &files, api)
        .await
        .map_err(|err| failed("CHECKPOINT_RESTORE_FAILED", url, err))?;
    if let Some(keys) = keys {
        write_keys(&keys, data_dir).map_err(|err| failed("DATA_DIR", url, format!("writing the API's keys: {err}")))?;
    }
    match &restored.head {
        Some((head, _)) => println!(
            "restored from {url}: generation {} ({} WAL segments, {} bytes) in {} ms",
            head.generation,
            restored.segments,
            restored.bytes,
            restored.elapsed.as_millis()
        ),
        None => println!("checkpoint bucket {url} holds no state yet: starting afresh"),
    }
    Ok(TakenOver { bucket, layout, files, restored })
}

/// Reads the bucket's key from the VM's own provider's secret store, as the VM; nothing is
/// restored or started without it.
async fn storage_key(secret: &VmSecret, url: &BucketUrl) -> Result<StorageKey, CliError> {
    let started = std::time::Instant::now();
    let key = anycloud_workflows::hosting::storage_key::read(secret.store, &secret.secret, secret.endpoint.as_deref())
        .await
        .map_err(|why| unreadable(secret, url, "the key to it", &why))?;
    println!("checkpoint bucket {url}: its key read from {} in {} ms", shown(secret), started.elapsed().as_millis());
    Ok(key)
}

/// Reads the API's keys from the VM's own provider's secret store, as the VM; nothing is
/// restored or started without them.
async fn api_keys(secret: &VmSecret, url: &BucketUrl) -> Result<ApiKeys, CliError> {
    let started = std::time::Instant::now();
    let keys = anycloud_workflows::hosting::keys::read(secret.store, &secret.secret, secret.endpoint.as_deref())
        .await
        .map_err(|why| unreadable(secret, url, "the API's keys", &why))?;
    println!("the API's keys read from {} in {} ms", shown(secret), started.elapsed().as_millis());
    Ok(keys)
}

/// `AWS Secrets Manager secret ARN`, `GCP Secret Manager secret NAME`.
fn shown(secret: &VmSecret) -> String {
    let store = if secret.store == ProviderKind::Aws { "AWS Secrets Manager" } else { "GCP Secret Manager" };
    format!("{store} secret {}", secret.secret)
}

fn unreadable(secret: &VmSecret, url: &BucketUrl, what: &str, why: &str) -> CliError {
    let grant = match secret.store {
        ProviderKind::Aws => "the VM's instance profile allows secretsmanager:GetSecretValue on it",
        _ => {
            "the VM's service account has roles/secretmanager.secretAccessor on it and the VM the cloud-platform scope"
        }
    };
    CliError::new(
        NOT_OBSERVED,
        "CHECKPOINT_SECRET_UNREADABLE",
        format!(
            "checkpoint bucket {url}: {what}, in {}, could not be read as this VM: {why}; check that the secret \
             exists (deploying the API again puts it back) and that {grant}; nothing was restored or started",
            shown(secret)
        ),
    )
}

/// Writes the keys where `api serve` reads them (`token`, `secret.key`, `tls-ca.crt`,
/// `tls-ca.key`), each readable by this user alone, replacing what was there: each through a new
/// temporary file (`create_new` follows no link), then renamed.
fn write_keys(keys: &ApiKeys, data_dir: &Path) -> std::io::Result<()> {
    write_private_files(
        data_dir,
        &[
            (TOKEN_FILE, &keys.token),
            (anycloud_workflows::secrets::SEALING_KEY_FILE, &keys.sealing_key),
            (CA_CERT_FILE, &keys.ca_cert_pem),
            (CA_KEY_FILE, &keys.ca_key_pem),
        ],
    )
}

/// Writes each `(name, value)` in `data_dir`, readable by this user alone, replacing what was
/// there: through a new temporary file (`create_new` follows no link), then renamed.
pub(super) fn write_private_files(data_dir: &Path, files: &[(&str, &str)]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    for &(name, value) in files {
        let path = data_dir.join(name);
        let temporary = data_dir.join(format!(".{name}.tmp"));
        let _ = std::fs::remove_file(&temporary);
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temporary)?;
        file.write_all(value.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)?;
    }
    Ok(())
}

fn mismatched(url: &BucketUrl, key: &StorageKey) -> CliError {
    CliError::new(
        NOT_OBSERVED,
        "CHECKPOINT_SECRET_UNREADABLE",
        format!("checkpoint bucket {url}: the secret holds a key of another store ({key:?}); deploy the API again"),
    )
}

/// Begins this API's generation in the bucket and starts shipping; then watches for a fence.
pub async fn start(taken: TakenOver, options: &CheckpointOptions, api: &str) -> Result<Checkpointer, CliError> {
    let TakenOver { bucket, layout, files, restored } = taken;
    let checkpointer = Checkpointer::start(bucket, layout, files, api, restored).await.map_err(|err| match err {
        anycloud_checkpoint::CheckpointError::Fenced(reason) => failed("CHECKPOINT_FENCED", &options.url, reason),
        other => failed("CHECKPOINT_UNAVAILABLE", &options.url, other),
    })?;
    let watcher = checkpointer.clone();
    let url = options.url.clone();
    tokio::spawn(async move {
        let reason = watcher.fenced().await;
        // Another API owns the state now: every step this one would still run could undo its
        // work, so it stops this instant, without finishing steps in flight.
        eprintln!("error[CHECKPOINT_FENCED]: checkpoint bucket {url}: {reason}; this API stops now");
        tracing::error!(%url, %reason, "fenced out of the checkpoint bucket; exiting");
        std::process::exit(FENCED_EXIT);
    });
    Ok(checkpointer)
}

/// Answers a request that may have changed something only once the change is in the bucket.
pub async fn durable(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let safe = matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let response = next.run(request).await;
    let Some((checkpointer, _)) = state.checkpoint.as_ref().filter(|_| !safe) else { return response };
    match checkpointer.flush().await {
        Ok(()) => response,
        Err(reason) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "CHECKPOINT_UNAVAILABLE",
            format!(
                "the change is on the API's disk but not yet in its checkpoint bucket ({reason}): it is shipped \
                 once the bucket answers, and lost if the API's disk is lost first; check the bucket's access, \
                 then read the resource back to see whether the change is there"
            ),
        )
        .into_response(),
    }
}
