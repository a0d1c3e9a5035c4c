//! One order (RFC 8555 §7.4) for one site's host: the HTTP-01 challenge
//! published in the store, where every control process answers it to the
//! edges; the ACME server told to validate only once it is readable there;
//! then a new key pair, its CSR, and the certificate chain.

use std::time::Duration;

use instant_acme::{
    Account, AuthorizationStatus, ChallengeType, Identifier, NewOrder, Order, OrderStatus, RetryPolicy,
};

use super::AcmeError;
use crate::store::Store;
use crate::store::acme::Challenge;
use crate::store::certificates::Certificate;

/// How long the ACME server may take to validate and then to issue.
const VALIDATION_TIMEOUT: Duration = Duration::from_secs(120);

/// Orders a certificate for `host`; returns it with its new private key (not yet stored).
pub async fn issue(account: &Account, store: &Store, host: &str) -> Result<Certificate, AcmeError> {
    let identifiers = [Identifier::Dns(host.to_string())];
    let mut order =
        account.new_order(&NewOrder::new(&identifiers)).await.map_err(|e| AcmeError::acme("placing the order", e))?;
    let mut published = Vec::new();
    let result = validate_and_finalize(&mut order, store, host, &mut published).await;
    for token in published {
        if let Err(e) = store.delete_acme_challenge(&token).await {
            tracing::warn!(host, error = %e, "an answered ACME challenge stays in the store until the next cleanup");
        }
    }
    let (cert_pem, key_pem) = result?;
    Ok(Certificate { domain: host.to_string(), cert_pem, key_pem, updated_at_ms: 0 })
}

/// Publishes and readies each pending challenge, then finalizes: `(chain PEM, key PEM)`.
async fn validate_and_finalize(
    order: &mut Order,
    store: &Store,
    host: &str,
    published: &mut Vec<String>,
) -> Result<(String, String), AcmeError> {
    let refused = |reason: String| AcmeError::Order { host: host.to_string(), reason };
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz.map_err(|e| AcmeError::acme("reading an authorization", e))?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(refused(format!("the authorization is {other:?}"))),
        }
        let mut challenge = authz
            .challenge(ChallengeType::Http01)
            .ok_or_else(|| refused("the ACME server offers no http-01 challenge".into()))?;
        let answer = Challenge {
            token: challenge.token.clone(),
            key_authorization: challenge.key_authorization().as_str().to_string(),
            domain: host.to_string(),
        };
        store.put_acme_challenge(&answer).await?;
        published.push(answer.token.clone());
        // The edges answer from the store through the control API: once the row
        // reads back, every edge can serve it, and only then may the server look.
        if store.acme_challenge(&answer.token).await?.as_deref() != Some(answer.key_authorization.as_str()) {
            return Err(refused("the challenge answer did not read back from the store".into()));
        }
        challenge.set_ready().await.map_err(|e| AcmeError::acme("asking the ACME server to validate", e))?;
    }
    let retries = RetryPolicy::default().timeout(VALIDATION_TIMEOUT);
    let status = order.poll_ready(&retries).await.map_err(|e| AcmeError::acme("waiting for the validation", e))?;
    if status != OrderStatus::Ready {
        return Err(refused(format!("the order is {status:?}: {}", problems(order).await)));
    }
    let key_pem = order.finalize().await.map_err(|e| AcmeError::acme("finalizing the order", e))?;
    let chain = order.poll_certificate(&retries).await.map_err(|e| AcmeError::acme("fetching the certificate", e))?;
    Ok((chain, key_pem))
}

/// What the server said went wrong: the order's problem and its challenges'.
async fn problems(order: &mut Order) -> String {
    let mut out: Vec<String> = order.state().error.iter().map(ToString::to_string).collect();
    let mut authorizations = order.authorizations();
    while let Some(Ok(authz)) = authorizations.next().await {
        out.extend(authz.challenges.iter().filter_map(|c| c.error.as_ref()).map(ToString::to_string));
    }
    if out.is_empty() { "no reason given".to_string() } else { out.join("; ") }
}
