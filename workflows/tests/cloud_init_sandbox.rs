//! Runs each cloud-init script `user_data` makes, as `/bin/sh` runs it on a VM, in a scratch root.
//!
//! Nothing here can boot a VM, so the sandbox stands in for one: `ANYCLOUD_ROOT` is a scratch
//! directory (every absolute path a script writes is under it), and `PATH` starts with stubs:
//! `curl` answers the provider's metadata URLs the way the real services do (EC2's IMDSv2 refuses a
//! request without its session token, GCE's server one without `Metadata-Flavor: Google`) and
//! serves fixture files for the k3s release URLs; `uname` says which machine it is; `iptables`
//! keeps the rules it is given in a file, in order. The fixture `install.sh` records its arguments
//! and environment instead of installing. Both log to one `order.log`, which shows what ran before
//! k3s was started. `sha256sum` is the real one: the tests give the scripts the sums of their
//! fixtures.
//!
//! `shellcheck -s sh` must pass every script; a machine without shellcheck fails the test
//! (scripts/test installs it).
#![allow(clippy::unwrap_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anycloud_workflows::cloud::ProviderKind;
use anycloud_workflows::cluster::network::Reach;
use anycloud_workflows::cluster::secrets::ClusterSecrets;
use anycloud_workflows::cluster::user_data::{self, Join, K3S_VERSION, K3sDownloads, METADATA_ADDRESS, METADATA_CHAIN};
use anycloud_workflows::hosting;
use anycloud_workflows::hosting::binary::{Arch, Sums};
use anycloud_workflows::hosting::user_data::{Download, HostedApi};
use sha2::{Digest, Sha256};

/// The public addresses the fake metadata services give.
const AWS_PUBLIC_IP: &str = "203.0.113.10";
const GCP_PUBLIC_IP: &str = "198.51.100.7";
/// The control plane's address a worker joins.
const SERVER: &str = "192.0.2.20";
/// The control plane's reserved address (an Elastic IP, a static external address).
const RESERVED: &str = "198.51.100.7";
/// The IMDSv2 session token the fake EC2 metadata service hands out.
const IMDS_TOKEN: &str = "fake-imds-session-token";

const BINARY_URL: &str = "https://github.com/k3s-io/k3s/releases/download/v1.36.4+k3s1/k3s";
const ARM64_BINARY_URL: &str = "https://github.com/k3s-io/k3s/releases/download/v1.36.4+k3s1/k3s-arm64";
const INSTALL_SH_URL: &str = "https://raw.githubusercontent.com/k3s-io/k3s/v1.36.4+k3s1/install.sh";

/// A `curl` that answers from fixture files (named after the URL, every byte but [A-Za-z0-9.]
/// made `_`), and plays the metadata services. It logs each request: method, URL, headers.
const CURL: &str = r#"#!/bin/sh
method=GET url= out= headers=
while [ $# -gt 0 ]; do
  case "$1" in
    -X) method=$2; shift 2 ;;
    -H) headers="$headers$2
"; shift 2 ;;
    -o) out=$2; shift 2 ;;
    http://*|https://*) url=$1; shift ;;
    *) shift ;;
  esac
done
{ echo "$method $url"; printf '%s' "$headers" | sed 's/^/  /'; } >> "$SANDBOX/curl.log"
has() { printf '%s' "$headers" | grep -qxF "$1"; }
answer() { if [ -n "$out" ]; then printf '%s' "$1" > "$out"; else printf '%s' "$1"; fi; }
case "$url" in
  http://169.254.169.254/latest/api/token)
    # IMDSv2: a PUT with the token's lifetime, else 400/405.
    [ "$method" = PUT ] && has 'X-aws-ec2-metadata-token-ttl-seconds: 21600' || exit 22
    answer "$IMDS_TOKEN"; exit 0 ;;
  http://169.254.169.254/*)
    # Instances that require IMDSv2 answer 401 without the session token.
    has "X-aws-ec2-metadata-token: $IMDS_TOKEN" || exit 22
    [ "$url" = http://169.254.169.254/latest/meta-data/public-ipv4 ] || exit 22
    answer "$AWS_PUBLIC_IP"; exit 0 ;;
  http://metadata.google.internal/*)
    # GCE's metadata server answers 403 without the header.
    has 'Metadata-Flavor: Google' || exit 22
    [ "$url" = http://metadata.google.internal/computeMetadata/v1/instance/network-interfaces/0/access-configs/0/external-ip ] || exit 22
    answer "$GCP_PUBLIC_IP"; exit 0 ;;
esac
fixture="$SANDBOX/fixtures/$(printf '%s' "$url" | tr -c 'A-Za-z0-9.' '_')"
[ -f "$fixture" ] || exit 22
if [ -n "$out" ]; then cp "$fixture" "$out"; else cat "$fixture"; fi
"#;

/// `uname -m` says what `$MACHINE` says.
const UNAME: &str = "#!/bin/sh\n[ \"$1\" = -m ] && echo \"$MACHINE\"\n";

/// The install script a test serves: records what it was asked to install, checks that the
/// binary is in place (as k3s's does with INSTALL_K3S_SKIP_DOWNLOAD) and "starts" k3s.
const INSTALL_SH: &str = r#"#!/bin/sh
set -eu
[ "${INSTALL_K3S_SKIP_DOWNLOAD:-}" = true ] || { echo 'would download' >&2; exit 9; }
[ -x "$ANYCLOUD_ROOT/usr/local/bin/k3s" ] || { echo 'no k3s binary' >&2; exit 9; }
{
  echo "args: $*"
  echo "K3S_URL=${K3S_URL:-}"
  echo "K3S_TOKEN=${K3S_TOKEN:-}"
  echo "K3S_AGENT_TOKEN=${K3S_AGENT_TOKEN:-}"
} >> "$SANDBOX/install.log"
echo "install.sh $1" >> "$SANDBOX/order.log"
"$ANYCLOUD_ROOT/usr/local/bin/k3s" "$1"
"#;

/// `iptables`, as far as the metadata guard uses it (`-w -t TABLE` then `-N CHAIN`, `-C`/`-A CHAIN
/// RULE...` or `-I CHAIN 1 RULE...`), answering as the real one does: `-N` of an existing chain
/// and `-C` of a missing rule fail, and a rule in a chain never made is refused. It keeps the rules
/// in `iptables.rules`, one `TABLE CHAIN RULE` a line, each chain's in its order.
const IPTABLES: &str = r#"#!/bin/sh
echo "iptables $*" >> "$SANDBOX/order.log"
[ "$1" = -w ] || { echo 'iptables: no -w: would race k3s for the xtables lock' >&2; exit 2; }
[ "$2" = -t ] || exit 2
table=$3 op=$4 chain=$5
shift 5
rules="$SANDBOX/iptables.rules" chains="$SANDBOX/iptables.chains"
touch "$rules" "$chains"
case "$chain" in
  PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) ;;
  *) [ "$op" = -N ] || grep -qxF "$table $chain" "$chains" || { echo "iptables: No chain/target/match by that name." >&2; exit 1; } ;;
