//! `GET /v1/openapi.json`: an OpenAPI 3.0 document of the HTTP API, built from the route table
//! (every route the router serves, with who may call it) and the JSON Schemas of the wire types
//! in `chainstore-model`, so neither can drift from the code.

use axum::response::{IntoResponse, Response};
use axum::Json;
use schemars::generate::SchemaSettings;
use schemars::{Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

use super::auth::Access;
use super::Route;
use chainstore_transport::Role;
use std::sync::OnceLock;

/// How a route's body or answer is described.
#[derive(Clone, Copy)]
pub(crate) enum Content {
    /// Nothing.
    None,
    /// JSON of a wire type (its schema).
    Json(fn(&mut SchemaGenerator) -> Schema),
    /// Another media type, described in words.
    Other(&'static str, &'static str),
}

/// What the document says of one route besides its method, path and access.
#[derive(Clone, Copy)]
pub(crate) struct Doc {
    /// One line.
    pub summary: &'static str,
    /// The query's type, whose fields become query parameters.
    pub query: Option<fn(&mut SchemaGenerator) -> Schema>,
    /// The request body.
    pub body: Content,
    /// The answer on success.
    pub answer: Content,
}

/// The schema of `T`, as a reference into the document's components.
pub(crate) fn schema<T: schemars::JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

fn access_words(access: Access) -> (&'static str, &'static str) {
    match access {
        Access::Public => ("public", "Anyone may call it."),
        Access::Client(Role::Read) => ("read", "Needs the `read` role (or a stronger one)."),
        Access::Client(Role::Write) => ("write", "Needs the `write` role (or `admin`)."),
        Access::Client(Role::Admin) => ("admin", "Needs the `admin` role."),
        Access::Peer => (
            "peer",
            "Cluster members only: openraft's RPCs in the cluster's own encoding.",
        ),
    }
}

fn content(generator: &mut SchemaGenerator, content: Content) -> Option<Value> {
    match content {
        Content::None => None,
        Content::Json(schema) => Some(json!({
            "application/json": { "schema": schema(generator) }
        })),
        Content::Other(media, description) => Some(json!({
            media: { "schema": { "type": "string", "description": description } }
        })),
    }
}

/// The document for `routes`.
pub(crate) fn document(routes: &[Route]) -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let error = schema::<chainstore_model::api::ErrorBody>(&mut generator);
    let mut paths = Map::new();
    for route in routes {
        let (role, who) = access_words(route.access);
        let mut parameters = Vec::new();
        for name in path_params(route.path) {
            parameters.push(json!({
                "name": name, "in": "path", "required": true, "schema": { "type": "string" }
            }));
        }
        if let Some(query) = route.doc.query {
            let schema = query(&mut generator);
            for (name, property) in query_properties(&generator, &schema) {
                parameters.push(json!({
                    "name": name, "in": "query", "required": false, "schema": property
                }));
            }
        }
        let mut operation = json!({
            "summary": route.doc.summary,
            "description": who,
            "tags": [role],
            "x-chainstore-role": role,
            "parameters": parameters,
            "responses": {
                "default": {
                    "description": "An error: the code names it; 4xx changed nothing.",
                    "content": { "application/json": { "schema": error } }
                }
            }
        });
        let mut ok = json!({ "description": "Done." });
        if let Some(answer) = content(&mut generator, route.doc.answer) {
            ok["content"] = answer;
        }
        operation["responses"]["200"] = ok;
        if let Some(body) = content(&mut generator, route.doc.body) {
            operation["requestBody"] = json!({ "required": true, "content": body });
        }
        if route.access != Access::Public {
            operation["security"] = json!([{ "bearer": [] }, { "mutualTls": [] }]);
        }
        let item = paths
            .entry(route.path.to_string())
            .or_insert_with(|| json!({}));
        item[route.method.to_ascii_lowercase()] = operation;
    }
    let schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "chainstore",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A replicated, execution-partitioned event-chain store. Reads that \
                            cannot be answered say `cannot_answer` with a reason, never \
                            \"no events\".",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": { "type": "http", "scheme": "bearer" },
                "mutualTls": { "type": "mutualTLS" },
            },
        },
    })
}

/// `{name}` segments of a path, in order.
fn path_params(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .collect()
}

/// The properties of a query type's schema (followed through its reference).
fn query_properties(generator: &SchemaGenerator, schema: &Schema) -> Vec<(String, Value)> {
    let value = schema.as_value();
    let resolved = match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let name = reference.rsplit('/').next().unwrap_or_default();
            generator
                .definitions()
                .get(name)
                .cloned()
                .unwrap_or(Value::Null)
        }
        None => value.clone(),
    };
    resolved
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .map(|(name, schema)| (name.clone(), not_null(schema.clone())))
                .collect()
        })
        .unwrap_or_default()
}

/// A query parameter's schema without its "or null" (an absent parameter is the null): OpenAPI
/// 3.0 has neither type lists nor a null type.
fn not_null(mut schema: Value) -> Value {
    if let Some(types) = schema.get("type").and_then(Value::as_array) {
        let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if let [only] = kept.as_slice() {
            schema["type"] = only.clone();
        }
    }
    let any_of = schema
        .get("anyOf")
        .and_then(Value::as_array)
        .map(|alternatives| {
            alternatives
                .iter()
                .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
                .cloned()
                .collect::<Vec<_>>()
        });
    if let (Some([only]), Some(object)) = (any_of.as_deref(), schema.as_object_mut()) {
        object.remove("anyOf");
        if let Some(fields) = only.as_object() {
            for (key, value) in fields {
                object.insert(key.clone(), value.clone());
            }
        }
    }
    schema
}

/// `GET /v1/openapi.json` (built once: it depends on nothing but the code).
pub async fn serve() -> Response {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    Json(DOCUMENT.get_or_init(|| document(&super::routes()))).into_response()
}
