//! Request parsing that answers in the API's error format: bodies read within a limit, JSON and
//! query strings decoded with a precise 400, ids validated before anything touches storage.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Uri};
use chainstore_model::{EventId, ExecutionId, Limit, Oversize};
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// Reads a whole body, refusing more than `limit` bytes.
pub async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(size) = declared.filter(|len| *len > limit as u64) {
        return Err(ApiError::too_large(Oversize {
            what: Limit::BodyBytes,
            size: Some(size),
            limit: limit as u64,
        }));
    }
    axum::body::to_bytes(body, limit).await.map_err(|_| {
        ApiError::too_large_because(
            Oversize {
                what: Limit::BodyBytes,
                size: None,
                limit: limit as u64,
            },
            format!("the body exceeds the limit of {limit} bytes or was cut short"),
        )
    })
}

/// Decodes a JSON body.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::invalid_input("the request needs a JSON body"));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::invalid_input(format!("malformed JSON body: {e}")))
}

/// Decodes the query string.
pub fn parse_query<T: DeserializeOwned>(uri: &Uri) -> Result<T, ApiError> {
    axum::extract::Query::<T>::try_from_uri(uri)
        .map(|q| q.0)
        .map_err(|e| ApiError::invalid_input(format!("malformed query string: {}", e.body_text())))
}

/// Path parameters, refused in the API's error format (axum's own rejection is plain text):
/// a bad percent-escape is a 400 `invalid_input` like any other bad id.
pub struct PathParams<T>(pub T);

impl<S, T> FromRequestParts<S> for PathParams<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(params)| PathParams(params))
            .map_err(|e| ApiError::invalid_input(format!("bad path: {}", e.body_text())))
    }
}

/// Validates an execution id from the path.
pub fn execution_id(raw: &str) -> Result<ExecutionId, ApiError> {
    ExecutionId::new(raw).map_err(|e| ApiError::invalid_input(format!("bad execution id: {e}")))
}

/// Validates an event id from the path.
pub fn event_id(raw: &str) -> Result<EventId, ApiError> {
    EventId::new(raw).map_err(|e| ApiError::invalid_input(format!("bad event id: {e}")))
}
