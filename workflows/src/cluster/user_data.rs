//! cloud-init user-data for a cluster's VMs: the control plane installs and starts the k3s
//! server with the cluster's CA and tokens; each capacity VM installs the k3s agent and joins.
//!
//! The scripts carry secrets: the control plane's the server token, the agent token, the API
//! token and the CA key; a worker's the agent token alone (and the CA's hash, which is public).
//! They go to the provider's launch call and nowhere else (not into step outputs, logs or
//! `inspect`).
//!
//! Nothing here can boot a real VM, so the scripts are right by construction and by test
//! (`workflows/tests/cloud_init_sandbox.rs` runs each one in a scratch root with stub `curl`,
//! `iptables`, `k3s` and install script, and runs `shellcheck` over it).

// What every script does, in order:
//
// 1. Stops at once if `/var/lib/anycloud/installed` exists. GCE runs a `startup-script` at every
//    boot (EC2's cloud-init runs user-data only at the first); k3s is installed as a service that
//    starts at boot by itself, so a later boot has nothing to do. The marker is the last thing the
//    script writes, so a boot after a failed run tries again from the start.
// 2. Reads the VM's own public address from its provider's metadata service: IMDSv2 on EC2 (a
//    session token first; the instances are launched with `HttpTokens=required`), `Metadata-Flavor:
//    Google` on GCE.
// 3. Downloads the pinned k3s binary for `uname -m` and the install script of the same tag, and
//    checks both against the SHA-256 sums below before it writes anything.
// 4. Keeps Pods from the metadata service (`metadata_guard`): an iptables rule in the `raw`
//    table's PREROUTING chain drops what arrives for 169.254.169.254 on any interface, which is
//    what a Pod's traffic does (it is routed through the host; the host's own requests leave
//    through OUTPUT and are not touched). The rule is in place before k3s first starts, and a
//    systemd drop-in puts it back before every later start of k3s (iptables rules do not outlive
//    a reboot); if it cannot be put in place, k3s does not start.
// 5. Writes its files (`umask 077`), places the binary at /usr/local/bin/k3s and runs the install
//    script with `INSTALL_K3S_SKIP_DOWNLOAD=true`: k3s's documented air-gapped install.
//
// The server gets two tokens (docs.k3s.io/cli/token, "Token Types"): the server token
// (`K3S_TOKEN`), which joins servers and would let its holder fetch the cluster's bootstrap data,
// CA keys included, and the agent token (`K3S_AGENT_TOKEN`, `--agent-token`), which joins agents
// only. Both reach k3s through the environment file the install script writes (0600), not the
// command line. A worker joins with the agent token in k3s's secure format,
// `K10<sha256 of the server CA bundle>::node:<agent token>`: before it sends its credentials it
// checks that the CA the server presents is the cluster's. No worker ever sees the server token,
// the API token or a CA key.
//
// Every absolute path a script writes is under `${ANYCLOUD_ROOT:-}` (unset on a VM), so that a test
// can run it in a scratch directory without root.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

use crate::cloud::ProviderKind;
use crate::cluster::network::Reach;
use crate::cluster::secrets::ClusterSecrets;

/// The k3s release the VMs install.
pub const K3S_VERSION: &str = "v1.36.4+k3s1";

// The SHA-256 sums of what the scripts download, pinned here: a script downloads nothing it does
// not check against a sum written in this file. Update all three rows together with K3S_VERSION.
//
// - install.sh at the tag (https://raw.githubusercontent.com/k3s-io/k3s/v1.36.4+k3s1/install.sh);
// - the binaries' lines of the release's sha256sum-amd64.txt and sha256sum-arm64.txt
//   (https://github.com/k3s-io/k3s/releases/download/v1.36.4+k3s1/).
//
// These machines cannot reach GitHub: the sums were taken from several public projects that pin
// this release and agree with each other, not downloaded here (docs/hosting.md says so).
const K3S_INSTALL_SH_SHA256: (&str, &str) =
    ("v1.36.4+k3s1", "46177d4c99440b4c0311b67233823a8e8a2fc09693f6c89af1a7161e152fbfad");
/// Rows: (version, release asset, sha256).
const K3S_BINARY_SHA256: [(&str, &str, &str); 2] = [
    ("v1.36.4+k3s1", "k3s", "835873f37245fc615f547a2fe2af9402a347875f13fa64a1f136de644955ea3f"),
    ("v1.36.4+k3s1", "k3s-arm64", "c920706346d5ad4e5cd3c7bf1bb09ce71ebe07fec829e513e40f1caf98aed8bb"),
];

/// The architectures the VMs may have: `uname -m` and the k3s release asset.
const ARCHITECTURES: [(&str, &str); 2] = [("x86_64", "k3s"), ("aarch64", "k3s-arm64")];