esac
case "$op" in
  -N) if grep -qxF "$table $chain" "$chains"; then echo 'iptables: Chain already exists.' >&2; exit 1; fi
      echo "$table $chain" >> "$chains" ;;
  -C) grep -qxF "$table $chain $*" "$rules" || { echo 'iptables: Bad rule (does a matching rule exist in that chain?).' >&2; exit 1; } ;;
  -A) echo "$table $chain $*" >> "$rules" ;;
  -I) [ "$1" = 1 ] || exit 2
      shift
      { echo "$table $chain $*"; cat "$rules"; } > "$rules.new"
      mv "$rules.new" "$rules" ;;
  *) exit 2 ;;
esac
"#;

fn secrets() -> ClusterSecrets {
    // A real CA, as the workflow makes them.
    ClusterSecrets::generate("sandbox").unwrap()
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A scratch VM: root, stubs, fixtures, logs.
/// `systemctl` records what it was asked.
const SYSTEMCTL: &str = "#!/bin/sh\necho \"$*\" >> \"$SANDBOX/systemctl.log\"\n";

/// Where the hosted API's tests serve `anycloud` (`{arch}` in the flag's URL).
const ANYCLOUD_URL: &str = "https://downloads.example.com/anycloud-{arch}";

struct Sandbox {
    dir: tempfile::TempDir,
    machine: &'static str,
}

/// What a script did.
struct Run {
    output: Output,
    script: String,
}

impl Run {
    fn assert_ok(&self) {
        assert!(
            self.output.status.success(),
            "the script failed: {:?}\nstderr:\n{}\nscript:\n{}",
            self.output.status,
            String::from_utf8_lossy(&self.output.stderr),
            self.script
        );
    }

    fn assert_failed(&self, why: &str) {
        assert!(!self.output.status.success(), "the script succeeded despite {why}:\n{}", self.script);
        let stderr = String::from_utf8_lossy(&self.output.stderr);
        assert!(stderr.contains("installing nothing"), "{why}: {stderr}");
    }
}

impl Sandbox {
    fn new() -> Self {
        let sandbox = Self { dir: tempfile::tempdir().unwrap(), machine: "x86_64" };
        for dir in ["root", "bin", "fixtures", "tmp"] {
            fs::create_dir(sandbox.path(dir)).unwrap();
        }
        sandbox.executable(&sandbox.path("bin/curl"), CURL);
        sandbox.executable(&sandbox.path("bin/uname"), UNAME);
        sandbox.executable(&sandbox.path("bin/systemctl"), SYSTEMCTL);
        sandbox.executable(&sandbox.path("bin/iptables"), IPTABLES);
        sandbox.serve(BINARY_URL, "#!/bin/sh\necho \"amd64 k3s $*\" >> \"$SANDBOX/started\"\n");
        sandbox.serve(ARM64_BINARY_URL, "#!/bin/sh\necho \"arm64 k3s $*\" >> \"$SANDBOX/started\"\n");
        sandbox.serve(INSTALL_SH_URL, INSTALL_SH);
        sandbox
    }

    fn arm64() -> Self {
        Self { machine: "aarch64", ..Self::new() }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    fn root(&self, relative: &str) -> PathBuf {
        self.path("root").join(relative.trim_start_matches('/'))
    }

    fn executable(&self, path: &Path, text: &str) {
        fs::write(path, text).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn fixture(&self, url: &str) -> PathBuf {
        let name: String = url.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect();
        self.path("fixtures").join(name)
    }

    fn serve(&self, url: &str, text: &str) {
        fs::write(self.fixture(url), text).unwrap();
    }

    fn served(&self, url: &str) -> Vec<u8> {
        fs::read(self.fixture(url)).unwrap()
    }

    /// The sums of what the sandbox serves, pinned.
    fn downloads(&self) -> K3sDownloads {
        K3sDownloads {
            version: K3S_VERSION.to_owned(),
            install_sh_sha256: sha256_hex(&self.served(INSTALL_SH_URL)),
            amd64_sha256: sha256_hex(&self.served(BINARY_URL)),
            arm64_sha256: sha256_hex(&self.served(ARM64_BINARY_URL)),
        }
    }

    fn run(&self, script: &str) -> Run {
        let path = self.path("user-data.sh");
        fs::write(&path, script).unwrap();
        let output = self.command("/bin/sh").arg(&path).output().unwrap();
        Run { output, script: script.to_owned() }
    }

    /// `program` as the VM would run it: the stubs first on `PATH`, the scratch root.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        command
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", self.path("bin").display()))
            .env("ANYCLOUD_ROOT", self.path("root"))
            .env("TMPDIR", self.path("tmp"))
            .env("SANDBOX", self.dir.path())
            .env("MACHINE", self.machine)
            .env("IMDS_TOKEN", IMDS_TOKEN)
            .env("AWS_PUBLIC_IP", AWS_PUBLIC_IP)
            .env("GCP_PUBLIC_IP", GCP_PUBLIC_IP);
        command
    }

    fn log(&self, name: &str) -> String {
        fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// The lines `install.sh` logged: `args: ...`, `K3S_URL=...`, `K3S_TOKEN=...`,
    /// `K3S_AGENT_TOKEN=...`, per run.
    fn installs(&self) -> Vec<String> {
        self.log("install.log").lines().map(str::to_owned).collect()
    }

    /// The requests `curl` logged, without their headers.
    fn requests(&self) -> Vec<String> {
        self.log("curl.log").lines().filter(|line| !line.starts_with(' ')).map(str::to_owned).collect()
    }

    fn assert_installed_nothing(&self) {
        assert_eq!(self.log("install.log"), "", "install.sh ran");
        assert_eq!(self.log("started"), "", "k3s was started");
        for path in ["usr/local/bin/k3s", "var/lib/anycloud/installed", "var/lib/rancher", "etc/rancher"] {
            assert!(!self.root(path).exists(), "{path} was written");
        }
    }
}

/// A script of each role, as the workflow makes them, checking `downloads`.
type Script = fn(ProviderKind, &K3sDownloads, &ClusterSecrets) -> String;

fn control_plane(provider: ProviderKind, downloads: &K3sDownloads, secrets: &ClusterSecrets) -> String {
    user_data::control_plane_with(provider, Reach::OneNetwork, downloads, "c1", RESERVED, secrets)
}

fn worker(provider: ProviderKind, downloads: &K3sDownloads, secrets: &ClusterSecrets) -> String {
    user_data::worker_with(provider, downloads, &join(Reach::OneNetwork), secrets)
}

/// Worker `w0` of cluster `c1`, joining [`SERVER`].
fn join(reach: Reach) -> Join<'static> {
    Join { cluster_id: "c1", vm_name: "w0", server_address: SERVER, reach }
}

/// What the server's install is asked, in one network and across networks, with its address.
fn server_args(reach: Reach, ip: &str) -> String {
    let across = match reach {
        Reach::OneNetwork => String::new(),
        Reach::AcrossNetworks => {
            format!(" --node-external-ip {RESERVED} --flannel-backend=wireguard-native --flannel-external-ip")
        }
    };
    format!(
        "args: server --node-taint anycloud.dev/control-plane=true:NoSchedule --disable=traefik --disable=servicelb \
         --disable=metrics-server --node-label anycloud.dev/cluster=c1 --secrets-encryption \
         --kube-apiserver-arg=token-auth-file=/etc/rancher/k3s/anycloud-tokens.csv --tls-san {RESERVED} --tls-san {ip}{across}"
    )
}

const ROLES: [(&str, Script); 2] = [("control plane", control_plane), ("worker", worker)];

fn public_ip(provider: ProviderKind) -> &'static str {
    match provider {
        ProviderKind::Gcp => GCP_PUBLIC_IP,
        ProviderKind::Aws | ProviderKind::Sim => AWS_PUBLIC_IP,
    }
}

/// The metadata requests each provider's script makes, with the headers its service requires.
fn assert_asked_its_metadata_service(sandbox: &Sandbox, provider: ProviderKind) {
    let log = sandbox.log("curl.log");
    match provider {
        ProviderKind::Gcp => {
            assert!(log.contains(
                "GET http://metadata.google.internal/computeMetadata/v1/instance/network-interfaces/0/access-configs/0/\
                 external-ip\n  Metadata-Flavor: Google\n"
            ));
            assert!(!log.contains("169.254.169.254"), "{log}");
        }
        ProviderKind::Aws | ProviderKind::Sim => {
            assert!(log.contains(
                "PUT http://169.254.169.254/latest/api/token\n  X-aws-ec2-metadata-token-ttl-seconds: 21600\n"
            ));
            let get = format!(
                "GET http://169.254.169.254/latest/meta-data/public-ipv4\n  X-aws-ec2-metadata-token: {IMDS_TOKEN}\n"
            );
            assert!(log.contains(&get), "{log}");
            assert!(!log.contains("metadata.google.internal"), "{log}");
        }
    }
}

/// The node's rule against the metadata service, as a script of `provider` left it before it
/// started k3s's `unit`: every `iptables` call before `install.sh` started k3s; the rules exactly
/// these, in order (on GCE DNS goes through, the metadata server being the VM's resolver); the
/// guard and the systemd drop-in that runs it before every start of `unit`; and the guard, run
/// again as the next start of k3s runs it, adds nothing, or after a reboot (no rules) the same.
fn assert_pods_kept_from_the_metadata_service(sandbox: &Sandbox, provider: ProviderKind, unit: &str) {
    let order = sandbox.log("order.log");
    let lines: Vec<&str> = order.lines().collect();
    let install = lines.iter().position(|line| line.starts_with("install.sh ")).expect("install.sh ran");
    let last_rule = lines.iter().rposition(|line| line.starts_with("iptables ")).expect("iptables ran");
    assert!(last_rule < install, "{provider}: a rule set after k3s started:\n{order}");
    let mut expected = vec![format!("raw PREROUTING -d {METADATA_ADDRESS}/32 -j {METADATA_CHAIN}")];
    if provider == ProviderKind::Gcp {
        expected.push(format!("raw {METADATA_CHAIN} -p udp --dport 53 -j RETURN"));
        expected.push(format!("raw {METADATA_CHAIN} -p tcp --dport 53 -j RETURN"));
    }
    expected.push(format!("raw {METADATA_CHAIN} -j DROP"));
    let rules = sandbox.log("iptables.rules");
    assert_eq!(rules.lines().collect::<Vec<_>>(), expected, "{provider}");

    let guard = sandbox.root("usr/local/bin/anycloud-metadata-guard");
    assert_eq!(mode(&guard), 0o700);
    let drop_in = sandbox.root(&format!("etc/systemd/system/{unit}.service.d/anycloud-metadata-guard.conf"));
    assert_eq!(
        fs::read_to_string(&drop_in).unwrap(),
        "[Service]\nExecStartPre=/usr/local/bin/anycloud-metadata-guard\n",
        "{provider} {unit}"
    );
    let again = sandbox.command(&guard).output().unwrap();
    assert!(again.status.success(), "{provider}: {}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(sandbox.log("iptables.rules"), rules, "{provider}: the guard run again changed the rules");
    fs::remove_file(sandbox.path("iptables.rules")).unwrap();
    fs::remove_file(sandbox.path("iptables.chains")).unwrap();
    let rebooted = sandbox.command(&guard).output().unwrap();
    assert!(rebooted.status.success(), "{provider}: {}", String::from_utf8_lossy(&rebooted.stderr));
    assert_eq!(sandbox.log("iptables.rules"), rules, "{provider}: the guard after a reboot");
}

/// What a worker holds: the agent token (and the CA's hash), never the server token, the API
/// token or a CA key; not in its script, not in any file it wrote, not in what it gave k3s.
fn assert_holds_no_secret_but_the_agent_token(sandbox: &Sandbox, script: &str, secrets: &ClusterSecrets) {
    fn files(dir: &Path, into: &mut String) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files(&path, into);
            } else {
                into.push_str(&String::from_utf8_lossy(&fs::read(&path).unwrap()));
            }
        }
    }
    let mut held = format!("{script}{}", sandbox.log("install.log"));
    files(&sandbox.path("root"), &mut held);
    assert!(held.contains(&secrets.agent_token), "the worker has no agent token");
    let key_line = secrets.ca_key_pem.lines().nth(1).unwrap();
    for (what, secret) in [
        ("the server token", secrets.server_token.as_str()),
        ("the API token", &secrets.api_token),
        ("the CA key", key_line),
        ("a private key", "PRIVATE KEY"),
        ("a server's credentials", "::server:"),
    ] {
        assert!(!held.contains(secret), "{what} reached a worker:\n{held}");
    }
}

