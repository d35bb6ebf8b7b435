//! The boot script of a hosted API's VM (`api.deploy`): install the `anycloud` binary and run
//! `anycloud api serve` as a systemd service that restores the API from its checkpoint bucket.
//!
//! Nothing secret is in it: the token and the TLS CA reach the VM through the bucket, which the
//! VM reads as itself (an EC2 instance profile over IMDSv2, a GCE service account through the
//! metadata server); a bucket on another provider is reached with a key the VM reads, as itself,
//! from its own provider's secret store, which the script names but does not hold. What it does,
//! in order:
//!
//! 1. writes the VM's stable public address (the Elastic IP or static address `api.deploy`
//!    reserved), which the API's serving certificate is issued for: not the metadata's, which
//!    is ephemeral;
//! 2. installs the `anycloud` binary for `uname -m` (`x86_64`, `aarch64`): unless the installed
//!    one already has the SHA-256 written here (a reboot, when a signed URL has long expired), it
//!    downloads it (from the short-lived signed URL of the object the deploy shipped to the
//!    bucket, or from the operator's `https://` URL, `{arch}` replaced) and checks its SHA-256
//!    before anything runs; an architecture with no sum here, or a binary with another sum, is
//!    refused and nothing is installed or started;
//! 3. writes the unit `anycloud-api.service` (restart always) and starts it.
//!
//! It may run again (GCE runs a `startup-script` at every boot): each run rewrites the address,
//! the binary and the unit, and restarts the service, which restores from the bucket.

use crate::cloud::ProviderKind;
use crate::hosting::binary::{Arch, Sums};

/// Where the VM downloads its binary from, with the SHA-256 it must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    /// A signed URL of one object (`https://` on the real stores; the store's endpoint override
    /// otherwise), or the operator's `https://` URL with `{arch}` in it.
    pub url: String,
    /// The SHA-256 of each architecture it serves.
    pub sums: Sums,
    /// Refuse anything but HTTPS, redirects included: the operator's URL. A store's signed URL
    /// is on the store's endpoint (HTTPS, but for a private endpoint the storage credential
    /// names).
    pub https_only: bool,
}

impl Download {
    /// The URL for `arch`, and the SHA-256 its binary must have; `None` if it has none.
    pub fn for_arch(&self, arch: Arch) -> Option<(String, &str)> {
        let sum = self.sums.get(&arch)?;
        Some((self.url.replace("{arch}", arch.as_str()), sum.as_str()))
    }
}

/// The start of the line that names the URL; [`parse_download`] reads it back.
const URL_LINE: &str = "binary_url='";
/// The curl flags of an HTTPS-only download.
const HTTPS_ONLY: &str = "--proto =https --proto-redir =https ";
/// The end of the case arm that names an architecture's sum (`  x86_64) binary_sha256='HEX' ;;`).
const SUM_ARM: &str = ") binary_sha256='";

/// The start of the line of the unit that runs the API; the tests' VM runner reads the rest.
const EXEC_START: &str = "ExecStart=/usr/local/bin/anycloud api serve ";

/// The variable the unit's command line names the VM's address by.
pub const ADDRESS_VARIABLE: &str = "${ANYCLOUD_ADDRESS}";