/// The taint that keeps every Pod off the control plane. It is the project's own key, not
/// `node-role.kubernetes.io/control-plane`, which k3s's packaged CoreDNS tolerates: with it,
/// CoreDNS runs on the capacity, where the workloads' Pods reach it in their own network.
pub const CONTROL_PLANE_TAINT: &str = "anycloud.dev/control-plane=true:NoSchedule";

/// The packaged components the server does not deploy (`--disable`): an ingress controller and
/// a load balancer the clusters do not use, and a metrics server nothing reads.
const DISABLED_COMPONENTS: [&str; 3] = ["traefik", "servicelb", "metrics-server"];

/// What the scripts download and the sums they check it against. Production uses
/// [`K3sDownloads::pinned`]; a test gives the sums of its own fixture files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct K3sDownloads {
    /// The k3s release tag.
    pub version: String,
    /// The sha256 (hex) of that tag's install.sh.
    pub install_sh_sha256: String,
    /// The sha256 (hex) of the x86_64 binary (`k3s`).
    pub amd64_sha256: String,
    /// The sha256 (hex) of the aarch64 binary (`k3s-arm64`).
    pub arm64_sha256: String,
}

impl K3sDownloads {
    /// [`K3S_VERSION`] and the sums pinned for it.
    pub fn pinned() -> Self {
        let binary = |asset: &str| {
            K3S_BINARY_SHA256
                .iter()
                .find(|(_, a, _)| *a == asset)
                .map(|(_, _, sum)| (*sum).to_owned())
                .unwrap_or_default()
        };
        Self {
            version: K3S_VERSION.to_owned(),
            install_sh_sha256: K3S_INSTALL_SH_SHA256.1.to_owned(),
            amd64_sha256: binary("k3s"),
            arm64_sha256: binary("k3s-arm64"),
        }
    }

    fn sum(&self, asset: &str) -> &str {
        if asset == "k3s" { &self.amd64_sha256 } else { &self.arm64_sha256 }
    }
}

/// The control plane's script, for a VM of `provider` in a cluster of `reach`, whose stable public
/// address (an Elastic IP, a reserved static address) is `address`: its serving certificate
/// names it (`--tls-san`), and across networks it is the node's external address.
pub fn control_plane(
    provider: ProviderKind,
    reach: Reach,
    cluster_id: &str,
    address: &str,
    secrets: &ClusterSecrets,
) -> String {
    control_plane_with(provider, reach, &K3sDownloads::pinned(), cluster_id, address, secrets)
}

/// [`control_plane`], checking the downloads against `downloads`.
pub fn control_plane_with(
    provider: ProviderKind,
    reach: Reach,
    downloads: &K3sDownloads,
    cluster_id: &str,
    address: &str,
    secrets: &ClusterSecrets,
) -> String {
    let ClusterSecrets { server_token, agent_token, api_token, ca_key_pem, .. } = secrets;
    let ca_cert = ca_bundle(secrets);
    let ca_key = with_newline(ca_key_pem);
    let head =
        head(&format!("anycloud cluster {cluster_id}: control plane"), provider, PublicIp::of(reach, true), downloads);
    let disabled: String = DISABLED_COMPONENTS.iter().map(|component| format!(" --disable={component}")).collect();
    // Across networks (k3s's multicloud guide): the server advertises its public address (the
    // reserved one, which the metadata may not show yet at an EC2 VM's first boot), and flannel
    // runs WireGuard between the nodes' public addresses.
    let across = match reach {
        Reach::OneNetwork => String::new(),
        Reach::AcrossNetworks => {
            format!(" \\\n  --node-external-ip '{address}' --flannel-backend=wireguard-native --flannel-external-ip")
        }
    };
    let guard = metadata_guard(provider, "k3s");
    format!(
        r#"{head}
{guard}
tls="$root/var/lib/rancher/k3s/server/tls"
mkdir -p "$tls" "$root/etc/rancher/k3s" "$root/usr/local/bin" "$root/var/lib/anycloud"
cat > "$tls/server-ca.crt" <<'ANYCLOUD_EOF'
{ca_cert}ANYCLOUD_EOF
cat > "$tls/server-ca.key" <<'ANYCLOUD_EOF'
{ca_key}ANYCLOUD_EOF
cp "$tls/server-ca.crt" "$tls/client-ca.crt"
cp "$tls/server-ca.key" "$tls/client-ca.key"
cd "$root/etc/rancher/k3s"
cat > anycloud-tokens.csv <<'ANYCLOUD_EOF'
{api_token},anycloud,anycloud,system:masters
ANYCLOUD_EOF
cp "$work/k3s" "$root/usr/local/bin/k3s"
chmod 0755 "$root/usr/local/bin/k3s"
K3S_TOKEN='{server_token}' K3S_AGENT_TOKEN='{agent_token}' INSTALL_K3S_SKIP_DOWNLOAD=true sh -s - server \
  --node-taint {CONTROL_PLANE_TAINT}{disabled} \
  --node-label anycloud.dev/cluster={cluster_id} --secrets-encryption \
  --kube-apiserver-arg=token-auth-file=/etc/rancher/k3s/anycloud-tokens.csv \
  --tls-san '{address}' ${{public_ip:+--tls-san "$public_ip"}}{across} < "$work/install.sh"
echo '{version}' > "$marker"
"#,
        version = downloads.version,
    )
}

