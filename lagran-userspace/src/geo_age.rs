//! `lagran_geo_data_age_seconds{source}`: how old each configured geo data
//! file is, for the "geo data old" alert. A MaxMind DB states when it was
//! built (its metadata's `build_epoch`): that date is used. Other files
//! (the IPv4/IPv6 CSVs, ASN CSVs) state none: their modification time is.
//!
//! Files are looked at on each scrape; a MaxMind DB is opened again only when
//! its modification time changed (the build date is cached by path and mtime).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::geo::settings::GeoSettings;

/// The configured geo files (IPv4, IPv6, MaxMind DBs, ASN data), in that order.
pub fn files(s: &GeoSettings) -> Vec<PathBuf> {
    s.ipv4_path.iter().chain(&s.ipv6_path).chain(&s.mmdb_path).chain(&s.asn_path).cloned().collect()
}

/// What an age is counted from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// The build date the data states (MaxMind DB `build_epoch`).
    BuildDate,
    /// The file's modification time.
    Mtime,
}

/// Build dates of MaxMind DBs, by path and the mtime they were read at.
#[derive(Default)]
pub struct GeoAges {
    built: Mutex<HashMap<PathBuf, (SystemTime, u64)>>,
}

impl GeoAges {
    /// When `path`'s data dates from (Unix seconds) and why; `None` when the
    /// file cannot be read.
    pub fn dated(&self, path: &Path) -> Option<(u64, Basis)> {
        let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("mmdb")) {
            let mut built = self.built.lock().expect("geo age lock poisoned");
            if let Some((_, epoch)) = built.get(path).filter(|(at, _)| *at == mtime) {
                return Some((*epoch, Basis::BuildDate));
            }
            if let Ok(r) = maxminddb::Reader::open_readfile(path) {
                let epoch = r.metadata.build_epoch;
                built.insert(path.to_path_buf(), (mtime, epoch));
                return Some((epoch, Basis::BuildDate));
            }
        }
        Some((mtime.duration_since(UNIX_EPOCH).ok()?.as_secs(), Basis::Mtime))
    }

    /// The gauge for `files` at `now` (Unix seconds): one line per readable file,
    /// labelled with its file name.
    pub fn render_prometheus(&self, files: &[PathBuf], now: u64, out: &mut String) {
        out.push_str(
            "# HELP lagran_geo_data_age_seconds Age of each configured geo data file: now minus the build date a \
             MaxMind DB states (build_epoch), or minus the file's modification time for formats that state none (CSV).\n\
             # TYPE lagran_geo_data_age_seconds gauge\n",
        );
        for f in files {
            let Some((since, _)) = self.dated(f) else { continue };
            let name = f.file_name().map_or_else(|| f.display().to_string(), |n| n.to_string_lossy().into_owned());
            let name = name.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(out, "lagran_geo_data_age_seconds{{source=\"{name}\"}} {}", now.saturating_sub(since));
        }
    }
}

/// Adds the gauge for `settings`' files to `/metrics`.
pub fn add_metrics(metrics: &crate::metrics::Metrics, settings: &GeoSettings) {
    let files = files(settings);
    if files.is_empty() {
        return;
    }
    let ages = GeoAges::default();
    metrics.add_source(Box::new(move |out| {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        ages.render_prometheus(&files, now, out);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_csv_is_dated_by_its_mtime_and_a_missing_file_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("ipv4.csv");
        std::fs::write(&csv, "1.0.0.0,1.0.0.255,AU\n").unwrap();
        let ten_days_ago = SystemTime::now() - std::time::Duration::from_secs(10 * 86_400);
        std::fs::File::options().write(true).open(&csv).unwrap().set_modified(ten_days_ago).unwrap();
        let ages = GeoAges::default();
        let (since, basis) = ages.dated(&csv).unwrap();
        assert_eq!(basis, Basis::Mtime);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let mut out = String::new();
        ages.render_prometheus(&[csv, dir.path().join("gone.csv")], now, &mut out);
        let age = now - since;
        assert!((10 * 86_400 - 2..=10 * 86_400 + 2).contains(&age), "{age}");
        assert!(out.contains(&format!("lagran_geo_data_age_seconds{{source=\"ipv4.csv\"}} {age}\n")), "{out}");
        assert!(!out.contains("gone.csv"), "{out}");
    }

    #[test]
    fn a_maxmind_db_is_dated_by_its_build_epoch() {
        // The geo data the repository's tests use, when present.
        let Some(mmdb) = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/geolite2-city-mmdb"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "mmdb"))
        else {
            return;
        };
        let (since, basis) = GeoAges::default().dated(&mmdb).unwrap();
        let want = maxminddb::Reader::open_readfile(&mmdb).unwrap().metadata.build_epoch;
        assert_eq!((since, basis), (want, Basis::BuildDate), "{}", mmdb.display());
    }
}
