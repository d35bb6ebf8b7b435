//! The patches a `PATCH` applies, as the apiserver applies them:
//!
//! - JSON merge patch (RFC 7386): maps merge, `null` removes, lists are replaced.
//! - Strategic merge patch (Kubernetes' "Update API Objects in Place Using kubectl patch" and
//!   `k8s.io/apimachinery/pkg/util/strategicpatch`): as a merge patch, except that a list whose
//!   schema says `x-kubernetes-patch-strategy: merge` merges element by element, matched on its
//!   `x-kubernetes-patch-merge-key` (a list of scalars by value); the directives `$patch`
//!   (`replace`, `delete`), `$retainKeys`, `$setElementOrder/FIELD` and
//!   `$deleteFromPrimitiveList/FIELD` are honoured. The schemas are [`super::schemas`]', the
//!   ones the OpenAPI documents publish, from which kubectl computes its patches.
//! - JSON patch (RFC 6902): `add`, `remove`, `replace`, `move`, `copy` and `test`.

use serde_json::{Map, Value};

use super::schemas::resolve;

/// A JSON merge patch (RFC 7386).
pub(crate) fn merge(target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(target) = target.as_object_mut() else { return };
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// A strategic merge patch on an object whose schema is `schema`, in `definitions`.
pub(crate) fn strategic(definitions: &Map<String, Value>, schema: &Value, target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() || patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = Value::Object(Map::new());
    }
    let schema = resolve(definitions, schema);
    let Some(object) = target.as_object_mut() else { return };
    if let Some(retained) = patch.get("$retainKeys").and_then(Value::as_array) {
        object.retain(|key, _| retained.iter().any(|kept| kept == key));
    }
    let mut orders = Vec::new();
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$setElementOrder/") {
            orders.push((field, value));
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(list), Some(gone)) = (object.get_mut(field).and_then(Value::as_array_mut), value.as_array()) {
                list.retain(|item| !gone.contains(item));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        if value.is_null() {
            object.remove(key);
            continue;
        }
        let property = property(definitions, schema, key);
        match value {
            Value::Object(map) if map.get("$patch").and_then(Value::as_str) == Some("delete") => {
                object.remove(key);
            }
            Value::Object(_) => {
                let entry = object.entry(key.clone()).or_insert(Value::Null);
                strategic(definitions, &property, entry, value);
            }
            Value::Array(items) if strategy(&property).contains("merge") => {
                let entry = object.entry(key.clone()).or_insert_with(|| Value::Array(Vec::new()));
                merge_list(definitions, &property, entry, items);
            }
            _ => {
                object.insert(key.clone(), strip(value));
            }
        }
    }
    for (field, order) in orders {
        let merge_key = property(definitions, schema, field)
            .get("x-kubernetes-patch-merge-key")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let (Some(list), Some(order)) = (object.get_mut(field).and_then(Value::as_array_mut), order.as_array()) {
            let position = |item: &Value| {
                let key = match &merge_key {
                    Some(merge_key) => item.get(merge_key.as_str()),
                    None => Some(item),
                };
                order
                    .iter()
                    .position(|wanted| match &merge_key {
                        Some(merge_key) => wanted.get(merge_key.as_str()) == key,
                        None => Some(wanted) == key,
                    })
                    .unwrap_or(order.len())
            };
            list.sort_by_key(position);
        }
    }
}

/// The schema of a property (or of a map's values).
fn property(definitions: &Map<String, Value>, schema: &Value, key: &str) -> Value {
    let schema = resolve(definitions, schema);
    schema
        .get("properties")
        .and_then(|properties| properties.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|extra| extra.is_object()))
        .cloned()
        .unwrap_or(Value::Null)
}

fn strategy(property: &Value) -> &str {
    property.get("x-kubernetes-patch-strategy").and_then(Value::as_str).unwrap_or_default()
}

/// A list with no directives left in it.
fn strip(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter().filter(|(key, _)| !key.starts_with('$')).map(|(k, v)| (k.clone(), strip(v))).collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
        other => other.clone(),
    }
}

fn merge_list(definitions: &Map<String, Value>, property: &Value, target: &mut Value, patch: &[Value]) {
    let replace = patch.iter().any(|item| item.get("$patch").and_then(Value::as_str) == Some("replace"));
    if replace || !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    let Some(list) = target.as_array_mut() else { return };
    let items = property.get("items").cloned().unwrap_or(Value::Null);
    let merge_key = property.get("x-kubernetes-patch-merge-key").and_then(Value::as_str);
    for item in patch {
        if item.get("$patch").is_some_and(|directive| directive == "replace") {
            continue;
        }
        let Some(merge_key) = merge_key.filter(|_| item.is_object()) else {
            if !list.contains(item) {
                list.push(item.clone());
            }
            continue;
        };
        let key = item.get(merge_key);
        let found = list.iter().position(|existing| existing.get(merge_key) == key);
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(found) = found {
                list.remove(found);
            }
            continue;
        }
        match found {
            Some(found) => strategic(definitions, &items, &mut list[found], item),
            None => {
                let mut added = Value::Null;
                strategic(definitions, &items, &mut added, item);
                list.push(added);
            }
        }
    }
}