/// Where a worker joins and how it is reached: what [`worker`] needs beside the secrets.
#[derive(Debug, Clone, Copy)]
pub struct Join<'a> {
    /// The cluster's id.
    pub cluster_id: &'a str,
    /// The VM's name within the cluster (its node name).
    pub vm_name: &'a str,
    /// The control plane's address the worker joins at (`https://<address>:6443`).
    pub server_address: &'a str,
    /// Whether the worker shares the control plane's network.
    pub reach: Reach,
}

/// A capacity VM's script, for a VM of `provider`: joins the control plane at
/// `https://<server_address>:6443`, checking that it presents the cluster's CA.
pub fn worker(provider: ProviderKind, join: &Join<'_>, secrets: &ClusterSecrets) -> String {
    worker_with(provider, &K3sDownloads::pinned(), join, secrets)
}

/// [`worker`], checking the downloads against `downloads`.
pub fn worker_with(
    provider: ProviderKind,
    downloads: &K3sDownloads,
    join: &Join<'_>,
    secrets: &ClusterSecrets,
) -> String {
    let Join { cluster_id, vm_name, server_address, reach } = *join;
    let token = secure_agent_token(secrets);
    let title = format!("anycloud cluster {cluster_id}: capacity VM {vm_name}");
    let head = head(&title, provider, PublicIp::of(reach, false), downloads);
    // Across networks the VM's public address is its node's ExternalIP (k3s's multicloud guide:
    // what the other nodes' WireGuard reaches it at).
    let across = match reach {
        Reach::OneNetwork => "",
        Reach::AcrossNetworks => " \\\n  --node-external-ip \"$public_ip\"",
    };
    let guard = metadata_guard(provider, "k3s-agent");
    format!(
        r#"{head}
{guard}
mkdir -p "$root/usr/local/bin" "$root/var/lib/anycloud"
cp "$work/k3s" "$root/usr/local/bin/k3s"
chmod 0755 "$root/usr/local/bin/k3s"
K3S_URL='https://{server_address}:6443' K3S_TOKEN='{token}' INSTALL_K3S_SKIP_DOWNLOAD=true \
  sh -s - agent --node-name '{vm_name}' --node-label anycloud.dev/cluster={cluster_id}{across} \
  < "$work/install.sh"
echo '{version}' > "$marker"
"#,
        version = downloads.version,
    )
}

/// What a script needs of the VM's public address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PublicIp {
    /// Nothing: a worker in its control plane's network.
    Unused,
    /// The address when the VM has one: a second TLS name of the control plane.
    IfAny,
    /// The address, or the script stops: a worker across networks.
    Required,
}

impl PublicIp {
    fn of(reach: Reach, control_plane: bool) -> Self {
        match (reach, control_plane) {
            (_, true) => Self::IfAny,
            (Reach::AcrossNetworks, false) => Self::Required,
            (Reach::OneNetwork, false) => Self::Unused,
        }
    }
}