/// The pinned release's binary and install script, and nothing from get.k3s.io.
fn assert_downloaded_the_pinned_release(sandbox: &Sandbox, binary_url: &str) {
    let requests = sandbox.requests();
    assert!(requests.contains(&format!("GET {binary_url}")), "{requests:?}");
    assert!(requests.contains(&format!("GET {INSTALL_SH_URL}")), "{requests:?}");
    assert!(requests.iter().all(|request| !request.contains("get.k3s.io")), "{requests:?}");
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_control_plane_installs_the_cluster_ca_and_tokens_and_names_its_public_address() {
    for provider in [ProviderKind::Aws, ProviderKind::Gcp, ProviderKind::Sim] {
        let sandbox = Sandbox::new();
        let secrets = secrets();
        let script =
            user_data::control_plane_with(provider, Reach::OneNetwork, &sandbox.downloads(), "c1", RESERVED, &secrets);
        sandbox.run(&script).assert_ok();

        assert_asked_its_metadata_service(&sandbox, provider);
        assert_downloaded_the_pinned_release(&sandbox, BINARY_URL);
        let tls = sandbox.root("var/lib/rancher/k3s/server/tls");
        assert_eq!(fs::read_to_string(tls.join("server-ca.crt")).unwrap(), secrets.ca_cert_pem);
        assert_eq!(fs::read_to_string(tls.join("server-ca.key")).unwrap(), secrets.ca_key_pem);
        assert_eq!(fs::read_to_string(tls.join("client-ca.crt")).unwrap(), secrets.ca_cert_pem);
        assert_eq!(fs::read_to_string(tls.join("client-ca.key")).unwrap(), secrets.ca_key_pem);
        let tokens = sandbox.root("etc/rancher/k3s/anycloud-tokens.csv");
        assert_eq!(
            fs::read_to_string(&tokens).unwrap(),
            format!("{},anycloud,anycloud,system:masters\n", secrets.api_token)
        );
        for secret in [tls.join("server-ca.key"), tls.join("client-ca.key"), tokens] {
            assert_eq!(mode(&secret), 0o600, "{}", secret.display());
        }
        let binary = sandbox.root("usr/local/bin/k3s");
        assert_eq!(fs::read(&binary).unwrap(), sandbox.served(BINARY_URL));
        assert_eq!(mode(&binary), 0o755);

        // The certificate names the reserved address the workflow gave it, first; and the address
        // the metadata shows (the same once the address is the VM's; on EC2's first boot it may
        // still be the ephemeral one, until the Elastic IP is associated).
        let ip = public_ip(provider);
        assert_eq!(
            sandbox.installs(),
            [
                server_args(Reach::OneNetwork, ip),
                "K3S_URL=".to_owned(),
                format!("K3S_TOKEN={}", secrets.server_token),
                format!("K3S_AGENT_TOKEN={}", secrets.agent_token),
            ],
            "{provider}"
        );
        assert_pods_kept_from_the_metadata_service(&sandbox, provider, "k3s");
        assert_eq!(sandbox.log("started"), "amd64 k3s server\n");
        assert_eq!(fs::read_to_string(sandbox.root("var/lib/anycloud/installed")).unwrap(), format!("{K3S_VERSION}\n"));
        assert!(fs::read_dir(sandbox.path("tmp")).unwrap().next().is_none(), "the downloads were left behind");
    }
}

#[test]
fn a_worker_joins_the_control_plane_and_pins_the_cluster_ca() {
    for provider in [ProviderKind::Aws, ProviderKind::Gcp, ProviderKind::Sim] {
        let sandbox = Sandbox::new();
        let secrets = secrets();
        let script = user_data::worker_with(provider, &sandbox.downloads(), &join(Reach::OneNetwork), &secrets);
        sandbox.run(&script).assert_ok();

        // In its control plane's network a worker needs no public address: it asks nothing.
        assert!(!sandbox.log("curl.log").contains("169.254.169.254"), "{provider}");
        assert!(!sandbox.log("curl.log").contains("metadata.google.internal"), "{provider}");
        assert_downloaded_the_pinned_release(&sandbox, BINARY_URL);
        // k3s's secure token: the sha256 of the CA bundle the server serves at /cacerts (the
        // server-ca.crt the control plane's script writes), then the credentials.
        let ca_hash = sha256_hex(secrets.ca_cert_pem.as_bytes());
        assert_eq!(
            sandbox.installs(),
            [
                "args: agent --node-name w0 --node-label anycloud.dev/cluster=c1".to_owned(),
                format!("K3S_URL=https://{SERVER}:6443"),
                format!("K3S_TOKEN=K10{ca_hash}::node:{}", secrets.agent_token),
                "K3S_AGENT_TOKEN=".to_owned(),
            ],
            "{provider}"
        );
        assert_pods_kept_from_the_metadata_service(&sandbox, provider, "k3s-agent");
        assert_holds_no_secret_but_the_agent_token(&sandbox, &script, &secrets);
        assert_eq!(sandbox.log("started"), "amd64 k3s agent\n");
        assert_eq!(fs::read(sandbox.root("usr/local/bin/k3s")).unwrap(), sandbox.served(BINARY_URL));
        assert!(!sandbox.root("var/lib/rancher").exists(), "a worker writes no CA");
        assert!(sandbox.root("var/lib/anycloud/installed").exists());
    }
}

#[test]
fn an_arm64_vm_installs_the_arm64_binary() {
    let sandbox = Sandbox::arm64();
    let script = user_data::worker_with(ProviderKind::Aws, &sandbox.downloads(), &join(Reach::OneNetwork), &secrets());
    sandbox.run(&script).assert_ok();
    assert_downloaded_the_pinned_release(&sandbox, ARM64_BINARY_URL);
    assert!(!sandbox.requests().contains(&format!("GET {BINARY_URL}")));
    assert_eq!(fs::read(sandbox.root("usr/local/bin/k3s")).unwrap(), sandbox.served(ARM64_BINARY_URL));
    assert_eq!(sandbox.log("started"), "arm64 k3s agent\n");
}

#[test]
fn a_second_boot_installs_nothing_again() {
    for provider in [ProviderKind::Aws, ProviderKind::Gcp] {
        for (role, script) in ROLES {
            let sandbox = Sandbox::new();
            let script = script(provider, &sandbox.downloads(), &secrets());
            sandbox.run(&script).assert_ok();
            let (installs, requests) = (sandbox.installs(), sandbox.requests());
            assert_eq!(installs.len(), 4, "{provider} {role}: {installs:?}");

            sandbox.run(&script).assert_ok();
            assert_eq!(sandbox.installs(), installs, "{provider} {role}: the second run installed again");
            assert_eq!(sandbox.requests(), requests, "{provider} {role}: the second run asked for something");
            assert_eq!(sandbox.log("started").lines().count(), 1, "{provider} {role}");
        }
    }
}

#[test]
fn a_tampered_download_installs_and_starts_nothing() {
    for (tampered, url) in [("binary", BINARY_URL), ("install script", INSTALL_SH_URL)] {
        for provider in [ProviderKind::Aws, ProviderKind::Gcp] {
            for (role, script) in ROLES {
                let sandbox = Sandbox::new();
                let downloads = sandbox.downloads();
                let mut bytes = sandbox.served(url);
                bytes.extend_from_slice(b"echo tampered\n");
                fs::write(sandbox.fixture(url), bytes).unwrap();
                let run = sandbox.run(&script(provider, &downloads, &secrets()));
                run.assert_failed(&format!("a tampered {tampered} ({provider} {role})"));
                sandbox.assert_installed_nothing();
            }
        }
    }
}

/// A VM whose metadata rule cannot be set (no `iptables`, or one that fails) starts no k3s: no
/// Pod ever runs on a node without it.
#[test]
fn a_vm_that_cannot_keep_pods_from_the_metadata_service_starts_no_k3s() {
    for provider in [ProviderKind::Aws, ProviderKind::Gcp] {
        for (role, script) in ROLES {
            let sandbox = Sandbox::new();
            sandbox.executable(
                &sandbox.path("bin/iptables"),
                "#!/bin/sh\necho \"iptables $*\" >> \"$SANDBOX/order.log\"\n\
                 echo 'iptables: Could not fetch rule set generation id: Permission denied' >&2\nexit 4\n",
            );
            let run = sandbox.run(&script(provider, &sandbox.downloads(), &secrets()));
            assert!(!run.output.status.success(), "{provider} {role}: went on without its rule");
            assert!(sandbox.log("order.log").starts_with("iptables "), "{provider} {role}");
            sandbox.assert_installed_nothing();
        }
    }
}

/// The spec's example and its mirror: the control plane on one provider (the hosted API's), the
/// capacity on the other. Each node advertises the public address its own metadata service
/// gives, the server runs flannel over WireGuard between public addresses, and the worker joins
/// the control plane's public address (the stable one the workflow passes).
#[test]
fn a_cluster_across_providers_advertises_public_addresses_and_runs_wireguard_both_ways() {
    for (control_plane, capacity) in [(ProviderKind::Aws, ProviderKind::Gcp), (ProviderKind::Gcp, ProviderKind::Aws)] {
        let secrets = secrets();
        let server = Sandbox::new();
        let script = user_data::control_plane_with(
            control_plane,
            Reach::AcrossNetworks,
            &server.downloads(),
            "c1",
            RESERVED,
            &secrets,
        );
        server.run(&script).assert_ok();
        assert_asked_its_metadata_service(&server, control_plane);
        assert_eq!(
            server.installs()[0],
            server_args(Reach::AcrossNetworks, public_ip(control_plane)),
            "{control_plane} server"
        );
        let server_ip = RESERVED;

        let agent = Sandbox::new();
        let joining = Join { server_address: server_ip, ..join(Reach::AcrossNetworks) };
        agent.run(&user_data::worker_with(capacity, &agent.downloads(), &joining, &secrets)).assert_ok();
        assert_asked_its_metadata_service(&agent, capacity);
        let agent_ip = public_ip(capacity);
        let ca_hash = sha256_hex(secrets.ca_cert_pem.as_bytes());
        assert_eq!(
            agent.installs(),
            [
                format!(
                    "args: agent --node-name w0 --node-label anycloud.dev/cluster=c1 --node-external-ip {agent_ip}"
                ),
                format!("K3S_URL=https://{server_ip}:6443"),
                format!("K3S_TOKEN=K10{ca_hash}::node:{}", secrets.agent_token),
                "K3S_AGENT_TOKEN=".to_owned(),
            ],
            "{capacity} agent joining a {control_plane} server"
        );
        for sandbox in [&server, &agent] {
            assert_fetched_only_pinned_downloads(sandbox);
        }
        assert_pods_kept_from_the_metadata_service(&server, control_plane, "k3s");
        assert_pods_kept_from_the_metadata_service(&agent, capacity, "k3s-agent");
        let script = user_data::worker_with(capacity, &agent.downloads(), &joining, &secrets);
        assert_holds_no_secret_but_the_agent_token(&agent, &script, &secrets);
    }
}

/// Across networks a node is reached at its public address; a VM without one installs nothing
/// and says why.
#[test]
fn across_networks_a_vm_without_a_public_address_installs_nothing() {
    for (role, script) in [
        ("worker in another network", user_data::worker(ProviderKind::Gcp, &join(Reach::AcrossNetworks), &secrets())),
        ("worker", user_data::worker(ProviderKind::Aws, &join(Reach::AcrossNetworks), &secrets())),
    ] {
        let sandbox = Sandbox::new();
        let path = sandbox.path("user-data.sh");
        fs::write(&path, &script).unwrap();
        let output = Command::new("/bin/sh")
            .arg(&path)
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", sandbox.path("bin").display()))
            .env("ANYCLOUD_ROOT", sandbox.path("root"))
            .env("TMPDIR", sandbox.path("tmp"))
            .env("SANDBOX", sandbox.dir.path())
            .env("MACHINE", sandbox.machine)
            .env("IMDS_TOKEN", IMDS_TOKEN)
            .env("AWS_PUBLIC_IP", "")
            .output()
            .unwrap();
        assert!(!output.status.success(), "{role}: a VM without a public address went on");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("has no public address, which a cluster across networks needs"), "{role}: {stderr}");
        sandbox.assert_installed_nothing();
    }
}

