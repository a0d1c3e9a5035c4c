//! API errors: a status code and a JSON body naming the field that is wrong.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::scheduler::SchedulerError;
use crate::store::StoreError;

/// An error answered to an API client.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub field: Option<String>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), field: None }
    }

    pub fn field(status: StatusCode, field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), field: Some(field.into()) }
    }

    pub fn bad_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::field(StatusCode::UNPROCESSABLE_ENTITY, field, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Body { error: &self.message, field: self.field.as_deref() };
        (self.status, Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::NotFound { .. } => ApiError::not_found(e.to_string()),
            StoreError::Conflict { .. } | StoreError::InUse { .. } => {
                ApiError::new(StatusCode::CONFLICT, e.to_string())
            }
            StoreError::Invalid { field, reason } => ApiError::bad_field(*field, reason.clone()),
            _ => {
                tracing::error!(error = %e, "store failure answering an API request");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
            }
        }
    }
}

impl From<SchedulerError> for ApiError {
    fn from(e: SchedulerError) -> Self {
        match e {
            SchedulerError::Store(s) => s.into(),
            SchedulerError::NoPrevious => {
                ApiError::new(StatusCode::CONFLICT, "no previous route table to roll back to")
            }
            e @ (SchedulerError::BadFreeze(_) | SchedulerError::Build(_)) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
            }
            // Retry on the leader (a standby) or on the new leader (a fenced one).
            e @ (SchedulerError::NotLeader { .. } | SchedulerError::Fenced { .. }) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            }
        }
    }
}

/// Parses a JSON body, naming the offending field on failure.
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let field = if path == "." || path.is_empty() { unknown_field(&inner.to_string()) } else { Some(path) };
        match field {
            Some(f) => ApiError::field(StatusCode::BAD_REQUEST, f, format!("invalid JSON body: {inner}")),
            None => ApiError::new(StatusCode::BAD_REQUEST, format!("invalid JSON body: {inner}")),
        }
    })
}

/// serde's "unknown field `x`" / "missing field `x`" messages carry the field name.
fn unknown_field(msg: &str) -> Option<String> {
    let start = msg.find('`')? + 1;
    let len = msg[start..].find('`')?;
    Some(msg[start..start + len].to_string())
}
