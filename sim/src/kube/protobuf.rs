//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), which kubectl's typed
//! clients send (`kubectl create job`, `create deployment`, ...) and do not retry as JSON when
//! refused. Read as the apiserver reads them ("Kubernetes Protobuf encoding" in the API
//! concepts): the magic `k8s\0`, then a `runtime.Unknown` whose `typeMeta` names the kind and
//! whose `raw` is the object, in the field numbers of `k8s.io/api`'s `generated.proto`.
//!
//! The fields decoded are those of the kinds the simulation serves that a client sets when it
//! creates one (metadata, a Job's or Deployment's spec, its Pod template, containers, ports,
//! variables, resources; a Service's ports and selector; a namespace's finalizers; a Secret's
//! data, type and immutability). Go's encoder
//! writes every non-pointer field, empty or not, so a field the table does not name is
//! accepted when it holds its zero value (an empty string, 0, an empty message, recursively)
//! and refused otherwise (415, asking for JSON), never silently dropped. Empty values of
//! non-pointer fields are left out of the JSON, as Go's `omitempty` leaves them out.

use serde_json::{Map, Value, json};

/// How one field is read.
#[derive(Clone, Copy)]
enum Kind {
    /// A string (left out when empty).
    Text,
    /// A non-pointer integer (left out when 0).
    Int,
    /// A pointer integer (kept when 0: it was set).
    SetInt,
    /// A non-pointer bool (left out when false).
    Flag,
    /// A pointer bool (kept when false).
    SetFlag,
    /// A nested message, by name.
    Message(&'static str),
    /// A repeated string.
    Texts,
    /// A repeated message, by name.
    Messages(&'static str),
    /// `map<string, string>`.
    TextMap,
    /// `map<string, Quantity>`.
    QuantityMap,
    /// `map<string, bytes>`, as JSON writes it: base64 values.
    BytesMap,
    /// `metav1.Time`.
    Time,
    /// `intstr.IntOrString`.
    IntOrString,
}

use Kind::{
    BytesMap, Flag, Int, IntOrString, Message, Messages, QuantityMap, SetFlag, SetInt, Text, TextMap, Texts, Time,
};

type Fields = &'static [(u64, &'static str, Kind)];

