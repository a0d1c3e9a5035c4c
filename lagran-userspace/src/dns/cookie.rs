//! DNS server cookies (RFC 7873) in the interoperable layout of RFC 9018, so
//! that every NS host of a cluster (and the XDP program) makes and accepts the
//! same cookies from one shared secret:
//!
//! ```text
//! COOKIE option (code 10) = Client Cookie (8) | Server Cookie (16)
//! Server Cookie = Version (1) = 1 | Reserved (3) = 0 | Timestamp (4, Unix seconds) | Hash (8)
//! Hash = SipHash-2-4(Client Cookie | Version | Reserved | Timestamp | Client-IP, Server Secret)
//! ```
//!
//! Client-IP is the query's source address, 4 octets for IPv4 (IPv4-mapped
//! IPv6 included), 16 for IPv6; the hash is the SipHash output in its
//! little-endian octet order, as the reference implementation writes it.
//!
//! What the responder does (RFC 7873 §5.2):
//! - no COOKIE option: nothing (§5.2.1);
//! - a malformed option — shorter than 8, 9–15 or more than 40 octets, or two
//!   COOKIE options — FORMERR (§5.2.2);
//! - a client cookie alone, or with a server cookie that is not valid: the
//!   query is answered normally with a fresh server cookie (§5.2.3 option 3,
//!   §5.2.4), and is subject to response rate limiting; a limited one may get
//!   BADCOOKIE with the fresh cookie instead (option 2, see `rrl`);
//! - a valid server cookie (§5.2.5): answered, exempt from rate limiting.
//!
//! Valid (RFC 9018 §4.3): 16 octets, version 1, a timestamp at most 1 hour in
//! the past and 5 minutes in the future, and the hash made with the current
//! secret or, for `grace_secs` after a rotation, the previous one. The
//! response echoes a valid cookie of the current secret whose timestamp is at
//! most half an hour old (and not more than 5 minutes ahead); any other gets a
//! new cookie with the current time ("if the timestamp is more than 30 minutes
//! old, the server SHOULD generate a new Server Cookie").

use std::hash::Hasher;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use siphasher::sip::SipHasher24;

use crate::settings::{Key, KeyDefault};

/// EDNS option code of COOKIE (RFC 7873 §4).
pub const OPTION_CODE: u16 = 10;
/// Octets of a client cookie.
pub const CLIENT_LEN: usize = 8;
/// Octets of the server cookies we make (RFC 9018 §4.2).
pub const SERVER_LEN: usize = 16;
/// Octets of the COOKIE option we send.
pub const OPTION_LEN: usize = CLIENT_LEN + SERVER_LEN;
/// RFC 9018 §4.2: "Version: 1 octet, currently 1".
pub const VERSION: u8 = 1;
/// RFC 9018 §4.3: a timestamp more than an hour in the past is not valid.
pub const MAX_AGE_SECS: i64 = 3600;
/// RFC 9018 §4.3: nor one more than five minutes in the future.
pub const MAX_AHEAD_SECS: i64 = 300;
/// RFC 9018 §4.3: older than half an hour, a new server cookie is made.
pub const REISSUE_AFTER_SECS: i64 = 1800;

/// A 16-octet SipHash key.
pub type Secret = [u8; 16];

/// DNS server cookies (`[cookies]`), in userspace and the XDP program.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CookieSettings {
    /// The 16-octet secret (raw, or 32 hex digits), shared by every NS host of a
    /// cluster; replacing the file rotates it. None: a random secret made at start.
    pub secret_file: Option<PathBuf>,
    /// Seconds the previous secret is still accepted after a rotation.
    pub grace_secs: u64,
}

impl Default for CookieSettings {
    fn default() -> Self {
        CookieSettings { secret_file: None, grace_secs: 3600 }
    }
}

