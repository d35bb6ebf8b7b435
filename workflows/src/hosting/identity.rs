//! A hosted API's identity, made by `api.deploy` before its VM exists: the bearer token its
//! users present, and the certificate authority its TLS certificate is issued from. Both reach
//! the VM through its provider's secret store (never user-data, never the bucket,
//! [`crate::hosting::keys`]); the deployer keeps the token sealed and the CA's certificate, which the
//! CLI config pins. The VM issues its own serving certificate from the CA at start, for the
//! address it finds itself at, so a replacement VM on another address is trusted by the same pin.
//!
//! Both certificates have bounded validity (docs/security.md, "CA keys"):
//!
//! - the CA is valid [`CA_VALIDITY`] (5 years) from its making, long enough that no operator
//!   meets its end by surprise in a project's life, short enough that a CA key copied once is
//!   not a key for ever; `api rotate-ca` ([`crate::workflows::api_rotate_ca`]) replaces it any time;
//! - a serving certificate is valid [`SERVING_VALIDITY`] (90 days, what ACME CAs issue), and the
//!   running API issues the next one when less than a third of its life is left
//!   ([`renewal_due`]), with no restart;
//! - both start [`CLOCK_SKEW`] (1 hour) before they are made, so that a client whose clock is a
//!   little behind the API's does not refuse a certificate made a moment ago.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long a hosted API's CA is valid, from its making.
pub const CA_VALIDITY: Duration = Duration::from_secs(5 * 365 * 24 * 3600);

/// How long a serving certificate is valid, from its issue.
pub const SERVING_VALIDITY: Duration = Duration::from_secs(90 * 24 * 3600);

/// How far before its making a certificate starts to be valid: room for clients' clocks.
pub const CLOCK_SKEW: Duration = Duration::from_secs(3600);

/// The identity file of the bearer token (the name `api serve` reads in its data directory).
pub const TOKEN_FILE: &str = "token";
/// The identity file of the TLS CA's certificate.
pub const CA_CERT_FILE: &str = "tls-ca.crt";
/// The identity file of the TLS CA's private key.
pub const CA_KEY_FILE: &str = "tls-ca.key";

/// The identity, open.
#[derive(Clone, Serialize, Deserialize)]
pub struct ApiIdentity {
    /// The bearer token.
    pub token: String,
    /// The CA's certificate (PEM): what clients pin.
    pub ca_cert_pem: String,
    /// The CA's private key (PEM).
    pub ca_key_pem: String,
}

impl std::fmt::Debug for ApiIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiIdentity(<sealed>)")
    }
}

impl ApiIdentity {
    /// A fresh token and a new CA named after the API.
    pub fn generate(api: &str) -> Result<Self, rcgen::Error> {
        let (ca_cert_pem, ca_key_pem) = new_ca(api)?;
        Ok(Self { token: crate::cluster::secrets::random_hex(), ca_cert_pem, ca_key_pem })
    }
}

/// A new CA for the API named `api`, valid [`CA_VALIDITY`] from [`CLOCK_SKEW`] ago: its
/// certificate and private key, PEM.
pub fn new_ca(api: &str) -> Result<(String, String), rcgen::Error> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
    // Two CAs of one API (before and after a rotation) are told apart by their names too.
    let made = time::OffsetDateTime::now_utc();
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("anycloud API {api} CA"));
    params.distinguished_name.push(rcgen::DnType::OrganizationalUnitName, format!("made {}", made.unix_timestamp()));
    (params.not_before, params.not_after) = validity(made, CA_VALIDITY);
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// From [`CLOCK_SKEW`] before `from` to `lifetime` after it.
fn validity(from: time::OffsetDateTime, lifetime: Duration) -> (time::OffsetDateTime, time::OffsetDateTime) {
    (from - CLOCK_SKEW, from + lifetime)
}