/// The messages decoded, with their field numbers (`generated.proto`).
const MESSAGES: &[(&str, Fields)] = &[
    ("Job", &[(1, "metadata", Message("ObjectMeta")), (2, "spec", Message("JobSpec"))]),
    ("Deployment", &[(1, "metadata", Message("ObjectMeta")), (2, "spec", Message("DeploymentSpec"))]),
    ("Pod", &[(1, "metadata", Message("ObjectMeta")), (2, "spec", Message("PodSpec"))]),
    ("Service", &[(1, "metadata", Message("ObjectMeta")), (2, "spec", Message("ServiceSpec"))]),
    ("Namespace", &[(1, "metadata", Message("ObjectMeta")), (2, "spec", Message("NamespaceSpec"))]),
    (
        "Secret",
        &[
            (1, "metadata", Message("ObjectMeta")),
            (2, "data", BytesMap),
            (3, "type", Text),
            (4, "stringData", TextMap),
            (5, "immutable", SetFlag),
        ],
    ),
    (
        "ObjectMeta",
        &[
            (1, "name", Text),
            (2, "generateName", Text),
            (3, "namespace", Text),
            (5, "uid", Text),
            (6, "resourceVersion", Text),
            (7, "generation", Int),
            (8, "creationTimestamp", Time),
            (11, "labels", TextMap),
            (12, "annotations", TextMap),
            (13, "ownerReferences", Messages("OwnerReference")),
            (14, "finalizers", Texts),
        ],
    ),
    (
        "OwnerReference",
        &[
            (1, "kind", Text),
            (3, "name", Text),
            (4, "uid", Text),
            (5, "apiVersion", Text),
            (6, "controller", SetFlag),
            (7, "blockOwnerDeletion", SetFlag),
        ],
    ),
    ("LabelSelector", &[(1, "matchLabels", TextMap), (2, "matchExpressions", Messages("LabelSelectorRequirement"))]),
    ("LabelSelectorRequirement", &[(1, "key", Text), (2, "operator", Text), (3, "values", Texts)]),
    (
        "JobSpec",
        &[
            (1, "parallelism", SetInt),
            (2, "completions", SetInt),
            (3, "activeDeadlineSeconds", SetInt),
            (4, "selector", Message("LabelSelector")),
            (5, "manualSelector", SetFlag),
            (6, "template", Message("PodTemplateSpec")),
            (7, "backoffLimit", SetInt),
            (8, "ttlSecondsAfterFinished", SetInt),
            (9, "completionMode", Text),
            (10, "suspend", SetFlag),
            (12, "backoffLimitPerIndex", SetInt),
            (13, "maxFailedIndexes", SetInt),
            (14, "podReplacementPolicy", Text),
            (15, "managedBy", Text),
        ],
    ),
    (
        "DeploymentSpec",
        &[
            (1, "replicas", SetInt),
            (2, "selector", Message("LabelSelector")),
            (3, "template", Message("PodTemplateSpec")),
            (4, "strategy", Message("DeploymentStrategy")),
            (5, "minReadySeconds", Int),
            (6, "revisionHistoryLimit", SetInt),
            (7, "paused", Flag),
            (9, "progressDeadlineSeconds", SetInt),
        ],
    ),
    ("DeploymentStrategy", &[(1, "type", Text), (2, "rollingUpdate", Message("RollingUpdateDeployment"))]),
    ("RollingUpdateDeployment", &[(1, "maxUnavailable", IntOrString), (2, "maxSurge", IntOrString)]),
    ("PodTemplateSpec", &[(1, "metadata", Message("ObjectMeta")), (2, "spec", Message("PodSpec"))]),
    (
        "PodSpec",
        &[
            (2, "containers", Messages("Container")),
            (3, "restartPolicy", Text),
            (4, "terminationGracePeriodSeconds", SetInt),
            (5, "activeDeadlineSeconds", SetInt),
            (6, "dnsPolicy", Text),
            (7, "nodeSelector", TextMap),
            (8, "serviceAccountName", Text),
            (9, "serviceAccount", Text),
            (10, "nodeName", Text),
            (11, "hostNetwork", Flag),
            (12, "hostPID", Flag),
            (13, "hostIPC", Flag),
            (16, "hostname", Text),
            (17, "subdomain", Text),
            (19, "schedulerName", Text),
            (20, "initContainers", Messages("Container")),
            (21, "automountServiceAccountToken", SetFlag),
            (24, "priorityClassName", Text),
            (25, "priority", SetInt),
            (29, "runtimeClassName", Text),
            (30, "enableServiceLinks", SetFlag),
            (31, "preemptionPolicy", Text),
            (41, "hostnameOverride", Text),
        ],
    ),
    (
        "Container",
        &[
            (1, "name", Text),
            (2, "image", Text),
            (3, "command", Texts),
            (4, "args", Texts),
            (5, "workingDir", Text),
            (6, "ports", Messages("ContainerPort")),
            (7, "env", Messages("EnvVar")),
            (8, "resources", Message("ResourceRequirements")),
            (13, "terminationMessagePath", Text),
            (14, "imagePullPolicy", Text),
            (16, "stdin", Flag),
            (17, "stdinOnce", Flag),
            (18, "tty", Flag),
            (20, "terminationMessagePolicy", Text),
            (24, "restartPolicy", Text),
        ],
    ),
    (
        "ContainerPort",
        &[
            (1, "name", Text),
            (2, "hostPort", Int),
            (3, "containerPort", Int),
            (4, "protocol", Text),
            (5, "hostIP", Text),
        ],
    ),
    ("EnvVar", &[(1, "name", Text), (2, "value", Text)]),
    ("ResourceRequirements", &[(1, "limits", QuantityMap), (2, "requests", QuantityMap)]),
    (
        "ServiceSpec",
        &[
            (1, "ports", Messages("ServicePort")),
            (2, "selector", TextMap),
            (3, "clusterIP", Text),
            (4, "type", Text),
            (7, "sessionAffinity", Text),
            (17, "ipFamilyPolicy", Text),
            (18, "clusterIPs", Texts),
            (19, "ipFamilies", Texts),
            (22, "internalTrafficPolicy", Text),
        ],
    ),
    (
        "ServicePort",
        &[
            (1, "name", Text),
            (2, "protocol", Text),
            (3, "port", Int),
            (4, "targetPort", IntOrString),
            (5, "nodePort", Int),
            (6, "appProtocol", Text),
        ],
    ),
    ("NamespaceSpec", &[(1, "finalizers", Texts)]),
];

/// The magic that starts a Kubernetes protobuf body.
const MAGIC: &[u8] = b"k8s\0";