/// The hosted API a VM runs.
#[derive(Debug, Clone)]
pub struct HostedApi<'a> {
    /// Its name.
    pub id: &'a str,
    /// Its owner id at the provider (`api-<id>`), which it tags on everything it makes: its
    /// VM's role may change only resources carrying it.
    pub owner: &'a str,
    /// The provider of the VM.
    pub provider: ProviderKind,
    /// The public HTTPS port.
    pub port: u16,
    /// `s3://...` or `gs://...`.
    pub bucket: &'a str,
    /// The bucket's region (S3).
    pub bucket_region: Option<&'a str>,
    /// Another endpoint than the store's public one (the storage credential's override).
    pub bucket_endpoint: Option<&'a str>,
    /// The secret in the VM's own provider's store that holds the API's keys (an ARN,
    /// `projects/P/secrets/NAME`): its name, never its value.
    pub keys_secret: &'a str,
    /// The secret in the VM's own provider's store that holds the bucket's key, when the bucket
    /// is on another provider: its name, never its value.
    pub storage_secret: Option<&'a str>,
    /// Another endpoint than the secret store's public one (the hosting credential's override).
    pub secret_endpoint: Option<&'a str>,
    /// Where the binary comes from, and its SHA-256.
    pub binary: &'a Download,
    /// The VM's stable public address (reserved by `api.deploy`): its certificate and URL name it.
    pub address: &'a str,
    /// The credential it is hosted with (saved on it by `api.deploy`), which places its clusters'
    /// control planes, in its region and machine type.
    pub hosting_credential: &'a str,
    /// The VM's region.
    pub region: &'a str,
    /// The VM's machine type.
    pub vm_type: &'a str,
    /// Whether it accepts plain-HTTP and loopback endpoints: as the deploying API does
    /// (`--allow-insecure-endpoints`), whose credentials and bucket endpoint it is handed.
    pub allow_insecure_endpoints: bool,
}

/// The arguments of `anycloud api serve` the VM runs (after `api serve`), the address as
/// [`ADDRESS_VARIABLE`].
fn serve_arguments(api: &HostedApi<'_>) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--id".into(),
        api.id.into(),
        "--hosted-by".into(),
        api.provider.as_str().into(),
        "--listen".into(),
        "0.0.0.0".into(),
        "--port".into(),
        api.port.to_string(),
        "--tls-address".into(),
        ADDRESS_VARIABLE.into(),
        "--data-dir".into(),
        format!("/var/lib/anycloud/{}", api.id),
        "--checkpoint-bucket".into(),
        api.bucket.into(),
    ];
    if let Some(region) = api.bucket_region {
        args.extend(["--checkpoint-region".into(), region.into()]);
    }
    if let Some(endpoint) = api.bucket_endpoint {
        args.extend(["--checkpoint-endpoint".into(), endpoint.into()]);
    }
    args.extend(["--keys-secret".into(), api.keys_secret.into()]);
    if let Some(secret) = api.storage_secret {
        args.extend(["--checkpoint-storage-secret".into(), secret.into()]);
    }
    if let Some(endpoint) = api.secret_endpoint {
        args.extend(["--secret-endpoint".into(), endpoint.into()]);
    }
    if api.allow_insecure_endpoints {
        args.push(crate::providers::endpoint::ALLOW_INSECURE_FLAG.into());
    }
    args.extend([
        "--owner".into(),
        api.owner.into(),
        "--control-plane-credentials".into(),
        api.hosting_credential.into(),
        "--control-plane-region".into(),
        api.region.into(),
        "--control-plane-vm-type".into(),
        api.vm_type.into(),
    ]);
    args
}