/// Every download a script makes is one whose SHA-256 is written in the script: the release's
/// binary and its install script; nothing else leaves the VM but the metadata service's answers.
fn assert_fetched_only_pinned_downloads(sandbox: &Sandbox) {
    for request in sandbox.requests() {
        let url = request.split_once(' ').map_or("", |(_, url)| url);
        let metadata =
            url.starts_with("http://169.254.169.254/") || url.starts_with("http://metadata.google.internal/");
        assert!(metadata || url == BINARY_URL || url == INSTALL_SH_URL, "an unpinned download: {request}");
    }
}

#[test]
fn no_script_fetches_anything_it_has_not_pinned() {
    for provider in [ProviderKind::Aws, ProviderKind::Gcp] {
        for reach in [Reach::OneNetwork, Reach::AcrossNetworks] {
            for (role, script) in [
                ("control plane", user_data::control_plane(provider, reach, "c1", RESERVED, &secrets())),
                ("worker", user_data::worker(provider, &join(reach), &secrets())),
            ] {
                assert!(!script.contains("sha256sum-"), "{provider} {role}: a sums file fetched from the release");
                let pinned = K3sDownloads::pinned();
                for sum in [&pinned.install_sh_sha256, &pinned.amd64_sha256, &pinned.arm64_sha256] {
                    assert!(script.contains(sum.as_str()), "{provider} {role} does not pin {sum}");
                }
            }
        }
    }
}

