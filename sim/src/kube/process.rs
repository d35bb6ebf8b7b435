//! A container's local process, made to outlive the API that starts it, as a real container
//! outlives a restart of its control plane:
//!
//! - It runs under a tiny `/bin/sh` wrapper, in a process group of its own (so that a signal to
//!   the API's group does not reach it, and deleting its Pod can end everything it started),
//!   with no `kill_on_drop` and no parent-death signal.
//! - The wrapper writes its pid to `{container}.pid` before it runs the command, and the
//!   command's exit code to `{container}.exit` after (each written to a temporary name, then
//!   renamed, so a reader never sees half a file). An exit while no API runs is still known.
//! - Its pid and start time (clock ticks after boot, `/proc/{pid}/stat` field 22) are recorded
//!   in SQL; the start time tells it apart from a later process that reuses the pid.
//! - While the API lives, a task waits on the child, so no zombie is left behind, and tells the
//!   kubelet the moment it ends ([`super::exits`]).
//!
//! Those files live in `{pod dir}/.sim/`, beside the container's log (`{container}.log`, its
//! stdout and stderr).
//!
//! A kubelet directory whose owner ends (a temporary storage, a test's harness) is closed with
//! [`kill_processes_under`]: its processes are killed and none starts under it again in this
//! process, whatever a reconcile loop still running tries ([`start_unless_closed`]).

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, MutexGuard, PoisonError};

use rustix::process::{Pid, Signal, kill_process_group};

use super::store::ProcessRecord;

/// Runs the command, then records its exit code; `trap : TERM` lets the wrapper outlive a
/// SIGTERM to the group and record the command's own exit (143) when it ends.
const WRAPPER: &str = r#"trap : TERM
echo $$ > "$0.pid.tmp" && /bin/mv -f "$0.pid.tmp" "$0.pid"
"$@"
code=$?
echo $code > "$0.exit.tmp" && /bin/mv -f "$0.exit.tmp" "$0.exit""#;

/// The PATH of a container that sets none (an image's usual one).
pub(crate) const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The directories closed by [`kill_processes_under`], as given and canonical. Held while a
/// process starts and while a directory is closed, so that a start never falls between a
/// close's kill and its end (a Pod's process started again after its test killed them all).
static CLOSED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn closed_dirs() -> MutexGuard<'static, Vec<PathBuf>> {
    CLOSED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `cwd` is under a closed directory: nothing may start or be made there.
pub(crate) fn closed(cwd: &Path) -> bool {
    closed_dirs().iter().any(|dir| cwd.starts_with(dir))
}

/// Runs `start`, which starts a process working in `cwd`, unless `cwd` is under a closed
/// directory (then an error, and nothing runs).
pub(crate) fn start_unless_closed<T>(cwd: &Path, start: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let closed = closed_dirs();
    if closed.iter().any(|dir| cwd.starts_with(dir)) {
        return Err(io::Error::other(format!(
            "{} is closed: the simulated Kubernetes that owns it has ended",
            cwd.display()
        )));
    }
    start()
}

/// The files the kubelet keeps for one container.
pub(crate) struct ContainerFiles {
    prefix: PathBuf,
}

impl ContainerFiles {
    /// The files of `container` in the Pod directory `pod_dir`.
    pub(crate) fn new(pod_dir: &Path, container: &str) -> Self {
        Self { prefix: pod_dir.join(".sim").join(container) }
    }

    fn with(&self, extension: &str) -> PathBuf {
        let mut path = self.prefix.clone().into_os_string();
        path.push(extension);
        PathBuf::from(path)
    }

    /// Its stdout and stderr.
    pub(crate) fn log(&self) -> PathBuf {
        self.with(".log")
    }

    /// Its exit code, once it exited.
    fn exit(&self) -> PathBuf {
        self.with(".exit")
    }

    /// The wrapper's pid, once it started.
    fn pid(&self) -> PathBuf {
        self.with(".pid")
    }

    /// Forgets a previous run's pid and exit code, before the container starts again.
    pub(crate) fn clear(&self) {
        for path in [self.exit(), self.pid()] {
            if let Err(err) = std::fs::remove_file(&path)
                && err.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), error = %err, "simulated kubelet: clearing a container's files");
            }
        }
    }

    /// The exit code the wrapper recorded.
    pub(crate) fn exit_code(&self) -> Option<i32> {
        std::fs::read_to_string(self.exit()).ok()?.trim().parse().ok()
    }

    /// The process the wrapper said it is, if it started (an API that died between starting it
    /// and recording it finds it here).
    pub(crate) fn started(&self) -> Option<ProcessRecord> {
        let pid: i32 = std::fs::read_to_string(self.pid()).ok()?.trim().parse().ok()?;
        let start_ticks = stat(pid).map(|(_, ticks)| ticks).unwrap_or(0);
        Some(ProcessRecord { pid, start_ticks })
    }
}

/// Where a container's process stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// It runs.
    Running,
    /// It exited with this code.
    Exited(i32),
    /// It is gone without an exit code (the wrapper was killed).
    Vanished,
}

/// Why a command cannot start, as containerd says it (`None`: it can).
pub(crate) fn cannot_start(pod_dir: &Path, command: &str, path: &str) -> Option<String> {
    let executable = |candidate: &Path| {
        candidate.metadata().is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    };
    let found = if command.contains('/') {
        executable(&pod_dir.join(command))
    } else {
        path.split(':').filter(|dir| !dir.is_empty()).any(|dir| executable(&Path::new(dir).join(command)))
    };
    (!found).then(|| {
        format!(
            "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create \
             failed: unable to start container process: exec: \"{command}\": executable file not found in $PATH: \
             unknown (simulated: the command runs on the API's host, no image is pulled)"
        )
    })
}

