//! `GET /v1/openapi.json` of a real running API (hosted, on SQLite, with a simulated cluster):
//!
//! - it is an OpenAPI 3.1 document whose every `$ref` resolves;
//! - every operation it lists answers through the router with the token (never the router's own
//!   `404 NOT_FOUND` or `405`), and `401` without it (but health);
//! - every other method on its paths is `405`, so the document lists each path's methods exactly
//!   (the unit test `server::openapi::tests` holds its paths to `router()`'s);
//! - the answers of a live API (health, status, credentials, a cluster with its VMs, a job, the
//!   workflows, one run and its timeline) conform to the schemas it gives for them: every field
//!   sent is declared with its type, every required one is sent.
#![allow(clippy::unwrap_used)]

use anycloud_tests::e2e::{self, Api, HttpResponse};
use serde_json::Value;

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "DELETE", "PATCH"];

fn get(api: &Api, path: &str) -> HttpResponse {
    let auth = format!("Bearer {}", api.token());
    e2e::http(&api.url, "GET", path, &[("Authorization", &auth)], b"")
}

/// The document's schema at a `#/...` pointer.
fn resolve<'a>(document: &'a Value, reference: &str) -> &'a Value {
    let pointer = reference.strip_prefix('#').unwrap_or_else(|| panic!("not a local $ref: {reference}"));
    document.pointer(pointer).unwrap_or_else(|| panic!("$ref {reference} resolves to nothing"))
}

fn every_ref<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref") {
                found.push(reference);
            }
            map.values().for_each(|value| every_ref(value, found));
        }
        Value::Array(items) => items.iter().for_each(|value| every_ref(value, found)),
        _ => {}
    }
}

fn type_matches(value: &Value, kind: &str) -> bool {
    match kind {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    }
}

/// Checks `value` against a JSON Schema 2020-12 `schema` as far as the generated ones go
/// (`$ref`, `anyOf`/`oneOf`, `allOf`, `type`, `enum`, `const`, `properties`, `required`,
/// `additionalProperties`, `items`): every mismatch is pushed to `errors` with where it is.
fn conforms(value: &Value, schema: &Value, document: &Value, at: &str, errors: &mut Vec<String>) {
    let Some(schema) = schema.as_object() else {
        if schema == &Value::Bool(false) {
            errors.push(format!("{at}: nothing is allowed here"));
        }
        return;
    };
    if let Some(Value::String(reference)) = schema.get("$ref") {
        conforms(value, resolve(document, reference), document, at, errors);
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = schema.get(key) {
            let fits = branches.iter().any(|branch| {
                let mut missed = Vec::new();
                conforms(value, branch, document, at, &mut missed);
                missed.is_empty()
            });
            if !fits {
                errors.push(format!("{at}: {value} fits none of {key}"));
            }
        }
    }
    if let Some(Value::Array(all)) = schema.get("allOf") {
        all.iter().for_each(|part| conforms(value, part, document, at, errors));
    }
    match schema.get("type") {
        Some(Value::String(kind)) if !type_matches(value, kind) => errors.push(format!("{at}: {value} is not {kind}")),
        Some(Value::Array(kinds)) if !kinds.iter().filter_map(Value::as_str).any(|kind| type_matches(value, kind)) => {
            errors.push(format!("{at}: {value} is none of {kinds:?}"));
        }
        _ => {}
    }
    if let Some(Value::Array(choices)) = schema.get("enum")
        && !choices.contains(value)
    {
        errors.push(format!("{at}: {value} is not one of {choices:?}"));
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        errors.push(format!("{at}: {value} is not {constant}"));
    }
    if let Value::Object(fields) = value {
        let properties = schema.get("properties").and_then(Value::as_object);
        for required in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            let name = required.as_str().unwrap();
            if !fields.contains_key(name) {
                errors.push(format!("{at}: the required field `{name}` is missing"));
            }
        }
        for (name, field) in fields {
            match properties.and_then(|properties| properties.get(name)) {
                Some(declared) => conforms(field, declared, document, &format!("{at}.{name}"), errors),
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => errors.push(format!("{at}: `{name}` is not declared")),
                    Some(extra @ Value::Object(_)) => conforms(field, extra, document, &format!("{at}.{name}"), errors),
                    _ if properties.is_some() && !schema.contains_key("additionalProperties") => {
                        errors.push(format!("{at}: `{name}` is sent but not declared"));
                    }
                    _ => {}
                },
            }
        }
    }
    if let (Value::Array(items), Some(each)) = (value, schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            conforms(item, each, document, &format!("{at}[{i}]"), errors);
        }
    }
}

/// The schema of `GET path`'s `status` answer in the document.
fn answer_schema<'a>(document: &'a Value, path: &str, status: &str) -> &'a Value {
    let operation = &document["paths"][path]["get"];
    let schema = &operation["responses"][status]["content"]["application/json"]["schema"];
    assert!(!schema.is_null(), "the document gives no JSON answer for GET {path}: {operation:#}");
    schema
}