#[test]
fn the_production_scripts_download_the_pinned_release() {
    let pinned = K3sDownloads::pinned();
    assert_eq!(pinned.version, K3S_VERSION);
    let script = user_data::control_plane(ProviderKind::Aws, Reach::OneNetwork, "c1", RESERVED, &secrets());
    assert!(script.contains(&format!("verify \"$work/install.sh\" '{}'", pinned.install_sh_sha256)));
    let release = BINARY_URL.strip_suffix("/k3s").unwrap();
    assert!(script.contains(&format!("release='{release}'")), "{script}");
    assert!(script.contains(&format!("'{INSTALL_SH_URL}'")), "{script}");
}

/// `shellcheck -s sh` reports nothing on any script: each provider, each role, the production sums.
/// A hosted API's script for `provider`, checking each architecture's binary against its sum.
fn hosted_api(provider: ProviderKind, sums: &[(Arch, &str)]) -> String {
    let download = Download {
        url: ANYCLOUD_URL.to_owned(),
        sums: sums.iter().map(|(arch, sum)| (*arch, (*sum).to_owned())).collect::<Sums>(),
        https_only: true,
    };
    hosting::user_data::hosted_api(&HostedApi {
        id: "team-api",
        owner: "api-0b7c",
        provider,
        port: 443,
        bucket: "s3://team-api-state/",
        bucket_region: Some("eu-west-1"),
        bucket_endpoint: None,
        keys_secret: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:anycloud/keys-0123456789abcdef-AbCdEf",
        storage_secret: None,
        secret_endpoint: None,
        binary: &download,
        address: "198.51.100.9",
        hosting_credential: "aws-host",
        region: "eu-west-1",
        vm_type: "t3.medium",
        allow_insecure_endpoints: false,
    })
}