/// The keys of `[cookies]`.
pub const COOKIE_KEYS: &[Key] = &[
    Key::toml(
        "cookies.secret_file",
        KeyDefault::Described("none: a random secret made at start (logged)"),
        "\"/etc/lagran/cookie.key\"",
        "server cookies (RFC 7873 in the RFC 9018 layout, SipHash-2-4): 16 octets, raw or 32 hex digits \
         (`openssl rand -hex 16`). Give every NS host of one (anycast) address the same file; \
         replace it to rotate (checked every 5 s)",
    ),
    Key::toml(
        "cookies.grace_secs",
        KeyDefault::Toml("3600"),
        "60",
        "after a rotation the previous secret is still accepted this long",
    ),
];

/// A COOKIE option no server could make sense of: FORMERR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed COOKIE option")]
pub struct Malformed;

/// The COOKIE option of a query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CookieIn<'a> {
    pub client: [u8; CLIENT_LEN],
    /// 8–32 octets, or empty.
    pub server: &'a [u8],
}

/// Finds the COOKIE option in an OPT record's RDATA (an option list already
/// known to be well framed or not: a truncated list is the caller's FORMERR).
pub fn find_in_opt(rdata: &[u8]) -> Result<Option<CookieIn<'_>>, Malformed> {
    let mut found = None;
    let mut i = 0usize;
    while rdata.len() - i >= 4 {
        let code = u16::from_be_bytes([rdata[i], rdata[i + 1]]);
        let len = u16::from_be_bytes([rdata[i + 2], rdata[i + 3]]) as usize;
        let start = i + 4;
        let Some(data) = rdata.get(start..start + len) else { return Ok(found) };
        if code == OPTION_CODE {
            if found.is_some() {
                return Err(Malformed);
            }
            found = Some(parse(data)?);
        }
        i = start + len;
    }
    Ok(found)
}

/// RFC 7873 §5.2.2: "If the COOKIE option is too short to contain a Server
/// Cookie field or is too long, [...] then the request is malformed" — the
/// option is 8 (client cookie alone) or 16 to 40 octets.
pub fn parse(data: &[u8]) -> Result<CookieIn<'_>, Malformed> {
    let len = data.len();
    if len != CLIENT_LEN && !(16..=40).contains(&len) {
        return Err(Malformed);
    }
    let mut client = [0u8; CLIENT_LEN];
    client.copy_from_slice(&data[..CLIENT_LEN]);
    Ok(CookieIn { client, server: &data[CLIENT_LEN..] })
}

/// The server cookie for `client_cookie` from `addr` at `timestamp`.
pub fn server_cookie(secret: &Secret, client_cookie: &[u8; CLIENT_LEN], timestamp: u32, addr: IpAddr) -> [u8; 16] {
    let mut out = [0u8; SERVER_LEN];
    out[0] = VERSION;
    out[4..8].copy_from_slice(&timestamp.to_be_bytes());
    let hash = hash(secret, client_cookie, &out[..8], addr);
    out[8..].copy_from_slice(&hash);
    out
}

fn hash(secret: &Secret, client_cookie: &[u8; CLIENT_LEN], head: &[u8], addr: IpAddr) -> [u8; 8] {
    let mut h = SipHasher24::new_with_key(secret);
    h.write(client_cookie);
    h.write(head);
    match addr.to_canonical() {
        IpAddr::V4(a) => h.write(&a.octets()),
        IpAddr::V6(a) => h.write(&a.octets()),
    }
    h.finish().to_le_bytes()
}

/// The secrets and the time one query is checked with (data, not a handle).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CookieCheck {
    pub current: Secret,
    /// The secret before the last rotation, while its grace lasts.
    pub previous: Option<Secret>,
    /// Unix seconds.
    pub now: u32,
}

/// What the responder makes of a query's cookie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CookieOut {
    /// The COOKIE option data of the response: the client cookie and our server cookie.
    pub option: [u8; OPTION_LEN],
    /// The query's server cookie was valid (RFC 7873 §5.2.5).
    pub valid: bool,
}

