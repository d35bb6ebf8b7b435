//! `labelSelector` and `fieldSelector` of lists and watches: equality (`a=b`, `a==b`), inequality
//! (`a!=b`) and, for labels, existence (`a`, `!a`). Set-based selectors (`a in (x,y)`) are not
//! simulated. A field is a dotted path into the object (`metadata.name`, `spec.nodeName`).

use serde_json::Value;

use super::status::ApiError;

#[derive(Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

/// The selectors of one request.
#[derive(Debug, Default)]
pub(crate) struct Selector {
    labels: Vec<Requirement>,
    fields: Vec<Requirement>,
}

impl Selector {
    /// The selectors of a request's `labelSelector` and `fieldSelector`.
    pub(crate) fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Self, ApiError> {
        Ok(Self {
            labels: requirements(labels.unwrap_or_default())?,
            fields: requirements(fields.unwrap_or_default())?,
        })
    }

    /// The label equalities (`a=b`) among its requirements, for the store's prefilter.
    pub(crate) fn label_equalities(&self) -> Vec<(&str, &str)> {
        self.labels
            .iter()
            .filter_map(|requirement| match requirement {
                Requirement::Equals(key, value) => Some((key.as_str(), value.as_str())),
                _ => None,
            })
            .collect()
    }

    /// The value a `field=value` requirement of the field selector asks of `field`, if any.
    pub(crate) fn field_equality(&self, field: &str) -> Option<&str> {
        self.fields.iter().find_map(|requirement| match requirement {
            Requirement::Equals(key, value) if key == field => Some(value.as_str()),
            _ => None,
        })
    }

    /// Whether the object is selected.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let label = |key: &str| labels.get(key).and_then(Value::as_str);
        let field = |path: &str| {
            let value = path.split('.').try_fold(object, |value, key| value.get(key));
            value.map(|value| value.as_str().map(str::to_owned).unwrap_or_else(|| value.to_string()))
        };
        self.labels.iter().all(|requirement| holds(requirement, &label))
            && self.fields.iter().all(|requirement| holds(requirement, &|path: &str| field(path)))
    }
}

fn holds<S: AsRef<str>>(requirement: &Requirement, value: &dyn Fn(&str) -> Option<S>) -> bool {
    match requirement {
        Requirement::Equals(key, expected) => value(key).is_some_and(|v| v.as_ref() == expected),
        Requirement::NotEquals(key, expected) => value(key).is_none_or(|v| v.as_ref() != expected),
        Requirement::Exists(key) => value(key).is_some(),
        Requirement::Absent(key) => value(key).is_none(),
    }
}

fn requirements(selector: &str) -> Result<Vec<Requirement>, ApiError> {
    let mut requirements = Vec::new();
    for term in selector.split(',').map(str::trim).filter(|term| !term.is_empty()) {
        let requirement = if let Some((key, value)) = term.split_once("!=") {
            Requirement::NotEquals(key.trim().into(), value.trim().into())
        } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
            Requirement::Equals(key.trim().into(), value.trim().into())
        } else if let Some(key) = term.strip_prefix('!') {
            Requirement::Absent(key.trim().into())
        } else if term.contains([' ', '(']) {
            return Err(ApiError::bad_request(format!(
                "unable to parse requirement: \"{term}\": set-based selectors are not simulated"
            )));
        } else {
            Requirement::Exists(term.into())
        };
        requirements.push(requirement);
    }
    Ok(requirements)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn equality_and_existence_select_by_label_and_field() {
        let pod = serde_json::json!({ "metadata": { "name": "p", "labels": { "a": "b", "c": "d" } } });
        let select = |labels: &str, fields: &str| Selector::parse(Some(labels), Some(fields)).unwrap().matches(&pod);
        assert!(select("a=b,c==d", "metadata.name=p"));
        assert!(select("a,!z,c!=x", ""));
        assert!(!select("a=x", ""));
        assert!(!select("", "metadata.name=q"));
    }
}
