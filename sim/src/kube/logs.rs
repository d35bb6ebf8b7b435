//! `GET .../pods/{name}/log`: a container's stdout and stderr, as the kubelet keeps them (one
//! file, in the order written), readable until the Pod is deleted. `container` (needed when
//! the Pod has several), `tailLines`, `timestamps`, `sinceTime`, `sinceSeconds`, and
//! `follow=true`, which streams lines as they are written until the process has exited and the
//! file is drained. `previous` is refused (containers are never restarted). A container that has
//! not started answers 400, as the apiserver does.
//!
//! Timestamps: a real container runtime stamps each line when it reads it from the container's
//! pipe (CRI log format, RFC 3339 with nanoseconds); `timestamps=true` puts that stamp and a
//! space before the line, and `sinceTime` skips the lines stamped before it (the kubelet's
//! `ReadLogs`). Here the container writes its file directly, so a line is stamped the first time
//! a log request reads it complete (a last line without a newline once the process has ended),
//! and the stamps are kept beside the log (`.log.stamps`, `END-OFFSET STAMP` per line) so that
//! every later read, and the API after a restart, sees the same ones. Lines written while no one
//! reads share a stamp, as lines read in one go from a pipe can.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
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
    let options = LogOptions::parse(query)?;
    let follow = query.get("follow").is_some_and(|follow| follow == "true");
    let ended = status["state"].get("terminated").is_some();
    let mut stamps = Stamps::new(files.log());
    let done = ended || finished(&kube, &uid, &container, &files).await;
    let lines = stamps.read(done);
    let first = lines.len().saturating_sub(options.tail.unwrap_or(usize::MAX));
    let text = options.render(&files.log(), &lines[first..]);
    if !follow || ended {
        return Ok(([(header::CONTENT_TYPE, "text/plain")], text).into_response());
    }
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(16);
    tokio::spawn(async move {
        if sender.send(Ok(text)).await.is_err() {
            return;
        }
        let log = files.log();
        loop {
            // Look at the process before reading, so that what it wrote before it ended is read.
            let done = finished(&kube, &uid, &container, &files).await;
            let more = stamps.read(done);
            if !more.is_empty() && sender.send(Ok(options.render(&log, &more))).await.is_err() {
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

/// What a log request asks for beyond its container.
struct LogOptions {
    /// `tailLines`.
    tail: Option<usize>,
    /// `timestamps=true`.
    timestamps: bool,
    /// `sinceTime`, or now less `sinceSeconds`.
    since: Option<Timestamp>,
}

impl LogOptions {
    fn parse(query: &HashMap<String, String>) -> Result<Self, ApiError> {
        let tail = query.get("tailLines").and_then(|n| n.parse::<usize>().ok());
        let timestamps = query.get("timestamps").is_some_and(|on| on == "true");
        let since =
            match (query.get("sinceTime"), query.get("sinceSeconds")) {
                (Some(_), Some(_)) => {
                    return Err(ApiError::bad_request("at most one of sinceTime or sinceSeconds may be specified"));
                }
                (Some(time), None) => Some(time.parse::<Timestamp>().map_err(|err| {
                    ApiError::bad_request(format!("sinceTime {time:?} is not an RFC 3339 time: {err}"))
                })?),
                (None, Some(seconds)) => {
                    let seconds = seconds.parse::<i64>().ok().filter(|seconds| *seconds > 0).ok_or_else(|| {
                        ApiError::bad_request(format!("sinceSeconds {seconds:?}: must be greater than 0"))
                    })?;
                    Timestamp::now().checked_sub(jiff::SignedDuration::from_secs(seconds)).ok()
                }
                (None, None) => None,
            };
        Ok(Self { tail, timestamps, since })
    }

    /// The lines' text as the request wants it: the ones stamped from `since` on, each after its
    /// stamp with `timestamps`.
    fn render(&self, log: &FsPath, lines: &[StampedLine]) -> Vec<u8> {
        let lines: Vec<&StampedLine> =
            lines.iter().filter(|line| self.since.is_none_or(|since| line.stamp >= since)).collect();
        let (Some(first), Some(last)) = (lines.first().copied(), lines.last().copied()) else { return Vec::new() };
        let bytes = read_range(log, first.start, last.end);
        let mut out = Vec::with_capacity(bytes.len());
        for line in lines {
            if self.timestamps {
                out.extend_from_slice(format!("{} ", line.stamp).as_bytes());
            }
            let start = usize::try_from(line.start - first.start).unwrap_or(usize::MAX).min(bytes.len());
            let end = usize::try_from(line.end - first.start).unwrap_or(usize::MAX).min(bytes.len());
            out.extend_from_slice(&bytes[start..end]);
        }
        out
    }
}

/// One line of a container's log: where it is in the file, and its stamp.
#[derive(Debug, Clone, PartialEq)]
struct StampedLine {
    start: u64,
    end: u64,
    stamp: Timestamp,
}

/// The stamps of a container's log lines, read from `.log.stamps` and extended as the log grows.
struct Stamps {
    log: PathBuf,
    file: PathBuf,
    /// How much of the stamps file this reader has read.
    read_to: u64,
    /// Where the last line this reader knows ends in the log.
    log_end: u64,
}

/// One kubelet stamps a log at a time (two readers must not stamp the same line twice).
static STAMPING: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Stamps {
    fn new(log: PathBuf) -> Self {
        let mut file = log.clone().into_os_string();
        file.push(".stamps");
        Self { log, file: PathBuf::from(file), read_to: 0, log_end: 0 }
    }

    /// The lines this reader has not seen yet: those others stamped, then the complete lines
    /// written since, stamped now (with `ended`, also a last line without its newline).
    fn read(&mut self, ended: bool) -> Vec<StampedLine> {
        let _stamping = STAMPING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (recorded, read_to) = read_from(&self.file, self.read_to);
        self.read_to = read_to;
        let mut lines = Vec::new();
        for record in String::from_utf8_lossy(&recorded).lines() {
            let parsed = record.split_once(' ').and_then(|(end, stamp)| Some((end.parse().ok()?, stamp.parse().ok()?)));
            if let Some((end, stamp)) = parsed {
                lines.push(StampedLine { start: self.log_end, end, stamp });
                self.log_end = end;
            }
        }
        let (written, _) = read_from(&self.log, self.log_end);
        let now = Timestamp::now();
        let mut records = String::new();
        let mut start = self.log_end;
        let mut ends: Vec<u64> = written
            .iter()
            .enumerate()
            .filter(|(_, byte)| **byte == b'\n')
            .map(|(at, _)| start + at as u64 + 1)
            .collect();
        if ended && ends.last().copied().unwrap_or(start) < start + written.len() as u64 {
            ends.push(start + written.len() as u64);
        }
        for end in ends {
            records.push_str(&format!("{end} {now}\n"));
            lines.push(StampedLine { start, end, stamp: now });
            start = end;
        }
        if !records.is_empty() {
            let appended = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.file)
                .and_then(|mut file| std::io::Write::write_all(&mut file, records.as_bytes()));
            if appended.is_ok() {
                self.read_to += records.len() as u64;
            }
            self.log_end = start;
        }
        lines
    }
}

/// The bytes of the file from `start` to `end`.
fn read_range(path: &FsPath, start: u64, end: u64) -> Vec<u8> {
    let Ok(file) = std::fs::File::open(path) else { return Vec::new() };
    let mut file = file;
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err()
        || file.take(end.saturating_sub(start)).read_to_end(&mut bytes).is_err()
    {
        return Vec::new();
    }
    bytes
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_stamped_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("main.log");
        std::fs::write(&log, "one\ntwo\npart").unwrap();
        let mut first = Stamps::new(log.clone());
        let stamped = first.read(false);
        assert_eq!(stamped.iter().map(|line| (line.start, line.end)).collect::<Vec<_>>(), [(0, 4), (4, 8)]);
        // Another reader sees the same stamps; the partial line waits for its end.
        let mut second = Stamps::new(log.clone());
        assert_eq!(second.read(false), stamped);
        std::fs::write(&log, "one\ntwo\npartial\nend").unwrap();
        let more = first.read(true);
        assert_eq!(more.iter().map(|line| (line.start, line.end)).collect::<Vec<_>>(), [(8, 16), (16, 19)]);
        assert_eq!(second.read(false), more);
        let options = LogOptions { tail: None, timestamps: true, since: Some(more[0].stamp) };
        let text = String::from_utf8(options.render(&log, &more)).unwrap();
        assert_eq!(text, format!("{} partial\n{} end", more[0].stamp, more[1].stamp));
        let options = LogOptions { tail: None, timestamps: false, since: None };
        assert_eq!(options.render(&log, &stamped), b"one\ntwo\n");
    }
}