/// The part every script shares: the run-once guard, the VM's public address as far as it is
/// needed, the checked downloads. It leaves `$root`, `$marker`, `$public_ip` (unless unused;
/// maybe empty unless required) and `$work` (holding `k3s` and `install.sh`, both checked) for
/// the rest.
fn head(title: &str, provider: ProviderKind, public: PublicIp, downloads: &K3sDownloads) -> String {
    let K3sDownloads { version, install_sh_sha256, .. } = downloads;
    let public_ip = match public {
        PublicIp::Unused => String::new(),
        PublicIp::IfAny => format!("\n{}", public_ip_lookup(provider)),
        PublicIp::Required => format!(
            "\n{}\nif [ -z \"$public_ip\" ]; then\n  echo \"anycloud: this VM has no public address, which a \
             cluster across networks needs\" >&2\n  exit 1\nfi",
            public_ip_lookup(provider)
        ),
    };
    let arches: String = ARCHITECTURES
        .iter()
        .map(|(machine, asset)| {
            let sum = downloads.sum(asset);
            format!("  {machine}) asset={asset}; binary_sha256='{sum}' ;;\n")
        })
        .collect();
    format!(
        r#"#!/bin/sh
# {title}
# Runs once; what it does and why: workflows/src/cluster/user_data.rs.
set -eu
umask 077
root="${{ANYCLOUD_ROOT:-}}"
marker="$root/var/lib/anycloud/installed"
if [ -e "$marker" ]; then
  exit 0
fi{public_ip}
case "$(uname -m)" in
{arches}  *) echo "anycloud: k3s has no binary for $(uname -m)" >&2; exit 1 ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
release='https://github.com/k3s-io/k3s/releases/download/{version}'
curl -sfL --retry 5 -o "$work/k3s" "$release/$asset"
curl -sfL --retry 5 -o "$work/install.sh" 'https://raw.githubusercontent.com/k3s-io/k3s/{version}/install.sh'
verify() {{
  actual=$(sha256sum "$1" | cut -d ' ' -f 1)
  if [ "$actual" != "$2" ]; then
    echo "anycloud: $3 has sha256 $actual, not $2: installing nothing" >&2
    exit 1
  fi
}}
verify "$work/k3s" "$binary_sha256" "$release/$asset"
verify "$work/install.sh" '{install_sh_sha256}' 'install.sh of k3s {version}'"#
    )
}

/// The metadata service's address, on EC2 and on GCE (`metadata.google.internal` is this address).
pub const METADATA_ADDRESS: &str = "169.254.169.254";

/// The iptables chain that holds what a Pod may send to the metadata address.
pub const METADATA_CHAIN: &str = "ANYCLOUD-METADATA";

/// Where the guard is installed on a VM, and the systemd drop-in that runs it before k3s starts.
const GUARD_PATH: &str = "/usr/local/bin/anycloud-metadata-guard";
const GUARD_DROP_IN: &str = "anycloud-metadata-guard.conf";

/// Shell that installs and runs the node's rule against the metadata service, and has systemd run
/// it again before every start of `unit` (`k3s` on the server, `k3s-agent` on a worker; the names
/// k3s's install script gives its units).
///
/// Why `raw` PREROUTING and not FORWARD: a Pod's packet for 169.254.169.254 enters the host from
/// its veth (flannel's `cni0` bridge) and is routed out of the host's interface, so it passes
/// PREROUTING, then FORWARD, never OUTPUT. FORWARD is where k3s's flannel and kube-proxy put
/// their own chains, at its top: flannel's `FLANNEL-FWD` accepts everything from the Pod network
/// (flannel-io/flannel#1542, #1650), so a DROP placed in FORWARD before k3s starts ends up below
/// that ACCEPT and never matches. Nothing of k3s writes to the `raw` table, whose PREROUTING runs
/// before any of theirs (and before conntrack and NAT), so the rule holds whatever k3s adds. It
/// matches any source, so a Pod that forges its address is dropped too; the host's own requests
/// (the script's metadata lookups, k3s) leave through OUTPUT and are not touched.
///
/// On GCE the metadata server is also the VM's DNS resolver (Cloud DNS, "Name resolution order":
/// every VM uses 169.254.169.254 as its name server), and CoreDNS, a Pod, forwards to it: port 53
/// is let through there, and nothing else.
fn metadata_guard(provider: ProviderKind, unit: &str) -> String {
    let dns = match provider {
        ProviderKind::Gcp => {
            "\n# GCE's DNS resolver answers at this address too: CoreDNS forwards there.\n\
                              rule -p udp --dport 53 -j RETURN\n\
                              rule -p tcp --dport 53 -j RETURN"
        }
        ProviderKind::Aws | ProviderKind::Sim => "",
    };
    let drop_in_dir = format!("$root/etc/systemd/system/{unit}.service.d");
    format!(
        r#"mkdir -p "$root/usr/local/bin" "{drop_in_dir}"
cat > "$root{GUARD_PATH}" <<'ANYCLOUD_EOF'
#!/bin/sh
# anycloud: Pods may not reach the metadata service ({METADATA_ADDRESS}); why: workflows/src/cluster/user_data.rs.
set -eu
iptables -w -t raw -N {METADATA_CHAIN} 2>/dev/null || true
rule() {{
  iptables -w -t raw -C {METADATA_CHAIN} "$@" 2>/dev/null || iptables -w -t raw -A {METADATA_CHAIN} "$@"
}}{dns}
rule -j DROP
iptables -w -t raw -C PREROUTING -d {METADATA_ADDRESS}/32 -j {METADATA_CHAIN} 2>/dev/null ||
  iptables -w -t raw -I PREROUTING 1 -d {METADATA_ADDRESS}/32 -j {METADATA_CHAIN}
ANYCLOUD_EOF
chmod 0700 "$root{GUARD_PATH}"
cat > "{drop_in_dir}/{GUARD_DROP_IN}" <<'ANYCLOUD_EOF'
[Service]
ExecStartPre={GUARD_PATH}
ANYCLOUD_EOF
"$root{GUARD_PATH}""#
    )
}

