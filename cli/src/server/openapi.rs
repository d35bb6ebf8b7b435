//! `GET /v1/openapi.json`: the HTTP API as an OpenAPI 3.1 document. Nothing in it is written by
//! hand but the list below of each route's method, path, purpose and the Rust types it reads
//! and answers: the schemas are generated (schemars, JSON Schema 2020-12, which is OpenAPI
//! 3.1's own) from the types the server answers with and the CLI's client reads
//! (`anycloud_workflows::wire`), their doc comments becoming the descriptions. A test holds the
//! list to the router: every path `router()` serves is here with exactly its methods, and every
//! operation here answers through the router (`tests/tests/api_openapi.rs`).

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use schemars::generate::{Contract, SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};

use anycloud_workflows::hosting::binary::StagedBinary;
use anycloud_workflows::wire::*;

/// How a route's request carries data besides its path.
enum Body {
    /// No body.
    None,
    /// `application/json`, this type.
    Json(Gen),
    /// `application/octet-stream`, streamed.
    Bytes,
}

/// What a route answers when it succeeds.
enum Answer {
    /// `application/json` with this status and type.
    Json(u16, Gen),
    /// `text/plain`, streamed.
    Text,
    /// `101`: a WebSocket.
    WebSocket,
}

/// Makes a type's schema (a `$ref` into `components/schemas`, for a named type).
type Gen = fn(&mut SchemaGenerator) -> Schema;

fn of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// A query's fields, from its type's own schema (an object of properties).
fn fields<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    T::json_schema(generator)
}

/// One operation: method, path (axum's `{param}` is OpenAPI's too), id, summary, query, body,
/// answer, and whether it needs the bearer token.
struct Operation {
    method: &'static str,
    path: &'static str,
    id: &'static str,
    summary: &'static str,
    query: Option<Gen>,
    body: Body,
    answer: Answer,
    public: bool,
}

const fn op(method: &'static str, path: &'static str, id: &'static str, summary: &'static str) -> Operation {
    Operation { method, path, id, summary, query: None, body: Body::None, answer: Answer::Text, public: false }
}

impl Operation {
    const fn query(mut self, query: Gen) -> Self {
        self.query = Some(query);
        self
    }
    const fn body(mut self, body: Gen) -> Self {
        self.body = Body::Json(body);
        self
    }
    const fn answers(mut self, status: u16, answer: Gen) -> Self {
        self.answer = Answer::Json(status, answer);
        self
    }
}

/// Every operation of the router.
fn operations() -> Vec<Operation> {
    [the_api(), hosted_apis(), credentials(), clusters(), deployments(), workflows(), secrets()]
        .into_iter()
        .flatten()
        .collect()
}

/// The API itself: health, this document, its status, its certificate.
fn the_api() -> Vec<Operation> {
    let mut health = op("get", "/v1/health", "health", "Whether the API and its database answer (public)")
        .answers(200, of::<Health>);
    health.public = true;
    vec![
        health,
        op("get", "/v1/openapi.json", "openapi", "This document").answers(200, |_| Schema::from(true)),
        op("get", "/v1/status", "status", "The API's id, kind, store and version").answers(200, of::<ApiStatus>),
        op("post", "/v1/tls/renew", "renewTls", "Issue a new serving certificate").answers(200, of::<TlsRenewed>),
        op("post", "/v1/console/codes", "consoleCode", "A single-use code that signs a browser into the console")
            .answers(201, of::<ConsoleCode>),
    ]
}

