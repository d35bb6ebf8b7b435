//! Waits that wake on events: the API watches the Pods and Deployments that Anycloud applied on
//! every ready cluster (`app.kubernetes.io/managed-by=anycloud`), and each change to one tells
//! the engine that the runs of its deployment (the `anycloud.dev/deployment-id` label) may find
//! what they poll for ([`Engine::changed_all`]): a job's Pod that started or ended, a rollout's
//! replica that became ready, an object that went. The changes that arrive while the engine is
//! being told are told together, each deployment once, in one transaction. The polls stay as the
//! safety net: a watch that breaks, a cluster not watched yet, a change between two watches only
//! make a run wait for its planned check.
//!
//! One watch per kind and cluster, as a Kubernetes controller holds them: it starts from the
//! current `resourceVersion` (what is already there was checked when its run planned the check),
//! follows bookmarks, starts again from a fresh list when its version is too old (410 Gone), and
//! reconnects with a back-off when the cluster does not answer. The clusters are read again
//! every [`CLUSTERS_EVERY`]: a cluster that became ready is watched, one that is no longer
//! ready is not.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use anycloud_engine::{Engine, error_chain};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment as KubeDeployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::db::clusters::{self, Cluster, Phase};
use crate::db::deployments::Deployment;
use crate::kubernetes::DEPLOYMENT_ID;
use crate::kubernetes::client::MANAGED_BY;
use crate::workflows::deps::Deps;

/// How often the list of ready clusters is read.
pub const CLUSTERS_EVERY: Duration = Duration::from_secs(5);
/// How long one watch request lasts before it is made again (the API server ends it then).
const WATCH_SECONDS: u32 = 290;
/// Past this with no line at all (not even a bookmark), the connection is taken for dead.
const SILENT_LIMIT: Duration = Duration::from_secs(WATCH_SECONDS as u64 + 30);
/// Changes seen and not yet told to the engine, past which the watches wait.
const CHANGES_QUEUED: usize = 1024;
/// The first and the longest wait before a watch that failed is made again.
const BACK_OFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

/// Watches every ready cluster until the task is aborted. The watches send the deployment ids
/// they see to this task, which alone holds the engine: once it is aborted and awaited, nothing
/// here holds the engine any more (the API shuts it down next).
pub async fn watch_clusters(deps: Deps, engine: Arc<Engine>) {
    let (changes, mut changed) = mpsc::channel::<String>(CHANGES_QUEUED);
    // A cluster's watches, aborted when their set is dropped: when the cluster is no longer
    // ready, and when this task is aborted.
    let mut watched: HashMap<String, JoinSet<()>> = HashMap::new();
    let mut ticker = tokio::time::interval(CLUSTERS_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => watch_ready(&deps, &mut watched, &changes).await,
            Some(deployment_id) = changed.recv() => {
                // What came meanwhile goes in the same transaction, each deployment once.
                let mut ids = BTreeSet::from([deployment_id]);
                while ids.len() < CHANGES_QUEUED && let Ok(id) = changed.try_recv() {
                    ids.insert(id);
                }
                let keys: Vec<String> = ids.iter().map(|id| Deployment::resource_key(id)).collect();
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                if let Err(err) = engine.changed_all(&keys).await {
                    tracing::debug!(deployments = ids.len(), error = %error_chain(&err), "could not wake their runs");
                }
            }
        }
    }
}

/// Starts watching the clusters that became ready, and stops watching those that are not.
async fn watch_ready(deps: &Deps, watched: &mut HashMap<String, JoinSet<()>>, changes: &mpsc::Sender<String>) {
    let ready: Vec<Cluster> = match clusters::list_all(&deps.db).await {
        Ok(all) => all.into_iter().filter(|cluster| cluster.phase == Phase::Ready).collect(),
        Err(err) => {
            tracing::warn!(error = %error_chain(&err), "reading the clusters to watch; trying again");
            return;
        }
    };
    watched.retain(|id, _| ready.iter().any(|cluster| &cluster.id == id));
    for cluster in &ready {
        if watched.contains_key(&cluster.id) {
            continue;
        }
        match deps.kube_stream_client(cluster).await {
            Ok(client) => {
                let mut tasks = JoinSet::new();
                tasks.spawn(follow(Api::<Pod>::all(client.clone()), changes.clone(), cluster.name.clone()));
                tasks.spawn(follow(Api::<KubeDeployment>::all(client), changes.clone(), cluster.name.clone()));
                watched.insert(cluster.id.clone(), tasks);
            }
            Err(err) => tracing::debug!(cluster = %cluster.name, error = %err, "not watched yet"),
        }
    }
}

/// Follows one kind of object of one cluster for as long as the task lives.
async fn follow<K>(api: Api<K>, changes: mpsc::Sender<String>, cluster: String)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let kind = K::kind(&()).into_owned();
    let mut back_off = BACK_OFF.0;
    loop {
        let ended = match session(&api, &changes).await {
            Ok(()) => {
                back_off = BACK_OFF.0;
                continue;
            }
            Err(ended) => ended,
        };
        tracing::debug!(%cluster, %kind, reason = %ended, "watch ended; watching again after {back_off:?}");
        tokio::time::sleep(back_off).await;
        back_off = (back_off * 2).min(BACK_OFF.1);
    }
}

/// One list for the current version, then watches from it until the server ends one (`Ok`:
/// watch again at once) or something fails (`Err`: why, to back off).
async fn session<K>(api: &Api<K>, changes: &mpsc::Sender<String>) -> Result<(), String>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let listed = api.list_metadata(&ListParams::default().labels(MANAGED_BY).limit(1)).await;
    let mut version = listed.map_err(|err| error_chain(&err))?.metadata.resource_version.unwrap_or_default();
    loop {
        let params = WatchParams::default().labels(MANAGED_BY).timeout(WATCH_SECONDS);
        let mut stream = api.watch(&params, &version).await.map_err(|err| error_chain(&err))?.boxed();
        loop {
            let next = tokio::time::timeout(SILENT_LIMIT, stream.try_next()).await;
            let event = match next {
                Err(_) => return Err(format!("nothing came for {SILENT_LIMIT:?}")),
                Ok(Err(err)) => return Err(error_chain(&err)),
                Ok(Ok(None)) => break,
                Ok(Ok(Some(event))) => event,
            };
            match event {
                WatchEvent::Added(object) | WatchEvent::Modified(object) | WatchEvent::Deleted(object) => {
                    version = object.resource_version().unwrap_or(version);
                    if let Some(id) = object.labels().get(DEPLOYMENT_ID) {
                        changes.send(id.clone()).await.map_err(|_| "the API stops".to_owned())?;
                    }
                }
                WatchEvent::Bookmark(bookmark) => version = bookmark.metadata.resource_version,
                // Too old a version: a fresh list gives a current one.
                WatchEvent::Error(status) if status.code == 410 => return Ok(()),
                WatchEvent::Error(status) => return Err(format!("{} ({})", status.message, status.code)),
            }
        }
    }
}
