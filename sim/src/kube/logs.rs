//! `GET .../pods/{name}/log`: a container's stdout and stderr, as the kubelet keeps them (one
//! file, in the order written), readable until the Pod is deleted. `container` (needed when
//! the Pod has several), `tailLines`, and `follow=true`, which streams lines as they are written
//! until the process has exited and the file is drained. `previous` is refused (containers are
//! never restarted) and `timestamps` is ignored (lines are not stamped). A container that has
//! not started answers 400, as the apiserver does.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path as FsPath;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::process::{self, ContainerFiles};
use super::resources::PODS;
use super::status::ApiError;
use super::{Kube, Shared, auth};

/// How often a followed log looks for more.
const POLL: Duration = Duration::from_millis(100);

/// `GET .../pods/{name}/log`.
pub(crate) async fn log(
    State(kube): Shared,
    Path((vm, namespace, name)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    match serve(kube, &vm, &namespace, &name, &query, &headers).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

async fn serve(
    kube: Arc<Kube>,
    vm: &str,
    namespace: &str,
    name: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    auth::control_plane(&kube, vm, headers).await?;
    let pod = kube.store.get(vm, &PODS, namespace, name).await?.ok_or_else(|| ApiError::not_found(&PODS, name))?;
    let container = container_of(&pod, query.get("container").map(String::as_str))?;
    if query.get("previous").is_some_and(|previous| previous == "true") {
        return Err(ApiError::bad_request(format!(
            "previous terminated container \"{container}\" in pod \"{name}\" not found"
        )));
    }
    let status = pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|statuses| statuses.iter().find(|s| s["name"] == container.as_str()))
        .cloned();
    let Some(status) = status.filter(|s| s["state"].get("waiting").is_none()) else {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
        )));
    };
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
    let files = kube.kubelet.files(&uid, &container);
    let tail = query.get("tailLines").and_then(|n| n.parse::<usize>().ok());
    let (bytes, offset) = read_from(&files.log(), 0);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let text = match tail {
        Some(lines) => last_lines(&text, lines),
        None => text,
    };
    let follow = query.get("follow").is_some_and(|follow| follow == "true");
    let ended = status["state"].get("terminated").is_some();
    if !follow || ended {
        return Ok(([(header::CONTENT_TYPE, "text/plain")], text).into_response());
    }
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(16);
    tokio::spawn(async move {
        if sender.send(Ok(text.into_bytes())).await.is_err() {
            return;
        }
        let mut offset = offset;
        loop {
            // Look at the process before reading, so that what it wrote before it ended is read.
            let done = finished(&kube, &uid, &container, &files).await;
            let (more, next) = read_from(&files.log(), offset);
            offset = next;
            if !more.is_empty() && sender.send(Ok(more)).await.is_err() {
                return;
            }
            if done || sender.is_closed() {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    });
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|chunk| (chunk, receiver))
    });
    Ok(([(header::CONTENT_TYPE, "text/plain")], Body::from_stream(stream)).into_response())
}

/// The container a request is for: the one named, or the Pod's only one.
fn container_of(pod: &Value, asked: Option<&str>) -> Result<String, ApiError> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let names: Vec<&str> =
        pod["spec"]["containers"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str()).collect();
    match asked {
        Some(asked) if names.contains(&asked) => Ok(asked.to_owned()),
        Some(asked) => Err(ApiError::bad_request(format!("container {asked} is not valid for pod {name}"))),
        None if names.len() == 1 => Ok(names[0].to_owned()),
        None => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            names.join(" ")
        ))),
    }
}

/// Whether the container's process has ended (or its Pod is gone).
async fn finished(kube: &Kube, uid: &str, container: &str, files: &ContainerFiles) -> bool {
    if files.exit_code().is_some() {
        return true;
    }
    match kube.store.process(uid, container).await {
        Ok(Some(record)) => !process::alive(record),
        Ok(None) => !kube.kubelet.pod_dir(uid).exists(),
        Err(_) => false,
    }
}

/// The file's bytes from `offset`, and the offset after them.
fn read_from(path: &FsPath, offset: u64) -> (Vec<u8>, u64) {
    let Ok(mut file) = std::fs::File::open(path) else { return (Vec::new(), offset) };
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(offset)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return (Vec::new(), offset);
    }
    let read = bytes.len() as u64;
    (bytes, offset + read)
}

/// The last `lines` lines of `text`.
fn last_lines(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.split_inclusive('\n').collect();
    all[all.len().saturating_sub(lines)..].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_lines_keeps_the_last_ones() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\n", 5), "a\n");
    }
}