/// Hosted APIs this API deploys, and the binaries it deploys.
fn hosted_apis() -> Vec<Operation> {
    let mut stage = op("put", "/v1/binaries/{sha256}", "stageBinary", "Upload a Linux anycloud binary to deploy")
        .answers(200, of::<StagedBinary>);
    stage.body = Body::Bytes;
    vec![
        op("get", "/v1/apis", "listApis", "Hosted APIs this API deployed")
            .query(fields::<NamesQuery>)
            .answers(200, of::<HostedApiList>),
        op("post", "/v1/apis", "deployApi", "Deploy a hosted API")
            .body(of::<NewHostedApi>)
            .answers(201, of::<HostedApiStarted>),
        op("get", "/v1/apis/{name}", "showApi", "One hosted API").answers(200, of::<HostedApiView>),
        op("delete", "/v1/apis/{name}", "removeApi", "Remove a hosted API")
            .query(fields::<RemoveHostedApi>)
            .answers(202, of::<HostedApiStarted>),
        op("get", "/v1/apis/{name}/access", "apiAccess", "How to reach a hosted API")
            .answers(200, of::<HostedApiAccess>),
        op("post", "/v1/apis/{name}/rotate-ca", "rotateApiCa", "Rotate a hosted API's CA")
            .answers(202, of::<HostedApiStarted>),
        stage,
    ]
}

/// Credentials.
fn credentials() -> Vec<Operation> {
    vec![
        op("get", "/v1/credentials/{name}/vm-types/{vm_type}", "vmType", "A VM type's architectures")
            .query(fields::<VmTypeQuery>)
            .answers(200, of::<VmTypeArchitectures>),
        op("get", "/v1/credentials", "listCredentials", "Credentials, without secrets")
            .query(fields::<NamesQuery>)
            .answers(200, of::<CredentialList>),
        op("post", "/v1/credentials", "saveCredential", "Save and verify a credential")
            .body(of::<NewCredential>)
            .answers(201, of::<CredentialSaved>),
        op("get", "/v1/credentials/{name}", "showCredential", "One credential, without its secret")
            .answers(200, of::<CredentialShown>),
        op("delete", "/v1/credentials/{name}", "deleteCredential", "Delete a credential")
            .answers(200, of::<CredentialDeleted>),
    ]
}

/// Clusters.
fn clusters() -> Vec<Operation> {
    vec![
        op("get", "/v1/clusters", "listClusters", "Clusters")
            .query(fields::<NamesQuery>)
            .answers(200, of::<ClusterList>),
        op("post", "/v1/clusters", "createCluster", "Create a cluster")
            .body(of::<NewCluster>)
            .answers(201, of::<ClusterCreated>),
        op("get", "/v1/clusters/{name}", "showCluster", "One cluster, its VMs and workflow")
            .answers(200, of::<ClusterDetail>),
        op("delete", "/v1/clusters/{name}", "deleteCluster", "Delete a cluster").answers(202, of::<ClusterDetail>),
        op("get", "/v1/clusters/{name}/kubeconfig", "clusterKubeconfig", "A cluster's kubeconfig")
            .answers(200, of::<Kubeconfig>),
    ]
}

/// Jobs and services.
fn deployments() -> Vec<Operation> {
    let mut exec = op("get", "/v1/deployments/{id}/exec", "execDeployment", "Run a command in a job's container");
    exec.answer = Answer::WebSocket;
    vec![
        op("post", "/v1/jobs", "submitJob", "Run a job on a cluster")
            .body(of::<NewJob>)
            .answers(201, of::<DeploymentDetail>),
        op("post", "/v1/services", "deployService", "Deploy a service on a cluster")
            .body(of::<NewService>)
            .answers(201, of::<DeploymentDetail>),
        op("get", "/v1/deployments", "listDeployments", "Jobs and services, newest first")
            .query(fields::<DeploymentQuery>)
            .answers(200, of::<DeploymentList>),
        op("get", "/v1/deployments/{id}", "showDeployment", "One deployment").answers(200, of::<DeploymentDetail>),
        op("post", "/v1/deployments/{id}/terminate", "terminateDeployment", "Terminate a deployment")
            .answers(202, of::<DeploymentDetail>),
        op("post", "/v1/deployments/{id}/resubmit", "resubmitDeployment", "Run an ended job again")
            .answers(201, of::<DeploymentDetail>),
        op("post", "/v1/deployments/{id}/upgrade", "upgradeService", "Roll a service out to a new revision")
            .body(of::<UpgradeRequest>)
            .answers(202, of::<DeploymentDetail>),
        op("get", "/v1/deployments/{id}/logs", "deploymentLogs", "A job's output, streamed").query(fields::<LogsQuery>),
        exec,
    ]
}

