//! The tests' stand-in for a hosted API's VM. moto and the fake Compute server boot nothing, so
//! when the provider holds a running instance whose user-data is a hosted API's boot script, the
//! runner does what the script and the VM's systemd unit would: it downloads the binary from the
//! URL the script names for this machine's architecture (a signed URL of the object the deploy
//! shipped to the bucket, served by moto or the fake GCS, or the operator's URL) and checks it
//! against the SHA-256 the script names, both read by the production parser
//! ([`parse_download`]); a binary with another sum, an architecture with none, or a failed
//! download is refused ([`VmRunner::refusal`]) and nothing starts, as the script exits before it
//! installs anything. Then it runs that binary with exactly the arguments of the unit's
//! `ExecStart` line ([`parse_serve_command`]). Two things are a VM's and are mapped here: the VM's address
//! (`${ANYCLOUD_ADDRESS}`, from its metadata service) is 127.0.0.1, where the deployer reaches it
//! through the seam `ANYCLOUD_TEST_HOSTED_API_ADDRESS`; and its disk (`--data-dir`) is a scratch
//! directory per instance. The VM's identity (an instance profile, a service account) is the
//! environment the test gives, or the instance's own ([`Launcher::identity`]: on GCE the service
//! account the instance runs as, [`gce_service_account`]). Like `Restart=always`, a process that exits is started again
//! while its instance runs; one whose instance is gone is killed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anycloud_sim::kube::Machines;
use anycloud_workflows::hosting::binary::Arch;
use anycloud_workflows::hosting::user_data::{ADDRESS_VARIABLE, parse_download, parse_serve_command};

/// The address the runner's VMs are reached at.
pub const ADDRESS: &str = "127.0.0.1";

/// One hosted API process and its VM's disk.
struct Vm {
    child: Child,
    /// The binary it downloaded and checked (its `/usr/local/bin/anycloud`).
    binary: PathBuf,
    args: Vec<String>,
    disk: PathBuf,
    log: PathBuf,
    starts: usize,
}

#[derive(Default)]
struct State {
    vms: HashMap<String, Vm>,
    /// Instances whose boot script refused to install the binary, with what it said.
    refused: HashMap<String, String>,
    /// Boot no new instance while set.
    held: bool,
}

