//! The vocabulary every subsystem's settings share: a documented key
//! ([`Key`]), a value that cannot be used ([`InvalidSetting`]) and the
//! "one address or many" form of listener keys.
//!
//! Each subsystem owns its settings type, its validation and the rows of the
//! configuration table that describe its keys; the configuration module puts
//! them together. This module depends on nothing else in the crate.

use std::net::SocketAddr;

use serde::Deserialize;

/// A configuration value that cannot be used, naming its key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("config value {key} is not valid: {reason}")]
pub struct InvalidSetting {
    /// The TOML path of the key (`dns.tcp_idle_secs`) or of its table (`tls`).
    pub key: &'static str,
    pub reason: String,
}

impl InvalidSetting {
    pub fn new(key: &'static str, reason: impl Into<String>) -> InvalidSetting {
        InvalidSetting { key, reason: reason.into() }
    }
}

/// Refuses a list of listen addresses that names one address twice.
pub fn no_repeated_address(key: &'static str, list: &[SocketAddr]) -> Result<(), InvalidSetting> {
    for (i, a) in list.iter().enumerate() {
        if list[..i].contains(a) {
            return Err(InvalidSetting::new(key, format!("{a} is listed twice")));
        }
    }
    Ok(())
}

/// Deserializes `key = "127.0.0.1:53"` or `key = ["10.0.0.2:53", "[2001:db8::2]:53"]`.
pub fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<SocketAddr>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(SocketAddr),
        Many(Vec<SocketAddr>),
    }
    match OneOrMany::deserialize(d)
        .map_err(|_| serde::de::Error::custom("expected an address such as \"127.0.0.1:53\" or an array of them"))?
    {
        OneOrMany::One(a) => Ok(vec![a]),
        OneOrMany::Many(v) => Ok(v),
    }
}

/// The default of a key as the table shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyDefault {
    /// A TOML value equal to the code's default (a test parses it and compares).
    Toml(&'static str),
    /// A default that is not a plain value ("none", "the system store").
    Described(&'static str),
}

/// One row of the configuration table (README's "Configuration" section is
/// generated from these rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    /// The TOML path (`dns.ttl`); `None` for an option of the command line only.
    pub toml: Option<&'static str>,
    /// The environment variable that overrides it.
    pub env: Option<&'static str>,
    /// The command-line flags that override it.
    pub flags: &'static [&'static str],
    pub default: KeyDefault,
    /// A TOML value the parser accepts and that differs from the default; the
    /// environment form (quotes and brackets dropped, commas between list
    /// items) must be accepted by the environment variable.
    pub example: &'static str,
    /// What the key does (Markdown, one line).
    pub meaning: &'static str,
}

impl Key {
    /// A TOML key.
    pub const fn toml(path: &'static str, default: KeyDefault, example: &'static str, meaning: &'static str) -> Key {
        Key { toml: Some(path), env: None, flags: &[], default, example, meaning }
    }

    /// An option that only the command line (and perhaps the environment) sets.
    pub const fn command_line(flags: &'static [&'static str], default: &'static str, meaning: &'static str) -> Key {
        Key { toml: None, env: None, flags, default: KeyDefault::Described(default), example: "", meaning }
    }

    /// The environment variable that overrides the key.
    pub const fn env(self, name: &'static str) -> Key {
        Key { env: Some(name), ..self }
    }

    /// The command-line flags that override the key.
    pub const fn flags(self, flags: &'static [&'static str]) -> Key {
        Key { flags, ..self }
    }
}
