//! HTTPS for an API: the certificate and key it was given (`--tls-cert`, `--tls-key`, PEM), or
//! one it issues itself from its CA (`--tls-address`: a deployed API), served with rustls (ring)
//! in front of the same router, by the listener ([`super::listener`]). A hosted API listens
//! beyond loopback and so must use it; the CLI pins the certificate (or its CA) it was given, as
//! a kubeconfig pins a cluster's CA, and trusts nothing else for that API.
//!
//! The certificate served is held by [`Serving`], which rustls asks at every handshake, so that
//! a new one is served from the next connection on, with no restart:
//!
//! - an issued certificate is valid 90 days
//!   ([`anycloud_workflows::hosting::identity::SERVING_VALIDITY`]); every [`RENEWAL_CHECK`] the API
//!   issues the next one from its CA when less than a third of its life is left
//!   ([`anycloud_workflows::hosting::identity::renewal_due`]);
//! - `POST /v1/tls/renew` issues one now, after reading the API's keys secret again when it has
//!   one (a deployed API): what `api.rotate_ca` asks of it once the secret holds a new CA;
//! - a certificate given as files is refused at start once expired, and warned about (at start
//!   and at every check) once less than a third of its life is left: the operator replaces the
//!   files and restarts the API.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use anycloud_workflows::hosting;
use anycloud_workflows::hosting::identity::{CA_CERT_FILE, CA_KEY_FILE, CLOCK_SKEW, SERVING_VALIDITY, shown_time};
use anycloud_workflows::wire::TlsRenewed;

use super::AppState;
use super::checkpoint::VmSecret;
use super::error::ApiError;

/// How often the API checks whether its certificate is due for renewal: hourly, a small part of
/// the 30 days a due certificate has left.
pub const RENEWAL_CHECK: Duration = Duration::from_secs(3600);

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
    /// a deployed API does, its CA read from its keys secret.
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
    /// The certificate served, renewed in place.
    pub serving: Arc<Serving>,
}

/// The certificate an API serves, which a renewal swaps.
#[derive(Debug)]
pub struct Serving {
    current: RwLock<Current>,
    source: TlsSource,
    data_dir: PathBuf,
    /// A deployed API's keys secret, read again by [`Serving::renew_from_keys`].
    keys_secret: Option<VmSecret>,
    /// How long an issued certificate is valid, and from how long before its issue.
    validity: (Duration, Duration),
}

#[derive(Debug, Clone)]
struct Current {
    key: Arc<CertifiedKey>,
    /// The chain's last certificate, PEM.
    ca_pem: String,
    not_before: i64,
    not_after: i64,
}

impl ResolvesServerCert for Serving {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|current| current.key.clone())
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    crate::commands::read_small_file(path, 1 << 20, &format!("TLS {what}"))
}

fn now() -> i64 {
    anycloud_workflows::now_ms() / 1000
}

/// Loads (or issues) the certificate; the error says which file is wrong and how.
pub fn load(source: &TlsSource, data_dir: &Path, keys_secret: Option<VmSecret>) -> Result<Tls, String> {
    load_for(source, data_dir, keys_secret, (SERVING_VALIDITY, CLOCK_SKEW))
}

/// [`load`], issuing certificates valid `validity`: how long from their issue, and from how long
/// before it.
pub fn load_for(
    source: &TlsSource,
    data_dir: &Path,
    keys_secret: Option<VmSecret>,
    validity: (Duration, Duration),
) -> Result<Tls, String> {
    let current = match source {
        TlsSource::Files(files) => {
            let cert = (read(&files.cert, "certificate")?, files.cert.display().to_string());
            let key = (read(&files.key, "key")?, files.key.display().to_string());
            let current = certified(cert, key)?;
            let name = files.cert.display();
            if current.not_after <= now() {
                return Err(format!(
                    "the TLS certificate {name} expired at {}: clients refuse it; give a current certificate and its \
                     key (--tls-cert, --tls-key)",
                    shown_time(current.not_after)
                ));
            }
            if let Some(warning) = ageing(&current, &name.to_string()) {
                println!("WARNING: {warning}");
                tracing::warn!("{warning}");
            }
            current
        }
        TlsSource::Issued { address } => issue(data_dir, address, validity)?,
    };
    let pinned_pem = current.ca_pem.clone();
    let serving = Arc::new(Serving {
        current: RwLock::new(current),
        source: source.clone(),
        data_dir: data_dir.to_owned(),
        keys_secret,
        validity,
    });
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| err.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(serving.clone());
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Tls { config: Arc::new(config), pinned_pem, serving })
}

/// A warning when a given certificate has less than a third of its life left.
fn ageing(current: &Current, name: &str) -> Option<String> {
    hosting::identity::renewal_due(current.not_before, current.not_after, now()).then(|| {
        format!(
            "the TLS certificate {name} expires at {}: replace it (--tls-cert, --tls-key) and restart the API \
             before then, or clients refuse it",
            shown_time(current.not_after)
        )
    })
}