/// Workflow runs.
fn workflows() -> Vec<Operation> {
    vec![
        op("get", "/v1/workflows", "listWorkflows", "Workflow runs, newest first")
            .query(fields::<WorkflowQuery>)
            .answers(200, of::<WorkflowList>),
        op("get", "/v1/workflows/{id}", "inspectWorkflow", "One run, its steps and plan")
            .answers(200, of::<WorkflowDetail>),
        op("get", "/v1/workflows/{id}/events", "workflowEvents", "A run's timeline")
            .query(fields::<EventsQuery>)
            .answers(200, of::<WorkflowEvents>),
        op("post", "/v1/workflows/{id}/retry", "retryWorkflow", "Retry a parked run").answers(200, of::<WorkflowActed>),
        op("post", "/v1/workflows/{id}/resume", "resumeWorkflow", "Resume a parked run past its step")
            .answers(200, of::<WorkflowActed>),
        op("post", "/v1/workflows/{id}/cancel", "cancelWorkflow", "Cancel a run").answers(200, of::<WorkflowActed>),
    ]
}

/// Secrets.
fn secrets() -> Vec<Operation> {
    vec![
        op("get", "/v1/secrets", "listSecrets", "Secrets, never their values")
            .query(fields::<NamesQuery>)
            .answers(200, of::<SecretList>),
        op("post", "/v1/secrets", "createSecret", "Create a secret")
            .body(of::<NewSecret>)
            .answers(201, of::<SecretSaved>),
        op("get", "/v1/secrets/{name}", "showSecret", "One secret, never its values").answers(200, of::<SecretSummary>),
        op("put", "/v1/secrets/{name}", "setSecret", "A secret's next version")
            .body(of::<NewSecret>)
            .answers(200, of::<SecretSaved>),
        op("delete", "/v1/secrets/{name}", "deleteSecret", "Delete a secret").answers(200, of::<SecretDeleted>),
    ]
}

/// The document, made once per process.
pub fn document() -> &'static Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT.get_or_init(build)
}

/// `GET /v1/openapi.json`.
pub async fn serve() -> impl IntoResponse {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    let bytes = BYTES.get_or_init(|| serde_json::to_vec(document()).unwrap_or_default());
    ([(header::CONTENT_TYPE, "application/json")], bytes.as_slice())
}

/// The types whose request and answer shapes differ (a field with a default that is always
/// written, say): the requests' shape is listed apart as `{Name}Input`.
fn conflicts() -> Vec<String> {
    let (mut requests, mut answers) = (generator(Contract::Deserialize), generator(Contract::Serialize));
    for operation in operations() {
        describe(&operation, &mut requests, &mut answers, &[]);
    }
    let answers = answers.take_definitions(true);
    requests
        .take_definitions(true)
        .into_iter()
        .filter(|(name, schema)| answers.get(name).is_some_and(|answer| answer != schema))
        .map(|(name, _)| name)
        .collect()
}

fn generator(contract: Contract) -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.definitions_path = "/components/schemas".into();
            settings.contract = contract;
        })
        .into_generator()
}

fn build() -> Value {
    // Requests are read as serde deserializes them, answers as it serializes them (a field
    // skipped when empty is not required in an answer, one with a default not in a request).
    let conflicts = conflicts();
    let mut requests = generator(Contract::Deserialize);
    let mut answers = generator(Contract::Serialize);
    let mut paths = Map::new();
    for operation in operations() {
        let item = paths.entry(operation.path).or_insert_with(|| json!({}));
        item[operation.method] = describe(&operation, &mut requests, &mut answers, &conflicts);
    }
    let error = answers.subschema_for::<ErrorBody>();
    let mut schemas = answers.take_definitions(true);
    for (name, mut schema) in requests.take_definitions(true) {
        rename_inputs(&mut schema, &conflicts);
        let name = if conflicts.contains(&name) { format!("{name}Input") } else { name };
        schemas.insert(name, schema);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Anycloud API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The HTTP API of `anycloud api serve`: clusters, jobs and services on them, \
                and the durable workflows that make them. Every route but `/v1/health` needs the \
                API's bearer token. docs/cli.md, \"The HTTP API\", says what each answer means.",
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "servers": [{ "url": "/" }],
        "security": [{ "bearer": [] }],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "responses": {
                "Error": {
                    "description": "A refusal: a stable code and a sentence that says what to do",
                    "content": { "application/json": { "schema": error } },
                },
            },
        },
    })
}

