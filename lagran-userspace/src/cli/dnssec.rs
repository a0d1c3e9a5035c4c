//! `lagran dnssec status`: the signed zones' keys as the control plane's key
//! directory holds them, with the DS records to give each parent zone and
//! the trust anchor (the KSK's DNSKEY) for a validator.

use clap::Subcommand;

use crate::dnssec::{KeyDirectory, KeyError, ZoneKey};
use crate::model::{DEFAULT_REFRESH_SECS, DEFAULT_VALIDITY_SECS};

#[derive(Debug, Subcommand)]
pub enum DnssecCommand {
    /// Keys, their states, the next events and the DS for each parent (run
    /// on a control-plane host: it reads the key directory).
    Status,
}

pub fn run(command: DnssecCommand, keys: &KeyDirectory) -> Result<String, KeyError> {
    match command {
        DnssecCommand::Status => status(keys),
    }
}

fn key_line(zone: &str, key: &ZoneKey) -> String {
    format!(
        "  {} tag {} algorithm {} state active (published, signing)\n    {zone}. IN DNSKEY {}\n",
        key.role.as_str().to_uppercase(),
        key.tag(),
        key.algorithm.number(),
        key.dnskey()
    )
}

/// The status text (see the module documentation).
pub fn status(keys: &KeyDirectory) -> Result<String, KeyError> {
    let zones = keys.zones()?;
    if zones.is_empty() {
        return Ok(format!("no DNSSEC keys in {}: no zone is signed yet\n", keys.path().display()));
    }
    let mut out = format!("DNSSEC keys in {}\n", keys.path().display());
    for (zone, algorithm) in zones {
        let Some(pair) = keys.load(&zone, algorithm)? else { continue };
        let apex = hickory_proto::rr::Name::from_ascii(format!("{zone}."))
            .map_err(|e| KeyError::new(format!("zone {zone:?}"), e))?;
        out.push_str(&format!("\nzone {zone}\n"));
        out.push_str(&key_line(&zone, &pair.ksk));
        out.push_str(&key_line(&zone, &pair.zsk));
        out.push_str(&format!("  DS for the parent (SHA-256):\n    {zone}. IN DS {}\n", pair.ksk.ds(&apex)?));
        out.push_str(&format!(
            "  next events: signatures renewed with fewer than {} days left (zone policy; default {} of {} days \
             validity); no rollover scheduled (keys are replaced by hand)\n",
            DEFAULT_REFRESH_SECS / 86_400,
            DEFAULT_REFRESH_SECS / 86_400,
            DEFAULT_VALIDITY_SECS / 86_400
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dnssec::ZoneKeys;
    use crate::model::DnssecAlgorithm;

    #[test]
    fn status_prints_each_zones_keys_and_its_ds() {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyDirectory::new(dir.path());
        assert!(status(&keys).unwrap().contains("no zone is signed"));
        let made: ZoneKeys = keys.load_or_create("edge.lagran.net", DnssecAlgorithm::Ecdsap256sha256).unwrap();
        let text = status(&keys).unwrap();
        assert!(text.contains(&format!("KSK tag {} algorithm 13", made.ksk.tag())), "{text}");
        assert!(text.contains(&format!("edge.lagran.net. IN DS {} 13 2 ", made.ksk.tag())), "{text}");
    }
}
