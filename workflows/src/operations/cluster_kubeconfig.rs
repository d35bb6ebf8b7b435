//! A cluster's kubeconfig: its API server, its CA and its admin token, so that people can use
//! their own Kubernetes tools on it (as `gcloud container clusters get-credentials` does).

use base64::Engine as _;

use crate::db::clusters::{self, Phase};
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::Kubeconfig;

use super::Operations;
use super::show_clusters::cluster_not_found;

impl Operations {
    /// The kubeconfig of the ready cluster `name`. It holds the cluster's admin token: whoever
    /// has it controls the cluster.
    pub async fn cluster_kubeconfig(&self, name: &str) -> Result<Kubeconfig, OperationError> {
        let cluster = clusters::get_by_name(&self.deps.db, name).await?.ok_or_else(|| cluster_not_found(name))?;
        if cluster.phase != Phase::Ready {
            return Err(Refusal::new(
                Code::ClusterNotReady,
                format!("cluster `{name}` is {}; a kubeconfig exists once it is ready", cluster.phase),
            )
            .into());
        }
        let unreachable = |err: &dyn std::fmt::Display| -> OperationError {
            Refusal::new(Code::ClusterUnreachable, format!("cluster `{name}`: {err}; try again")).into()
        };
        let secrets = self.deps.secrets(&cluster.id).await.map_err(|err| unreachable(&err))?;
        let endpoint = self.deps.kube_endpoint_of(&cluster).await.map_err(|err| unreachable(&err))?;
        let server = &endpoint.url;
        let tls_server_name = match &endpoint.tls_server_name {
            Some(name) => format!("\n    tls-server-name: {name}"),
            None => String::new(),
        };
        // The CA is pinned for a TLS server; a simulated cluster's API is plain HTTP on loopback.
        let ca = match server.starts_with("https://") {
            true => format!(
                "\n    certificate-authority-data: {}",
                base64::engine::general_purpose::STANDARD.encode(secrets.ca_cert_pem.as_bytes())
            ),
            false => String::new(),
        };
        let context = format!("anycloud-{name}");
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {context}\n  cluster:\n    server: {server}{ca}{tls_server_name}\nusers:\n- name: {context}-admin\n  user:\n    token: {token}\n\
             contexts:\n- name: {context}\n  context:\n    cluster: {context}\n    user: {context}-admin\n    \
             namespace: anycloud\ncurrent-context: {context}\n",
            token = secrets.api_token,
        );
        Ok(Kubeconfig { cluster: name.to_owned(), kubeconfig })
    }
}