/// A serving certificate for `address` (an IP address or a DNS name) issued by the CA, valid
/// [`SERVING_VALIDITY`]: the chain (the certificate, then the CA's) and the new private key,
/// both PEM.
pub fn issue_server_certificate(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    address: &str,
) -> Result<(String, String), rcgen::Error> {
    issue_server_certificate_for(ca_cert_pem, ca_key_pem, address, SERVING_VALIDITY, CLOCK_SKEW)
}

/// [`issue_server_certificate`], valid from `skew` ago to `lifetime` from now; never past the
/// CA's own end, which a client would refuse it beyond.
pub fn issue_server_certificate_for(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    address: &str,
    lifetime: Duration,
    skew: Duration,
) -> Result<(String, String), rcgen::Error> {
    let ca_ends = validity_of(ca_cert_pem)
        .ok()
        .and_then(|(_, to)| time::OffsetDateTime::from_unix_timestamp(to).ok())
        .ok_or(rcgen::Error::CouldNotParseCertificate)?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(ca_cert_pem, rcgen::KeyPair::from_pem(ca_key_pem)?)?;
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec![address.to_owned()])?;
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("anycloud API at {address}"));
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let now = time::OffsetDateTime::now_utc();
    (params.not_before, params.not_after) = (now - skew, (now + lifetime).min(ca_ends));
    let cert = params.signed_by(&key, &issuer)?;
    Ok((format!("{}{ca_cert_pem}", cert.pem()), key.serialize_pem()))
}

/// The validity of the first certificate of `pem`: when it starts and ends, in seconds since
/// the epoch.
pub fn validity_of(pem: &str) -> Result<(i64, i64), String> {
    let Some(first) = pem_certificates(pem).into_iter().next() else {
        return Err("it holds no CERTIFICATE block".to_owned());
    };
    let (_, cert) = x509_parser::parse_x509_certificate(&first).map_err(|err| err.to_string())?;
    let validity = cert.validity();
    Ok((validity.not_before.timestamp(), validity.not_after.timestamp()))
}

/// A time in seconds since the epoch as people read it (RFC 3339, UTC).
pub fn shown_time(seconds: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(seconds).map_or_else(|_| format!("{seconds} s"), |t| t.to_string())
}

/// Whether a certificate valid from `not_before` to `not_after` (seconds since the epoch) is due
/// for renewal at `now`: when less than a third of its life is left. A third of 90 days is 30:
/// a renewal that fails (a CA key unreadable, a full disk) is retried for a month, in which
/// warnings say so, before any client sees an expired certificate.
pub fn renewal_due(not_before: i64, not_after: i64, now: i64) -> bool {
    let life = (not_after - not_before).max(0);
    not_after - now < life / 3
}

/// The certificates of `pem`, each as its own PEM block, in order.
pub fn pem_blocks(pem: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current = String::new();
    for line in pem.lines() {
        let line = line.trim();
        if line.starts_with("-----BEGIN CERTIFICATE") {
            current.clear();
        }
        if !line.is_empty() {
            current.push_str(line);
            current.push('\n');
        }
        if line.starts_with("-----END CERTIFICATE") {
            blocks.push(std::mem::take(&mut current));
        }
    }
    blocks
}

/// A PEM bundle of the certificates of `first` then those of `then` that `first` lacks: what the
/// CLI pins while a CA rotation is under way (the CA the API may still serve from, and the new).
pub fn bundle(first: &str, then: &str) -> String {
    let mut blocks = pem_blocks(first);
    for block in pem_blocks(then) {
        if !blocks.contains(&block) {
            blocks.push(block);
        }
    }
    blocks.concat()
}

/// The certificates of a PEM bundle (those that parse).
pub fn pem_certificates(pem: &str) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject as _;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()).filter_map(Result::ok).collect()
}

/// `builder`, trusting the certificates of `ca_pem` and nothing else.
pub fn trusting_only(builder: reqwest::ClientBuilder, ca_pem: &str) -> reqwest::ClientBuilder {
    builder.tls_certs_only(
        pem_certificates(ca_pem).into_iter().filter_map(|der| reqwest::Certificate::from_der(&der).ok()),
    )
}