impl CookieCheck {
    /// The response's cookie for `cookie` from `addr`.
    pub fn respond(&self, cookie: &CookieIn<'_>, addr: IpAddr) -> CookieOut {
        let mut option = [0u8; OPTION_LEN];
        option[..CLIENT_LEN].copy_from_slice(&cookie.client);
        let fresh = |option: &mut [u8; OPTION_LEN], valid| {
            option[CLIENT_LEN..].copy_from_slice(&server_cookie(&self.current, &cookie.client, self.now, addr));
            CookieOut { option: *option, valid }
        };
        let s = cookie.server;
        if s.len() != SERVER_LEN || s[0] != VERSION {
            return fresh(&mut option, false);
        }
        let ts = u32::from_be_bytes([s[4], s[5], s[6], s[7]]);
        // Serial-number arithmetic (RFC 1982), as RFC 9018 §4.3 asks.
        let age = i64::from(self.now.wrapping_sub(ts) as i32);
        if !(-MAX_AHEAD_SECS..=MAX_AGE_SECS).contains(&age) {
            return fresh(&mut option, false);
        }
        if hash(&self.current, &cookie.client, &s[..8], addr) == s[8..] {
            if age <= REISSUE_AFTER_SECS {
                option[CLIENT_LEN..].copy_from_slice(s);
                return CookieOut { option, valid: true };
            }
            return fresh(&mut option, true);
        }
        let valid = self.previous.is_some_and(|p| hash(&p, &cookie.client, &s[..8], addr) == s[8..]);
        fresh(&mut option, valid)
    }
}

/// Why a secret file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read cookie secret {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error(
        "cookie secret {path} must hold 16 octets, raw or as 32 hex digits (e.g. `openssl rand -hex 16`); it holds {len} octets"
    )]
    Format { path: PathBuf, len: usize },
}

/// Reads a secret file: 16 raw octets, or 32 hex digits with surrounding whitespace.
pub fn read_secret(path: &Path) -> Result<Secret, SecretError> {
    let bytes = std::fs::read(path).map_err(|source| SecretError::Read { path: path.to_path_buf(), source })?;
    if let Ok(raw) = <Secret>::try_from(bytes.as_slice()) {
        return Ok(raw);
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut secret = [0u8; 16];
    match hex::decode_to_slice(text.trim(), &mut secret) {
        Ok(()) => Ok(secret),
        Err(_) => Err(SecretError::Format { path: path.to_path_buf(), len: bytes.len() }),
    }
}

/// The secrets in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Secrets {
    pub current: Secret,
    /// The previous secret and the Unix second its grace ends.
    pub previous: Option<(Secret, u64)>,
}

/// The responder's cookie secrets: from `[cookies] secret_file`, re-read when
/// the file changes (the previous secret then stays valid for `grace_secs`),
/// or a random secret made at start.
pub struct CookieJar {
    secrets: ArcSwap<Secrets>,
    file: Option<PathBuf>,
    grace_secs: u64,
    /// The file's modification time and length when last read.
    seen: std::sync::Mutex<Option<(SystemTime, u64)>>,
}

impl CookieJar {
    /// Reads the secret file, or makes a random secret when there is none.
    pub fn load(settings: &CookieSettings) -> Result<CookieJar, SecretError> {
        let (current, seen) = match &settings.secret_file {
            Some(p) => (read_secret(p)?, file_stamp(p)),
            None => (rand::random::<Secret>(), None),
        };
        Ok(CookieJar {
            secrets: ArcSwap::from_pointee(Secrets { current, previous: None }),
            file: settings.secret_file.clone(),
            grace_secs: settings.grace_secs,
            seen: std::sync::Mutex::new(seen),
        })
    }

    /// A jar with a fixed secret (tests, the differential fuzz).
    pub fn fixed(current: Secret) -> CookieJar {
        CookieJar {
            secrets: ArcSwap::from_pointee(Secrets { current, previous: None }),
            file: None,
            grace_secs: 0,
            seen: std::sync::Mutex::new(None),
        }
    }

    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    pub fn secrets(&self) -> Secrets {
        **self.secrets.load()
    }

    /// What a query arriving at Unix second `now` is checked with.
    pub fn check(&self, now: u64) -> CookieCheck {
        let s = self.secrets.load();
        CookieCheck {
            current: s.current,
            previous: s.previous.filter(|&(_, until)| now < until).map(|(p, _)| p),
            now: now as u32,
        }
    }

