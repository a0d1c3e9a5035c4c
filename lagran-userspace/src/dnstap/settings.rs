//! The `[dnstap]` table: where query logs go, and how many of the XDP fast
//! path's answers they sample.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

use crate::settings::{Key, KeyDefault};

/// `[dnstap]`: query logs in dnstap over Frame Streams.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnstapSettings {
    /// The reader's Unix socket; `None`: no query logs.
    pub socket: Option<PathBuf>,
    /// Which of the XDP fast path's answers are logged too: one in N.
    pub xdp_sample: XdpSample,
}

/// `xdp_sample = "1/N"`: every Nth answer the XDP program sends is logged
/// (per CPU); `0` (or no key): none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpSample(u32);

impl XdpSample {
    /// One answer in `n` (0: none).
    pub const fn one_in(n: u32) -> XdpSample {
        XdpSample(n)
    }

    /// N of "1/N"; 0 when sampling is off.
    pub fn every(self) -> u32 {
        self.0
    }

    /// `"1/N"` with N ≥ 1, or `"0"`.
    pub fn parse(text: &str) -> Result<XdpSample, String> {
        let t = text.trim();
        if t == "0" {
            return Ok(XdpSample(0));
        }
        let n =
            t.strip_prefix("1/").and_then(|n| n.trim().parse::<u32>().ok()).filter(|n| *n >= 1).ok_or_else(|| {
                format!("dnstap.xdp_sample must be \"1/N\" with N ≥ 1 (e.g. \"1/100\"), or 0: got {text:?}")
            })?;
        Ok(XdpSample(n))
    }
}

impl fmt::Display for XdpSample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 { f.write_str("0") } else { write!(f, "1/{}", self.0) }
    }
}

impl<'de> Deserialize<'de> for XdpSample {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(i64),
        }
        match Raw::deserialize(d)? {
            Raw::Text(t) => XdpSample::parse(&t).map_err(serde::de::Error::custom),
            Raw::Number(0) => Ok(XdpSample(0)),
            Raw::Number(n) => XdpSample::parse(&n.to_string()).map_err(serde::de::Error::custom),
        }
    }
}

/// The keys of `[dnstap]`.
pub const DNSTAP_KEYS: &[Key] = &[
    Key::toml(
        "dnstap.socket",
        KeyDefault::Described("none"),
        "\"/run/lagran/dnstap.sock\"",
        "query logs: `AUTH_QUERY`/`AUTH_RESPONSE` dnstap messages of every userspace answer (UDP, TCP, DoT, DoQ) \
         and of the XDP answers `dnstap.xdp_sample` picks, sent over Frame Streams to a reader listening on this \
         Unix socket (reconnected when it goes away; messages the reader cannot take are dropped and counted, \
         never delaying an answer)",
    ),
    Key::toml(
        "dnstap.xdp_sample",
        KeyDefault::Described("0 (none)"),
        "\"1/100\"",
        "with `dnstap.socket` and `--xdp`: every Nth answer the XDP program sends (counted per CPU) goes to the \
         query log too, query and response (their first 512 octets), through a BPF ring buffer \
         (`lagran_tap_ring`); a full ring drops the sample (counted in \
         `lagran_dnstap_dropped_total{source=\"xdp\"}`), never the answer",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_reads_a_socket_and_refuses_unknown_keys() {
        let s: DnstapSettings = toml::from_str("socket = \"/run/x.sock\"").unwrap();
        assert_eq!(s.socket.as_deref(), Some(std::path::Path::new("/run/x.sock")));
        assert_eq!(s.xdp_sample.every(), 0, "no sampling unless asked");
        assert!(toml::from_str::<DnstapSettings>("sockets = \"/run/x.sock\"").is_err());
    }

    #[test]
    fn xdp_sample_reads_one_in_n_or_zero_and_says_what_is_wrong() {
        let every = |t: &str| toml::from_str::<DnstapSettings>(t).map(|s| s.xdp_sample.every());
        assert_eq!(every("xdp_sample = \"1/100\"").unwrap(), 100);
        assert_eq!(every("xdp_sample = \"1/1\"").unwrap(), 1);
        assert_eq!(every("xdp_sample = \"0\"").unwrap(), 0);
        assert_eq!(every("xdp_sample = 0").unwrap(), 0);
        for bad in ["\"1/0\"", "\"2/100\"", "\"100\"", "\"1/x\"", "\"\"", "5", "-1"] {
            let e = every(&format!("xdp_sample = {bad}")).unwrap_err().to_string();
            assert!(e.contains("dnstap.xdp_sample must be \"1/N\""), "{bad}: {e}");
        }
        assert_eq!(XdpSample::one_in(100).to_string(), "1/100");
    }
}
