//! The fake Cloud Storage's check of a V4 signed URL, as GCS documents it
//! (<https://cloud.google.com/storage/docs/access-control/signed-urls>, "Signing process" and
//! "Canonical requests"): the request's method, path, query (but the signature) and signed
//! headers make the canonical request; its SHA-256, the timestamp and the credential scope make
//! the string to sign; the signature must be the RSA-SHA256 (PKCS #1 v1.5) of that string by the
//! private key of the service account the credential names; and the URL is valid from
//! `X-Goog-Date` for `X-Goog-Expires` seconds (at most 7 days). A URL signed for `GET` does not
//! serve a `PUT` or a `DELETE`, since the method is in what was signed.
//!
//! Like GCS: an expired (or not yet valid) URL is 400 `ExpiredToken`, a signature that does not
//! match is 403 `SignatureDoesNotMatch`, a missing parameter 400; answers are XML. One difference,
//! written down: the fake listens on a port and GCS does not, and google-cloud-storage signs the
//! host without its port, so the fake compares the `Host` header without its port.
// Errors are the responses themselves, as in `fake_gcs.rs`; their size does not matter here.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;

/// The service accounts whose signatures the fake accepts: email -> public key (PKCS #1 DER).
#[derive(Clone, Default)]
pub struct Signers(HashMap<String, Vec<u8>>);

impl Signers {
    /// Trusts the key of `email`, given as its private key's PKCS #8 PEM (a service-account key
    /// file's `private_key`), as GCS trusts the keys of a service account.
    pub fn trust(&mut self, email: &str, private_key_pem: &str) {
        let body: String = private_key_pem.lines().filter(|line| !line.starts_with("-----")).collect();
        let der = base64::engine::general_purpose::STANDARD.decode(body.trim()).expect("the key's PEM");
        let pair = ring::signature::RsaKeyPair::from_pkcs8(&der).expect("an RSA key in PKCS #8");
        self.0.insert(email.to_owned(), ring::signature::KeyPair::public_key(&pair).as_ref().to_vec());
    }
}

/// Whether the request carries a signed URL's parameters (then it is checked here, not by bearer).
pub fn is_signed(query: &HashMap<String, String>) -> bool {
    query.contains_key("X-Goog-Signature")
}

/// Checks the signed URL of a request at `now`; `Err` is GCS's answer.
pub fn check(
    signers: &Signers,
    method: &Method,
    path: &str,
    raw_query: &str,
    headers: &HeaderMap,
    now: SystemTime,
) -> Result<(), Response> {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(raw_query.as_bytes()).into_owned().collect();
    let param = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let required = |name: &str| param(name).ok_or_else(|| xml(400, "InvalidArgument", &format!("Missing {name}.")));
    if required("X-Goog-Algorithm")? != "GOOG4-RSA-SHA256" {
        return Err(xml(400, "InvalidArgument", "Unsupported X-Goog-Algorithm."));
    }
    let credential = required("X-Goog-Credential")?;
    let date = required("X-Goog-Date")?;
    let expires: u64 = required("X-Goog-Expires")?
        .parse()
        .map_err(|_| xml(400, "InvalidArgument", "X-Goog-Expires is not a number of seconds."))?;
    let signed_headers = required("X-Goog-SignedHeaders")?;
    let signature = required("X-Goog-Signature")?;
    if expires > 604_800 {
        return Err(xml(400, "InvalidArgument", "Max allowed expiration interval is seven days 604800."));
    }
    let Some((email, scope)) = credential.split_once('/') else {
        return Err(xml(400, "InvalidArgument", "X-Goog-Credential is not EMAIL/SCOPE."));
    };
    let Some(issued) = parse_timestamp(date) else {
        return Err(xml(400, "InvalidArgument", "X-Goog-Date is not YYYYMMDDTHHMMSSZ."));
    };
    let now = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    if now + 60 < issued || now >= issued + expires {
        return Err(xml(400, "ExpiredToken", &format!("Request has expired: {date} + {expires} s.")));
    }
    // The canonical request, as the signer built it.
    let mut query: BTreeMap<&str, &str> = BTreeMap::new();
    for (k, v) in &pairs {
        if k != "X-Goog-Signature" {
            query.insert(k, v);
        }
    }
    let mut canonical_query = form_urlencoded::Serializer::new(String::new());
    for (k, v) in &query {
        canonical_query.append_pair(k, v);
    }
    let canonical_query = canonical_query.finish().replace("%7E", "~").replace('+', "%20");
    let mut canonical_headers = String::new();
    for name in signed_headers.split(';') {
        let value = if name == "host" {
            let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
            host.rsplit_once(':').map_or(host, |(h, _)| h).to_owned()
        } else {
            headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().trim().to_owned()
        };
        canonical_headers.push_str(&format!("{name}:{value}\n"));
    }
    let canonical_request =
        [method.as_str(), path, &canonical_query, &canonical_headers, signed_headers, "UNSIGNED-PAYLOAD"].join("\n");
    let digest = ring::digest::digest(&ring::digest::SHA256, canonical_request.as_bytes());
    let hex_digest: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let string_to_sign = ["GOOG4-RSA-SHA256", date, scope, &hex_digest].join("\n");
    let mismatch = || {
        xml(
            403,
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. Check your Google \
             secret key and signing method.",
        )
    };
    let Some(public_key) = signers.0.get(email) else { return Err(mismatch()) };
    let Some(signature) = decode_hex(signature) else { return Err(mismatch()) };
    ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, public_key)
        .verify(string_to_sign.as_bytes(), &signature)
        .map_err(|_| mismatch())
}

/// `YYYYMMDDTHHMMSSZ` as seconds since the epoch.
fn parse_timestamp(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    if bytes.len() != 16 || bytes[8] != b'T' || bytes[15] != b'Z' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hh, mm, ss) = (num(9..11)?, num(11..13)?, num(13..15)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// An error as GCS's XML API words it.
pub fn xml(status: u16, code: &str, message: &str) -> Response {
    let body =
        format!("<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message></Error>");
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    (status, [(header::CONTENT_TYPE, "application/xml; charset=UTF-8")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_read_as_utc() {
        assert_eq!(parse_timestamp("19700101T000000Z"), Some(0));
        assert_eq!(parse_timestamp("20241231T235959Z"), Some(1_735_689_599));
        assert_eq!(parse_timestamp("2024-12-31"), None);
    }
}