/// The running runner; dropping it kills every process it started.
pub struct VmRunner {
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a VM's own identity adds to its process's environment, given its instance's id: what
/// its metadata server would give the SDKs on it ([`gce_service_account`]).
pub type VmIdentity = Arc<dyn Fn(&str) -> Vec<(String, String)> + Send + Sync>;

/// How the runner starts a VM's process.
#[derive(Clone)]
pub struct Launcher {
    /// The environment (the VM's identity; the test's seams).
    pub env: Vec<(String, String)>,
    /// Where the VMs' disks and logs go.
    pub scratch: PathBuf,
    /// The identity of each instance, added to (and over) `env` when its process starts.
    pub identity: Option<VmIdentity>,
}

/// A GCE VM's identity: the service account the instance runs as at `gce` (its
/// `serviceAccounts[0].email`), as a key file of that account (the tests' throwaway key, which
/// the fakes take from any account) written under `dir`, where a GCE VM's metadata server would
/// give the SDKs that account's tokens. An instance that runs as no account gets no key; one
/// gone since keeps the key it had.
pub fn gce_service_account(gce: Arc<crate::fake_gce::FakeGce>, project: &str, dir: PathBuf) -> VmIdentity {
    let project = project.to_owned();
    Arc::new(move |instance: &str| {
        let path = dir.join(format!("{instance}-service-account.json"));
        let found = gce.instances(&project).into_iter().find(|i| i["id"].as_str() == Some(instance));
        if let Some(email) = found.and_then(|i| i["serviceAccounts"][0]["email"].as_str().map(str::to_owned)) {
            std::fs::create_dir_all(&dir).expect("the VMs' key directory");
            std::fs::write(&path, crate::gcp_test_key::service_account_json_of(&email)).expect("the VM's key file");
        }
        // An instance gone since keeps the key it ran with (a test starts its process again).
        if !path.exists() {
            return Vec::new();
        }
        vec![("GOOGLE_APPLICATION_CREDENTIALS".to_owned(), path.display().to_string())]
    })
}

impl VmRunner {
    /// Watches `machines` every 200 ms in a thread of its own.
    pub fn start(machines: impl Machines, launcher: Launcher) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::Builder::new()
                .name("vm-runner".into())
                .spawn(move || {
                    let runtime =
                        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
                    while !stop.load(Ordering::SeqCst) {
                        if let Ok(running) = runtime.block_on(machines.running()) {
                            let hosted: HashMap<String, (Vec<String>, String)> = running
                                .into_iter()
                                .filter(|machine| machine.running)
                                .filter_map(|machine| {
                                    let args = parse_serve_command(&machine.user_data)?;
                                    Some((machine.id, (args, machine.user_data)))
                                })
                                .collect();
                            reconcile(&runtime, &state, &hosted, &launcher);
                        }
                        std::thread::sleep(Duration::from_millis(200));
                    }
                })
                .expect("spawning the VM runner")
        };
        Self { state, stop, thread: Some(thread) }
    }

    /// The instances it runs an API for, with the process's pid.
    pub fn running(&self) -> Vec<(String, u32)> {
        let state = self.state.lock().expect("the runner's state");
        let mut running: Vec<(String, u32)> = state.vms.iter().map(|(id, vm)| (id.clone(), vm.child.id())).collect();
        running.sort();
        running
    }

    /// Waits until it runs an API for exactly one instance; that instance and pid.
    pub fn one(&self, timeout: Duration) -> (String, u32) {
        crate::e2e::wait_until(timeout, "the VM runner to run one hosted API", || {
            let running = self.running();
            (running.len() == 1).then(|| running[0].clone())
        })
    }

    /// The `api serve` arguments it ran for `instance` (after the mapping).
    pub fn args(&self, instance: &str) -> Vec<String> {
        self.state.lock().expect("the runner's state").vms.get(instance).map(|vm| vm.args.clone()).unwrap_or_default()
    }

    /// Boots no new instance until [`release`](Self::release) (a VM still booting).
    pub fn hold(&self) {
        self.state.lock().expect("the runner's state").held = true;
    }

    /// Boots new instances again.
    pub fn release(&self) {
        self.state.lock().expect("the runner's state").held = false;
    }

    /// What `instance`'s boot script said when it refused to install the binary, if it did.
    pub fn refusal(&self, instance: &str) -> Option<String> {
        self.state.lock().expect("the runner's state").refused.get(instance).cloned()
    }

    /// Runs `instance`'s boot script again on the runner's next look (as GCE does at a reboot).
    pub fn reboot(&self, instance: &str) {
        self.state.lock().expect("the runner's state").refused.remove(instance);
    }

    /// The binary `instance` downloaded and runs.
    pub fn binary(&self, instance: &str) -> Option<PathBuf> {
        self.state.lock().expect("the runner's state").vms.get(instance).map(|vm| vm.binary.clone())
    }

    /// `instance`'s disk (its scratch directory; the API's `--data-dir` is under it).
    pub fn disk(&self, instance: &str) -> Option<PathBuf> {
        self.state.lock().expect("the runner's state").vms.get(instance).map(|vm| vm.disk.clone())
    }

    /// The secrets of `needles` found on `instance`'s disk outside the files that hold its keys
    /// by design (`token`, `secret.key`, `tls-ca.key` in its data directory), or in its log:
    /// `(file, needle)` for each.
    pub fn secrets_outside_key_files(&self, instance: &str, needles: &[&str]) -> Vec<(PathBuf, String)> {
        let (disk, log) = {
            let state = self.state.lock().expect("the runner's state");
            let vm = state.vms.get(instance).unwrap_or_else(|| panic!("the runner runs nothing for {instance}"));
            (vm.disk.clone(), vm.log.clone())
        };
        let key_files = ["token", "secret.key", "tls-ca.key"].map(|name| disk.join("data").join(name));
        let mut files = crate::e2e::files_under(&disk);
        files.retain(|path| !key_files.contains(path));
        files.push(log);
        let mut found = Vec::new();
        for path in files {
            let bytes = std::fs::read(&path).unwrap_or_default();
            for needle in needles {
                if crate::e2e::contains_bytes(&bytes, needle.as_bytes()) {
                    found.push((path.clone(), (*needle).to_owned()));
                }
            }
        }
        found
    }

    /// How many times it started `instance`'s process.
    pub fn starts(&self, instance: &str) -> usize {
        self.state.lock().expect("the runner's state").vms.get(instance).map_or(0, |vm| vm.starts)
    }

    /// What `instance`'s process wrote.
    pub fn log(&self, instance: &str) -> String {
        let path = self.state.lock().expect("the runner's state").vms.get(instance).map(|vm| vm.log.clone());
        path.and_then(|path| std::fs::read_to_string(path).ok()).unwrap_or_default()
    }

    /// SIGKILLs `instance`'s process and empties its disk: a VM replaced by one with a fresh disk.
    /// The runner starts the process again on its next look (the instance still runs).
    pub fn kill_and_wipe(&self, instance: &str) {
        let mut state = self.state.lock().expect("the runner's state");
        let vm = state.vms.get_mut(instance).unwrap_or_else(|| panic!("the runner runs nothing for {instance}"));
        let _ = vm.child.kill();
        let status = vm.child.wait().expect("reaping the hosted API");
        assert!(
            std::os::unix::process::ExitStatusExt::signal(&status) == Some(9),
            "it did not die of SIGKILL: {status}"
        );
        std::fs::remove_dir_all(&vm.disk).expect("wiping the VM's disk");
        std::fs::create_dir_all(&vm.disk).expect("a fresh disk");
    }

    /// [`kill_and_wipe`](Self::kill_and_wipe)s `instance`, waits until the runner has started it
    /// again (restoring from its bucket) and `local` (the CLI's API) shows `cluster` ready;
    /// answers its `cluster status --json`. The engine's last second of step checkpoints may not
    /// have shipped (docs/hosting.md): a step may run again and finds what it made by its tags.
    /// A timeout shows the last status and the VM's log.
    pub fn kill_wipe_and_await_ready(
        &self,
        local: &crate::e2e::Api,
        instance: &str,
        cluster: &str,
    ) -> serde_json::Value {
        self.kill_and_wipe(instance);
        crate::e2e::wait_until(Duration::from_secs(60), "the hosted API to restart", || {
            (self.starts(instance) == 2).then_some(())
        });
        let last = std::cell::RefCell::new(String::new());
        let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::e2e::wait_until(Duration::from_secs(90), "the restored API to show the cluster ready", || {
                let out = local.cli(&["--json", "cluster", "status", cluster]);
                *last.borrow_mut() = out.to_string();
                (out.code == 0 && out.json()["cluster"]["phase"] == "ready").then(|| out.json())
            })
        }));
        waited.unwrap_or_else(|_| {
            panic!(
                "the cluster is not ready after the restore:\n{}\n--- the VM's log\n{}",
                last.borrow(),
                self.log(instance)
            )
        })
    }
}

