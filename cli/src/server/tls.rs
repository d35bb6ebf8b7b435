//! HTTPS for an API: the certificate and key it was given (`--tls-cert`, `--tls-key`, PEM), served
//! with rustls (ring) in front of the same router. A hosted API listens beyond loopback and so
//! must use it; the CLI pins the certificate (or its CA) it was given, as a kubeconfig pins a
//! cluster's CA, and trusts nothing else for that API.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// The certificate chain and key an API serves HTTPS with.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// PEM certificate chain, the server's certificate first.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

/// Where an API's certificate comes from.
#[derive(Clone, Debug)]
pub enum TlsSource {
    /// Files it was given (`--tls-cert`, `--tls-key`).
    Files(TlsFiles),
    /// Issued at start for this address by the CA in the data directory (`--tls-address`): what
    /// a deployed API does, its CA restored from its checkpoint bucket.
    Issued {
        /// The IP address or DNS name clients reach it at.
        address: String,
    },
}

/// A loaded TLS configuration and the PEM a client pins.
pub struct Tls {
    /// The server side.
    pub config: Arc<rustls::ServerConfig>,
    /// The chain's last certificate (its CA, or the certificate itself if self-signed): what
    /// the CLI config pins.
    pub pinned_pem: String,
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    crate::commands::read_small_file(path, 1 << 20, &format!("TLS {what}"))
}

/// Loads (or issues) the certificate; the error says which file is wrong and how.
pub fn load(source: &TlsSource, data_dir: &Path) -> Result<Tls, String> {
    match source {
        TlsSource::Files(files) => {
            let cert = (read(&files.cert, "certificate")?, files.cert.display().to_string());
            let key = (read(&files.key, "key")?, files.key.display().to_string());
            configure(cert, key)
        }
        TlsSource::Issued { address } => {
            use anycloud_workflows::api_identity::{CA_CERT_FILE, CA_KEY_FILE, issue_server_certificate};
            let ca_cert = String::from_utf8_lossy(&read(&data_dir.join(CA_CERT_FILE), "CA certificate")?).into_owned();
            let ca_key = String::from_utf8_lossy(&read(&data_dir.join(CA_KEY_FILE), "CA key")?).into_owned();
            let (chain, key) = issue_server_certificate(&ca_cert, &ca_key, address).map_err(|err| {
                format!("issuing a certificate for {address} from the CA in {}: {err}", data_dir.display())
            })?;
            let issued = format!("the certificate issued for {address}");
            configure((chain.into_bytes(), issued.clone()), (key.into_bytes(), issued))
        }
    }
}

/// The server configuration of a PEM chain and key, each with what to call it in an error.
fn configure((cert_pem, cert_name): (Vec<u8>, String), (key_pem, key_name): (Vec<u8>, String)) -> Result<Tls, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|err| format!("the TLS certificate {cert_name} is not PEM: {err}"))?;
    let Some(last) = chain.last() else {
        return Err(format!("the TLS certificate {cert_name} holds no CERTIFICATE block"));
    };
    let pinned_pem = pem("CERTIFICATE", last);
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|err| format!("the TLS key {key_name} is not a PEM private key: {err}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| err.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|err| format!("the TLS key {key_name} does not go with the certificate {cert_name}: {err}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Tls { config: Arc::new(config), pinned_pem })
}

fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = body.as_bytes().chunks(64).map(|line| std::str::from_utf8(line).unwrap_or("")).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

/// Serves `app` over TLS until `stop` resolves. A connection whose handshake fails is dropped.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    config: Arc<rustls::ServerConfig>,
    stop: impl Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(config);
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
            () = &mut stop => return,
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let tls = match acceptor.accept(stream).await {
                Ok(tls) => tls,
                Err(err) => {
                    tracing::debug!(error = %err, "a TLS handshake failed");
                    return;
                }
            };
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                .with_upgrades()
                .await;
            if let Err(err) = served {
                tracing::debug!(error = %err, "an HTTPS connection ended with an error");
            }
        });
    }
}