/// The script.
pub fn hosted_api(api: &HostedApi<'_>) -> String {
    let exec = format!("{EXEC_START}{}", serve_arguments(api).join(" "));
    let served: Vec<&str> = api.binary.sums.keys().map(|arch| arch.as_str()).collect();
    let sums: String = api.binary.sums.iter().map(|(arch, sum)| format!("  {arch}{SUM_ARM}{sum}' ;;\n")).collect();
    let proto = if api.binary.https_only { HTTPS_ONLY } else { "" };
    format!(
        r#"#!/bin/sh
# anycloud API {id}: restored from {bucket} and served on port {port}.
# What it does and why: workflows/src/hosting/user_data.rs.
set -eu
umask 077
root="${{ANYCLOUD_ROOT:-}}"
arch=$(uname -m)
case "$arch" in
{sums}  *) echo "anycloud: this deploy has no anycloud binary for $arch (it has {served}): installing nothing; deploy again with --binary FILE built for $arch" >&2; exit 1 ;;
esac
{URL_LINE}{binary_url}'
url=$(printf '%s' "$binary_url" | sed "s/{{arch}}/$arch/g")
installed="$root/usr/local/bin/anycloud"
if [ -f "$installed" ] && [ "$(sha256sum "$installed" | cut -d ' ' -f 1)" = "$binary_sha256" ]; then
  echo "anycloud: the installed binary has sha256 $binary_sha256 already"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  curl -sfL {proto}--retry 5 -o "$work/anycloud" "$url"
  actual=$(sha256sum "$work/anycloud" | cut -d ' ' -f 1)
  if [ "$actual" != "$binary_sha256" ]; then
    echo "anycloud: the downloaded binary has sha256 $actual, not $binary_sha256: installing nothing" >&2
    exit 1
  fi
  mkdir -p "$root/usr/local/bin"
  cp "$work/anycloud" "$installed.new"
  chmod 0755 "$installed.new"
  mv "$installed.new" "$installed"
fi
mkdir -p "$root/etc/anycloud" "$root/etc/systemd/system" "$root/var/lib/anycloud"
echo 'ANYCLOUD_ADDRESS={address}' > "$root/etc/anycloud/address.env"
cat > "$root/etc/systemd/system/anycloud-api.service" <<'ANYCLOUD_EOF'
[Unit]
Description=anycloud API {id}
Wants=network-online.target
After=network-online.target

[Service]
EnvironmentFile=/etc/anycloud/address.env
{exec}
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
ANYCLOUD_EOF
systemctl daemon-reload
systemctl enable anycloud-api.service
systemctl restart anycloud-api.service
"#,
        id = api.id,
        bucket = api.bucket,
        port = api.port,
        served = served.join(", "),
        binary_url = api.binary.url,
        address = api.address,
    )
}

/// Where a hosted API's script downloads its binary from, with the sums it checks; `None` if
/// `user_data` is not such a script. The tests' VM runner fetches and checks exactly these.
pub fn parse_download(user_data: &str) -> Option<Download> {
    let url = user_data.lines().find_map(|line| line.strip_prefix(URL_LINE)?.strip_suffix('\''))?;
    let mut sums = Sums::new();
    for line in user_data.lines() {
        if let Some((arch, rest)) = line.trim_start().split_once(SUM_ARM)
            && let (Some(arch), Some(sum)) = (Arch::parse(arch), rest.strip_suffix("' ;;"))
        {
            sums.insert(arch, sum.to_owned());
        }
    }
    let https_only = user_data.lines().any(|line| line.trim_start().starts_with("curl ") && line.contains(HTTPS_ONLY));
    Some(Download { url: url.to_owned(), sums, https_only })
}

