//! A hosted API's identity, made by `api.deploy` before its VM exists: the bearer token its
//! users present, and the certificate authority its TLS certificate is issued from. Both reach
//! the VM through the checkpoint bucket (never user-data) as identity files; the deployer keeps
//! the token sealed and the CA's certificate, which the CLI config pins. The VM issues its own
//! serving certificate from the CA at start, for the address it finds itself at, so a
//! replacement VM on another address is trusted by the same pin.

use serde::{Deserialize, Serialize};

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
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        params.distinguished_name.push(rcgen::DnType::CommonName, format!("anycloud API {api} CA"));
        let cert = params.self_signed(&key)?;
        Ok(Self {
            token: crate::cluster_secrets::random_hex(),
            ca_cert_pem: cert.pem(),
            ca_key_pem: key.serialize_pem(),
        })
    }
}

/// A serving certificate for `address` (an IP address or a DNS name) issued by the CA: the
/// chain (the certificate, then the CA's) and the new private key, both PEM.
pub fn issue_server_certificate(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    address: &str,
) -> Result<(String, String), rcgen::Error> {
    let issuer = rcgen::Issuer::from_ca_cert_pem(ca_cert_pem, rcgen::KeyPair::from_pem(ca_key_pem)?)?;
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec![address.to_owned()])?;
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("anycloud API at {address}"));
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer)?;
    Ok((format!("{}{ca_cert_pem}", cert.pem()), key.serialize_pem()))
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
}
