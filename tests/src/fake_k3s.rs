//! A stand-in for the k3s server of clusters whose VMs cannot boot here (moto's and the fake
//! Compute server's instances run no cloud-init). It answers the Kubernetes API calls the
//! workflows make (`/version`, nodes, and empty lists of Jobs, Deployments and Services) and
//! reports as nodes whatever its `nodes` function finds at the provider: a test passes a function
//! that lists the cluster's running worker VMs, as their kubelets would register. The API under
//! test reaches it through `ANYCLOUD_KUBE_URL_OVERRIDE`; the kube client code is the production one.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

/// A node the stand-in reports.
#[derive(Debug, Clone)]
pub struct FakeNode {
    /// Node name.
    pub name: String,
    /// Ready condition.
    pub ready: bool,
    /// Carries the control-plane role label.
    pub control_plane: bool,
}

type NodeSource = Arc<dyn Fn() -> Vec<FakeNode> + Send + Sync>;

/// The running stand-in.
pub struct FakeK3s {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl FakeK3s {
    /// Starts it on a free port of 127.0.0.1. `nodes` runs on a blocking thread for every
    /// node list, so it may call a provider synchronously.
    pub fn start(nodes: impl Fn() -> Vec<FakeNode> + Send + Sync + 'static) -> Self {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("binding the fake k3s server");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the fake k3s server's address");
        let source: NodeSource = Arc::new(nodes);
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("fake-k3s".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .expect("the fake k3s server's runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                    let app = Router::new()
                        .route("/version", get(version))
                        .route("/api/v1/nodes", get(nodes_list))
                        .route("/api/v1/services", get(empty_list))
                        .route("/apis/batch/v1/jobs", get(empty_list))
                        .route("/apis/apps/v1/deployments", get(empty_list))
                        .with_state(source);
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(async {
                            let _ = stop.await;
                        })
                        .await;
                });
            })
            .expect("spawning the fake k3s server");
        Self { addr, shutdown: Some(shutdown) }
    }

    /// The URL to pass as `ANYCLOUD_KUBE_URL_OVERRIDE`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for FakeK3s {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

/// The 401 to answer when no bearer token came.
fn rejection(headers: &HeaderMap) -> Option<Response> {
    let bearer = headers.get("authorization").and_then(|value| value.to_str().ok()).unwrap_or("");
    if bearer.starts_with("Bearer ") && bearer.len() > "Bearer ".len() {
        return None;
    }
    let body =
        json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Unauthorized", "code": 401 });
    Some((StatusCode::UNAUTHORIZED, axum::Json(body)).into_response())
}

async fn version(headers: HeaderMap) -> Response {
    if let Some(response) = rejection(&headers) {
        return response;
    }
    axum::Json(json!({
        "major": "1", "minor": "34", "gitVersion": "v1.34.1+k3s1 (test stand-in)", "gitCommit": "test",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go", "compiler": "gc",
        "platform": "linux/amd64",
    }))
    .into_response()
}

async fn nodes_list(State(source): State<NodeSource>, headers: HeaderMap) -> Response {
    if let Some(response) = rejection(&headers) {
        return response;
    }
    let nodes = match tokio::task::spawn_blocking(move || source()).await {
        Ok(nodes) => nodes,
        Err(err) => return (StatusCode::INTERNAL_SERVER_ERROR, format!("node source panicked: {err}")).into_response(),
    };
    let items: Vec<Value> = nodes
        .iter()
        .map(|node| {
            let mut labels = json!({ "kubernetes.io/hostname": node.name });
            if node.control_plane {
                labels["node-role.kubernetes.io/control-plane"] = json!("true");
            }
            json!({
                "metadata": { "name": node.name, "labels": labels },
                "status": { "conditions": [{ "type": "Ready", "status": if node.ready { "True" } else { "False" } }] },
            })
        })
        .collect();
    axum::Json(
        json!({ "kind": "NodeList", "apiVersion": "v1", "metadata": { "resourceVersion": "1" }, "items": items }),
    )
    .into_response()
}

async fn empty_list(headers: HeaderMap) -> Response {
    if let Some(response) = rejection(&headers) {
        return response;
    }
    axum::Json(json!({ "kind": "List", "apiVersion": "v1", "metadata": { "resourceVersion": "1" }, "items": [] }))
        .into_response()
}