/// A certificate for `address` issued from the CA in `data_dir`.
fn issue(data_dir: &Path, address: &str, (lifetime, skew): (Duration, Duration)) -> Result<Current, String> {
    let ca_cert = String::from_utf8_lossy(&read(&data_dir.join(CA_CERT_FILE), "CA certificate")?).into_owned();
    let ca_key = String::from_utf8_lossy(&read(&data_dir.join(CA_KEY_FILE), "CA key")?).into_owned();
    let (chain, key) = hosting::identity::issue_server_certificate_for(&ca_cert, &ca_key, address, lifetime, skew)
        .map_err(|err| format!("issuing a certificate for {address} from the CA in {}: {err}", data_dir.display()))?;
    let issued = format!("the certificate issued for {address}");
    certified((chain.into_bytes(), issued.clone()), (key.into_bytes(), issued))
}

/// The served form of a PEM chain and key, each with what to call it in an error.
fn certified(
    (cert_pem, cert_name): (Vec<u8>, String),
    (key_pem, key_name): (Vec<u8>, String),
) -> Result<Current, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|err| format!("the TLS certificate {cert_name} is not PEM: {err}"))?;
    let Some(last) = chain.last() else {
        return Err(format!("the TLS certificate {cert_name} holds no CERTIFICATE block"));
    };
    let ca_pem = pem("CERTIFICATE", last);
    let (not_before, not_after) = hosting::identity::validity_of(&pem("CERTIFICATE", &chain[0]))
        .map_err(|why| format!("the TLS certificate {cert_name} cannot be read: {why}"))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|err| format!("the TLS key {key_name} is not a PEM private key: {err}"))?;
    let provider = rustls::crypto::ring::default_provider();
    let key = CertifiedKey::from_der(chain, key, &provider)
        .map_err(|err| format!("the TLS key {key_name} does not go with the certificate {cert_name}: {err}"))?;
    Ok(Current { key: Arc::new(key), ca_pem, not_before, not_after })
}

impl Serving {
    /// When the certificate served stops being valid (seconds since the epoch).
    #[cfg(test)]
    pub fn not_after(&self) -> i64 {
        self.current.read().map_or(0, |current| current.not_after)
    }

    /// Issues a certificate from the CA in the data directory and serves it from the next
    /// handshake on; refused for a certificate given as files.
    pub fn renew(&self) -> Result<TlsRenewed, String> {
        let TlsSource::Issued { address } = &self.source else {
            return Err("this API serves the certificate it was given (--tls-cert): replace the files and restart \
                        it"
            .to_owned());
        };
        let next = issue(&self.data_dir, address, self.validity)?;
        let renewed = TlsRenewed { ca_pem: next.ca_pem.clone(), address: address.clone(), not_after: next.not_after };
        match self.current.write() {
            Ok(mut current) => *current = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
        Ok(renewed)
    }

    /// A deployed API: reads its keys secret again and writes the CA it holds where [`Self::renew`]
    /// reads it (the token and the sealing key the API runs with are read at start only); then
    /// renews.
    pub async fn renew_from_keys(&self) -> Result<TlsRenewed, String> {
        if let Some(secret) = &self.keys_secret {
            let keys =
                anycloud_workflows::hosting::keys::read(secret.store, &secret.secret, secret.endpoint.as_deref())
                    .await
                    .map_err(|why| format!("reading the API's keys secret {}: {why}", secret.secret))?;
            let files = [(CA_CERT_FILE, keys.ca_cert_pem.as_str()), (CA_KEY_FILE, keys.ca_key_pem.as_str())];
            super::checkpoint::write_private_files(&self.data_dir, &files)
                .map_err(|err| format!("writing the CA to {}: {err}", self.data_dir.display()))?;
        }
        self.renew()
    }

    /// Renews an issued certificate that is due ([`hosting::identity::renewal_due`]); for a given
    /// one, a warning when it is. `None` when nothing is due.
    pub fn check(&self, now: i64) -> Option<Result<String, String>> {
        let current = self.current.read().ok()?.clone();
        if !hosting::identity::renewal_due(current.not_before, current.not_after, now) {
            return None;
        }
        Some(match &self.source {
            TlsSource::Files(files) => Err(ageing(&current, &files.cert.display().to_string()).unwrap_or_default()),
            TlsSource::Issued { .. } => self.renew().map(|renewed| {
                format!(
                    "renewed the TLS certificate for {}: valid until {}",
                    renewed.address,
                    shown_time(renewed.not_after)
                )
            }),
        })
    }

    /// Checks every `every` until the task is dropped ([`Self::check`]), saying what it did.
    pub async fn keep_renewed(self: Arc<Self>, every: Duration) {
        loop {
            tokio::time::sleep(every).await;
            match self.check(now()) {
                None => {}
                Some(Ok(done)) => {
                    println!("{done}");
                    tracing::info!("{done}");
                }
                Some(Err(why)) => {
                    println!("WARNING: {why}");
                    tracing::warn!("{why}");
                }
            }
        }
    }
}

/// `POST /v1/tls/renew`: serves a new certificate from the API's CA (read again from its keys
/// secret, for a deployed API) from the next connection on.
pub async fn renew(State(state): State<AppState>) -> Result<Json<TlsRenewed>, ApiError> {
    let Some(serving) = state.tls.clone() else {
        return Err(ApiError::new(StatusCode::CONFLICT, "TLS_NOT_ISSUED", "this API serves plain HTTP on loopback"));
    };
    if let TlsSource::Files(_) = serving.source {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "TLS_NOT_ISSUED",
            "this API serves the certificate it was given (--tls-cert): replace the files and restart it",
        ));
    }
    match serving.renew_from_keys().await {
        Ok(renewed) => {
            println!(
                "renewed the TLS certificate for {}: valid until {}",
                renewed.address,
                shown_time(renewed.not_after)
            );
            Ok(Json(renewed))
        }
        Err(why) => {
            tracing::warn!(%why, "renewing the TLS certificate failed");
            Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "TLS_RENEWAL_FAILED", why))
        }
    }
}

fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = body.as_bytes().chunks(64).map(|line| std::str::from_utf8(line).unwrap_or("")).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    use anycloud_workflows::hosting::identity::ApiIdentity;

    /// The certificate the API at `port` serves, trusting only `ca_pem`: its validity.
    async fn served(port: u16, ca_pem: &str) -> (i64, i64) {
        let mut roots = rustls::RootCertStore::empty();
        for der in hosting::identity::pem_certificates(ca_pem) {
            roots.add(der).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let tls = connector.connect(name, tcp).await.unwrap();
        let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
        hosting::identity::validity_of(&pem("CERTIFICATE", &leaf)).unwrap()
    }

    #[tokio::test]
    async fn a_certificate_near_its_end_is_renewed_and_served_without_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let identity = ApiIdentity::generate("team-api").unwrap();
        std::fs::write(dir.path().join(CA_CERT_FILE), &identity.ca_cert_pem).unwrap();
        std::fs::write(dir.path().join(CA_KEY_FILE), &identity.ca_key_pem).unwrap();
        // Issued for 6 s: due once less than 2 s are left.
        let source = TlsSource::Issued { address: "127.0.0.1".into() };
        let tls = load_for(&source, dir.path(), None, (Duration::from_secs(6), Duration::ZERO)).unwrap();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(super::super::listener::serve(listener, app, Some(tls.config.clone()), 64, async {
            let _ = stopped.await;
        }));
        let first = served(port, &identity.ca_cert_pem).await;
        assert_eq!(first.1 - first.0, 6, "{first:?}");
        assert!(tls.serving.check(now()).is_none(), "not due at issue");
        // Due once less than a third of its life is left: the loop renews it, checking every
        // 100 ms, while the listener goes on serving.
        let renewing = tokio::spawn(tls.serving.clone().keep_renewed(Duration::from_millis(100)));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let renewed = loop {
            let now_served = served(port, &identity.ca_cert_pem).await;
            if now_served.1 > first.1 {
                break now_served;
            }
            assert!(tokio::time::Instant::now() < deadline, "never renewed: {now_served:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(renewed.1 - renewed.0, 6);
        assert!(renewed.1 - first.1 < 6, "renewed before the first one ended: {first:?} {renewed:?}");
        assert_eq!(tls.serving.not_after(), renewed.1);
        renewing.abort();
        let _ = stop.send(());
        server.await.unwrap();
    }

    #[test]
    fn an_expired_certificate_given_as_files_is_refused_and_a_late_one_warned_about() {
        let dir = tempfile::tempdir().unwrap();
        let identity = ApiIdentity::generate("team-api").unwrap();
        let cert = dir.path().join("tls.crt");
        let key = dir.path().join("tls.key");
        let files = TlsSource::Files(TlsFiles { cert: cert.clone(), key: key.clone() });
        // Valid for 1 s: expired a moment later.
        let (chain, private) = hosting::identity::issue_server_certificate_for(
            &identity.ca_cert_pem,
            &identity.ca_key_pem,
            "a.example",
            Duration::from_secs(1),
            Duration::ZERO,
        )
        .unwrap();
        std::fs::write(&cert, &chain).unwrap();
        std::fs::write(&key, &private).unwrap();
        std::thread::sleep(Duration::from_millis(2100));
        let Err(why) = load(&files, dir.path(), None) else { panic!("an expired certificate was loaded") };
        assert!(why.contains("tls.crt expired at") && why.contains("--tls-cert"), "{why}");
        // A current one with less than a third of its life left loads, and every check warns.
        let (chain, private) = hosting::identity::issue_server_certificate_for(
            &identity.ca_cert_pem,
            &identity.ca_key_pem,
            "a.example",
            Duration::from_secs(600),
            CLOCK_SKEW,
        )
        .unwrap();
        std::fs::write(&cert, &chain).unwrap();
        std::fs::write(&key, &private).unwrap();
        let tls = load(&files, dir.path(), None).unwrap();
        let Some(Err(warning)) = tls.serving.check(now()) else { panic!("no warning") };
        assert!(warning.contains("tls.crt expires at") && warning.contains("restart"), "{warning}");
        assert!(tls.serving.renew().unwrap_err().contains("--tls-cert"));
    }
}
