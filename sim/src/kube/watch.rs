//! `?watch=true`: a chunked stream of `{"type": "ADDED" | "MODIFIED" | "DELETED", "object": ..}`
//! lines, as the apiserver sends them. The simulation polls its store for changes after the
//! watch's `resourceVersion` (tombstones carry deletions), which is enough for `kubectl delete`
//! (it waits for the object's DELETED), `kubectl get -w` and kube's watcher. Without a
//! `resourceVersion` (or with `0`) it starts with an ADDED for every object, as the apiserver does.
//! It ends after `timeoutSeconds` (30 minutes if not given) or when the client goes.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::Kube;
use super::resources::Resource;
use super::selectors::Selector;
use super::store::ChangeKind;

/// How often a watch looks for changes.
const POLL: Duration = Duration::from_millis(100);

/// What one watch follows.
pub(crate) struct Watch {
    pub(crate) cluster: String,
    pub(crate) resource: &'static Resource,
    pub(crate) namespace: Option<String>,
    pub(crate) selector: Selector,
    /// The revision it starts after (`None`: start with the current objects).
    pub(crate) since: Option<i64>,
    pub(crate) timeout: Duration,
}

/// The streamed response.
pub(crate) fn serve(kube: Arc<Kube>, watch: Watch) -> Response {
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(64);
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + watch.timeout;
        let namespace = watch.namespace.as_deref();
        let mut since = match watch.since {
            Some(since) => since,
            None => {
                let Ok(revision) = kube.store.revision(&watch.cluster).await else { return };
                let Ok(objects) = kube.store.list(&watch.cluster, watch.resource, namespace).await else { return };
                for object in objects.into_iter().filter(|object| watch.selector.matches(object)) {
                    let event = json!({ "type": "ADDED", "object": object });
                    if sender.send(Ok(format!("{event}\n"))).await.is_err() {
                        return;
                    }
                }
                revision
            }
        };
        while tokio::time::Instant::now() < deadline {
            let Ok(changes) = kube.store.changes(&watch.cluster, watch.resource, namespace, since).await else {
                return;
            };
            for change in changes {
                since = since.max(change.revision);
                if !watch.selector.matches(&change.object) {
                    continue;
                }
                let kind = match change.kind {
                    ChangeKind::Added => "ADDED",
                    ChangeKind::Modified => "MODIFIED",
                    ChangeKind::Deleted => "DELETED",
                };
                let mut object = change.object;
                object["metadata"]["resourceVersion"] = json!(change.revision.to_string());
                let event = json!({ "type": kind, "object": object });
                if sender.send(Ok(format!("{event}\n"))).await.is_err() {
                    return;
                }
            }
            if sender.is_closed() {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    });
    let stream =
        futures::stream::unfold(
            receiver,
            |mut receiver| async move { receiver.recv().await.map(|line| (line, receiver)) },
        );
    ([(axum::http::header::CONTENT_TYPE, "application/json")], Body::from_stream(stream)).into_response()
}