/// The arguments after `anycloud` that a hosted API's script runs (`api serve ...`), its address
/// still [`ADDRESS_VARIABLE`]; `None` if `user_data` is not such a script. The tests' VM runner
/// runs exactly these.
pub fn parse_serve_command(user_data: &str) -> Option<Vec<String>> {
    let line = user_data.lines().find_map(|line| line.strip_prefix(EXEC_START))?;
    let mut args = vec!["api".to_owned(), "serve".to_owned()];
    args.extend(line.split_whitespace().map(str::to_owned));
    Some(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn download() -> &'static Download {
        static DOWNLOAD: std::sync::OnceLock<Download> = std::sync::OnceLock::new();
        DOWNLOAD.get_or_init(|| Download {
            url: "https://team-api-state.s3.amazonaws.com/binaries/anycloud-ab12?X-Amz-Signature=00".into(),
            sums: Sums::from([(Arch::X86_64, "ab12".to_owned())]),
            https_only: false,
        })
    }

    fn api() -> HostedApi<'static> {
        HostedApi {
            id: "team-api",
            owner: "api-0b7c",
            provider: ProviderKind::Aws,
            port: 443,
            bucket: "s3://team-api-state",
            bucket_region: Some("eu-west-1"),
            bucket_endpoint: None,
            keys_secret: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:anycloud/keys-0123456789abcdef-AbCdEf",
            storage_secret: None,
            secret_endpoint: None,
            binary: download(),
            address: "198.51.100.9",
            hosting_credential: "aws-host",
            region: "eu-west-1",
            vm_type: "t3.medium",
            allow_insecure_endpoints: false,
        }
    }

    #[test]
    fn the_runner_reads_back_the_command_the_unit_runs() {
        let script = hosted_api(&api());
        let args = parse_serve_command(&script).unwrap_or_default();
        assert_eq!(args[..2], ["api", "serve"]);
        assert_eq!(args[2..], serve_arguments(&api())[..]);
        assert!(args.contains(&ADDRESS_VARIABLE.to_owned()));
        assert!(script.contains("echo 'ANYCLOUD_ADDRESS=198.51.100.9'"), "the reserved address");
        assert!(!script.contains("169.254.169.254"), "not the metadata's ephemeral address");
        assert!(script.contains("'ab12'"), "the sum is checked");
        assert_eq!(parse_serve_command("#!/bin/sh\necho hi\n"), None);
        assert_eq!(parse_download(&script).as_ref(), Some(download()), "the runner reads back what it fetches");
        assert_eq!(parse_download("#!/bin/sh\necho hi\n"), None);
        // The deploying API's setting on endpoints goes with it, and only when it is on.
        assert!(!args.iter().any(|a| a == "--allow-insecure-endpoints"));
        let insecure = parse_serve_command(&hosted_api(&HostedApi { allow_insecure_endpoints: true, ..api() }));
        assert!(insecure.unwrap_or_default().iter().any(|a| a == "--allow-insecure-endpoints"));
    }

    #[test]
    fn a_bucket_on_another_provider_is_reached_through_the_secret_the_unit_names() {
        let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:anycloud/api-1/checkpoint-storage-AbCdEf";
        let cross = HostedApi {
            bucket: "gs://team-api-state/",
            bucket_region: None,
            storage_secret: Some(arn),
            secret_endpoint: Some("https://secretsmanager.example.internal"),
            ..api()
        };
        let args = parse_serve_command(&hosted_api(&cross)).unwrap_or_default();
        let after = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
        assert_eq!(after("--checkpoint-storage-secret").as_deref(), Some(arn));
        assert_eq!(after("--secret-endpoint").as_deref(), Some("https://secretsmanager.example.internal"));
        assert_eq!(after("--keys-secret").as_deref(), Some(api().keys_secret));
        assert_eq!(after("--checkpoint-bucket").as_deref(), Some("gs://team-api-state/"));
        let without = parse_serve_command(&hosted_api(&api())).unwrap_or_default();
        assert!(!without.iter().any(|a| a.starts_with("--checkpoint-storage-secret")));
        assert!(without.iter().any(|a| a == "--keys-secret"), "every hosted API reads its keys: {without:?}");
    }

    #[test]
    fn the_operators_url_is_fetched_per_architecture_over_https_only() {
        let hosted = Download {
            url: "https://downloads.example.com/anycloud-{arch}".into(),
            sums: Sums::from([(Arch::X86_64, "aa".repeat(32)), (Arch::Aarch64, "bb".repeat(32))]),
            https_only: true,
        };
        let script = hosted_api(&HostedApi { binary: &hosted, ..api() });
        assert_eq!(parse_download(&script).as_ref(), Some(&hosted));
        assert!(script.contains("--proto =https --proto-redir =https"), "{script}");
        assert_eq!(
            hosted.for_arch(Arch::Aarch64),
            Some(("https://downloads.example.com/anycloud-aarch64".to_owned(), "bb".repeat(32).as_str()))
        );
        let signed = hosted_api(&api());
        assert!(!signed.contains("--proto-redir"), "a signed URL is the store's own");
        assert!(signed.contains("it has x86_64"), "an unserved architecture is refused by name");
    }

    #[test]
    fn nothing_secret_is_in_the_script() {
        let script = hosted_api(&api());
        for secret in ["PRIVATE KEY", "CERTIFICATE", "AWS_SECRET"] {
            assert!(!script.contains(secret), "{secret} in\n{script}");
        }
    }
}
