//! The simulated control planes' HTTPS endpoint, as k3s serves its API on `:6443`: TLS with a
//! server certificate signed by the cluster's own CA, which the control plane's user-data carries
//! (k3s is given the same CA and signs its serving certificate with it). One listener serves every
//! simulated cluster: the client names the control plane in SNI (`{vm}.kube.sim.anycloud.internal`,
//! kubeconfig's `tls-server-name`), and the certificate for that name is made from that VM's CA on
//! first use. Behind TLS are the same routes as [`super::router`], and, as k3s serves its API,
//! the same at the root: a path outside `/sim/kube/` is the SNI's control plane's.
//!
//! It exists because clients refuse to send a bearer token over plain HTTP (kubectl does), and
//! because it makes the simulated API as strict as a real one: a client that does not pin the
//! cluster's CA cannot talk to it.
//!
//! It listens on loopback, where every simulated Pod runs too, and holds as the API's own listener
//! does (`cli/src/server/listener.rs`): a handshake must end within [`HANDSHAKE_TIMEOUT`], a
//! request header arrive within [`HEADER_READ_TIMEOUT`] (which also closes a kept-alive
//! connection idle that long), at most [`MAX_CONNECTIONS`] are open at once (one more is closed
//! at once), and a failed accept is tried again after a pause doubling from 5 ms to 1 s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anycloud_workflows::cluster::user_data;
use axum::Router;
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::LazyConfigAcceptor;

use super::Machines;

/// The DNS suffix a control plane's TLS name ends with.
pub const NAME_SUFFIX: &str = ".kube.sim.anycloud.internal";

/// The TLS server name of the simulated control plane `vm`.
pub fn server_name(vm: &str) -> String {
    format!("{vm}{NAME_SUFFIX}")
}

/// How long a TLS handshake may take, from the accept to its end.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a request header may take to arrive whole; also how long a kept-alive connection may
/// stay idle between requests.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The most connections open at once.
pub const MAX_CONNECTIONS: usize = 512;

/// The pause after a first failed accept, and the longest.
const ACCEPT_PAUSES: (Duration, Duration) = (Duration::from_millis(5), Duration::from_secs(1));

/// Serves `routes` over TLS on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, routes: Router, machines: Arc<dyn Machines>) {
    let certificates = Arc::new(Certificates { machines, made: Mutex::new(HashMap::new()) });
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut pause: Option<Duration> = None;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                pause = None;
                stream
            }
            Err(err) => {
                let wait = pause.map_or(ACCEPT_PAUSES.0, |pause| (pause * 2).min(ACCEPT_PAUSES.1));
                if pause.is_none() {
                    tracing::warn!(error = %err, "simulated Kubernetes: accepting a connection failed");
                }
                pause = Some(wait);
                tokio::time::sleep(wait).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!("simulated Kubernetes: {MAX_CONNECTIONS} connections are open: one more closed");
            continue;
        };
        let routes = routes.clone();
        let certificates = certificates.clone();
        tokio::spawn(async move {
            if let Err(err) = connection(stream, slot, routes, &certificates).await {
                tracing::debug!(error = %err, "simulated Kubernetes: a TLS connection failed");
            }
        });
    }
}

async fn connection(
    stream: tokio::net::TcpStream,
    slot: OwnedSemaphorePermit,
    routes: Router,
    certificates: &Certificates,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let handshake = async {
        let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream).await?;
        let name = start.client_hello().server_name().map(str::to_owned);
        let vm = name
            .as_deref()
            .and_then(|name| name.strip_suffix(NAME_SUFFIX))
            .ok_or_else(|| format!("no simulated control plane is named {name:?} (SNI)"))?
            .to_owned();
        let config = certificates.config_for(&vm).await?;
        let tls = start.into_stream(config).await?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>((vm, tls))
    };
    let (vm, tls) = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
        .await
        .map_err(|_| format!("the TLS handshake did not end within {} s", HANDSHAKE_TIMEOUT.as_secs()))??;
    let routes = TowerToHyperService::new(routes);
    let prefix = format!("/sim/kube/{vm}");
    let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
        at_root(&mut request, &prefix);
        routes.call(request)
    });
    hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(tls), service)
        .with_upgrades()
        .await?;
    // The slot is given back when the connection ends; an exec's WebSocket outlives it, bounded
    // by its own idle limit.
    drop(slot);
    Ok(())
}

/// Serves a path outside `/sim/kube/` as the SNI's control plane's, as k3s serves its API at
/// the root (kubectl's `get --raw` and the OpenAPI client address paths from the root).
fn at_root<B>(request: &mut hyper::Request<B>, prefix: &str) {
    let uri = request.uri();
    if uri.path().starts_with("/sim/kube/") {
        return;
    }
    let path_and_query = uri.path_and_query().map_or("/", |path| path.as_str());
    if let Ok(rewritten) = format!("{prefix}{path_and_query}").parse() {
        *request.uri_mut() = rewritten;
    }
}

/// The server configuration of each control plane, made once from its CA.
struct Certificates {
    machines: Arc<dyn Machines>,
    made: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

impl Certificates {
    async fn config_for(
        &self,
        vm: &str,
    ) -> Result<Arc<rustls::ServerConfig>, Box<dyn std::error::Error + Send + Sync>> {
        if let Some(config) = self.made.lock().map_err(|_| "poisoned")?.get(vm) {
            return Ok(config.clone());
        }
        let machine = self.machines.machine(vm).await?.filter(|machine| machine.control_plane);
        let machine = machine.ok_or_else(|| format!("no simulated control plane VM {vm}"))?;
        let (ca_cert, ca_key) = user_data::parse_control_plane_ca(&machine.user_data)
            .ok_or_else(|| format!("control plane VM {vm} was not given a cluster CA"))?;
        let config = Arc::new(server_config(vm, &ca_cert, &ca_key)?);
        self.made.lock().map_err(|_| "poisoned")?.insert(vm.to_owned(), config.clone());
        Ok(config)
    }
}

/// A serving certificate for `vm`'s names (its TLS name, `localhost`, `127.0.0.1`), signed by the
/// cluster CA, in a configuration that speaks HTTP/1.1.
fn server_config(
    vm: &str,
    ca_cert_pem: &str,
    ca_key_pem: &str,
) -> Result<rustls::ServerConfig, Box<dyn std::error::Error + Send + Sync>> {
    let issuer = rcgen::Issuer::from_ca_cert_pem(ca_cert_pem, rcgen::KeyPair::from_pem(ca_key_pem)?)?;
    let key = rcgen::KeyPair::generate()?;
    let mut params =
        rcgen::CertificateParams::new(vec![server_name(vm), "localhost".to_owned(), "127.0.0.1".to_owned()])?;
    params.distinguished_name.push(rcgen::DnType::CommonName, "k3s (simulated)");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer)?;
    let chain = vec![CertificateDer::from(cert.der().to_vec())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