    /// Rotates to `next` at Unix second `now`: the current secret stays valid for `grace_secs`.
    pub fn rotate(&self, next: Secret, now: u64) {
        let old = self.secrets();
        if old.current == next {
            return;
        }
        self.secrets.store(Arc::new(Secrets { current: next, previous: Some((old.current, now + self.grace_secs)) }));
    }

    /// Re-reads the secret file when its modification time or length changed;
    /// true when the secret changed. A file that cannot be read or holds no
    /// secret keeps the current one (the error is returned).
    pub fn reload_if_changed(&self, now: u64) -> Result<bool, SecretError> {
        let Some(path) = &self.file else { return Ok(false) };
        let stamp = file_stamp(path);
        {
            let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if stamp.is_some() && *seen == stamp {
                return Ok(false);
            }
        }
        let next = read_secret(path)?;
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = stamp;
        let changed = next != self.secrets().current;
        self.rotate(next, now);
        Ok(changed)
    }
}

fn file_stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    (crate::clock::now_ms().max(0) / 1000) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex16(s: &str) -> [u8; 16] {
        let mut o = [0u8; 16];
        hex::decode_to_slice(s, &mut o).unwrap();
        o
    }

    fn hex8(s: &str) -> [u8; 8] {
        let mut o = [0u8; 8];
        hex::decode_to_slice(s, &mut o).unwrap();
        o
    }

    /// RFC 9018 Appendix A.1 and A.2 (IPv4) and A.3 (IPv6): the published test vectors.
    #[test]
    fn rfc_9018_test_vectors() {
        let secret = hex16("e5e973e5a6b2a43f48e7dc849e37bfcf");
        let ip: IpAddr = "198.51.100.100".parse().unwrap();
        let c = server_cookie(&secret, &hex8("2464c4abcf10c957"), 1559731985, ip);
        assert_eq!(hex::encode(c), "010000005cf79f111f8130c3eee29480");
        let c = server_cookie(&secret, &hex8("2464c4abcf10c957"), 1559734385, ip);
        assert_eq!(hex::encode(c), "010000005cf7a871d4a564a1442aca77");
        let secret = hex16("dd3bdf9344b678b185a6f5cb60fca715");
        let ip: IpAddr = "2001:db8:220:1:59de:d0f4:8769:82b8".parse().unwrap();
        let c = server_cookie(&secret, &hex8("22681ab97d52c298"), 1559741817, ip);
        assert_eq!(hex::encode(c), "010000005cf7c57926556bd0934c72f8");
    }

    #[test]
    fn parse_checks_the_lengths() {
        assert!(parse(&[0; 8]).is_ok());
        assert!(parse(&[0; 7]).is_err());
        assert!(parse(&[0; 12]).is_err());
        assert!(parse(&[0; 16]).is_ok());
        assert!(parse(&[0; 40]).is_ok());
        assert!(parse(&[0; 41]).is_err());
        let two = [0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(find_in_opt(&two), Err(Malformed));
        assert_eq!(find_in_opt(&two[..12]).unwrap().unwrap().client, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(find_in_opt(&[0, 8, 0, 0]).unwrap(), None);
    }

    #[test]
    fn valid_cookies_are_echoed_old_and_foreign_ones_reissued() {
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let client = [7u8; 8];
        let now = 1_700_000_000u32;
        let check = CookieCheck { current: [1; 16], previous: Some([2; 16]), now };
        let with = |server: &[u8; 16]| {
            let mut data = client.to_vec();
            data.extend_from_slice(server);
            check.respond(&parse(&data).unwrap(), ip)
        };
        let fresh = server_cookie(&check.current, &client, now, ip);

        // A client cookie alone: a fresh cookie, not valid.
        let out = check.respond(&CookieIn { client, server: &[] }, ip);
        assert_eq!((out.valid, &out.option[8..]), (false, &fresh[..]));
        // 10 minutes old, current secret: valid, echoed.
        let c = server_cookie(&check.current, &client, now - 600, ip);
        assert_eq!(with(&c), CookieOut { option: [client.as_slice(), &c].concat().try_into().unwrap(), valid: true });
        // 40 minutes old: valid, reissued.
        let c = server_cookie(&check.current, &client, now - 2400, ip);
        let out = with(&c);
        assert_eq!((out.valid, &out.option[8..]), (true, &fresh[..]));
        // 2 hours old, or 10 minutes ahead: not valid.
        for ts in [now - 7200, now + 600] {
            let out = with(&server_cookie(&check.current, &client, ts, ip));
            assert_eq!((out.valid, &out.option[8..]), (false, &fresh[..]));
        }
        // The previous secret: valid during its grace, reissued with the current one.
        let out = with(&server_cookie(&[2; 16], &client, now - 10, ip));
        assert_eq!((out.valid, &out.option[8..]), (true, &fresh[..]));
        // Another address, another secret, another version: not valid.
        assert!(!with(&server_cookie(&check.current, &client, now, "192.0.2.2".parse().unwrap())).valid);
        assert!(!with(&server_cookie(&[3; 16], &client, now, ip)).valid);
        let mut v2 = server_cookie(&check.current, &client, now, ip);
        v2[0] = 2;
        assert!(!with(&v2).valid);
    }

    #[test]
    fn secret_files_rotate_with_a_grace_period() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "000102030405060708090a0b0c0d0e0f\n").unwrap();
        let settings = CookieSettings { secret_file: Some(path.clone()), grace_secs: 100 };
        let jar = CookieJar::load(&settings).unwrap();
        assert_eq!(jar.secrets().current, hex16("000102030405060708090a0b0c0d0e0f"));
        assert!(!jar.reload_if_changed(1000).unwrap());

        std::fs::write(&path, [9u8; 16]).unwrap();
        assert!(jar.reload_if_changed(1000).unwrap());
        assert_eq!(jar.check(1050).current, [9; 16]);
        assert_eq!(jar.check(1050).previous, Some(hex16("000102030405060708090a0b0c0d0e0f")));
        assert_eq!(jar.check(1100).previous, None, "the grace is over");

        std::fs::write(&path, "too short").unwrap();
        assert!(matches!(jar.reload_if_changed(1200), Err(SecretError::Format { .. })));
        assert_eq!(jar.secrets().current, [9; 16], "a bad file keeps the secret in force");
        assert!(
            CookieJar::load(&CookieSettings { secret_file: Some(dir.path().join("none")), grace_secs: 1 }).is_err()
        );
    }
}