impl Drop for VmRunner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        for vm in self.state.lock().map(|mut state| std::mem::take(&mut state.vms)).unwrap_or_default().into_values() {
            let mut child = vm.child;
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts what runs no process yet (or whose process exited), kills what has no instance. A new
/// instance first downloads and checks its binary, without the lock held.
fn reconcile(
    runtime: &tokio::runtime::Runtime,
    state: &Mutex<State>,
    hosted: &HashMap<String, (Vec<String>, String)>,
    launcher: &Launcher,
) {
    let booting: Vec<String> = {
        let mut state = state.lock().expect("the runner's state");
        state.vms.retain(|id, vm| {
            if hosted.contains_key(id) {
                return true;
            }
            let _ = vm.child.kill();
            let _ = vm.child.wait();
            false
        });
        state.refused.retain(|id, _| hosted.contains_key(id));
        for (id, vm) in &mut state.vms {
            if matches!(vm.child.try_wait(), Ok(Some(_))) && hosted.contains_key(id) {
                vm.child = spawn(launcher, id, &vm.binary, &vm.args, &vm.log);
                vm.starts += 1;
            }
        }
        if state.held {
            return;
        }
        hosted.keys().filter(|id| !state.vms.contains_key(*id) && !state.refused.contains_key(*id)).cloned().collect()
    };
    for id in booting {
        let (args, user_data) = &hosted[&id];
        let dir = launcher.scratch.join(&id);
        let disk = dir.join("disk");
        std::fs::create_dir_all(&disk).expect("the VM's disk");
        let log = dir.join("api.log");
        match runtime.block_on(install(user_data, &dir)) {
            Ok(binary) => {
                let args = mapped(args, &disk);
                let child = spawn(launcher, &id, &binary, &args, &log);
                let vm = Vm { child, binary, args, disk, log, starts: 1 };
                state.lock().expect("the runner's state").vms.insert(id, vm);
            }
            Err(why) => {
                let _ = std::fs::write(&log, format!("{why}\n"));
                state.lock().expect("the runner's state").refused.insert(id, why);
            }
        }
    }
}

/// What the boot script does before the unit: the binary for this machine's architecture, from
/// the URL the script names, kept only if it has the SHA-256 the script names.
async fn install(user_data: &str, dir: &Path) -> Result<PathBuf, String> {
    let download = parse_download(user_data).ok_or("anycloud: the boot script names no binary")?;
    let arch = Arch::current().ok_or("anycloud: no anycloud binary for this machine")?;
    let Some((url, sum)) = download.for_arch(arch) else {
        return Err(format!("anycloud: this deploy has no anycloud binary for {arch}: installing nothing"));
    };
    let response = reqwest::get(&url).await.map_err(|err| format!("anycloud: downloading {url}: {err}"))?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(|err| format!("anycloud: downloading {url}: {err}"))?;
    if !status.is_success() {
        return Err(format!(
            "anycloud: downloading {url}: HTTP {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(500)])
        ));
    }
    let actual: String =
        ring::digest::digest(&ring::digest::SHA256, &bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect();
    if actual != sum {
        return Err(format!("anycloud: the downloaded binary has sha256 {actual}, not {sum}: installing nothing"));
    }
    let binary = dir.join("anycloud");
    let staging = dir.join("anycloud.new");
    std::fs::write(&staging, &bytes).map_err(|err| format!("anycloud: writing the binary: {err}"))?;
    std::fs::set_permissions(&staging, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(|err| format!("anycloud: chmod: {err}"))?;
    std::fs::rename(&staging, &binary).map_err(|err| format!("anycloud: installing the binary: {err}"))?;
    Ok(binary)
}

/// The unit's arguments with the VM's address and disk mapped.
fn mapped(args: &[String], disk: &Path) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut next_is_data_dir = false;
    for arg in args {
        if next_is_data_dir {
            out.push(disk.join("data").display().to_string());
            next_is_data_dir = false;
            continue;
        }
        next_is_data_dir = arg == "--data-dir";
        out.push(arg.replace(ADDRESS_VARIABLE, ADDRESS));
    }
    out
}

fn spawn(launcher: &Launcher, instance: &str, binary: &Path, args: &[String], log: &Path) -> Child {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("the VM's log");
    let mut command = Command::new(binary);
    command.args(args).stdin(Stdio::null()).stdout(log.try_clone().expect("the log")).stderr(log);
    for (name, value) in &launcher.env {
        command.env(name, value);
    }
    for (name, value) in launcher.identity.as_ref().map(|identity| identity(instance)).unwrap_or_default() {
        command.env(name, value);
    }
    // The binary was just written by this process, whose other threads fork children of their
    // own: one forked while the write's descriptor was open holds a copy of it until its exec,
    // and Linux refuses to run a file open for writing (ETXTBSY) until then. A moment later the
    // copy is gone, so a busy file is tried again, as Go's os/exec and cargo do.
    let mut busy = 0;
    loop {
        match command.spawn() {
            Err(err) if err.kind() == std::io::ErrorKind::ExecutableFileBusy && busy < 100 => {
                busy += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            started => return started.expect("starting the hosted API"),
        }
    }
}