/// The object a protobuf body holds, as JSON; or why it cannot be read.
pub(crate) fn decode(body: &[u8]) -> Result<Value, String> {
    let envelope = body.strip_prefix(MAGIC).ok_or("the body does not start with the protobuf magic k8s\\0")?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (number, value) in fields(envelope)? {
        match (number, value) {
            (1, Wire::Bytes(type_meta)) => {
                for (number, value) in fields(type_meta)? {
                    match (number, value) {
                        (1, Wire::Bytes(text)) => api_version = utf8(text)?,
                        (2, Wire::Bytes(text)) => kind = utf8(text)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(bytes)) => raw = bytes,
            (3, Wire::Bytes(encoding)) if !encoding.is_empty() => {
                return Err("a content-encoded protobuf body is not read here".into());
            }
            _ => {}
        }
    }
    let mut object = message(&kind, raw)?;
    object.insert("apiVersion".into(), json!(api_version));
    object.insert("kind".into(), json!(kind));
    Ok(Value::Object(object))
}

/// One field's value as the wire carries it.
#[derive(Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed(u64),
}

fn varint(bytes: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at).ok_or("a truncated varint")?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("a varint longer than 64 bits".into())
}

/// The fields of a message, in order.
fn fields(bytes: &[u8]) -> Result<Vec<(u64, Wire<'_>)>, String> {
    let mut at = 0;
    let mut all = Vec::new();
    while at < bytes.len() {
        let key = varint(bytes, &mut at)?;
        let value = match key & 7 {
            0 => Wire::Varint(varint(bytes, &mut at)?),
            2 => {
                let length = usize::try_from(varint(bytes, &mut at)?).map_err(|_| "a field too long")?;
                let end = at.checked_add(length).filter(|end| *end <= bytes.len()).ok_or("a truncated field")?;
                let value = &bytes[at..end];
                at = end;
                Wire::Bytes(value)
            }
            1 | 5 => {
                let width = if key & 7 == 1 { 8 } else { 4 };
                let end = at.checked_add(width).filter(|end| *end <= bytes.len()).ok_or("a truncated field")?;
                let value = bytes[at..end].iter().rev().fold(0u64, |sum, byte| (sum << 8) | u64::from(*byte));
                at = end;
                Wire::Fixed(value)
            }
            other => return Err(format!("wire type {other} is not read here")),
        };
        all.push((key >> 3, value));
    }
    Ok(all)
}

/// Whether a value is its type's zero: 0, empty, or a message of zeros.
fn zero(value: Wire<'_>) -> bool {
    match value {
        Wire::Varint(value) | Wire::Fixed(value) => value == 0,
        Wire::Bytes(bytes) => {
            bytes.is_empty() || fields(bytes).is_ok_and(|fields| fields.into_iter().all(|(_, value)| zero(value)))
        }
    }
}

fn utf8(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string that is not UTF-8".into())
}

fn signed(value: u64) -> i64 {
    i64::from_ne_bytes(value.to_ne_bytes())
}

