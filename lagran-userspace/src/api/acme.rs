//! ACME through the API.
//!
//! - `GET /api/v1/acme/challenges/{token}`: the key authorization of a pending
//!   HTTP-01 challenge, as `text/plain` — what an edge answers to
//!   `GET /.well-known/acme-challenge/{token}` (RFC 8555 §8.3). The answer is
//!   public by design (the ACME server fetches it over plain HTTP), but only
//!   the edges ask here: the agent token or a node's own.
//! - `POST /api/v1/sites/{domain}/certificate/renew` (admin): the leader's
//!   ACME task orders a new certificate for the site now, whatever the expiry
//!   of the one it has: `202` with `domain` and `requested_at_ms`; `404` for
//!   an unknown site, `409` for a site without `acme`. The request is a row in
//!   the store, so any control process takes it and the leader acts on it
//!   (within a second; see [`crate::acme::renewal`]).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::Serialize;

use super::AppState;
use super::error::ApiError;

/// The answer to a renewal request.
#[derive(Debug, Serialize)]
pub struct RenewalAsked {
    pub domain: String,
    pub requested_at_ms: i64,
}

/// `POST /api/v1/sites/{domain}/certificate/renew`.
pub async fn renew(
    State(state): State<AppState>,
    Path(domain): Path<String>,
) -> Result<(StatusCode, Json<RenewalAsked>), ApiError> {
    let domain = domain.trim().trim_end_matches('.').to_ascii_lowercase();
    let Some(site) = state.store.get_site(&domain).await? else {
        return Err(ApiError::not_found(format!("no site {domain}")));
    };
    if !site.site.acme {
        let why = format!("the site {domain} does not get its certificate by ACME (`acme` is false)");
        return Err(ApiError::new(StatusCode::CONFLICT, why));
    }
    let requested_at_ms = state.store.request_acme_renewal(&domain).await?;
    tracing::info!(%domain, "ACME renewal asked");
    Ok((StatusCode::ACCEPTED, Json(RenewalAsked { domain, requested_at_ms })))
}

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

    #[tokio::test]
    async fn a_renewal_is_asked_for_acme_sites_only() {
        use crate::api::auth::AGENT_TOKEN_HEADER;
        use crate::api::testing::{ADMIN, AGENT, call, router, state};
        use crate::store::Store;
        use axum::http::Method;
        use serde_json::json;

        let store = Store::connect("sqlite::memory:").await.unwrap();
        let r = router(state(store.clone()));
        let admin = format!("Bearer {ADMIN}");
        let admin = [("authorization", admin.as_str())];
        for (host, acme) in [("shop.test", true), ("plain.test", false)] {
            let site = json!({"origin": "http://o", "acme": acme});
            let (s, v) = call(&r, Method::PUT, &format!("/api/v1/sites/{host}"), &admin, Some(site)).await;
            assert_eq!(s, StatusCode::CREATED, "{v}");
        }
        let renew = |host: &str| format!("/api/v1/sites/{host}/certificate/renew");
        let (s, _) = call(&r, Method::POST, &renew("shop.test"), &[(AGENT_TOKEN_HEADER, AGENT)], None).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "the admin token only");
        assert_eq!(call(&r, Method::POST, &renew("none.test"), &admin, None).await.0, StatusCode::NOT_FOUND);
        assert_eq!(call(&r, Method::POST, &renew("plain.test"), &admin, None).await.0, StatusCode::CONFLICT);
        assert_eq!(store.acme_renewals().await.unwrap(), vec![], "nothing asked by the refused requests");
        let (s, v) = call(&r, Method::POST, &renew("Shop.Test."), &admin, None).await;
        assert_eq!((s, &v["domain"]), (StatusCode::ACCEPTED, &json!("shop.test")), "{v}");
        let asked = store.acme_renewals().await.unwrap();
        assert_eq!(asked, vec![("shop.test".to_string(), v["requested_at_ms"].as_i64().unwrap())]);
    }
}
