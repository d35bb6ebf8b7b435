//! The Kubernetes layer: a kube client for a cluster's API (its URL, the cluster CA, the API
//! token), and the few questions the cluster workflows ask of it. The same code talks to k3s on
//! a real VM and to the simulated cloud's Kubernetes-compatible API.

use base64::Engine as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, DeleteParams, ListParams};
use serde::{Deserialize, Serialize};

use crate::cluster::secrets::ClusterSecrets;
use crate::kubernetes::KubeEndpoint;

/// The label every Kubernetes object Anycloud creates carries.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by=anycloud";

/// Why Kubernetes could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The URL or CA are unusable.
    #[error("configuring the Kubernetes client for {url}")]
    Config {
        /// The API URL.
        url: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The API did not answer as hoped.
    #[error("calling the Kubernetes API")]
    Call(#[from] kube::Error),
}

/// How long an ordinary call (a get, a list, an apply) may wait for the next bytes of its answer
/// before it fails: a hung API server fails it fast.
pub const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// A client for the cluster at `endpoint`, trusting the cluster CA and carrying the API token,
/// for ordinary calls: every read of its sockets times out after [`READ_TIMEOUT`].
pub fn client(endpoint: &KubeEndpoint, secrets: &ClusterSecrets) -> Result<kube::Client, KubeError> {
    build(endpoint, secrets, Some(READ_TIMEOUT))
}

/// A client for the cluster at `endpoint` for streams that may rightly stay silent for as long
/// as their container does: a followed log and an exec session. kube applies a read timeout to
/// every read of the socket, so this client has none; a stream that dies is noticed otherwise
/// (the follower checks its container when it is silent, exec sessions have kube's WebSocket
/// pings and the API's idle limit).
pub fn stream_client(endpoint: &KubeEndpoint, secrets: &ClusterSecrets) -> Result<kube::Client, KubeError> {
    build(endpoint, secrets, None)
}

fn build(
    endpoint: &KubeEndpoint,
    secrets: &ClusterSecrets,
    read_timeout: Option<std::time::Duration>,
) -> Result<kube::Client, KubeError> {
    install_crypto_provider();
    let url = &endpoint.url;
    let config_error =
        |source: Box<dyn std::error::Error + Send + Sync>| KubeError::Config { url: url.to_owned(), source };
    let uri: http::Uri = url.parse().map_err(|err: http::uri::InvalidUri| config_error(err.into()))?;
    let mut config = kube::Config::new(uri);
    config.tls_server_name = endpoint.tls_server_name.clone();
    config.root_cert = Some(vec![pem_to_der(&secrets.ca_cert_pem).map_err(config_error)?]);
    config.auth_info.token = Some(secrecy::SecretString::from(secrets.api_token.clone()));
    config.connect_timeout = Some(std::time::Duration::from_secs(5));
    config.read_timeout = read_timeout;
    kube::Client::try_from(config).map_err(|err| config_error(err.into()))
}

/// Both of rustls's crypto providers are linked (the AWS SDK brings aws-lc-rs, kube ring), so
/// rustls cannot pick one by itself: the process uses ring.
fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Another part of the process may have installed one first; either is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn pem_to_der(pem: &str) -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>> {
    let body: String = pem.lines().filter(|line| !line.starts_with("-----")).collect();
    Ok(base64::engine::general_purpose::STANDARD.decode(body)?)
}

/// A Kubernetes node, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    /// Node name.
    pub name: String,
    /// Whether its `Ready` condition is `True`.
    pub ready: bool,
    /// Whether it is the control plane.
    pub control_plane: bool,
}

/// Asks the API for its version: the cheapest proof that it answers.
pub async fn version(client: &kube::Client) -> Result<String, KubeError> {
    Ok(client.apiserver_version().await?.git_version)
}

/// Every node and whether it is Ready.
pub async fn nodes(client: &kube::Client) -> Result<Vec<NodeState>, KubeError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .map(|node| {
            let labels = node.metadata.labels.unwrap_or_default();
            let ready = node
                .status
                .and_then(|status| status.conditions)
                .unwrap_or_default()
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True");
            NodeState {
                name: node.metadata.name.unwrap_or_default(),
                ready,
                control_plane: labels.contains_key("node-role.kubernetes.io/control-plane"),
            }
        })
        .collect())
}

/// Deletes every Job, Deployment and Service Anycloud created, in every namespace, with
/// foreground propagation (their Pods go too). Returns how many objects were deleted.
pub async fn delete_workloads(client: &kube::Client) -> Result<usize, KubeError> {
    let selector = ListParams::default().labels(MANAGED_BY);
    let delete = DeleteParams::foreground();
    let mut deleted = 0;
    let jobs: Api<Job> = Api::all(client.clone());
    for job in jobs.list(&selector).await?.items {
        let api: Api<Job> = Api::namespaced(client.clone(), job.metadata.namespace.as_deref().unwrap_or("default"));
        deleted += delete_one(&api, job.metadata.name.as_deref(), &delete).await?;
    }
    let deployments: Api<Deployment> = Api::all(client.clone());
    for deployment in deployments.list(&selector).await?.items {
        let namespace = deployment.metadata.namespace.as_deref().unwrap_or("default");
        let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
        deleted += delete_one(&api, deployment.metadata.name.as_deref(), &delete).await?;
    }
    let services: Api<Service> = Api::all(client.clone());
    for service in services.list(&selector).await?.items {
        let namespace = service.metadata.namespace.as_deref().unwrap_or("default");
        let api: Api<Service> = Api::namespaced(client.clone(), namespace);
        deleted += delete_one(&api, service.metadata.name.as_deref(), &delete).await?;
    }
    Ok(deleted)
}

async fn delete_one<K>(api: &Api<K>, name: Option<&str>, params: &DeleteParams) -> Result<usize, KubeError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Some(name) = name else { return Ok(0) };
    match api.delete(name, params).await {
        Ok(_) => Ok(1),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(0),
        Err(err) => Err(err.into()),
    }
}