fn message(name: &str, bytes: &[u8]) -> Result<Map<String, Value>, String> {
    let table = MESSAGES.iter().find(|(message, _)| *message == name).map(|(_, fields)| *fields);
    let table = table.ok_or_else(|| format!("a {name} in protobuf is not read here"))?;
    let mut object = Map::new();
    for (number, value) in fields(bytes)? {
        let Some((_, field, kind)) = table.iter().find(|(known, _, _)| *known == number) else {
            if zero(value) {
                continue;
            }
            return Err(format!("field {number} of {name} is not read here"));
        };
        let field = (*field).to_owned();
        match (*kind, value) {
            (Text, Wire::Bytes(text)) => {
                let text = utf8(text)?;
                if !text.is_empty() {
                    object.insert(field, json!(text));
                }
            }
            (Int, Wire::Varint(number)) => {
                if number != 0 {
                    object.insert(field, json!(signed(number)));
                }
            }
            (SetInt, Wire::Varint(number)) => drop(object.insert(field, json!(signed(number)))),
            (Flag, Wire::Varint(flag)) => {
                if flag != 0 {
                    object.insert(field, json!(true));
                }
            }
            (SetFlag, Wire::Varint(flag)) => drop(object.insert(field, json!(flag != 0))),
            (Message(inner), Wire::Bytes(bytes)) => {
                let inner = message(inner, bytes)?;
                if !inner.is_empty() {
                    object.insert(field, Value::Object(inner));
                }
            }
            (Texts, Wire::Bytes(text)) => push(&mut object, field, json!(utf8(text)?)),
            (Messages(inner), Wire::Bytes(bytes)) => push(&mut object, field, Value::Object(message(inner, bytes)?)),
            (TextMap | QuantityMap | BytesMap, Wire::Bytes(entry)) => {
                let (mut key, mut mapped) = (String::new(), String::new());
                for (number, value) in fields(entry)? {
                    match (number, value, *kind) {
                        (1, Wire::Bytes(text), _) => key = utf8(text)?,
                        (2, Wire::Bytes(text), TextMap) => mapped = utf8(text)?,
                        (2, Wire::Bytes(bytes), BytesMap) => {
                            mapped = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes);
                        }
                        // A Quantity is a message whose field 1 is its string.
                        (2, Wire::Bytes(quantity), _) => {
                            for (number, value) in fields(quantity)? {
                                if let (1, Wire::Bytes(text)) = (number, value) {
                                    mapped = utf8(text)?;
                                }
                            }
                        }
                        _ => {}
                    }
                }
                let map = object.entry(field).or_insert_with(|| json!({}));
                if let Some(map) = map.as_object_mut() {
                    map.insert(key, json!(mapped));
                }
            }
            (Time, Wire::Bytes(bytes)) => {
                let (mut seconds, mut nanos) = (0i64, 0i64);
                for (number, value) in fields(bytes)? {
                    match (number, value) {
                        (1, Wire::Varint(value)) => seconds = signed(value),
                        (2, Wire::Varint(value)) => nanos = signed(value),
                        _ => {}
                    }
                }
                if seconds != 0 || nanos != 0 {
                    let time = jiff::Timestamp::from_second(seconds).map_err(|err| err.to_string())?;
                    object.insert(field, json!(time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()));
                }
            }
            (IntOrString, Wire::Bytes(bytes)) => {
                let (mut is_string, mut int, mut text) = (false, 0i64, String::new());
                for (number, value) in fields(bytes)? {
                    match (number, value) {
                        (1, Wire::Varint(kind)) => is_string = kind == 1,
                        (2, Wire::Varint(value)) => int = signed(value),
                        (3, Wire::Bytes(value)) => text = utf8(value)?,
                        _ => {}
                    }
                }
                object.insert(field, if is_string { json!(text) } else { json!(int) });
            }
            _ => return Err(format!("field {number} of {name} has an unexpected wire type")),
        }
    }
    Ok(object)
}

fn push(object: &mut Map<String, Value>, field: String, item: Value) {
    if let Some(list) = object.entry(field).or_insert_with(|| json!([])).as_array_mut() {
        list.push(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tagged(number: u64, wire: u64, body: &[u8]) -> Vec<u8> {
        let mut key = (number << 3) | wire;
        let mut out = Vec::new();
        while key >= 0x80 {
            out.push(u8::try_from(key & 0x7f).unwrap() | 0x80);
            key >>= 7;
        }
        out.push(u8::try_from(key).unwrap());
        if wire == 2 {
            out.push(u8::try_from(body.len()).unwrap());
        }
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn a_job_as_kubectl_create_sends_it() {
        let container = [
            tagged(1, 2, b"main"),
            tagged(2, 2, b"busybox"),
            tagged(3, 2, b"echo"),
            tagged(13, 2, b""),
            tagged(16, 0, &[0]),
        ]
        .concat();
        let pod_spec = [tagged(2, 2, &container), tagged(3, 2, b"Never"), tagged(11, 0, &[0])].concat();
        let template = [tagged(1, 2, &tagged(8, 2, b"")), tagged(2, 2, &pod_spec)].concat();
        let spec = [tagged(6, 2, &template), tagged(7, 0, &[0])].concat();
        let status = [tagged(4, 0, &[0]), tagged(5, 0, &[0])].concat();
        let job = [tagged(1, 2, &tagged(1, 2, b"made")), tagged(2, 2, &spec), tagged(3, 2, &status)].concat();
        let type_meta = [tagged(1, 2, b"batch/v1"), tagged(2, 2, b"Job")].concat();
        let body = [MAGIC.to_vec(), tagged(1, 2, &type_meta), tagged(2, 2, &job)].concat();
        let decoded = decode(&body).unwrap();
        assert_eq!(
            decoded,
            json!({ "apiVersion": "batch/v1", "kind": "Job", "metadata": { "name": "made" }, "spec": {
                "backoffLimit": 0,
                "template": { "spec": { "restartPolicy": "Never", "containers": [{ "name": "main", "image": "busybox", "command": ["echo"] }] } },
            } })
        );
        let unread = [MAGIC.to_vec(), tagged(1, 2, &type_meta), tagged(2, 2, &tagged(9, 2, b"x"))].concat();
        assert!(decode(&unread).unwrap_err().contains("field 9 of Job"));
    }
}