#[test]
fn the_openapi_document_lists_every_route_with_schemas_the_answers_conform_to() {
    let api = Api::start_hosted("openapi").with_demo_cluster(&[]);
    let job = api.cli(&["job", "busybox:1.36", "--cluster", "demo", "-i", "hello", "--wait", "--", "echo", "hi"]);
    job.expect_code(0);

    let served = get(&api, "/v1/openapi.json");
    assert_eq!(served.status, 200, "{served:?}");
    let content_type = served.headers.iter().find(|(name, _)| name == "content-type").map(|(_, value)| value.as_str());
    assert_eq!(content_type, Some("application/json"));
    let document = served.json();
    assert_eq!(document["openapi"], "3.1.0");
    let paths = document["paths"].as_object().unwrap();
    assert!(paths.len() >= 25, "{} paths", paths.len());
    let mut references = Vec::new();
    every_ref(&document, &mut references);
    assert!(references.len() > 40, "{} $refs", references.len());
    for reference in references {
        resolve(&document, reference);
    }
    let unauthenticated = e2e::http(&api.url, "GET", "/v1/openapi.json", &[], b"");
    assert_eq!(unauthenticated.status, 401, "{unauthenticated:?}");

    // Every operation answers through the router; every other method on its path is 405.
    let auth = format!("Bearer {}", api.token());
    for (path, item) in paths {
        let concrete = path.replace("{sha256}", &"0".repeat(64)).replace(['{', '}'], "");
        for method in METHODS {
            let listed = item.get(method.to_lowercase()).is_some();
            let answer = e2e::http(&api.url, method, &concrete, &[("Authorization", &auth)], b"");
            let code =
                if answer.status >= 400 { answer.json()["error"]["code"].as_str().map(str::to_owned) } else { None };
            if listed {
                assert_ne!(answer.status, 405, "{method} {path} is listed but the router refuses it: {answer:?}");
                assert_ne!(code.as_deref(), Some("NOT_FOUND"), "{method} {path} is listed but not routed: {answer:?}");
                let bare = e2e::http(&api.url, method, &concrete, &[], b"");
                let expected = if path == "/v1/health" { 200 } else { 401 };
                assert_eq!(bare.status, expected, "{method} {path} without the token: {bare:?}");
            } else {
                assert_eq!(answer.status, 405, "{method} {path} is not listed but the router takes it: {answer:?}");
            }
        }
    }

    // Live answers conform to the schemas the document gives for them.
    let workflows = get(&api, "/v1/workflows").json();
    let run = workflows["workflows"][0]["id"].as_str().unwrap().to_owned();
    let job_id = get(&api, "/v1/deployments").json()["deployments"][0]["deployment"]["id"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no deployment listed: {workflows:#}"));
    let checked = [
        ("/v1/health", "/v1/health".to_owned()),
        ("/v1/status", "/v1/status".to_owned()),
        ("/v1/credentials", "/v1/credentials".to_owned()),
        ("/v1/credentials/{name}", "/v1/credentials/sim".to_owned()),
        ("/v1/clusters", "/v1/clusters".to_owned()),
        ("/v1/clusters/{name}", "/v1/clusters/demo".to_owned()),
        ("/v1/deployments", "/v1/deployments".to_owned()),
        ("/v1/deployments/{id}", format!("/v1/deployments/{job_id}")),
        ("/v1/workflows", "/v1/workflows".to_owned()),
        ("/v1/workflows/{id}", format!("/v1/workflows/{run}")),
        ("/v1/workflows/{id}/events", format!("/v1/workflows/{run}/events")),
        ("/v1/secrets", "/v1/secrets".to_owned()),
    ];
    for (template, path) in checked {
        let answer = get(&api, &path);
        assert_eq!(answer.status, 200, "GET {path}: {answer:?}");
        let mut errors = Vec::new();
        conforms(&answer.json(), answer_schema(&document, template, "200"), &document, "answer", &mut errors);
        assert!(errors.is_empty(), "GET {path} does not conform to its schema:\n{}", errors.join("\n"));
    }

    // The check can fail: a cluster's detail is not a workflow's, nor a list with a stray field.
    let cluster = get(&api, "/v1/clusters/demo").json();
    let mut errors = Vec::new();
    conforms(&cluster, answer_schema(&document, "/v1/workflows/{id}", "200"), &document, "answer", &mut errors);
    assert!(errors.iter().any(|error| error.contains("required field `now`")), "{errors:?}");
    let mut stray = get(&api, "/v1/clusters").json();
    stray["clusters"][0]["cluster"]["surprise"] = Value::from(1);
    let mut errors = Vec::new();
    conforms(&stray, answer_schema(&document, "/v1/clusters", "200"), &document, "answer", &mut errors);
    assert!(errors.iter().any(|error| error.contains("`surprise`")), "{errors:?}");

    // And a refusal is the document's error shape.
    let refused = get(&api, "/v1/clusters/nope");
    assert_eq!(refused.status, 404);
    let error = &document["components"]["responses"]["Error"]["content"]["application/json"]["schema"];
    let mut errors = Vec::new();
    conforms(&refused.json(), error, &document, "error", &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
}
