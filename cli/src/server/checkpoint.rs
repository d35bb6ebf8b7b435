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
}

/// A bucket taken over: its state is on the local disk, ready for the store to open.
pub struct TakenOver {
    bucket: Arc<dyn Bucket>,
    layout: Layout,
    files: LocalFiles,
    restored: Restored,
}

/// The files that travel with the state: the API's token and its sealing key, the port of the
/// simulated control planes' endpoint (which their kubeconfigs and records name), and the CA a
/// deployed API issues its TLS certificate from (`api.deploy` puts it, and the token, there
/// before the VM's first start).
const IDENTITY: [&str; 5] = ["token", "secret.key", "sim-kube-port", "tls-ca.crt", "tls-ca.key"];

fn failed(code: &str, url: &BucketUrl, err: impl std::fmt::Display) -> CliError {
    CliError::new(NOT_OBSERVED, code, format!("checkpoint bucket {url}: {err}"))
}

/// Restores the bucket's state into `data_dir` (replacing what was there) and seals the
/// generation it came from.
pub async fn restore(options: &CheckpointOptions, api: &str, data_dir: &Path) -> Result<TakenOver, CliError> {
    let url = &options.url;
    let bucket: Arc<dyn Bucket> = match url.store {
        StoreKind::S3 => {
            let access = S3Access { keys: None, region: options.region.clone(), endpoint: options.endpoint.clone() };
            Arc::new(S3Bucket::new(url, &access).await)
        }
        StoreKind::Gcs => Arc::new(
            anycloud_checkpoint::GcsBucket::new(url, None, options.endpoint.as_deref())
                .await
                .map_err(|err| failed("CHECKPOINT_UNAVAILABLE", url, err))?,
        ),
    };
    let layout = Layout::new(&url.prefix);
    let files = LocalFiles {
        database: data_dir.join("anycloud.db"),
        identity_dir: data_dir.to_owned(),
        identity: IDENTITY.iter().map(|name| (*name).to_owned()).collect(),
    };
    let restored = anycloud_checkpoint::restore(bucket.as_ref(), &layout, &files, api)
        .await
        .map_err(|err| failed("CHECKPOINT_RESTORE_FAILED", url, err))?;
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
