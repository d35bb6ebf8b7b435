//! cloud-init user-data for a cluster's VMs: the control plane installs and starts the k3s
//! server with the cluster's CA and tokens; each capacity VM installs the k3s agent and joins.
//!
//! The scripts carry secrets (the join token, the API token, the CA key): they go to the
//! provider's launch call and nowhere else (not into step outputs, logs or `inspect`).

use crate::cluster_secrets::ClusterSecrets;

/// The k3s release the VMs install.
pub const K3S_VERSION: &str = "v1.34.1+k3s1";

/// The control plane's script.
pub fn control_plane(cluster_id: &str, secrets: &ClusterSecrets) -> String {
    let ClusterSecrets { join_token, api_token, ca_cert_pem, ca_key_pem } = secrets;
    format!(
        r#"#!/bin/sh
# anycloud cluster {cluster_id}: control plane
set -eu
tls=/var/lib/rancher/k3s/server/tls
mkdir -p "$tls" /etc/rancher/k3s
umask 077
cat > "$tls/server-ca.crt" <<'ANYCLOUD_EOF'
{ca_cert_pem}ANYCLOUD_EOF
cat > "$tls/server-ca.key" <<'ANYCLOUD_EOF'
{ca_key_pem}ANYCLOUD_EOF
cp "$tls/server-ca.crt" "$tls/client-ca.crt"
cp "$tls/server-ca.key" "$tls/client-ca.key"
cat > /etc/rancher/k3s/anycloud-tokens.csv <<'ANYCLOUD_EOF'
{api_token},anycloud,anycloud,system:masters
ANYCLOUD_EOF
public_ip=$(curl -sf http://169.254.169.254/latest/meta-data/public-ipv4 || true)
curl -sfL https://get.k3s.io | INSTALL_K3S_VERSION='{K3S_VERSION}' K3S_TOKEN='{join_token}' sh -s - server \
  --node-taint node-role.kubernetes.io/control-plane=true:NoSchedule \
  --node-label anycloud.dev/cluster={cluster_id} \
  --kube-apiserver-arg=token-auth-file=/etc/rancher/k3s/anycloud-tokens.csv \
  ${{public_ip:+--tls-san "$public_ip"}}
"#
    )
}

/// A capacity VM's script: joins the control plane at `server_address`.
pub fn worker(cluster_id: &str, vm_name: &str, server_address: &str, secrets: &ClusterSecrets) -> String {
    let join_token = &secrets.join_token;
    format!(
        r#"#!/bin/sh
# anycloud cluster {cluster_id}: capacity VM {vm_name}
set -eu
curl -sfL https://get.k3s.io | INSTALL_K3S_VERSION='{K3S_VERSION}' K3S_URL='https://{server_address}:6443' \
  K3S_TOKEN='{join_token}' sh -s - agent --node-name '{vm_name}' --node-label anycloud.dev/cluster={cluster_id}
"#
    )
}

/// What a worker's script says it joins: `(server address, join token, node name)`. The
/// simulated cloud reads it the way a booting VM would run it.
pub fn parse_worker(user_data: &str) -> Option<(String, String, String)> {
    let value = |key: &str| {
        let start = user_data.find(key)? + key.len();
        let rest = &user_data[start..];
        Some(rest[..rest.find('\'')?].to_owned())
    };
    let url = value("K3S_URL='https://")?;
    let address = url.strip_suffix(":6443")?.to_owned();
    Some((address, value("K3S_TOKEN='")?, value("--node-name '")?))
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
            join_token: "join123".into(),
            api_token: "api456".into(),
            ca_cert_pem: "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n".into(),
            ca_key_pem: "-----BEGIN PRIVATE KEY-----\ny\n-----END PRIVATE KEY-----\n".into(),
        }
    }

    #[test]
    fn a_worker_script_says_what_it_joins() {
        let script = worker("c1", "w0", "10.0.0.2", &secrets());
        assert_eq!(parse_worker(&script), Some(("10.0.0.2".into(), "join123".into(), "w0".into())));
    }

    #[test]
    fn a_control_plane_script_installs_the_api_token() {
        let script = control_plane("c1", &secrets());
        assert_eq!(parse_control_plane_token(&script).as_deref(), Some("api456"));
        assert!(script.contains("K3S_TOKEN='join123'"));
        assert!(script.contains("-----BEGIN PRIVATE KEY-----"));
        let (cert, key) = parse_control_plane_ca(&script).unwrap();
        assert_eq!(cert, secrets().ca_cert_pem);
        assert_eq!(key, secrets().ca_key_pem);
    }
}