#[test]
fn a_hosted_apis_vm_installs_the_checked_binary_and_runs_the_unit_for_its_address() {
    for (provider, machine) in [(ProviderKind::Aws, "x86_64"), (ProviderKind::Gcp, "aarch64")] {
        let sandbox = Sandbox { machine, ..Sandbox::new() };
        let binary = format!("#!/bin/sh\necho anycloud {machine}\n");
        let url = ANYCLOUD_URL.replace("{arch}", machine);
        sandbox.serve(&url, &binary);
        let sum = sha256_hex(binary.as_bytes());
        let other = "0".repeat(64);
        let (arch, other_arch) = match Arch::parse(machine).unwrap() {
            Arch::X86_64 => (Arch::X86_64, Arch::Aarch64),
            Arch::Aarch64 => (Arch::Aarch64, Arch::X86_64),
        };
        let script = hosted_api(provider, &[(arch, &sum), (other_arch, &other)]);
        sandbox.run(&script).assert_ok();
        assert!(sandbox.requests().contains(&format!("GET {url}")), "{:?}", sandbox.requests());
        let installed = sandbox.root("usr/local/bin/anycloud");
        assert_eq!(fs::read_to_string(&installed).unwrap(), binary);
        assert_eq!(mode(&installed), 0o755);
        let address = fs::read_to_string(sandbox.root("etc/anycloud/address.env")).unwrap();
        // The reserved address the deploy gave it, not the metadata's (which changes on a stop).
        assert_eq!(address, "ANYCLOUD_ADDRESS=198.51.100.9\n");
        assert!(!sandbox.log("curl.log").contains("169.254.169.254"), "it asked the metadata service");
        let unit = fs::read_to_string(sandbox.root("etc/systemd/system/anycloud-api.service")).unwrap();
        assert!(unit.contains("EnvironmentFile=/etc/anycloud/address.env\n"), "{unit}");
        assert!(unit.contains("Restart=always\n"), "{unit}");
        let args = hosting::user_data::parse_serve_command(&unit).unwrap();
        assert!(args.windows(2).any(|w| w == ["--tls-address", "${ANYCLOUD_ADDRESS}"]), "{args:?}");
        assert!(args.windows(2).any(|w| w == ["--hosted-by", provider.as_str()]), "{args:?}");
        assert_eq!(
            sandbox.log("systemctl.log"),
            "daemon-reload\nenable anycloud-api.service\nrestart anycloud-api.service\n"
        );
        // Again (GCE runs it at every boot, long after a signed URL expired): the binary in place
        // has its sum, so nothing is fetched; the same files, the service restarted.
        let fetched = sandbox.requests().iter().filter(|r| **r == format!("GET {url}")).count();
        sandbox.run(&script).assert_ok();
        assert_eq!(sandbox.requests().iter().filter(|r| **r == format!("GET {url}")).count(), fetched);
        assert_eq!(sandbox.log("systemctl.log").matches("restart").count(), 2);
    }
}