/// Starts `argv` in `pod_dir` with exactly `env`, detached in a process group of its own;
/// `on_exit` runs once the wrapper has ended (its exit code written), if this API still runs.
pub(crate) fn spawn(
    pod_dir: &Path,
    files: &ContainerFiles,
    argv: &[String],
    env: &[(String, String)],
    on_exit: impl FnOnce() + Send + 'static,
) -> io::Result<ProcessRecord> {
    let mut child = start_unless_closed(pod_dir, || {
        std::fs::create_dir_all(pod_dir.join(".sim"))?;
        let log = std::fs::OpenOptions::new().create(true).append(true).open(files.log())?;
        tokio::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg(&files.prefix)
            .args(argv)
            .current_dir(pod_dir)
            .env_clear()
            .envs(env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
    })?;
    let pid = child.id().and_then(|pid| i32::try_from(pid).ok()).ok_or_else(|| io::Error::other("no pid"))?;
    let start_ticks = stat(pid).map(|(_, ticks)| ticks).unwrap_or(0);
    // Reap it when it exits, so that it leaves no zombie while this API lives.
    tokio::spawn(async move {
        if child.wait().await.is_ok() {
            on_exit();
        }
    });
    Ok(ProcessRecord { pid, start_ticks })
}

/// Where the recorded process stands, by its exit file and `/proc`.
pub(crate) fn probe(record: ProcessRecord, files: &ContainerFiles) -> Probe {
    if let Some(code) = files.exit_code() {
        return Probe::Exited(code);
    }
    if alive(record) {
        return Probe::Running;
    }
    // It may have written its exit code between the two looks.
    files.exit_code().map_or(Probe::Vanished, Probe::Exited)
}

/// Whether the recorded process still runs (a zombie does not; a reused pid is not it).
pub(crate) fn alive(record: ProcessRecord) -> bool {
    stat(record.pid).is_some_and(|(state, ticks)| state != 'Z' && state != 'X' && ticks == record.start_ticks)
}

/// Signals the process's whole group: SIGTERM, or SIGKILL when `kill`.
pub(crate) fn signal_group(record: ProcessRecord, kill: bool) {
    if !alive(record) {
        return;
    }
    if let Some(pid) = Pid::from_raw(record.pid) {
        let _ = kill_process_group(pid, if kill { Signal::KILL } else { Signal::TERM });
    }
}

/// Closes `dir` for good and kills (SIGKILL) the process group of every process whose working
/// directory is under it: the containers and kube-proxies of the simulated clusters whose kubelet
/// directory it is. From then on no process starts under `dir` in this process, so a reconcile
/// loop still running cannot start a Pod again after the kill. For storage that ends with its
/// owner (a temporary one, a test's), never for an API's own: Pods outlive their API.
pub fn kill_processes_under(dir: &Path) {
    let mut closed = closed_dirs();
    let canonical = dir.canonicalize().ok();
    for path in [Some(dir.to_path_buf()), canonical.clone()].into_iter().flatten() {
        if !closed.contains(&path) {
            closed.push(path);
        }
    }
    let Some(dir) = canonical else { return };
    kill_groups_under(&dir);
    // Held to the end: no start falls between the close and the kill.
    drop(closed);
}

/// Kills (SIGKILL) the process group of every process working under `dir` (canonical), but this
/// process's own.
fn kill_groups_under(dir: &Path) {
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    let me = rustix::process::getpgrp();
    for pid in entries.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
        let under = std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir));
        if under && let Some(group) = group(pid).and_then(Pid::from_raw).filter(|group| *group != me) {
            let _ = kill_process_group(group, Signal::KILL);
        }
    }
}

/// The process group of a pid, from `/proc/{pid}/stat` (field 5).
fn group(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(2)?.parse().ok()
}

/// `(state, start time in clock ticks)` of a pid, from `/proc/{pid}/stat`.
fn stat(pid: i32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: read after the last one.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // Field 3 (state) is fields[0], so field 22 (starttime) is fields[19].
    let ticks = fields.get(19)?.parse().ok()?;
    Some((state, ticks))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn a_process_records_its_exit_code_and_is_found_by_its_start_time() {
        let dir = tempfile::tempdir().unwrap();
        let files = ContainerFiles::new(dir.path(), "c");
        let argv = ["sh".to_owned(), "-c".to_owned(), "echo out; echo err >&2; exit 3".to_owned()];
        let env = [("PATH".to_owned(), DEFAULT_PATH.to_owned())];
        let (exited, ended) = tokio::sync::oneshot::channel();
        let record = spawn(dir.path(), &files, &argv, &env, move || {
            let _ = exited.send(());
        })
        .unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), ended).await.unwrap().unwrap();
        // Told once the exit code is written, not before.
        assert_eq!(probe(record, &files), Probe::Exited(3));
        assert_eq!(std::fs::read_to_string(files.log()).unwrap(), "out\nerr\n");
        assert_eq!(files.started().map(|started| started.pid), Some(record.pid));
        let reused = ProcessRecord { pid: std::process::id() as i32, start_ticks: 1 };
        assert!(!alive(reused), "another process with the pid is not the one recorded");
    }

    #[test]
    fn a_missing_executable_cannot_start() {
        assert!(cannot_start(Path::new("/"), "sh", DEFAULT_PATH).is_none());
        assert!(cannot_start(Path::new("/"), "no-such-command-here", DEFAULT_PATH).is_some());
    }
}