/// Shell that sets `$public_ip` to the VM's public address from its provider's metadata service
/// (empty when it has none): IMDSv2 on EC2 (a session token first), `Metadata-Flavor: Google`
/// on GCE.
pub(crate) fn public_ip_lookup(provider: ProviderKind) -> &'static str {
    match provider {
        ProviderKind::Gcp => {
            "public_ip=$(curl -sf --retry 5 --retry-connrefused -H 'Metadata-Flavor: Google' \\\n  \
             http://metadata.google.internal/computeMetadata/v1/instance/network-interfaces/0/access-configs/0/external-ip \
             || true)"
        }
        // The simulated cloud's VMs boot nothing; they get EC2's form.
        ProviderKind::Aws | ProviderKind::Sim => {
            "imds_token=$(curl -sf --retry 5 --retry-connrefused -X PUT \\\n  \
             -H 'X-aws-ec2-metadata-token-ttl-seconds: 21600' http://169.254.169.254/latest/api/token)\n\
             public_ip=$(curl -sf --retry 5 --retry-connrefused -H \"X-aws-ec2-metadata-token: $imds_token\" \\\n  \
             http://169.254.169.254/latest/meta-data/public-ipv4 || true)"
        }
    }
}

/// The CA bundle file the control plane writes (server-ca.crt): the CA's PEM, ending in a newline.
fn ca_bundle(secrets: &ClusterSecrets) -> Cow<'_, str> {
    with_newline(&secrets.ca_cert_pem)
}

fn with_newline(pem: &str) -> Cow<'_, str> {
    if pem.ends_with('\n') { Cow::Borrowed(pem) } else { Cow::Owned(format!("{pem}\n")) }
}

/// The token a worker joins with: the agent token in k3s's secure format,
/// `K10<hash>::node:<agent token>` (`node` is the user k3s keeps the agent token under; the server
/// token's is `server`). The hash is what k3s computes of the bundle a server serves at `/cacerts`
/// (its server-ca.crt): for a bundle of one certificate, the sha256 of the file's bytes (k3s
/// `clientaccess.hashCA`).
fn secure_agent_token(secrets: &ClusterSecrets) -> String {
    secure_token(ca_bundle(secrets).as_bytes(), AGENT_USER, &secrets.agent_token)
}

/// The user k3s gives the agent token (`node`, group `k3s:agent`) and the server token (`server`,
/// group `k3s:server`): k3s `pkg/daemons/control/deps`, `genUsers`.
const AGENT_USER: &str = "node";
const SERVER_USER: &str = "server";

fn secure_token(ca_bundle: &[u8], user: &str, password: &str) -> String {
    let hash: String = Sha256::digest(ca_bundle).iter().map(|b| format!("{b:02x}")).collect();
    format!("K10{hash}::{user}:{password}")
}

/// What a worker's script says it joins: `(server address, token, node name)`; the token is
/// in k3s's secure format. The simulated cloud reads it the way a booting VM would run it.
pub fn parse_worker(user_data: &str) -> Option<(String, String, String)> {
    let url = quoted(user_data, "K3S_URL='https://")?;
    let address = url.strip_suffix(":6443")?.to_owned();
    Some((address, quoted(user_data, "K3S_TOKEN='")?.to_owned(), quoted(user_data, "--node-name '")?.to_owned()))
}

/// The single-quoted value after the first `key` in `script`.
fn quoted<'a>(script: &'a str, key: &str) -> Option<&'a str> {
    let start = script.find(key)? + key.len();
    let rest = &script[start..];
    Some(&rest[..rest.find('\'')?])
}

/// Whether the control plane whose script is `user_data` lets an agent join with `token`, as a
/// k3s server does: the agent token, or the server token (which joins agents too), each in the
/// secure format with the hash of the CA the control plane installs (a worker that pinned another
/// CA would not send its credentials). Compared in constant time.
pub fn control_plane_admits_agent(user_data: &str, token: &str) -> bool {
    let Some((ca_cert, _)) = parse_control_plane_ca(user_data) else { return false };
    [(AGENT_USER, "K3S_AGENT_TOKEN='"), (SERVER_USER, "K3S_TOKEN='")].into_iter().any(|(user, key)| {
        quoted(user_data, key).filter(|password| !password.is_empty()).is_some_and(|password| {
            let expected = secure_token(ca_cert.as_bytes(), user, password);
            crate::secrets::constant_time_eq(token.as_bytes(), expected.as_bytes())
        })
    })
}

