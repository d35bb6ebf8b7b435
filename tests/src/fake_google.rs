//! One endpoint for the fake Compute Engine ([`FakeGce`]), the fake Cloud Storage ([`FakeGcs`]),
//! the fake Secret Manager ([`FakeSecretManager`]) and the fake IAM Admin and Resource Manager
//! ([`FakeIam`]), as Google fronts its APIs: a Private Service Connect endpoint for all Google
//! APIs serves Compute's `/compute/v1/...`, Storage's `/storage/v1/...` and
//! `/upload/storage/v1/...`, Secret Manager's `/v1/projects/P/secrets...`, IAM's
//! `/v1/projects/P/serviceAccounts...` and Resource Manager's `/v3/projects/...` on one host.
//! The fakes that name service accounts ask the fake IAM whether they exist: a secret's binding
//! and an instance's account must be accounts IAM holds. A GCP credential's single
//! `--endpoint` override is therefore enough for a hosted API's VM and its bucket, and a test of
//! GCP hosting gives that credential this front.
//!
//! The front forwards each request, method, path, query, headers and body, to the fake that
//! serves its path, and answers with that fake's response: it adds nothing and decides nothing.
//! (Secret Manager and IAM are served in the front's own process: they have no server of their own.) Each fake
//! keeps its own inspection helpers ([`FakeGoogle::gce`], [`FakeGoogle::gcs`],
//! [`FakeGoogle::secrets`]).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::fake_gce::FakeGce;
use crate::fake_gcs::FakeGcs;
use crate::fake_iam::FakeIam;
use crate::fake_secret_manager::FakeSecretManager;

/// Headers that belong to one hop, not to the request or response the front forwards.
const HOP: [header::HeaderName; 4] =
    [header::HOST, header::CONTENT_LENGTH, header::TRANSFER_ENCODING, header::CONNECTION];

/// The two fakes behind one address.
pub struct FakeGoogle {
    gce: Arc<FakeGce>,
    gcs: FakeGcs,
    secrets: Arc<FakeSecretManager>,
    iam: Arc<FakeIam>,
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

struct Targets {
    gce: String,
    gcs: String,
    secrets: Arc<FakeSecretManager>,
    iam: Arc<FakeIam>,
    client: reqwest::Client,
}

impl FakeGoogle {
    /// Starts both fakes and the front on free ports of 127.0.0.1; returns once the front serves.
    pub fn start() -> Self {
        let gce = Arc::new(FakeGce::start());
        let gcs = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime to start the fake GCS server")
            .block_on(FakeGcs::start());
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("binding the fake Google front");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the front's address");
        let secrets = FakeSecretManager::new();
        let iam = FakeIam::new(crate::gcp_test_key::CLIENT_EMAIL);
        secrets.check_members_at(iam.clone());
        gce.check_service_accounts_at(iam.clone());
        let targets = Arc::new(Targets {
            gce: gce.url(),
            gcs: gcs.endpoint(),
            secrets: secrets.clone(),
            iam: iam.clone(),
            client: reqwest::Client::new(),
        });
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let (ready, serving) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("fake-google".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("the front's runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                    let app = Router::new().fallback(forward).with_state(targets);
                    let _ = ready.send(());
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(async {
                            let _ = stop.await;
                        })
                        .await;
                });
            })
            .expect("spawning the fake Google front");
        serving.recv().expect("the fake Google front started");
        Self { gce, gcs, secrets, iam, addr, shutdown: Some(shutdown) }
    }

    /// The endpoint to give a GCP credential (`http://127.0.0.1:PORT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The fake Compute Engine behind the front.
    pub fn gce(&self) -> &Arc<FakeGce> {
        &self.gce
    }

    /// The fake Cloud Storage behind the front.
    pub fn gcs(&self) -> &FakeGcs {
        &self.gcs
    }

    /// The fake Secret Manager behind the front.
    pub fn secrets(&self) -> &FakeSecretManager {
        &self.secrets
    }

    /// The fake IAM Admin and Resource Manager behind the front.
    pub fn iam(&self) -> &FakeIam {
        &self.iam
    }
}

impl Drop for FakeGoogle {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

/// Forwards one request to the fake whose path it is.
async fn forward(State(targets): State<Arc<Targets>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
        return (StatusCode::BAD_REQUEST, "the request's body could not be read").into_response();
    };
    let path = parts.uri.path();
    let iam_admin = path.starts_with("/v1/projects/") && path.split('/').nth(4) == Some("serviceAccounts");
    if iam_admin || path.starts_with("/v3/projects/") {
        return targets.iam.handle(&parts.method, path, &parts.headers, &body);
    }
    if parts.uri.path().starts_with("/v1/") {
        let query = parts.uri.query().unwrap_or_default();
        return targets.secrets.handle(&parts.method, parts.uri.path(), query, &parts.headers, &body);
    }
    let base = if parts.uri.path().starts_with("/compute/") { &targets.gce } else { &targets.gcs };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut forwarded = targets.client.request(parts.method, format!("{base}{path}")).body(body);
    for (name, value) in parts.headers.iter().filter(|(name, _)| !HOP.contains(name)) {
        forwarded = forwarded.header(name, value);
    }
    let answer = match forwarded.send().await {
        Ok(answer) => answer,
        Err(err) => return (StatusCode::BAD_GATEWAY, format!("the fake behind the front: {err}")).into_response(),
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    let Ok(bytes) = answer.bytes().await else {
        return (StatusCode::BAD_GATEWAY, "the fake's answer was cut").into_response();
    };
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    for (name, value) in headers.iter().filter(|(name, _)| !HOP.contains(name)) {
        response.headers_mut().append(name, value.clone());
    }
    response
}