/// Points a request's `$ref`s to the `{Name}Input` twin of each type in `inputs`.
fn rename_inputs(schema: &mut Value, inputs: &[String]) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get_mut("$ref")
                && let Some(name) = reference.strip_prefix("#/components/schemas/")
                && inputs.iter().any(|input| input == name)
            {
                reference.push_str("Input");
            }
            map.values_mut().for_each(|value| rename_inputs(value, inputs));
        }
        Value::Array(items) => items.iter_mut().for_each(|value| rename_inputs(value, inputs)),
        _ => {}
    }
}

fn describe(
    operation: &Operation,
    requests: &mut SchemaGenerator,
    answers: &mut SchemaGenerator,
    inputs: &[String],
) -> Value {
    let mut parameters: Vec<Value> = path_parameters(operation.path);
    if let Some(query) = operation.query {
        parameters.extend(query_parameters(query(requests)));
    }
    let mut request = |make: Gen| {
        let mut schema = make(requests).to_value();
        rename_inputs(&mut schema, inputs);
        schema
    };
    for parameter in &mut parameters {
        rename_inputs(parameter, inputs);
    }
    let mut described = json!({
        "operationId": operation.id,
        "summary": operation.summary,
        "parameters": parameters,
        "responses": { "default": { "$ref": "#/components/responses/Error" } },
    });
    if operation.public {
        described["security"] = json!([]);
    }
    match operation.body {
        Body::None => {}
        Body::Json(body) => {
            described["requestBody"] =
                json!({ "required": true, "content": { "application/json": { "schema": request(body) } } });
        }
        Body::Bytes => {
            described["requestBody"] = json!({
                "required": true,
                "content": { "application/octet-stream": { "schema": { "type": "string", "contentMediaType": "application/octet-stream" } } },
            });
        }
    }
    let (status, answer) = match &operation.answer {
        Answer::Json(status, answer) => (
            status.to_string(),
            json!({ "description": "OK", "content": { "application/json": { "schema": answer(answers) } } }),
        ),
        Answer::Text => (
            "200".to_owned(),
            json!({ "description": "OK", "content": { "text/plain": { "schema": { "type": "string" } } } }),
        ),
        Answer::WebSocket => (
            "101".to_owned(),
            json!({ "description": "A WebSocket: first an ExecRequest text message, then binary messages whose first byte is the channel (docs/cli.md)" }),
        ),
    };
    described["responses"][status] = answer;
    described
}

fn path_parameters(path: &str) -> Vec<Value> {
    path.split('/')
        .filter_map(|part| part.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| json!({ "name": name, "in": "path", "required": true, "schema": { "type": "string" } }))
        .collect()
}