#[test]
fn a_hosted_apis_vm_with_a_tampered_binary_installs_and_starts_nothing() {
    let sandbox = Sandbox::new();
    sandbox.serve(&ANYCLOUD_URL.replace("{arch}", "x86_64"), "#!/bin/sh\necho swapped\n");
    let real = sha256_hex(b"the real one");
    sandbox.run(&hosted_api(ProviderKind::Aws, &[(Arch::X86_64, &real)])).assert_failed("a swapped binary");
    assert!(!sandbox.root("usr/local/bin/anycloud").exists());
    assert!(!sandbox.root("etc/systemd/system/anycloud-api.service").exists());
    assert_eq!(sandbox.log("systemctl.log"), "");
}

#[test]
fn a_hosted_apis_vm_of_an_architecture_the_deploy_has_no_sum_for_fetches_and_starts_nothing() {
    let sandbox = Sandbox { machine: "aarch64", ..Sandbox::new() };
    sandbox.serve(
        &ANYCLOUD_URL.replace("{arch}", "aarch64"),
        "#!/bin/sh
echo anycloud
",
    );
    let run = sandbox.run(&hosted_api(ProviderKind::Gcp, &[(Arch::X86_64, &"a".repeat(64))]));
    run.assert_failed("no binary for aarch64");
    assert!(!sandbox.requests().iter().any(|r| r.contains("downloads.example.com")), "{:?}", sandbox.requests());
    assert!(!sandbox.root("usr/local/bin/anycloud").exists());
    assert_eq!(sandbox.log("systemctl.log"), "");
}

