//! The console's API docs page: the HTTP API's OpenAPI document (`GET /v1/openapi.json`, made
//! from the Rust types the server and client share) rendered as one page, made once per process.
//! Every operation (its method and path, what it needs, its parameters, body and answer) and
//! every type it names, each type a link to its description.

use std::fmt::Write as _;
use std::sync::OnceLock;

use serde_json::Value;

use super::html::escape;

/// The page's content, made from the document the first time it is asked for.
pub fn content() -> &'static str {
    static CONTENT: OnceLock<String> = OnceLock::new();
    CONTENT.get_or_init(|| render(crate::server::openapi::document()))
}

fn render(document: &Value) -> String {
    let mut html = format!(
        r##"<p>{} {}. Every route but <code>/v1/health</code> needs the API's bearer token (<code>Authorization: Bearer …</code>, the file <code>token</code> in the API's data directory). A refusal is an <a href="#schema-ErrorBody">ErrorBody</a>. The same document as JSON: <a href="/ui/openapi.json">openapi.json</a> (OpenAPI 3.1, JSON Schema 2020-12).</p>"##,
        escape(document["info"]["title"].as_str().unwrap_or("API")),
        escape(document["info"]["version"].as_str().unwrap_or("")),
    );
    let operations = operations(document);
    html.push_str(r#"<nav aria-label="Operations" class="toc"><h2>Operations</h2><ul>"#);
    for (method, path, operation) in &operations {
        let _ = write!(
            html,
            r##"<li><a href="#op-{id}"><code>{} {}</code></a> {}</li>"##,
            method.to_uppercase(),
            escape(path),
            escape(operation["summary"].as_str().unwrap_or("")),
            id = escape(operation["operationId"].as_str().unwrap_or("")),
        );
    }
    html.push_str("</ul></nav>");
    for (method, path, operation) in &operations {
        html.push_str(&describe_operation(method, path, operation));
    }
    html.push_str("<h2>Types</h2>");
    if let Some(schemas) = document["components"]["schemas"].as_object() {
        for (name, schema) in schemas {
            html.push_str(&describe_schema(name, schema));
        }
    }
    html
}

/// `(method, path, operation)` in the document's order of paths.
fn operations(document: &Value) -> Vec<(&str, &str, &Value)> {
    let mut found = Vec::new();
    for (path, item) in document["paths"].as_object().into_iter().flatten() {
        for (method, operation) in item.as_object().into_iter().flatten() {
            found.push((method.as_str(), path.as_str(), operation));
        }
    }
    found
}

fn describe_operation(method: &str, path: &str, operation: &Value) -> String {
    let public = operation["security"].as_array().is_some_and(Vec::is_empty);
    let mut html = format!(
        r#"<section id="op-{id}" class="operation"><h3><code>{} {}</code></h3><p>{}. {}</p>"#,
        method.to_uppercase(),
        escape(path),
        escape(operation["summary"].as_str().unwrap_or("")),
        if public { "No token needed." } else { "Needs the bearer token." },
        id = escape(operation["operationId"].as_str().unwrap_or("")),
    );
    let parameters = operation["parameters"].as_array().map(Vec::as_slice).unwrap_or_default();
    if !parameters.is_empty() {
        html.push_str(r#"<table><thead><tr><th scope="col">Parameter</th><th scope="col">In</th><th scope="col">Type</th><th scope="col">Description</th></tr></thead><tbody>"#);
        for parameter in parameters {
            let required = if parameter["required"].as_bool() == Some(true) { ", required" } else { "" };
            let _ = write!(
                html,
                "<tr><td><code>{}</code></td><td>{}{required}</td><td>{}</td><td>{}</td></tr>",
                escape(parameter["name"].as_str().unwrap_or("")),
                escape(parameter["in"].as_str().unwrap_or("")),
                type_words(&parameter["schema"]),
                prose(parameter["description"].as_str().unwrap_or("")),
            );
        }
        html.push_str("</tbody></table>");
    }
    for (media, content) in operation["requestBody"]["content"].as_object().into_iter().flatten() {
        let _ = write!(html, "<p>Body ({}): {}</p>", escape(media), type_words(&content["schema"]));
    }
    for (status, answer) in operation["responses"].as_object().into_iter().flatten().filter(|(s, _)| *s != "default") {
        let shape = match answer["content"].as_object().and_then(|content| content.iter().next()) {
            Some((media, content)) => format!("({}) {}", escape(media), type_words(&content["schema"])),
            None => escape(answer["description"].as_str().unwrap_or("")),
        };
        let _ = write!(html, "<p>Answers <strong>{}</strong> {shape}; a refusal otherwise.</p>", escape(status));
    }
    html.push_str("</section>");
    html
}

fn describe_schema(name: &str, schema: &Value) -> String {
    let mut html = format!(r#"<section id="schema-{0}" class="schema"><h3>{0}</h3>"#, escape(name));
    if let Some(description) = schema["description"].as_str() {
        let _ = write!(html, "<p>{}</p>", prose(description));
    }
    let required: Vec<&str> = schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    match schema["properties"].as_object() {
        Some(properties) => {
            html.push_str(r#"<table><thead><tr><th scope="col">Field</th><th scope="col">Type</th><th scope="col">Description</th></tr></thead><tbody>"#);
            for (field, property) in properties {
                let optional =
                    if required.contains(&field.as_str()) { "" } else { " <span class=\"muted\">optional</span>" };
                let _ = write!(
                    html,
                    "<tr><td><code>{}</code>{optional}</td><td>{}</td><td>{}</td></tr>",
                    escape(field),
                    type_words(property),
                    prose(property["description"].as_str().unwrap_or("")),
                );
            }
            html.push_str("</tbody></table>");
        }
        None => html.push_str(&alternatives(schema)),
    }
    html.push_str("</section>");
    html
}

/// A schema without fields: its values, each with its description, or its type in words.
fn alternatives(schema: &Value) -> String {
    let choices = schema["oneOf"].as_array().or_else(|| schema["anyOf"].as_array());
    let Some(choices) = choices.filter(|choices| choices.iter().all(|choice| choice.get("description").is_some()))
    else {
        return format!("<p>{}</p>", type_words(schema));
    };
    let mut html = String::from("<ul>");
    for choice in choices {
        let _ = write!(
            html,
            "<li>{}: {}</li>",
            type_words(&strip_description(choice)),
            prose(choice["description"].as_str().unwrap_or(""))
        );
    }
    html.push_str("</ul>");
    html
}

fn strip_description(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(object) = schema.as_object_mut() {
        object.remove("description");
    }
    schema
}

/// A description as HTML: escaped, with its `code` spans as code.
fn prose(text: &str) -> String {
    let mut html = String::new();
    for (i, part) in escape(text).split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(html, "<code>{part}</code>");
        } else {
            html.push_str(part);
        }
    }
    html
}

/// A schema's type in words, as HTML: a named type is a link to its description.
fn type_words(schema: &Value) -> String {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.rsplit('/').next().unwrap_or(reference);
        return format!(r##"<a href="#schema-{0}">{0}</a>"##, escape(name));
    }
    if let Some(value) = schema.get("const") {
        return format!("<code>{}</code>", escape(&value.to_string()));
    }
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> =
            values.iter().map(|value| format!("<code>{}</code>", escape(&value.to_string()))).collect();
        return format!("one of {}", values.join(", "));
    }
    if let Some(choices) = schema["oneOf"].as_array().or_else(|| schema["anyOf"].as_array()) {
        let choices: Vec<String> = choices.iter().map(type_words).collect();
        return choices.join(" or ");
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        _ => return "any JSON value".to_owned(),
    };
    let words: Vec<String> = types
        .iter()
        .map(|kind| match *kind {
            "array" => format!("array of {}", type_words(&schema["items"])),
            "object" if schema["additionalProperties"].is_object() => {
                format!("map of string to {}", type_words(&schema["additionalProperties"]))
            }
            "string" | "integer" | "number" => match schema["format"].as_str() {
                Some(format) => format!("{kind} ({})", escape(format)),
                None => (*kind).to_owned(),
            },
            other => escape(other),
        })
        .collect();
    words.join(" or ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn types_are_told_in_words_with_links() {
        assert_eq!(
            type_words(&json!({ "$ref": "#/components/schemas/Cluster" })),
            r##"<a href="#schema-Cluster">Cluster</a>"##
        );
        assert_eq!(type_words(&json!({ "type": ["string", "null"], "format": "uuid" })), "string (uuid) or null");
        assert_eq!(
            type_words(&json!({ "type": "array", "items": { "$ref": "#/components/schemas/Vm" } })),
            r##"array of <a href="#schema-Vm">Vm</a>"##
        );
        assert_eq!(
            type_words(&json!({ "enum": ["a", "b"] })),
            "one of <code>&quot;a&quot;</code>, <code>&quot;b&quot;</code>"
        );
        assert_eq!(type_words(&json!({})), "any JSON value");
        assert_eq!(prose("`GET /v1/x` & <b>"), "<code>GET /v1/x</code> &amp; &lt;b&gt;");
    }

    /// Every operation of the document and every type it names is on the page, and every link
    /// to a type lands on its description.
    #[test]
    fn the_page_holds_every_operation_and_every_type() {
        let document = crate::server::openapi::document();
        let page = content();
        for (_, _, operation) in operations(document) {
            let id = operation["operationId"].as_str().unwrap();
            assert!(page.contains(&format!(r#"id="op-{id}""#)), "operation {id} missing");
        }
        for name in document["components"]["schemas"].as_object().unwrap().keys() {
            assert!(page.contains(&format!(r#"id="schema-{name}""#)), "type {name} missing");
        }
        for link in page.split(r##"href="#schema-"##).skip(1) {
            let name = &link[..link.find('"').unwrap()];
            assert!(page.contains(&format!(r#"id="schema-{name}""#)), "a link to {name} leads nowhere");
        }
        assert!(!page.contains("<script"), "the page holds no script");
    }
}
