//! The control plane's ACME account: created once per directory, its key and
//! URL kept in the store (`acme_accounts`) so every leader after this one
//! signs with the same account.

use instant_acme::{Account, AccountCredentials, NewAccount};

use super::AcmeError;
use super::client::AcmeHttp;
use super::settings::AcmeSettings;
use crate::store::Store;

/// The stored account for the configured directory, or a new one (then stored).
pub async fn load_or_create(settings: &AcmeSettings, directory_url: &str, store: &Store) -> Result<Account, AcmeError> {
    let http = || -> Result<Box<AcmeHttp>, AcmeError> {
        Ok(Box::new(AcmeHttp::new(settings.ca_file.as_deref()).map_err(AcmeError::Client)?))
    };
    if let Some(json) = store.acme_account(directory_url).await? {
        let credentials: AccountCredentials =
            serde_json::from_str(&json).map_err(|e| AcmeError::StoredAccount(e.to_string()))?;
        let account = Account::builder_with_http(http()?)
            .from_credentials(credentials)
            .await
            .map_err(|e| AcmeError::acme("restoring the ACME account", e))?;
        tracing::info!(directory = directory_url, id = account.id(), "ACME account restored from the store");
        return Ok(account);
    }
    let contact = settings.contact_email.as_ref().map(|m| format!("mailto:{m}"));
    let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
    let new = NewAccount { contact: &contact, terms_of_service_agreed: true, only_return_existing: false };
    let (account, credentials) = Account::builder_with_http(http()?)
        .create(&new, directory_url.to_string(), None)
        .await
        .map_err(|e| AcmeError::acme("creating the ACME account", e))?;
    let json = serde_json::to_string(&credentials).map_err(|e| AcmeError::StoredAccount(e.to_string()))?;
    store.put_acme_account(directory_url, &json).await?;
    tracing::info!(directory = directory_url, id = account.id(), "ACME account created");
    Ok(account)
}