#[test]
fn shellcheck_passes_every_script() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = secrets();
    for provider in [ProviderKind::Aws, ProviderKind::Gcp, ProviderKind::Sim] {
        for (role, script) in [
            ("control-plane", user_data::control_plane(provider, Reach::OneNetwork, "c1", RESERVED, &secrets)),
            ("worker", user_data::worker(provider, &join(Reach::OneNetwork), &secrets)),
            (
                "control-plane-across",
                user_data::control_plane(provider, Reach::AcrossNetworks, "c1", RESERVED, &secrets),
            ),
            ("worker-across", user_data::worker(provider, &join(Reach::AcrossNetworks), &secrets)),
            ("hosted-api", hosted_api(provider, &[(Arch::X86_64, "ab12")])),
            ("hosted-api-two-arches", hosted_api(provider, &[(Arch::X86_64, "ab12"), (Arch::Aarch64, "cd34")])),
        ] {
            let path = dir.path().join(format!("{provider}-{role}.sh"));
            fs::write(&path, &script).unwrap();
            let checked = Command::new("shellcheck").args(["-s", "sh"]).arg(&path).output().unwrap_or_else(|err| {
                panic!(
                    "running shellcheck: {err}; install it (`apt-get install shellcheck`; scripts/test does it with \
                     scripts/lib/debian_tool.sh)"
                )
            });
            let report =
                format!("{}{}", String::from_utf8_lossy(&checked.stdout), String::from_utf8_lossy(&checked.stderr));
            assert!(
                checked.status.success() && report.is_empty(),
                "shellcheck on the {provider} {role} script:\n{report}"
            );
        }
    }
}