/// The API token a control plane's script installs. The simulated cloud's Kubernetes API
/// accepts it, as k3s would from its token file.
pub fn parse_control_plane_token(user_data: &str) -> Option<String> {
    let start =
        user_data.find("anycloud-tokens.csv <<'ANYCLOUD_EOF'\n")? + "anycloud-tokens.csv <<'ANYCLOUD_EOF'\n".len();
    let line = user_data[start..].lines().next()?;
    Some(line.split(',').next()?.to_owned())
}

/// The cluster CA (certificate and key, PEM) that a control plane's script installs for k3s, which
/// signs the API server's certificate with it; the simulated control plane does the same.
pub fn parse_control_plane_ca(user_data: &str) -> Option<(String, String)> {
    let heredoc = |file: &str| {
        let marker = format!("{file}\" <<'ANYCLOUD_EOF'\n");
        let start = user_data.find(&marker)? + marker.len();
        let end = start + user_data[start..].find("ANYCLOUD_EOF")?;
        Some(user_data[start..end].to_owned())
    };
    Some((heredoc("$tls/server-ca.crt")?, heredoc("$tls/server-ca.key")?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn secrets() -> ClusterSecrets {
        ClusterSecrets {
            server_token: "server123".into(),
            agent_token: "agent789".into(),
            api_token: "api456".into(),
            ca_cert_pem: "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n".into(),
            ca_key_pem: "-----BEGIN PRIVATE KEY-----\ny\n-----END PRIVATE KEY-----\n".into(),
        }
    }

    const PROVIDERS: [ProviderKind; 3] = [ProviderKind::Aws, ProviderKind::Gcp, ProviderKind::Sim];

    fn join(vm_name: &str) -> Join<'_> {
        Join { cluster_id: "c1", vm_name, server_address: "10.0.0.2", reach: Reach::OneNetwork }
    }

    #[test]
    fn a_worker_script_says_what_it_joins_with_the_ca_pinned() {
        for provider in PROVIDERS {
            let script = worker(provider, &join("w0"), &secrets());
            let (address, token, name) = parse_worker(&script).unwrap();
            assert_eq!((address.as_str(), name.as_str()), ("10.0.0.2", "w0"));
            // The sha256 of the PEM file's bytes, as `sha256sum server-ca.crt` prints it.
            let expected = "K101a73b7a8990ec3c4cc6aedb06395635db02c9e6dc6a88e92ca46084be5969746::node:agent789";
            assert_eq!(token, expected);
        }
    }

    /// A worker's script holds the agent token and the CA's hash: never the server token, the API
    /// token or a key.
    #[test]
    fn a_worker_script_carries_no_secret_but_the_agent_token() {
        for provider in PROVIDERS {
            for reach in [Reach::OneNetwork, Reach::AcrossNetworks] {
                let script = worker(provider, &Join { reach, ..join("w0") }, &secrets());
                assert!(script.contains("agent789"), "{script}");
                for secret in ["server123", "api456", "PRIVATE KEY", "BEGIN CERTIFICATE", "::server:"] {
                    assert!(
                        !script.contains(secret),
                        "{provider} {reach:?}: {secret:?} in a worker's script:\n{script}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_control_plane_script_installs_the_api_token_and_the_ca() {
        for provider in PROVIDERS {
            let script = control_plane(provider, Reach::OneNetwork, "c1", "198.51.100.7", &secrets());
            assert!(script.contains("--tls-san '198.51.100.7'"), "the certificate names the stable address");
            assert_eq!(parse_control_plane_token(&script).as_deref(), Some("api456"));
            assert!(script.contains("K3S_TOKEN='server123' K3S_AGENT_TOKEN='agent789' INSTALL_K3S_SKIP_DOWNLOAD=true"));
            assert!(!script.contains("--agent-token") && !script.contains("--token"), "no token on a command line");
            let (cert, key) = parse_control_plane_ca(&script).unwrap();
            assert_eq!(cert, secrets().ca_cert_pem);
            assert_eq!(key, secrets().ca_key_pem);
        }
    }

    #[test]
    fn a_worker_joins_with_the_token_its_control_plane_expects() {
        let cp = control_plane(ProviderKind::Gcp, Reach::AcrossNetworks, "c1", "198.51.100.7", &secrets());
        let (_, token, _) = parse_worker(&worker(ProviderKind::Aws, &join("w0"), &secrets())).unwrap();
        assert!(control_plane_admits_agent(&cp, &token));
        let hash = "K101a73b7a8990ec3c4cc6aedb06395635db02c9e6dc6a88e92ca46084be5969746";
        // As a k3s server does, it admits an agent with the server token too (none is given one).
        assert!(control_plane_admits_agent(&cp, &format!("{hash}::server:server123")));
        let mut other_ca = secrets();
        other_ca.ca_cert_pem = "-----BEGIN CERTIFICATE-----\nz\n-----END CERTIFICATE-----\n".into();
        let (_, other, _) = parse_worker(&worker(ProviderKind::Aws, &join("w0"), &other_ca)).unwrap();
        assert!(!control_plane_admits_agent(&cp, &other), "another CA's hash");
        for wrong in [
            format!("{hash}::node:agent78"),
            format!("{hash}::node:agent7890"),
            format!("{hash}::server:agent789"),
            format!("{hash}::node:server123"),
            format!("{hash}::node:api456"),
            format!("{hash}::node:"),
            "agent789".to_owned(),
            String::new(),
        ] {
            assert!(!control_plane_admits_agent(&cp, &wrong), "{wrong:?} admitted");
        }
        // Secrets from before agent tokens: no agent token is admitted, the empty one least of all.
        let old = ClusterSecrets { agent_token: String::new(), ..secrets() };
        let old_cp = control_plane(ProviderKind::Aws, Reach::OneNetwork, "c1", "198.51.100.7", &old);
        assert!(!control_plane_admits_agent(&old_cp, &format!("{hash}::node:")));
        assert!(!control_plane_admits_agent(&worker(ProviderKind::Aws, &join("w0"), &secrets()), &token), "a worker");
    }

    #[test]
    fn a_pem_without_its_last_newline_is_written_and_hashed_with_one() {
        let mut secrets = secrets();
        secrets.ca_cert_pem = secrets.ca_cert_pem.trim_end().to_owned();
        let script = control_plane(ProviderKind::Aws, Reach::OneNetwork, "c1", "198.51.100.7", &secrets);
        let (cert, _) = parse_control_plane_ca(&script).unwrap();
        assert_eq!(cert, format!("{}\n", secrets.ca_cert_pem));
        let (_, token, _) = parse_worker(&worker(ProviderKind::Aws, &join("w0"), &secrets)).unwrap();
        assert!(control_plane_admits_agent(&script, &token));
    }

    #[test]
    fn each_provider_asks_its_own_metadata_service() {
        for role in ["cp", "w0"] {
            let script = |provider| match role {
                "cp" => control_plane(provider, Reach::OneNetwork, "c1", "198.51.100.7", &secrets()),
                _ => worker(provider, &Join { reach: Reach::AcrossNetworks, ..join(role) }, &secrets()),
            };
            let aws = script(ProviderKind::Aws);
            assert!(aws.contains("-X PUT") && aws.contains("X-aws-ec2-metadata-token-ttl-seconds: 21600"));
            assert!(aws.contains("X-aws-ec2-metadata-token: $imds_token"));
            assert!(!aws.contains("metadata.google.internal"));
            let gcp = script(ProviderKind::Gcp);
            assert!(gcp.contains("Metadata-Flavor: Google") && gcp.contains("metadata.google.internal"));
            assert!(!gcp.contains("http://169.254.169.254"), "GCE's metadata is asked by name");
            assert_eq!(script(ProviderKind::Sim), aws);
        }
    }

    /// Every node keeps its Pods from the metadata address before k3s first starts, and before
    /// each later start of its k3s unit; GCE's lets DNS through (its resolver is that address).
    #[test]
    fn every_node_drops_pod_traffic_to_the_metadata_address_before_k3s_starts() {
        for provider in PROVIDERS {
            for reach in [Reach::OneNetwork, Reach::AcrossNetworks] {
                for (unit, script) in [
                    ("k3s", control_plane(provider, reach, "c1", "198.51.100.7", &secrets())),
                    ("k3s-agent", worker(provider, &Join { reach, ..join("w0") }, &secrets())),
                ] {
                    let jump = "iptables -w -t raw -I PREROUTING 1 -d 169.254.169.254/32 -j ANYCLOUD-METADATA";
                    let drop = "rule -j DROP";
                    let run = "\n\"$root/usr/local/bin/anycloud-metadata-guard\"\n";
                    let install = "INSTALL_K3S_SKIP_DOWNLOAD=true";
                    let at = |text: &str| script.find(text).unwrap_or_else(|| panic!("{text:?} missing:\n{script}"));
                    assert!(at(jump) < at(run) && at(drop) < at(run) && at(run) < at(install), "{script}");
                    let drop_in = format!("/etc/systemd/system/{unit}.service.d/anycloud-metadata-guard.conf");
                    assert!(at(&drop_in) < at(install), "{script}");
                    assert!(script.contains("[Service]\nExecStartPre=/usr/local/bin/anycloud-metadata-guard\n"));
                    let dns = script
                        .contains("rule -p udp --dport 53 -j RETURN\nrule -p tcp --dport 53 -j RETURN\nrule -j DROP");
                    assert_eq!(dns, provider == ProviderKind::Gcp, "{provider}: {script}");
                    assert!(!script.contains("FORWARD"), "a FORWARD rule sits below k3s's own ACCEPT");
                }
            }
        }
    }

    #[test]
    fn the_scripts_install_the_pinned_release_and_never_pipe_the_installer() {
        let script = control_plane(ProviderKind::Aws, Reach::OneNetwork, "c1", "198.51.100.7", &secrets());
        assert!(script.contains(&format!("https://github.com/k3s-io/k3s/releases/download/{K3S_VERSION}'")));
        assert!(script.contains(&format!("https://raw.githubusercontent.com/k3s-io/k3s/{K3S_VERSION}/install.sh")));
        assert!(script.contains(K3S_INSTALL_SH_SHA256.1));
        assert!(!script.contains("get.k3s.io"));
        assert!(!script.contains("| sh"));
    }

    /// One sum for install.sh and one row per architecture, all for [`K3S_VERSION`]: a version bump
    /// that leaves the sums of the old one fails here.
    #[test]
    fn the_sums_are_those_of_the_pinned_version() {
        let hex64 =
            |sum: &str| sum.len() == 64 && sum.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        assert_eq!(K3S_INSTALL_SH_SHA256.0, K3S_VERSION);
        assert!(hex64(K3S_INSTALL_SH_SHA256.1));
        let assets: Vec<&str> = ARCHITECTURES.iter().map(|(_, asset)| *asset).collect();
        let rows: Vec<&str> = K3S_BINARY_SHA256.iter().map(|(_, asset, _)| *asset).collect();
        assert_eq!(rows, assets, "one binary sum row per architecture, in the same order");
        for (version, asset, sum) in K3S_BINARY_SHA256 {
            assert_eq!(version, K3S_VERSION, "the sum of {asset} is for another k3s version");
            assert!(hex64(sum), "the sum of {asset} is not 64 lowercase hex digits: {sum:?}");
        }
        let pinned = K3sDownloads::pinned();
        assert_eq!(
            (pinned.version.as_str(), pinned.install_sh_sha256.as_str()),
            (K3S_VERSION, K3S_INSTALL_SH_SHA256.1)
        );
        assert_eq!(
            (pinned.amd64_sha256.as_str(), pinned.arm64_sha256.as_str()),
            (K3S_BINARY_SHA256[0].2, K3S_BINARY_SHA256[1].2)
        );
    }

    #[test]
    fn the_server_runs_no_packaged_extras_and_keeps_every_pod_off_itself() {
        for reach in [Reach::OneNetwork, Reach::AcrossNetworks] {
            let script = control_plane(ProviderKind::Aws, reach, "c1", "198.51.100.7", &secrets());
            assert!(script.contains("--disable=traefik --disable=servicelb --disable=metrics-server"), "{script}");
            assert!(script.contains("--node-taint anycloud.dev/control-plane=true:NoSchedule"), "{script}");
        }
    }

    #[test]
    fn across_networks_every_node_advertises_its_public_address_and_flannel_runs_wireguard() {
        let across = Join { reach: Reach::AcrossNetworks, ..join("w0") };
        for provider in PROVIDERS {
            let server = control_plane(provider, Reach::AcrossNetworks, "c1", "198.51.100.7", &secrets());
            // The server's external address is its reserved one, which it is given.
            assert!(server.contains(
                "--node-external-ip '198.51.100.7' --flannel-backend=wireguard-native --flannel-external-ip"
            ));
            let agent = worker(provider, &across, &secrets());
            assert!(agent.contains("--node-external-ip \"$public_ip\""));
            assert!(!agent.contains("flannel"), "flannel options are the server's alone");
            assert!(agent.contains("has no public address, which a cluster across networks needs"));
        }
        let same_server = control_plane(ProviderKind::Aws, Reach::OneNetwork, "c1", "198.51.100.7", &secrets());
        let same_agent = worker(ProviderKind::Aws, &join("w0"), &secrets());
        for script in [&same_server, &same_agent] {
            assert!(!script.contains("--node-external-ip") && !script.contains("wireguard"), "{script}");
            assert!(!script.contains("has no public address"));
        }
    }
}
