//! Endpoint overrides: where a credential (`--endpoint`) or a checkpoint bucket
//! (`--checkpoint-endpoint`) sends its calls instead of the provider's public API, and what of an
//! answer from one is kept.
//!
//! An API calls whatever endpoint a credential names, signed with that credential's keys, and
//! shows what answered. So by default an endpoint must be `https://` to a host that is not this
//! machine or its networks: no loopback, link-local (the metadata servers at 169.254.169.254),
//! private or unspecified address, no `localhost` or `metadata.google.internal`. A name is not
//! resolved here; TLS keeps a name that resolves to an inner address from being answered by a
//! service that holds no certificate for it. Plain `http://` and those addresses are allowed
//! only by the operator who starts the API (`api serve --allow-insecure-endpoints`, for a test
//! peer such as moto), never by a request.
//!
//! A provider's answer is kept where a person reads it (a credential's status, a step's error):
//! [`answer_text`] keeps the first [`ANSWER_LIMIT`] characters, with control characters
//! replaced, so that an endpoint cannot have a long body stored or write to a terminal.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Which endpoints an API accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EndpointPolicy {
    /// `https://` to a public host only.
    #[default]
    HttpsOnly,
    /// `http://` too, and loopback or private hosts: the operator's `--allow-insecure-endpoints`.
    AllowInsecure,
}

/// The flag that allows what [`EndpointPolicy::HttpsOnly`] refuses.
pub const ALLOW_INSECURE_FLAG: &str = "--allow-insecure-endpoints";

/// The most characters of a provider's answer kept in a message.
pub const ANSWER_LIMIT: usize = 1000;

/// Checks `endpoint` against `policy`; the error names `what` ("credential `team`", "the
/// checkpoint bucket") and says what to give instead.
pub fn check(what: &str, endpoint: &str, policy: EndpointPolicy) -> Result<(), String> {
    let example = "such as https://ec2.eu-west-1.amazonaws.com";
    let url = reqwest::Url::parse(endpoint).map_err(|_| {
        format!(
            "{what}: endpoint `{}` is not an http(s) URL; give one {example}, or leave the endpoint out to use the \
             provider's own",
            crate::shown::shown(endpoint)
        )
    })?;
    let shown = crate::shown::shown(endpoint);
    if !matches!(url.scheme(), "https" | "http") {
        return Err(format!("{what}: endpoint `{shown}` is not an http(s) URL; give one {example}"));
    }
    let Some(host) = url.host_str().filter(|host| !host.is_empty()) else {
        return Err(format!("{what}: endpoint `{shown}` names no host; give one {example}"));
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "{what}: endpoint `{shown}` carries a user name or password; give the endpoint alone (the credential \
             holds the keys)"
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "{what}: endpoint `{shown}` has a query or fragment; give scheme, host, port and path only"
        ));
    }
    if policy == EndpointPolicy::AllowInsecure {
        return Ok(());
    }
    if url.scheme() == "http" {
        return Err(format!(
            "{what}: endpoint `{shown}` is plain HTTP, where signed requests and what they carry cross the network \
             readable; give an https:// URL (a local test peer needs the API started with {ALLOW_INSECURE_FLAG})"
        ));
    }
    // An IPv6 host is written in brackets; the URL parser has already normalised IPv4 forms
    // such as `0x7f.1` to dotted decimal.
    let inner = match host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        Ok(ip) => inner_address(ip),
        Err(_) => inner_name(host),
    };
    if inner {
        return Err(format!(
            "{what}: endpoint `{shown}` is on this machine or an inner network (loopback, link-local such as the \
             metadata server, private, or unspecified), which the API would call with the credential's keys; give \
             the provider's public or private-link endpoint (the API must be started with {ALLOW_INSECURE_FLAG} \
             to call a local test peer)"
        ));
    }
    Ok(())
}

/// Names that mean this machine or a cloud's metadata server.
fn inner_name(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost") || name == "metadata.google.internal" || name == "metadata"
}

