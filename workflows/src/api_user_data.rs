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
//! 2. downloads the binary for `uname -m` (`{arch}` in the URL: `x86_64`, `aarch64`) and, when a
//!    sum is given, checks it before installing it;
//! 3. writes the unit `anycloud-api.service` (restart always) and starts it.
//!
//! It may run again (GCE runs a `startup-script` at every boot): each run rewrites the address,
//! the binary and the unit, and restarts the service, which restores from the bucket.

use crate::providers::ProviderKind;

/// Where the VM downloads `anycloud` unless told otherwise: the project's release for this
/// version. docs/hosting.md says how to host your own.
pub const DEFAULT_BINARY_URL: &str = concat!(
    "https://github.com/anycloud/anycloud/releases/download/v",
    env!("CARGO_PKG_VERSION"),
    "/anycloud-{arch}-unknown-linux-gnu"
);

/// The start of the line of the unit that runs the API; the tests' VM runner reads the rest.
const EXEC_START: &str = "ExecStart=/usr/local/bin/anycloud api serve ";

/// The variable the unit's command line names the VM's address by.
pub const ADDRESS_VARIABLE: &str = "${ANYCLOUD_ADDRESS}";

/// The hosted API a VM runs.
#[derive(Debug, Clone)]
pub struct HostedApi<'a> {
    /// Its name.
    pub id: &'a str,
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
    /// The secret in the VM's own provider's store that holds the bucket's key, when the bucket
    /// is on another provider (an ARN, `projects/P/secrets/NAME`): its name, never its value.
    pub storage_secret: Option<&'a str>,
    /// Another endpoint than the secret store's public one (the hosting credential's override).
    pub storage_secret_endpoint: Option<&'a str>,
    /// Where the binary comes from (`{arch}` is replaced).
    pub binary_url: &'a str,
    /// Its sha256, hex, when known.
    pub binary_sha256: Option<&'a str>,
    /// The VM's stable public address (reserved by `api.deploy`): its certificate and URL name it.
    pub address: &'a str,
    /// The credential it is hosted with (saved on it by `api.deploy`), which places its clusters'
    /// control planes, in its region and machine type.
    pub hosting_credential: &'a str,
    /// The VM's region.
    pub region: &'a str,
    /// The VM's machine type.
    pub vm_type: &'a str,
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
    if let Some(secret) = api.storage_secret {
        args.extend(["--checkpoint-storage-secret".into(), secret.into()]);
        if let Some(endpoint) = api.storage_secret_endpoint {
            args.extend(["--checkpoint-storage-secret-endpoint".into(), endpoint.into()]);
        }
    }
    args.extend([
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
    let verify = match api.binary_sha256 {
        Some(sum) => format!(
            r#"actual=$(sha256sum "$work/anycloud" | cut -d ' ' -f 1)
if [ "$actual" != '{sum}' ]; then
  echo "anycloud: $url has sha256 $actual, not {sum}: installing nothing" >&2
  exit 1
fi
"#
        ),
        None => String::new(),
    };
    format!(
        r#"#!/bin/sh
# anycloud API {id}: restored from {bucket} and served on port {port}.
# What it does and why: workflows/src/api_user_data.rs.
set -eu
umask 077
root="${{ANYCLOUD_ROOT:-}}"
case "$(uname -m)" in
  x86_64) arch=x86_64 ;;
  aarch64) arch=aarch64 ;;
  *) echo "anycloud: no anycloud binary for $(uname -m)" >&2; exit 1 ;;
esac
url=$(printf '%s' '{binary_url}' | sed "s/{{arch}}/$arch/g")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
curl -sfL --retry 5 -o "$work/anycloud" "$url"
{verify}mkdir -p "$root/usr/local/bin" "$root/etc/anycloud" "$root/etc/systemd/system" "$root/var/lib/anycloud"
cp "$work/anycloud" "$root/usr/local/bin/anycloud"
chmod 0755 "$root/usr/local/bin/anycloud"
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
        binary_url = api.binary_url,
        address = api.address,
    )
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

    fn api() -> HostedApi<'static> {
        HostedApi {
            id: "team-api",
            provider: ProviderKind::Aws,
            port: 443,
            bucket: "s3://team-api-state",
            bucket_region: Some("eu-west-1"),
            bucket_endpoint: None,
            storage_secret: None,
            storage_secret_endpoint: None,
            binary_url: DEFAULT_BINARY_URL,
            binary_sha256: Some("ab12"),
            address: "198.51.100.9",
            hosting_credential: "aws-host",
            region: "eu-west-1",
            vm_type: "t3.medium",
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
    }

    #[test]
    fn a_bucket_on_another_provider_is_reached_through_the_secret_the_unit_names() {
        let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:anycloud/api-1/checkpoint-storage-AbCdEf";
        let cross = HostedApi {
            bucket: "gs://team-api-state/",
            bucket_region: None,
            storage_secret: Some(arn),
            storage_secret_endpoint: Some("https://secretsmanager.example.internal"),
            ..api()
        };
        let args = parse_serve_command(&hosted_api(&cross)).unwrap_or_default();
        let after = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
        assert_eq!(after("--checkpoint-storage-secret").as_deref(), Some(arn));
        assert_eq!(
            after("--checkpoint-storage-secret-endpoint").as_deref(),
            Some("https://secretsmanager.example.internal")
        );
        assert_eq!(after("--checkpoint-bucket").as_deref(), Some("gs://team-api-state/"));
        let without = parse_serve_command(&hosted_api(&HostedApi { storage_secret_endpoint: Some("x"), ..api() }));
        assert!(!without.unwrap_or_default().iter().any(|a| a.starts_with("--checkpoint-storage-secret")));
    }

    #[test]
    fn nothing_secret_is_in_the_script() {
        let script = hosted_api(&api());
        for secret in ["PRIVATE KEY", "CERTIFICATE", "AWS_SECRET"] {
            assert!(!script.contains(secret), "{secret} in\n{script}");
        }
    }
}
