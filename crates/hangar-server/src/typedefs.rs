//! The web page's types: TypeScript declarations (`web/api.d.ts`) made from the same JSON Schemas
//! as the OpenAPI document's `components/schemas`, so `web/app.js` can name the API's shapes in
//! JSDoc (`/** @type {import('./api').Board} */`) without a build step. A test checks the file is
//! what this module generates (regenerated with `HANGAR_WRITE_OPENAPI=1`, as `docs/openapi.json`).

use std::fmt::Write as _;

use serde_json::{Map, Value};

/// The declarations of every named schema of `openapi`, in name order.
pub fn typescript(openapi: &Value) -> String {
    let mut out = String::from(
        "// The API's types for the web page, generated from hangar-api's JSON Schemas by\n\
         // hangar-server's typedefs.rs. Do not edit: regenerate with\n\
         // `HANGAR_WRITE_OPENAPI=1 cargo test -p hangar-server openapi`.\n",
    );
    let empty = Map::new();
    let schemas = openapi
        .pointer("/components/schemas")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (name, schema) in schemas {
        out.push('\n');
        if let Some(d) = schema.get("description").and_then(Value::as_str) {
            doc(&mut out, d, "");
        }
        let props = schema.get("properties").and_then(Value::as_object);
        match props {
            Some(props) if schema.get("anyOf").is_none() && schema.get("oneOf").is_none() => {
                let _ = writeln!(out, "export interface {name} {}", object(schema, props, ""));
            }
            _ => {
                let _ = writeln!(out, "export type {name} = {};", ts(schema, ""));
            }
        }
    }
    out
}

fn doc(out: &mut String, text: &str, indent: &str) {
    let text = text.replace("*/", "* /");
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() == 1 {
        let _ = writeln!(out, "{indent}/** {} */", lines[0]);
        return;
    }
    let _ = writeln!(out, "{indent}/**");
    for l in lines {
        let _ = writeln!(out, "{indent} * {l}");
    }
    let _ = writeln!(out, "{indent} */");
}

fn object(schema: &Value, props: &Map<String, Value>, indent: &str) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let inner = format!("{indent}  ");
    let mut out = String::from("{\n");
    for (key, prop) in props {
        if let Some(d) = prop.get("description").and_then(Value::as_str) {
            doc(&mut out, d, &inner);
        }
        let optional = if required.contains(&key.as_str()) {
            ""
        } else {
            "?"
        };
        let _ = writeln!(out, "{inner}{key}{optional}: {};", ts(prop, &inner));
    }
    out.push_str(indent);
    out.push('}');
    out
}

/// A schema as a TypeScript type.
fn ts(schema: &Value, indent: &str) -> String {
    let Some(s) = schema.as_object() else {
        return "unknown".into();
    };
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        return r.rsplit('/').next().unwrap_or("unknown").to_owned();
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        return union(e.iter().map(|v| v.to_string()));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = s.get(key).and_then(Value::as_array) {
            return union(alts.iter().map(|a| ts(a, indent)));
        }
    }
    let types: Vec<&str> = match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return "unknown".into(),
    };
    union(types.into_iter().map(|t| match t {
        "string" => "string".to_owned(),
        "integer" | "number" => "number".to_owned(),
        "boolean" => "boolean".to_owned(),
        "null" => "null".to_owned(),
        "array" => {
            let item = s.get("items").map_or("unknown".into(), |i| ts(i, indent));
            if item.contains(' ') {
                format!("({item})[]")
            } else {
                format!("{item}[]")
            }
        }
        "object" => match s.get("properties").and_then(Value::as_object) {
            Some(props) => object(schema, props, indent),
            None => "Record<string, unknown>".to_owned(),
        },
        _ => "unknown".to_owned(),
    }))
}

fn union(parts: impl Iterator<Item = String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for p in parts {
        if !seen.contains(&p) {
            seen.push(p);
        }
    }
    seen.join(" | ")
}
