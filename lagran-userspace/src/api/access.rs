//! Who may call an endpoint. Every route of the API declares a
//! [`Requirement`] in the endpoint table; [`enforce`], a route layer, checks
//! it before the handler runs, so no handler decides who may call it. (The
//! heartbeat also writes only where the presented node token matches, in the
//! same statement, so a token revoked between the check and the write writes
//! nothing.)
//!
//! The checks are [`Auth`]'s: the admin bearer token, the agent token header,
//! the console cookie carrying either, and the node tokens kept in the store.
//!
//! [`Auth`]: super::Auth

use std::collections::HashMap;

use axum::extract::{Path, Query, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::auth::AGENT_TOKEN_HEADER;
use super::error::ApiError;
use crate::store::verify_token;

/// What a caller must present to reach an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// Anyone: health, metrics, the console's page, login and session.
    Public,
    /// A token that reads: the agent token header, the admin bearer token, or
    /// the console cookie carrying either (open when no token is configured).
    Read,
    /// The admin bearer token or the console cookie carrying it (open when no
    /// admin token is configured).
    Admin,
    /// [`Requirement::Read`], or the own agent token of any node.
    ReadOrAnyNode,
    /// [`Requirement::Read`], or the own agent token of the node named by
    /// `?node=`; the handler learns from [`KeyAccess`] whether the caller may
    /// see private keys (the admin token or that node's token).
    ReadOrQueriedNode,
    /// The global agent token, or the own agent token of the node named by the
    /// path's `{name}`, in the agent token header.
    PathNode,
}

impl Requirement {
    /// Whether a request without credentials is refused (given configured tokens).
    pub fn needs_credentials(self) -> bool {
        self != Requirement::Public
    }
}

/// Whether the caller of a [`Requirement::ReadOrQueriedNode`] endpoint may see
/// private keys; put in the request's extensions by [`enforce`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyAccess(pub bool);

/// `?node=NAME`: whose agent token is presented.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyQuery {
    pub node: Option<String>,
}

/// The route layer: refuses the request unless it meets `requirement`.
pub async fn enforce(
    State((state, requirement)): State<(AppState, Requirement)>,
    mut request: Request,
    next: Next,
) -> Response {
    match check(&state, requirement, &mut request).await {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

async fn check(state: &AppState, requirement: Requirement, request: &mut Request) -> Result<(), ApiError> {
    let headers = request.headers();
    match requirement {
        Requirement::Public => Ok(()),
        Requirement::Read => state.auth.check_agent(headers),
        Requirement::Admin => state.auth.check_admin(headers),
        Requirement::ReadOrAnyNode => read_or_any_node(state, headers).await,
        Requirement::ReadOrQueriedNode => {
            // A malformed query names no node; the handler answers it with 400.
            let node = Query::<KeyQuery>::try_from_uri(request.uri()).ok().and_then(|Query(q)| q.node);
            let keys = may_read_keys(state, headers, node.as_deref()).await?;
            if !keys {
                state.auth.check_agent(headers)?;
            }
            request.extensions_mut().insert(KeyAccess(keys));
            Ok(())
        }
        Requirement::PathNode => {
            let name = path_param(request, "name").await;
            path_node(state, request.headers(), name.as_deref()).await
        }
    }
}

fn presented_agent_token(headers: &HeaderMap) -> Option<&str> {
    headers.get(AGENT_TOKEN_HEADER).and_then(|v| v.to_str().ok())
}

/// An edge node asks for its schedule with its own token.
async fn read_or_any_node(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Err(refused) = state.auth.check_agent(headers) else { return Ok(()) };
    let Some(token) = presented_agent_token(headers) else { return Err(refused) };
    match state.store.node_of_token(token).await? {
        Some(_) => Ok(()),
        None => Err(refused),
    }
}

/// Whether this request may read private keys: the admin token (or writes
/// open: no admin token configured), or `node`'s own agent token.
async fn may_read_keys(state: &AppState, headers: &HeaderMap, node: Option<&str>) -> Result<bool, ApiError> {
    if state.auth.check_admin(headers).is_ok() {
        return Ok(true);
    }
    let (Some(node), Some(presented)) = (node, presented_agent_token(headers)) else {
        return Ok(false);
    };
    let own = state.store.node_token_hash(node).await?;
    Ok(own.as_deref().is_some_and(|h| verify_token(h, presented)))
}

/// The global agent token, or `name`'s own token. The answer is the same
/// whether the node exists or not: no probing for node names.
async fn path_node(state: &AppState, headers: &HeaderMap, name: Option<&str>) -> Result<(), ApiError> {
    let unauthorized =
        || ApiError::unauthorized(format!("heartbeats need the node's own token in `{AGENT_TOKEN_HEADER}`"));
    let Some(presented) = presented_agent_token(headers) else { return Err(unauthorized()) };
    if state.auth.agent_token_matches(presented) {
        return Ok(());
    }
    let Some(name) = name else { return Err(unauthorized()) };
    match state.store.node_token_hash(name).await? {
        Some(hash) if verify_token(&hash, presented) => Ok(()),
        _ => Err(unauthorized()),
    }
}

/// The value of the path parameter `key` of the matched route.
async fn path_param(request: &mut Request, key: &str) -> Option<String> {
    use axum::RequestExt;
    let Path(mut params) = request.extract_parts::<Path<HashMap<String, String>>>().await.ok()?;
    params.remove(key)
}
