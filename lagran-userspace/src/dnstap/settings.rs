//! The `[dnstap]` table: where query logs go.

use std::path::PathBuf;

use serde::Deserialize;

use crate::settings::{Key, KeyDefault};

/// `[dnstap]`: query logs in dnstap over Frame Streams.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnstapSettings {
    /// The reader's Unix socket; `None`: no query logs.
    pub socket: Option<PathBuf>,
}

/// The keys of `[dnstap]`.
pub const DNSTAP_KEYS: &[Key] = &[Key::toml(
    "dnstap.socket",
    KeyDefault::Described("none"),
    "\"/run/lagran/dnstap.sock\"",
    "query logs: `AUTH_QUERY`/`AUTH_RESPONSE` dnstap messages of every userspace answer (UDP, TCP, DoT, DoQ; \
     not the XDP fast path's), sent over Frame Streams to a reader listening on this Unix socket (reconnected \
     when it goes away; messages the reader cannot take are dropped and counted, never delaying an answer)",
)];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_reads_a_socket_and_refuses_unknown_keys() {
        let s: DnstapSettings = toml::from_str("socket = \"/run/x.sock\"").unwrap();
        assert_eq!(s.socket.as_deref(), Some(std::path::Path::new("/run/x.sock")));
        assert!(toml::from_str::<DnstapSettings>("sockets = \"/run/x.sock\"").is_err());
    }
}
