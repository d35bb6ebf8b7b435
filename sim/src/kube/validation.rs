//! What the apiserver refuses with 422 Invalid, in its words: names that are not DNS-1123, Jobs,
//! Pods, Deployments and ReplicaSets without containers, images or a supported
//! `restartPolicy`, a Deployment whose selector does not match its template's labels, a Service
//! without ports or with a cluster IP outside the simulation's loopback range (or a protocol
//! other than TCP, which the simulation does not serve), Secrets as [`super::secrets`] checks
//! them. One rule is the
//! simulation's own: a container needs a `command`, because no image (and so no entrypoint) is
//! ever pulled.

use serde_json::Value;

use super::resources::Resource;
use super::status::Cause;

const SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', \
     and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is \
     '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must \
     start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is \
     '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// Whether `name` is a DNS-1123 label (`my-name`).
pub(crate) fn is_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// Whether `name` is a DNS-1123 subdomain (`example.com`).
pub(crate) fn is_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_label)
}

/// Every reason the apiserver would refuse this new (or applied) object.
pub(crate) fn validate(resource: &Resource, object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        causes.push(required("metadata.name", "name or generateName is required"));
    } else if resource.plural == "namespaces" && !is_label(name) {
        causes.push(invalid("metadata.name", name, LABEL));
    } else if !is_subdomain(name) {
        causes.push(invalid("metadata.name", name, SUBDOMAIN));
    } else if resource.plural == "jobs" && name.len() > 63 {
        causes.push(invalid("metadata.name", name, "must be no more than 63 characters"));
    }
    match resource.plural {
        "jobs" => {
            let spec = &object["spec"]["template"]["spec"];
            match spec["restartPolicy"].as_str() {
                Some("Never" | "OnFailure") => {}
                None => {
                    causes.push(required("spec.template.spec.restartPolicy", "valid values: \"OnFailure\", \"Never\""))
                }
                Some(other) => causes.push((
                    "spec.template.spec.restartPolicy".into(),
                    format!("Unsupported value: \"{other}\": supported values: \"OnFailure\", \"Never\""),
                    "FieldValueNotSupported",
                )),
            }
            containers(&mut causes, "spec.template.spec", spec);
        }
        "pods" => containers(&mut causes, "spec", &object["spec"]),
        "deployments" | "replicasets" => {
            let spec = &object["spec"];
            let selector = spec["selector"]["matchLabels"].as_object().filter(|labels| !labels.is_empty());
            match selector {
                None => causes.push(required("spec.selector", "")),
                Some(selector) => {
                    let labels = &spec["template"]["metadata"]["labels"];
                    if !selector.iter().all(|(key, value)| labels[key] == *value) {
                        causes.push((
                            "spec.template.metadata.labels".into(),
                            format!("Invalid value: {labels}: `selector` does not match template `labels`"),
                            "FieldValueInvalid",
                        ));
                    }
                }
            }
            if spec["replicas"].as_i64().is_some_and(|replicas| replicas < 0) {
                causes.push((
                    "spec.replicas".into(),
                    format!("Invalid value: {}: must be greater than or equal to 0", spec["replicas"]),
                    "FieldValueInvalid",
                ));
            }
            if let Some(policy) = spec["template"]["spec"]["restartPolicy"].as_str().filter(|p| *p != "Always") {
                causes.push((
                    "spec.template.spec.restartPolicy".into(),
                    format!("Unsupported value: \"{policy}\": supported values: \"Always\""),
                    "FieldValueNotSupported",
                ));
            }
            containers(&mut causes, "spec.template.spec", &spec["template"]["spec"]);
        }
        "services" => {
            let spec = &object["spec"];
            let ports = spec["ports"].as_array().map(Vec::as_slice).unwrap_or_default();
            let ip = spec["clusterIP"].as_str().unwrap_or_default();
            if ports.is_empty() && ip != "None" {
                causes.push(required("spec.ports", ""));
            }
            for (i, port) in ports.iter().enumerate() {
                if !port["port"].as_u64().is_some_and(|port| (1..=65535).contains(&port)) {
                    causes.push((
                        format!("spec.ports[{i}].port"),
                        format!("Invalid value: {}: must be between 1 and 65535, inclusive", port["port"]),
                        "FieldValueInvalid",
                    ));
                }
                if port["protocol"].as_str().is_some_and(|protocol| protocol != "TCP") {
                    causes.push((
                        format!("spec.ports[{i}].protocol"),
                        "Unsupported value: the simulated cluster serves TCP only".into(),
                        "FieldValueNotSupported",
                    ));
                }
            }
            if !ip.is_empty() && !crate::kube::cluster_ips::valid_cluster_ip(ip) {
                causes.push(invalid(
                    "spec.clusterIP",
                    ip,
                    "provided IP is not in the valid range. The range of valid IPs is 127.43.0.0/16",
                ));
            }
        }
        "secrets" => causes.extend(super::secrets::validate(object)),
        _ => {}
    }
    causes
}

fn containers(causes: &mut Vec<Cause>, at: &str, spec: &Value) {
    let containers = spec["containers"].as_array().map(Vec::as_slice).unwrap_or_default();
    if containers.is_empty() {
        causes.push(required(&format!("{at}.containers"), ""));
    }
    for (i, container) in containers.iter().enumerate() {
        let field = |name: &str| format!("{at}.containers[{i}].{name}");
        match container["name"].as_str() {
            None | Some("") => causes.push(required(&field("name"), "")),
            Some(name) if !is_label(name) => causes.push(invalid(&field("name"), name, LABEL)),
            Some(_) => {}
        }
        if container["image"].as_str().is_none_or(str::is_empty) {
            causes.push(required(&field("image"), ""));
        }
        let command = container["command"].as_array().map(Vec::as_slice).unwrap_or_default();
        if command.is_empty() || command.iter().any(|part| !part.is_string()) {
            causes.push(required(
                &field("command"),
                "the simulated cluster pulls no image, so it has no entrypoint to run: give the container a command",
            ));
        }
    }
}

fn required(field: &str, detail: &str) -> Cause {
    let message = if detail.is_empty() { "Required value".to_owned() } else { format!("Required value: {detail}") };
    (field.to_owned(), message, "FieldValueRequired")
}

fn invalid(field: &str, value: &str, detail: &str) -> Cause {
    (field.to_owned(), format!("Invalid value: \"{value}\": {detail}"), "FieldValueInvalid")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources::JOBS;

    #[test]
    fn names_are_dns_1123() {
        assert!(is_subdomain("hello.world-1"));
        assert!(!is_subdomain("Bad_Name"));
        assert!(!is_label("a.b"));
        assert!(!is_label("-a"));
    }

    #[test]
    fn a_job_needs_a_container_with_an_image_and_a_command() {
        let job = serde_json::json!({
            "metadata": { "name": "x" },
            "spec": { "template": { "spec": { "restartPolicy": "Never", "containers": [{ "name": "c" }] } } },
        });
        let fields: Vec<String> = validate(&JOBS, &job).into_iter().map(|(field, _, _)| field).collect();
        assert_eq!(fields, ["spec.template.spec.containers[0].image", "spec.template.spec.containers[0].command"]);
    }
}