fn query_parameters(query: Schema) -> Vec<Value> {
    let object = query.as_value();
    let required: Vec<&str> = object["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let properties = object["properties"].as_object().cloned().unwrap_or_default();
    properties
        .into_iter()
        .map(|(name, mut schema)| {
            let description = schema.as_object_mut().and_then(|schema| schema.remove("description"));
            let mut parameter =
                json!({ "name": name, "in": "query", "required": required.contains(&name.as_str()), "schema": schema });
            if let Some(description) = description {
                parameter["description"] = description;
            }
            parameter
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// `(method, path)` of every `.route(PATH, METHOD(..).METHOD(..))` in `router()`'s source.
    fn routed() -> BTreeSet<(String, String)> {
        let source = include_str!("mod.rs");
        let start = source.find("fn router(").unwrap();
        let end = start + source[start..].find("\n}\n").unwrap();
        let mut found = BTreeSet::new();
        for call in source[start..end].split(".route(").skip(1) {
            let path = call.split('"').nth(1).unwrap();
            // The call's arguments: up to the parenthesis that closes `.route(`.
            let mut depth = 1;
            let arguments: String = call
                .chars()
                .take_while(|c| {
                    depth += match c {
                        '(' => 1,
                        ')' => -1,
                        _ => 0,
                    };
                    depth > 0
                })
                .collect();
            for method in ["get", "post", "put", "delete", "patch"] {
                let called = arguments
                    .match_indices(&format!("{method}("))
                    .any(|(at, _)| at == 0 || !arguments[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_'));
                if called {
                    found.insert((method.to_owned(), path.to_owned()));
                }
            }
        }
        found
    }

    /// The paths and methods the document lists.
    fn routes() -> Vec<(&'static str, &'static str)> {
        operations().into_iter().map(|operation| (operation.method, operation.path)).collect()
    }

    #[test]
    fn the_document_lists_exactly_the_routes_of_the_router() {
        let routed = routed();
        assert!(routed.len() > 35, "{routed:?}");
        let listed: BTreeSet<(String, String)> =
            routes().into_iter().map(|(method, path)| (method.to_owned(), path.to_owned())).collect();
        assert_eq!(listed.len(), routes().len(), "an operation is listed twice");
        let missing: Vec<_> = routed.difference(&listed).collect();
        let extra: Vec<_> = listed.difference(&routed).collect();
        assert!(missing.is_empty(), "routed but not in the OpenAPI document: {missing:?}");
        assert!(extra.is_empty(), "in the OpenAPI document but not routed: {extra:?}");
    }

    #[test]
    fn a_type_read_otherwise_than_it_is_written_has_an_input_twin() {
        // Every field of SimSettings has a default when read, and most are always written.
        assert_eq!(conflicts(), ["SimSettings"]);
        let schemas = &document()["components"]["schemas"];
        assert_eq!(
            schemas["NewCredential"]["properties"]["sim"]["anyOf"][0]["$ref"],
            "#/components/schemas/SimSettingsInput"
        );
        assert!(schemas["SimSettingsInput"]["required"].is_null(), "{:#}", schemas["SimSettingsInput"]);
        assert!(schemas["SimSettings"]["required"].as_array().is_some_and(|required| !required.is_empty()));
    }

    #[test]
    fn the_document_is_openapi_3_1_with_a_schema_for_every_json_body_and_answer() {
        let document = document();
        assert_eq!(document["openapi"], "3.1.0");
        let schemas = document["components"]["schemas"].as_object().unwrap();
        for name in ["ClusterDetail", "NewCluster", "RunStatus", "DeploymentDetail", "ErrorBody", "WorkflowDetail"] {
            assert!(schemas.contains_key(name), "no schema {name}: {:?}", schemas.keys().collect::<Vec<_>>());
        }
        // Doc comments are the descriptions; a request that refuses unknown fields says so.
        assert_eq!(schemas["NewCluster"]["additionalProperties"], false);
        assert!(schemas["NewCluster"]["properties"]["max_vms"]["description"].as_str().unwrap().contains("capacity"));
        let statuses = schemas["RunStatus"].to_string();
        assert!(statuses.contains("needs-attention"), "{statuses}");
        let create = &document["paths"]["/v1/clusters"]["post"];
        assert_eq!(
            create["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/NewCluster"
        );
        assert_eq!(
            create["responses"]["201"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ClusterCreated"
        );
        let list = &document["paths"]["/v1/workflows"]["get"]["parameters"];
        let names: Vec<&str> = list.as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["before", "kind", "limit", "resource", "status"]);
        assert_eq!(document["paths"]["/v1/health"]["get"]["security"], serde_json::json!([]));
        assert!(document["paths"]["/v1/clusters/{name}"]["get"]["parameters"][0]["in"] == "path");
    }
}
