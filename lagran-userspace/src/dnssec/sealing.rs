//! The key file and what it does: the DNSSEC private keys are stored in the
//! database sealed with AES-256-GCM under a 32-byte key the operator keeps in
//! a file (`dnssec_key_file`), so a database copy (a backup, a test system)
//! holds no usable key, while every control process that has the file sees
//! the same key set. Each sealing is bound to its key's row id (the AEAD's
//! associated data), so a sealed key copied onto another row does not open.

use std::io::Write;
use std::path::{Path, PathBuf};

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

use super::keys::KeyError;

/// The key the private keys are sealed with.
pub struct SealingKey {
    key: LessSafeKey,
    path: PathBuf,
}

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealingKey").field("path", &self.path).finish()
    }
}

impl SealingKey {
    /// Reads the key file at `path`: 32 bytes, raw or as 64 hex digits
    /// (surrounding white space ignored); `None` when there is no file.
    pub fn read(path: &Path) -> Result<Option<SealingKey>, KeyError> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(KeyError::new(format!("reading the DNSSEC key file {}", path.display()), e)),
        };
        let raw = if bytes.len() == 32 {
            bytes
        } else {
            let text = String::from_utf8_lossy(&bytes);
            hex::decode(text.trim()).ok().filter(|b| b.len() == 32).ok_or_else(|| {
                KeyError::new(
                    format!("the DNSSEC key file {}", path.display()),
                    format!(
                        "holds {} bytes, neither 32 raw bytes nor 64 hex digits (make one with \
                         `head -c 32 /dev/urandom > FILE`)",
                        bytes.len()
                    ),
                )
            })?
        };
        Ok(Some(SealingKey::from_bytes(&raw, path)?))
    }

    /// Makes a new key file at `path` (mode 0600), refusing to replace one.
    pub fn create(path: &Path) -> Result<SealingKey, KeyError> {
        let what = || format!("creating the DNSSEC key file {}", path.display());
        let mut raw = [0u8; 32];
        SystemRandom::new().fill(&mut raw).map_err(|_| KeyError::new(what(), "the system's random source failed"))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| KeyError::new(what(), e))?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options.open(path).map_err(|e| KeyError::new(what(), e))?;
        f.write_all(&raw).and_then(|_| f.sync_all()).map_err(|e| KeyError::new(what(), e))?;
        SealingKey::from_bytes(&raw, path)
    }

    fn from_bytes(raw: &[u8], path: &Path) -> Result<SealingKey, KeyError> {
        let key = UnboundKey::new(&AES_256_GCM, raw)
            .map_err(|_| KeyError::new(format!("the DNSSEC key file {}", path.display()), "not an AES-256 key"))?;
        Ok(SealingKey { key: LessSafeKey::new(key), path: path.to_path_buf() })
    }

    /// `secret` sealed for the row `id`: hex of a random nonce, then the
    /// ciphertext and its tag.
    pub fn seal(&self, id: &str, secret: &[u8]) -> Result<String, KeyError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| KeyError::new("sealing a DNSSEC key", "the system's random source failed"))?;
        let mut out = secret.to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(id.as_bytes()), &mut out)
            .map_err(|_| KeyError::new("sealing a DNSSEC key", "AES-256-GCM failed"))?;
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&out);
        Ok(hex::encode(sealed))
    }

    /// The secret sealed for the row `id`; a wrong key file says so.
    pub fn open(&self, id: &str, sealed: &str) -> Result<Vec<u8>, KeyError> {
        let what = || format!("opening DNSSEC key {id}");
        let mut bytes = hex::decode(sealed).map_err(|e| KeyError::new(what(), e))?;
        if bytes.len() < NONCE_LEN {
            return Err(KeyError::new(what(), "the sealed key is truncated"));
        }
        let mut body = bytes.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&bytes).map_err(|_| KeyError::new(what(), "a bad nonce"))?;
        let plain = self.key.open_in_place(nonce, Aad::from(id.as_bytes()), &mut body).map_err(|_| {
            KeyError::new(
                what(),
                format!(
                    "{} does not open it: this is not the key file the keys were sealed with (nothing was \
                     changed; start with the right dnssec_key_file)",
                    self.path.display()
                ),
            )
        })?;
        Ok(plain.to_vec())
    }
}

/// A new random row id (16 bytes, hex).
pub fn new_key_id() -> Result<String, KeyError> {
    let mut id = [0u8; 16];
    SystemRandom::new()
        .fill(&mut id)
        .map_err(|_| KeyError::new("naming a key", "the system's random source failed"))?;
    Ok(hex::encode(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_and_opens_only_with_the_same_file_and_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        assert!(SealingKey::read(&path).unwrap().is_none());
        let key = SealingKey::create(&path).unwrap();
        assert!(SealingKey::create(&path).is_err(), "an existing key file is never replaced");
        let sealed = key.seal("row1", b"secret").unwrap();
        let again = SealingKey::read(&path).unwrap().expect("written");
        assert_eq!(again.open("row1", &sealed).unwrap(), b"secret");
        assert!(again.open("row2", &sealed).is_err(), "bound to its row");
        let other = dir.path().join("other");
        std::fs::write(&other, hex::encode([7u8; 32])).unwrap();
        let wrong = SealingKey::read(&other).unwrap().expect("a hex key file");
        let err = wrong.open("row1", &sealed).unwrap_err().to_string();
        assert!(err.contains("not the key file"), "{err}");
        std::fs::write(&other, b"short").unwrap();
        assert!(SealingKey::read(&other).is_err());
    }
}