/// Whether the API at `url` answers `GET /v1/health` over HTTPS with a certificate from `ca_pem`;
/// the error says what went wrong.
pub async fn health(url: &str, ca_pem: &str) -> Result<(), String> {
    let client = trusting_only(reqwest::Client::builder(), ca_pem)
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|err| anycloud_engine::error_chain(&err))?;
    let response =
        client.get(format!("{url}/v1/health")).send().await.map_err(|err| anycloud_engine::error_chain(&err))?;
    if response.status().is_success() { Ok(()) } else { Err(format!("it answered {}", response.status())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_issued_for_an_address_chains_to_the_ca() {
        let identity = ApiIdentity::generate("team-api").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(identity.token.len(), 48);
        let (chain, key) = issue_server_certificate(&identity.ca_cert_pem, &identity.ca_key_pem, "203.0.113.7")
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(chain.matches("BEGIN CERTIFICATE").count(), 2);
        assert!(chain.ends_with(&identity.ca_cert_pem));
        assert!(key.contains("PRIVATE KEY"));
        assert!(!format!("{identity:?}").contains(&identity.token));
    }

    const DAY: i64 = 24 * 3600;

    #[test]
    fn the_ca_and_the_serving_certificate_have_bounded_validity() {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let identity = ApiIdentity::generate("team-api").unwrap_or_else(|err| panic!("{err}"));
        let (ca_from, ca_to) = validity_of(&identity.ca_cert_pem).unwrap_or_else(|err| panic!("{err}"));
        // Five years and the hour of skew; it started an hour ago, not in 1975.
        assert_eq!(ca_to - ca_from, 5 * 365 * DAY + 3600);
        assert!((now - 3600 - 5..=now - 3600 + 5).contains(&ca_from), "{ca_from} vs {now}");
        let (chain, _) = issue_server_certificate(&identity.ca_cert_pem, &identity.ca_key_pem, "203.0.113.7")
            .unwrap_or_else(|err| panic!("{err}"));
        let (from, to) = validity_of(&chain).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(to - from, 90 * DAY + 3600);
        assert!((now - 3600 - 5..=now - 3600 + 5).contains(&from), "{from} vs {now}");
        // Not due at issue, nor at 59 days; due with less than 30 left.
        assert!(!renewal_due(from, to, now));
        assert!(!renewal_due(from, to, now + 59 * DAY));
        assert!(renewal_due(from, to, now + 61 * DAY));
        assert!(renewal_due(from, to, to + 1));
    }

    #[test]
    fn a_serving_certificate_never_outlives_its_ca() {
        let identity = ApiIdentity::generate("team-api").unwrap_or_else(|err| panic!("{err}"));
        let (_, ca_to) = validity_of(&identity.ca_cert_pem).unwrap_or_else(|err| panic!("{err}"));
        let long = Duration::from_secs(10 * 365 * 24 * 3600);
        let (chain, _) =
            issue_server_certificate_for(&identity.ca_cert_pem, &identity.ca_key_pem, "a.example", long, CLOCK_SKEW)
                .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(validity_of(&chain).map(|(_, to)| to), Ok(ca_to));
    }

    #[test]
    fn a_bundle_holds_each_ca_once_in_order() {
        let old = ApiIdentity::generate("a").unwrap_or_else(|err| panic!("{err}")).ca_cert_pem;
        let new = ApiIdentity::generate("a").unwrap_or_else(|err| panic!("{err}")).ca_cert_pem;
        assert_ne!(old, new);
        let both = bundle(&old, &new);
        assert_eq!(pem_blocks(&both), [old.clone(), new.clone()]);
        assert_eq!(bundle(&both, &new), both, "adding the new CA twice");
        assert_eq!(pem_certificates(&both).len(), 2);
        assert_eq!(validity_of("no pem"), Err("it holds no CERTIFICATE block".to_owned()));
    }
}