/// A JSON patch (RFC 6902), or why it does not apply.
pub(crate) fn json_patch(target: &mut Value, operations: &Value) -> Result<(), String> {
    let operations = operations.as_array().ok_or("a JSON patch is a list of operations")?;
    for operation in operations {
        let op = operation.get("op").and_then(Value::as_str).ok_or("an operation without \"op\"")?;
        let path = operation.get("path").and_then(Value::as_str).ok_or("an operation without \"path\"")?;
        let value = || operation.get("value").cloned().ok_or(format!("{op} operation without a value at {path}"));
        let from = || operation.get("from").and_then(Value::as_str).ok_or(format!("{op} operation without from"));
        match op {
            "add" => add(target, path, value()?)?,
            "remove" => drop(remove(target, path)?),
            "replace" => {
                remove(target, path)?;
                add(target, path, value()?)?;
            }
            "move" => {
                let moved = remove(target, from()?)?;
                add(target, path, moved)?;
            }
            "copy" => {
                let copied =
                    target.pointer(from()?).cloned().ok_or(format!("copy operation: missing value at {path}"))?;
                add(target, path, copied)?;
            }
            "test" => {
                if target.pointer(path) != Some(&value()?) {
                    return Err(format!("testing value {path} failed"));
                }
            }
            other => return Err(format!("unexpected kind: {other}")),
        }
    }
    Ok(())
}

fn split(path: &str) -> Result<(&str, String), String> {
    let (parent, last) = path.rsplit_once('/').ok_or(format!("invalid path {path:?}"))?;
    Ok((parent, last.replace("~1", "/").replace("~0", "~")))
}

fn add(target: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *target = value;
        return Ok(());
    }
    let (parent, key) = split(path)?;
    match target.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.insert(key, value);
            Ok(())
        }
        Some(Value::Array(list)) => {
            let index =
                if key == "-" { list.len() } else { key.parse().map_err(|_| format!("invalid index {key}"))? };
            if index > list.len() {
                return Err(format!("add operation: index out of bounds at {path}"));
            }
            list.insert(index, value);
            Ok(())
        }
        _ => Err(format!("add operation does not apply: doc is missing path: {path}")),
    }
}

fn remove(target: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, key) = split(path)?;
    let missing = || format!("remove operation does not apply: doc is missing path: {path}");
    match target.pointer_mut(parent) {
        Some(Value::Object(map)) => map.remove(&key).ok_or_else(missing),
        Some(Value::Array(list)) => {
            let index: usize = key.parse().map_err(|_| missing())?;
            if index < list.len() { Ok(list.remove(index)) } else { Err(missing()) }
        }
        _ => Err(missing()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::schemas;
    use serde_json::json;

    fn pod_spec() -> Value {
        json!({ "$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec" })
    }

    #[test]
    fn containers_merge_by_name_and_env_by_name() {
        let mut spec = json!({ "containers": [
            { "name": "a", "image": "one", "env": [{ "name": "X", "value": "1" }, { "name": "Y", "value": "2" }] },
            { "name": "b", "image": "two" },
        ] });
        let patch = json!({
            "$setElementOrder/containers": [{ "name": "b" }, { "name": "a" }],
            "containers": [{ "name": "a", "env": [{ "name": "Y", "$patch": "delete" }, { "name": "Z", "value": "3" }] }],
        });
        strategic(schemas::v3(), &pod_spec(), &mut spec, &patch);
        assert_eq!(
            spec,
            json!({ "containers": [
                { "name": "b", "image": "two" },
                { "name": "a", "image": "one", "env": [{ "name": "X", "value": "1" }, { "name": "Z", "value": "3" }] },
            ] })
        );
    }

    #[test]
    fn lists_without_a_strategy_are_replaced_and_null_removes() {
        let mut spec = json!({ "containers": [{ "name": "a", "command": ["x", "y"], "image": "i" }] });
        let patch = json!({ "containers": [{ "name": "a", "command": ["z"], "image": null }] });
        strategic(schemas::v3(), &pod_spec(), &mut spec, &patch);
        assert_eq!(spec, json!({ "containers": [{ "name": "a", "command": ["z"] }] }));
    }

    #[test]
    fn a_json_patch_adds_replaces_and_tests() {
        let mut object = json!({ "spec": { "replicas": 1, "list": [1, 3] } });
        let patch = json!([
            { "op": "replace", "path": "/spec/replicas", "value": 2 },
            { "op": "add", "path": "/spec/list/1", "value": 2 },
            { "op": "test", "path": "/spec/list/2", "value": 3 },
        ]);
        json_patch(&mut object, &patch).unwrap();
        assert_eq!(object, json!({ "spec": { "replicas": 2, "list": [1, 2, 3] } }));
        assert!(json_patch(&mut object, &json!([{ "op": "remove", "path": "/spec/nothing" }])).is_err());
    }
}
