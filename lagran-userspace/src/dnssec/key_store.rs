//! The key directory of earlier versions: each signed zone's private keys,
//! one PKCS#8 DER file per key (`<zone>.<ksk|zsk>.<algorithm number>.pk8`,
//! mode 0600). The keys now live in the database (the keeper); a
//! directory is read once, at start, and its keys imported so the DS a
//! parent holds keeps matching. Writing (`load_or_create`) remains for
//! tests of that import.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::keys::{KeyError, KeyRole, ZoneKey, ZoneKeys};
use crate::model::DnssecAlgorithm;

/// The directory of zone key files.
#[derive(Clone, Debug)]
pub struct KeyDirectory {
    dir: PathBuf,
}

impl KeyDirectory {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        KeyDirectory { dir: dir.into() }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn file(&self, zone: &str, role: KeyRole, algorithm: DnssecAlgorithm) -> PathBuf {
        self.dir.join(format!("{zone}.{}.{}.pk8", role.as_str(), algorithm.number()))
    }

    /// The zone's keys of `algorithm`, if both files exist.
    pub fn load(&self, zone: &str, algorithm: DnssecAlgorithm) -> Result<Option<ZoneKeys>, KeyError> {
        let read = |role| -> Result<Option<ZoneKey>, KeyError> {
            let path = self.file(zone, role, algorithm);
            match std::fs::read(&path) {
                Ok(der) => ZoneKey::from_pkcs8(role, algorithm, der)
                    .map(Some)
                    .map_err(|e| KeyError::new(path.display().to_string(), e)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(KeyError::new(format!("reading {}", path.display()), e)),
            }
        };
        match (read(KeyRole::Ksk)?, read(KeyRole::Zsk)?) {
            (Some(ksk), Some(zsk)) => Ok(Some(ZoneKeys { ksk, zsk })),
            (None, None) => Ok(None),
            _ => Err(KeyError::new(
                format!("the keys of {zone:?} in {}", self.dir.display()),
                "one of the KSK and ZSK files is missing: restore it (a new one would break the chain of trust)",
            )),
        }
    }

    /// The zone's keys, generated and written first when it has none.
    pub fn load_or_create(&self, zone: &str, algorithm: DnssecAlgorithm) -> Result<ZoneKeys, KeyError> {
        if let Some(keys) = self.load(zone, algorithm)? {
            return Ok(keys);
        }
        let keys = ZoneKeys {
            ksk: ZoneKey::generate(KeyRole::Ksk, algorithm)?,
            zsk: ZoneKey::generate(KeyRole::Zsk, algorithm)?,
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| KeyError::new(format!("creating {}", self.dir.display()), e))?;
        for key in [&keys.ksk, &keys.zsk] {
            self.write(&self.file(zone, key.role, algorithm), key.pkcs8())?;
        }
        tracing::info!(zone, ksk = keys.ksk.tag(), zsk = keys.zsk.tag(), "DNSSEC keys generated");
        Ok(keys)
    }

    /// Writes a key file readable by its owner only, whole or not at all.
    fn write(&self, path: &Path, der: &[u8]) -> Result<(), KeyError> {
        let err = |e: std::io::Error| KeyError::new(format!("writing {}", path.display()), e);
        let tmp = path.with_extension("pk8.tmp");
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options.open(&tmp).map_err(err)?;
        f.write_all(der).and_then(|_| f.sync_all()).map_err(err)?;
        std::fs::rename(&tmp, path).map_err(err)
    }

    /// Every `(zone, algorithm)` with key files here, sorted.
    pub fn zones(&self) -> Result<Vec<(String, DnssecAlgorithm)>, KeyError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(KeyError::new(format!("reading {}", self.dir.display()), e)),
        };
        let mut zones = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".pk8") else { continue };
            let Some((rest, alg)) = stem.rsplit_once('.') else { continue };
            let Some(zone) = rest.strip_suffix(".ksk") else { continue };
            if let Some(algorithm) = DnssecAlgorithm::parse(alg) {
                zones.push((zone.to_string(), algorithm));
            }
        }
        zones.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.number().cmp(&b.1.number())));
        Ok(zones)
    }
}
