//! `GET /api/v1/acme/challenges/{token}`: the key authorization of a pending
//! HTTP-01 challenge, as `text/plain` — what an edge answers to
//! `GET /.well-known/acme-challenge/{token}` (RFC 8555 §8.3). The answer is
//! public by design (the ACME server fetches it over plain HTTP), but only
//! the edges ask here: the agent token or a node's own.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::IntoResponse;

use super::AppState;
use super::error::ApiError;

/// RFC 8555 §8.1: a token is base64url, at least 128 bits of entropy.
fn plausible_token(token: &str) -> bool {
    (16..=256).contains(&token.len()) && token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

pub async fn challenge(
    State(state): State<AppState>,
    Path(token): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let found = match plausible_token(&token) {
        true => state.store.acme_challenge(&token).await?,
        false => None,
    };
    match found {
        Some(key_authorization) => Ok(([(header::CONTENT_TYPE, "text/plain")], key_authorization)),
        None => Err(ApiError::not_found("no pending ACME challenge has this token")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_base64url() {
        assert!(plausible_token("evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA"));
        assert!(!plausible_token("short"));
        assert!(!plausible_token("../../../../etc/passwd/aaaaaaaa"));
        assert!(!plausible_token(&"a".repeat(300)));
    }
}
