//! The names anycloud gives Compute Engine resources, and the request ids that make its inserts
//! idempotent (gcp_cloud.rs, "Names and labels" and "Idempotency").

use crate::cloud::CloudError;

/// The namespace of the UUID v5 request ids this provider derives.
const REQUEST_ID_NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x6f1e_2b7c_52a4_4c0e_9d38_4a0c_1f55_e7a1);

/// `ac-<first 12 alphanumerics of the cluster id, lowercased>`: the network tag, and the prefix of
/// every resource name of the cluster.
pub fn cluster_prefix(cluster_id: &str) -> Result<String, CloudError> {
    let short: String =
        cluster_id.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).take(12).collect();
    if short.is_empty() {
        return Err(CloudError::Terminal(format!("cluster id `{cluster_id}` gives no GCE name prefix")));
    }
    Ok(format!("ac-{short}"))
}

/// The GCE name of a VM of a cluster: `ac-<12 hex>-<vm name>`.
pub fn instance_name(cluster_id: &str, vm_name: &str) -> Result<String, CloudError> {
    Ok(format!("{}-{vm_name}", cluster_prefix(cluster_id)?))
}

/// A deterministic request id: UUID v5 of `key` and `what`.
pub(super) fn request_id(key: &str, what: &str) -> String {
    uuid::Uuid::new_v5(&REQUEST_ID_NAMESPACE, format!("{key}/{what}").as_bytes()).to_string()
}

/// Whether `name` is a GCE resource name: `[a-z]([-a-z0-9]{0,61}[a-z0-9])?`.
pub(super) fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.last() != Some(&b'-')
}

/// Whether `value` is a GCE label value: `[a-z0-9_-]{0,63}` (ASCII only here).
pub(super) fn valid_label_value(value: &str) -> bool {
    value.len() <= 63 && value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let id = "3f2a9c1e-77b0-4d2e-9a8b-0c1d2e3f4a5b";
        assert_eq!(cluster_prefix(id).ok().as_deref(), Some("ac-3f2a9c1e77b0"));
        assert_eq!(instance_name(id, "w0").ok().as_deref(), Some("ac-3f2a9c1e77b0-w0"));
        assert!(valid_name("ac-3f2a9c1e77b0-cp"));
        assert!(!valid_name("ac-"));
        assert!(!valid_name("1ac"));
        assert!(!valid_name("Ac"));
        assert!(valid_label_value(id));
        assert_eq!(request_id(id, "x"), request_id(id, "x"));
        assert_ne!(request_id(id, "x"), request_id(id, "y"));
    }
}
