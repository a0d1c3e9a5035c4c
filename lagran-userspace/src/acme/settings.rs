//! `[acme]`: where the control plane gets the certificates of the sites that
//! ask for ACME, and when it renews them.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::settings::{InvalidSetting, Key, KeyDefault};

/// The ACME client's settings; no `directory_url`, no ACME.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AcmeSettings {
    /// The ACME server's directory (RFC 8555 §7.1.1).
    pub directory_url: Option<String>,
    /// The account's contact address (`mailto:` is added).
    pub contact_email: Option<String>,
    /// PEM CA certificates trusted for the ACME server besides the system's.
    pub ca_file: Option<PathBuf>,
    /// A certificate is renewed once it expires within this many days.
    pub renew_before_days: u64,
    /// How often the sites and their certificates are looked at.
    pub check_secs: u64,
}

impl Default for AcmeSettings {
    fn default() -> Self {
        AcmeSettings { directory_url: None, contact_email: None, ca_file: None, renew_before_days: 30, check_secs: 60 }
    }
}

impl AcmeSettings {
    /// How long before its expiry a certificate is renewed.
    pub fn renew_before(&self) -> Duration {
        Duration::from_secs(self.renew_before_days.saturating_mul(86_400))
    }

    pub fn check_every(&self) -> Duration {
        Duration::from_secs(self.check_secs)
    }

    /// An https:// directory, a sane period, and a CA file that holds certificates.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.check_secs == 0 {
            return Err(InvalidSetting::new("acme.check_secs", "must be > 0"));
        }
        if let Some(url) = &self.directory_url
            && !url.starts_with("https://")
        {
            return Err(InvalidSetting::new("acme.directory_url", format!("{url:?} must be an https:// URL")));
        }
        if let Some(mail) = &self.contact_email
            && (!mail.contains('@') || mail.contains(char::is_whitespace))
        {
            return Err(InvalidSetting::new("acme.contact_email", format!("{mail:?} is not an e-mail address")));
        }
        if let Some(path) = &self.ca_file {
            super::client::read_roots(path).map_err(|e| InvalidSetting::new("acme.ca_file", e))?;
        }
        Ok(())
    }
}

/// The keys of `[acme]`.
pub const ACME_KEYS: &[Key] = &[
    Key::toml(
        "acme.directory_url",
        KeyDefault::Described("none (no ACME)"),
        "\"https://acme-v02.api.letsencrypt.org/directory\"",
        "the ACME server that issues and renews the certificates of sites with `\"acme\": true` \
         (HTTP-01, answered by the edges; the leader of the control plane orders)",
    ),
    Key::toml(
        "acme.contact_email",
        KeyDefault::Described("none"),
        "\"hostmaster@example.com\"",
        "the ACME account's contact address",
    ),
    Key::toml(
        "acme.ca_file",
        KeyDefault::Described("none"),
        "\"/etc/lagran/acme-ca.pem\"",
        "PEM CA certificates trusted for the ACME server besides the system's (a test CA such as pebble's)",
    ),
    Key::toml(
        "acme.renew_before_days",
        KeyDefault::Toml("30"),
        "20",
        "a certificate is renewed once it expires within this many days",
    ),
    Key::toml("acme.check_secs", KeyDefault::Toml("60"), "300", "how often the sites' certificates are looked at"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_named() {
        let ok = AcmeSettings { directory_url: Some("https://acme.test/dir".into()), ..Default::default() };
        ok.validate().unwrap();
        let field = |s: AcmeSettings| s.validate().unwrap_err().to_string();
        assert!(
            field(AcmeSettings { directory_url: Some("http://acme.test/dir".into()), ..ok.clone() })
                .contains("acme.directory_url")
        );
        assert!(field(AcmeSettings { check_secs: 0, ..ok.clone() }).contains("acme.check_secs"));
        assert!(field(AcmeSettings { contact_email: Some("nobody".into()), ..ok.clone() }).contains("contact_email"));
        assert!(field(AcmeSettings { ca_file: Some("/nonexistent/ca.pem".into()), ..ok.clone() }).contains("ca_file"));
        assert_eq!(ok.renew_before(), Duration::from_secs(30 * 86_400));
    }
}