#[cfg(test)]
mod kernel_hash_tests {
    use super::*;
    use lagran_common::cookie::{hash_v4, hash_v6};

    /// The XDP program's SipHash (lagran-common) gives the bytes `server_cookie` gives.
    #[test]
    fn the_kernels_siphash_agrees_with_siphasher() {
        let le = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap());
        for seed in 0u8..50 {
            let secret: Secret = std::array::from_fn(|i| (i as u8).wrapping_mul(31).wrapping_add(seed));
            let client: [u8; 8] = std::array::from_fn(|i| (i as u8) ^ seed.wrapping_mul(7));
            let ts = 1_600_000_000u32.wrapping_add(u32::from(seed) * 977);
            let (k0, k1) = (le(&secret[..8]), le(&secret[8..]));
            let v4: IpAddr = std::net::Ipv4Addr::new(seed, 2, 3, 4).into();
            let c = server_cookie(&secret, &client, ts, v4);
            let IpAddr::V4(a) = v4 else { unreachable!() };
            let h = hash_v4(k0, k1, le(&client), le(&c[..8]), u32::from_le_bytes(a.octets()));
            assert_eq!(h.to_le_bytes(), c[8..]);
            let v6: std::net::Ipv6Addr = format!("2001:db8::{seed:x}:1").parse().unwrap();
            let c = server_cookie(&secret, &client, ts, v6.into());
            let o = v6.octets();
            let h = hash_v6(k0, k1, le(&client), le(&c[..8]), [le(&o[..8]), le(&o[8..])]);
            assert_eq!(h.to_le_bytes(), c[8..]);
        }
    }
}
