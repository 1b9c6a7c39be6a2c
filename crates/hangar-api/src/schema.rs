//! The schema generator the OpenAPI document uses, and the few serde helpers the types share.

use schemars::generate::SchemaSettings;
use schemars::{Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer};

/// A generator whose named schemas live where OpenAPI keeps them (`#/components/schemas`), in
/// JSON Schema 2020-12 (OpenAPI 3.1's dialect).
pub fn generator() -> SchemaGenerator {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    SchemaGenerator::new(settings)
}

/// Any JSON object (what the control plane owns and the API passes on as it is).
pub(crate) fn object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object"})
}

/// Any JSON object, or `null`.
pub(crate) fn object_or_null(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": ["object", "null"]})
}

/// A whole number as JSON Schema's `integer` allows it (`80` or `80.0`), for `deserialize_with`.
pub fn whole<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Number {
        Whole(u64),
        Float(f64),
    }
    let n = match Number::deserialize(d)? {
        Number::Whole(n) => Some(n),
        // Below 2^53 every whole float is exact.
        Number::Float(f) if f.fract() == 0.0 && (0.0..9_007_199_254_740_992.0).contains(&f) => {
            Some(f as u64)
        }
        Number::Float(_) => None,
    };
    n.and_then(|n| T::try_from(n).ok()).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "expected a whole number that fits in {}",
            std::any::type_name::<T>()
        ))
    })
}

/// The same, or `null`.
pub fn whole_opt<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    match Option::<serde_json::Value>::deserialize(d)? {
        None => Ok(None),
        Some(v) => whole(v).map(Some).map_err(serde::de::Error::custom),
    }
}

/// Every property that may be `null` is required: an answer always holds it, `null` when there
/// is nothing (a field left out when empty is typed without `null` instead). For the answers'
/// types, with `#[schemars(transform = ...)]`; a request's optional fields stay optional.
pub(crate) fn nulls_required(schema: &mut Schema) {
    let nullable = |v: &serde_json::Value| {
        let is_null = |t: &serde_json::Value| t == "null";
        match v.get("type") {
            Some(serde_json::Value::Array(ts)) => ts.iter().any(is_null),
            Some(t) => is_null(t),
            None => v
                .get("anyOf")
                .and_then(serde_json::Value::as_array)
                .is_some_and(|alts| alts.iter().any(|a| a.get("type").is_some_and(is_null))),
        }
    };
    let names: Vec<serde_json::Value> = schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
        .map(|props| {
            props
                .iter()
                .filter(|(_, v)| nullable(v))
                .map(|(k, _)| serde_json::Value::String(k.clone()))
                .collect()
        })
        .unwrap_or_default();
    if names.is_empty() {
        return;
    }
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let required = obj
        .entry("required")
        .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    if let Some(list) = required.as_array_mut() {
        for n in names {
            if !list.contains(&n) {
                list.push(n);
            }
        }
    }
}
