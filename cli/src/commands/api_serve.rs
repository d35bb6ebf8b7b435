//! `anycloud api serve`: one command, three modes, each its own path.
//!
//! - `--credentials C` (an AWS or GCP credential): deploy the API to a VM on that account
//!   (`api.deploy` on the active API, [`super::hosted_api::deploy`]);
//! - `--credentials sim`: start an API that the simulated cloud hosts, detached
//!   ([`super::api::host`]);
//! - no `--credentials`: serve here, in this process ([`crate::server::serve`]); the mode a
//!   deployed or simulated host runs, told by `--hosted-by`.

use anycloud_workflows::cluster::sides::ControlPlaneHost;
use anycloud_workflows::providers::endpoint::{self, EndpointPolicy};
use anycloud_workflows::wire::NewHostedApi;

use crate::args::ServeArgs;
use crate::exit::{CliError, CliResult};
use crate::server::tls::{TlsFiles, TlsSource};
use crate::server::{self, CheckpointOptions, ServeOptions, VmSecret};

/// Runs `api serve` in the mode its flags choose.
pub async fn serve(args: ServeArgs, json: bool) -> CliResult {
    match args.credentials.clone() {
        Some(credentials) if !credentials.eq_ignore_ascii_case("sim") => deploy(args, credentials, json).await,
        Some(_sim) => host_on_sim(args, json).await,
        None => serve_here(args).await,
    }
}

/// Deploys the API to a VM on credential `credentials`' cloud.
async fn deploy(args: ServeArgs, credentials: String, json: bool) -> CliResult {
    if args.allow_insecure_endpoints {
        return Err(CliError::bad_input(format!(
            "--allow-insecure-endpoints applies to the API this command runs; API `{}` is deployed by the active API \
             and takes its setting (start that one with --allow-insecure-endpoints)",
            args.id
        )));
    }
    let Some(vm_type) = args.vm_type else {
        return Err(CliError::bad_input(format!(
            "hosting API `{}` with credential `{credentials}` needs --vm-type (e.g. t3.medium, e2-standard-2)",
            args.id
        )));
    };
    let Some(bucket) = args.checkpoint_bucket else {
        return Err(CliError::bad_input(format!(
            "hosting API `{}` with credential `{credentials}` needs --checkpoint-bucket: the VM keeps the API's state \
             there (created if missing)",
            args.id
        )));
    };
    let request = NewHostedApi {
        name: args.id,
        credentials,
        vm_type,
        region: args.region,
        checkpoint_bucket: bucket,
        checkpoint_storage_credentials: args.checkpoint_storage_credentials,
        port: args.port,
        binary: None,
        binary_url: None,
        binary_sha256: None,
    };
    let binary = match (args.binary, args.binary_url) {
        (_, Some(url)) => super::hosted_api::Binary::Url { url, sums: args.binary_sha256.join(",") },
        (Some(file), None) => super::hosted_api::Binary::File(file),
        (None, None) => super::hosted_api::Binary::Own,
    };
    let args = super::hosted_api::DeployArgs { request, binary, use_it: args.use_it, timeout: args.timeout };
    super::hosted_api::deploy(args, json).await
}

/// Starts an API that the simulated cloud hosts, refusing the flags of a real cloud's hosting.
async fn host_on_sim(args: ServeArgs, json: bool) -> CliResult {
    let cloud_hosting_flags = args.vm_type.is_some()
        || args.region.is_some()
        || args.binary.is_some()
        || args.binary_url.is_some()
        || !args.binary_sha256.is_empty()
        || args.checkpoint_bucket.is_some()
        || args.checkpoint_storage_credentials.is_some();
    if cloud_hosting_flags {
        return Err(CliError::bad_input(
            "--vm-type, --region, --binary, --binary-url, --binary-sha256, --checkpoint-bucket and \
             --checkpoint-storage-credentials apply to hosting on AWS or GCP; the simulated cloud's host takes none \
             of them",
        ));
    }
    let args = super::api::HostArgs {
        id: args.id,
        port: args.port.unwrap_or(0),
        data_dir: args.data_dir,
        database_url: args.database_url,
        use_it: args.use_it,
        allow_insecure_endpoints: args.allow_insecure_endpoints,
    };
    super::api::host(args, json).await
}

/// Serves the API in this process.
async fn serve_here(args: ServeArgs) -> CliResult {
    if let Some(host) = &args.hosted_by
        && !["sim", "aws", "gcp"].contains(&host.as_str())
    {
        return Err(CliError::bad_input(format!("--hosted-by {host}: use sim, aws or gcp")));
    }
    let endpoints =
        if args.allow_insecure_endpoints { EndpointPolicy::AllowInsecure } else { EndpointPolicy::HttpsOnly };
    for (flag, endpoint) in
        [("--checkpoint-endpoint", &args.checkpoint_endpoint), ("--secret-endpoint", &args.secret_endpoint)]
    {
        if let Some(endpoint) = endpoint {
            endpoint::check(&format!("API `{}`: {flag}", args.id), endpoint, endpoints).map_err(CliError::bad_input)?;
        }
    }
    let checkpoint = checkpoint_options(&args)?;
    let tls = match (args.tls_cert, args.tls_key, args.tls_address) {
        (Some(cert), Some(key), _) => Some(TlsSource::Files(TlsFiles { cert, key })),
        (_, _, Some(address)) => Some(TlsSource::Issued { address }),
        _ => None,
    };
    // A hosted API's requests leave from the address it is reached at, unless told.
    let public_address = match (&args.hosted_by, &tls) {
        (Some(_), Some(TlsSource::Issued { address })) => args.public_address.or_else(|| Some(address.clone())),
        _ => args.public_address,
    };
    let control_planes = match (args.control_plane_credentials, args.control_plane_region, args.control_plane_vm_type) {
        (Some(credential), Some(region), Some(vm_type)) => Some(ControlPlaneHost { credential, region, vm_type }),
        _ => None,
    };
    let options = ServeOptions {
        checkpoint,
        listen: args.listen,
        tls,
        id: args.id,
        port: args.port.unwrap_or(if args.hosted_by.is_some() { 0 } else { 7878 }),
        data_dir: args.data_dir,
        database_url: args.database_url,
        use_it: args.use_it,
        public_address,
        endpoints,
        hosted_by: args.hosted_by,
        owner: args.owner,
        control_planes,
    };
    server::serve(options, crate::seams::get()).await
}

/// Where a served API keeps its state in a bucket, and the secrets its VM reads at start.
fn checkpoint_options(args: &ServeArgs) -> Result<Option<CheckpointOptions>, CliError> {
    let vm_secret = |secret: &Option<String>| -> Result<Option<VmSecret>, CliError> {
        match (secret, &args.hosted_by) {
            (Some(secret), Some(host)) => Ok(Some(VmSecret {
                store: host.parse().map_err(CliError::bad_input)?,
                secret: secret.clone(),
                endpoint: args.secret_endpoint.clone(),
            })),
            _ => Ok(None),
        }
    };
    let storage_secret = vm_secret(&args.checkpoint_storage_secret)?;
    let keys_secret = vm_secret(&args.keys_secret)?;
    let Some(url) = &args.checkpoint_bucket else { return Ok(None) };
    Ok(Some(CheckpointOptions {
        url: anycloud_checkpoint::BucketUrl::parse(url).map_err(CliError::bad_input)?,
        endpoint: args.checkpoint_endpoint.clone(),
        region: args.checkpoint_region.clone(),
        storage_secret,
        keys_secret,
    }))
}
