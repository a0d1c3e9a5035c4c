//! API errors: a status code and a JSON body naming the field that is wrong.
//! An internal failure (the database, a build) is logged with a random id,
//! and the client gets only `{"error":"internal error","id":"…"}`: the id
//! finds the log line, and nothing of the database's text leaves the process.

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
    /// The id of the log line of an internal error.
    pub id: Option<String>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), field: None, id: None }
    }

    /// An internal failure: logged with a random id, answered with the id only.
    pub fn internal(error: &dyn std::fmt::Display) -> Self {
        let id = hex::encode(rand::random::<[u8; 8]>());
        tracing::error!(error_id = %id, error = %error, "internal error answering an API request");
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: "internal error".into(),
            field: None,
            id: Some(id),
        }
    }

    pub fn field(status: StatusCode, field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), field: Some(field.into()), id: None }
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
        let body = Body { error: &self.message, field: self.field.as_deref(), id: self.id.as_deref() };
        (self.status, Json(body)).into_response()
    }
}

impl From<crate::model::InvalidZone> for ApiError {
    fn from(e: crate::model::InvalidZone) -> Self {
        ApiError::bad_field(e.field, e.reason)
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
            StoreError::NameTaken { field, message } => ApiError::field(StatusCode::CONFLICT, *field, message.clone()),
            _ => ApiError::internal(&e),
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
            e @ (SchedulerError::BadFreeze(_) | SchedulerError::Build(_)) => ApiError::internal(&e),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn internal_errors_carry_an_id_and_not_the_database_text() {
        let store = crate::store::Store::connect("sqlite::memory:").await.unwrap();
        let e = sqlx::query("SELECT * FROM no_such_table_here").execute(store.pool()).await.unwrap_err();
        let e = StoreError::Db { context: "reading secrets".into(), source: e };
        let a = ApiError::from(e);
        assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(a.into_response().into_body(), 4096).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"], "internal error", "{v}");
        assert_eq!(v["id"].as_str().map(str::len), Some(16), "{v}");
        assert!(!v.to_string().contains("no_such_table") && !v.to_string().contains("secrets"), "{v}");
        let other = ApiError::internal(&"x");
        let same = ApiError::internal(&"x");
        assert_ne!(other.id, same.id, "ids are random");
        let nf = ApiError::from(StoreError::not_found("node", "a"));
        assert_eq!((nf.status, nf.id), (StatusCode::NOT_FOUND, None), "request errors are told as before");
    }
}