/// Addresses of this machine, its links and private networks.
fn inner_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => inner_v4(ip),
        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => inner_v4(v4),
            None => inner_v6(ip),
        },
    }
}

fn inner_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        // 100.64.0.0/10, carrier-grade NAT (shared address space).
        || (a == 100 && (64..128).contains(&b))
        || a == 0
}

fn inner_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        // fc00::/7, unique local; fe80::/10, link-local.
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
}

/// A provider's answer as it may be kept: control characters (line breaks, escapes) replaced
/// by spaces, and cut after [`ANSWER_LIMIT`] characters.
pub fn answer_text(text: &str) -> String {
    let mut out: String = text.chars().take(ANSWER_LIMIT).map(|c| if c.is_control() { ' ' } else { c }).collect();
    if text.chars().nth(ANSWER_LIMIT).is_some() {
        out.push_str(" [cut]");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(endpoint: &str, policy: EndpointPolicy) -> String {
        check("credential `team`", endpoint, policy).map(|()| format!("{endpoint} was accepted")).unwrap_or_else(|e| e)
    }

    #[test]
    fn only_public_https_endpoints_pass_by_default() {
        for good in [
            "https://ec2.eu-west-1.amazonaws.com",
            "https://compute.googleapis.com/compute/v1",
            "https://vpce-0a1b.ec2.us-east-1.vpce.amazonaws.com:8443/",
            "https://203.0.113.7",
        ] {
            assert_eq!(check("credential `team`", good, EndpointPolicy::HttpsOnly), Ok(()), "{good}");
        }
        let plain = refused("http://ec2.eu-west-1.amazonaws.com", EndpointPolicy::HttpsOnly);
        assert!(plain.contains("plain HTTP") && plain.contains(ALLOW_INSECURE_FLAG), "{plain}");
        for inner in [
            "https://127.0.0.1:5000",
            "https://localhost",
            "https://api.localhost.",
            "https://169.254.169.254/latest/meta-data",
            "https://metadata.google.internal",
            "https://10.0.0.8",
            "https://172.20.1.1",
            "https://192.168.1.1",
            "https://100.100.100.200",
            "https://0.0.0.0",
            "https://[::1]",
            "https://[::ffff:127.0.0.1]",
            "https://[fe80::1]",
            "https://[fd00:ec2::254]",
        ] {
            let message = refused(inner, EndpointPolicy::HttpsOnly);
            assert!(message.contains("inner network") && message.contains("credential `team`"), "{inner}: {message}");
        }
    }

    #[test]
    fn the_operators_setting_allows_plain_http_and_loopback_but_never_a_malformed_url() {
        for test_peer in ["http://127.0.0.1:5000", "https://localhost:9443", "http://moto:5000"] {
            assert_eq!(check("x", test_peer, EndpointPolicy::AllowInsecure), Ok(()), "{test_peer}");
        }
        for bad in [
            "not a url",
            "ftp://example.com",
            "https://user:pw@example.com",
            "https://example.com/?a=1",
            "file:///etc/passwd",
        ] {
            for policy in [EndpointPolicy::HttpsOnly, EndpointPolicy::AllowInsecure] {
                assert!(check("x", bad, policy).is_err(), "{bad} was accepted under {policy:?}");
            }
        }
    }

    #[test]
    fn answers_are_cut_and_lose_their_control_characters() {
        assert_eq!(answer_text("EC2 says\nno\u{1b}[31m"), "EC2 says no [31m");
        let long = "x".repeat(ANSWER_LIMIT + 5);
        let kept = answer_text(&long);
        assert!(kept.starts_with(&"x".repeat(ANSWER_LIMIT)) && kept.ends_with(" [cut]"), "{kept}");
        assert_eq!(answer_text(&"é".repeat(ANSWER_LIMIT)), "é".repeat(ANSWER_LIMIT));
    }
}
