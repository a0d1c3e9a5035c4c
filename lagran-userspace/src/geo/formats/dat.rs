//! V2Ray / Loyalsoldier `geoip.dat`: a protobuf `GeoIPList`, read with a small
//! wire-format decoder (no protobuf dependency for three messages).
//!
//! ```proto
//! message CIDR      { bytes ip = 1; uint32 prefix = 2; }          // ip: 4 or 16 bytes
//! message GeoIP     { string country_code = 1; repeated CIDR cidr = 2;
//!                     bool reverse_match = 3; }                   // "inverse_match" in Xray
//! message GeoIPList { repeated GeoIP entry = 1; }
//! ```
//!
//! (v2ray-core `app/router/config.proto`.) Country only: an entry whose code is two
//! ASCII letters becomes region `CC|0|0|0`. Other lists (`private`, `cloudflare`,
//! `telegram`, …, which overlap the countries) and entries with `reverse_match` set
//! are skipped and named in [`Stats::skipped`](super::Stats). Unknown fields are
//! skipped as protobuf requires; group wire types (3, 4) are an error. Every error
//! names the byte offset.

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::{Position, RangeBuilder, Ranges, region_from_fields};
use crate::geo::GeoError;

const FORMAT: &str = "geoip.dat";

/// A protobuf wire-format cursor over `buf[pos..end]`; offsets are absolute.
struct Wire<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
}

/// A decoded field value.
enum Val {
    Varint(u64),
    /// Absolute byte range of a length-delimited value.
    Bytes(usize, usize),
    Fixed,
}

impl<'a> Wire<'a> {
    fn new(buf: &'a [u8], start: usize, end: usize) -> Wire<'a> {
        Wire { buf, pos: start, end }
    }

    fn err(&self, at: usize, reason: impl Into<String>) -> GeoError {
        GeoError::syntax(FORMAT, Position::Byte(at), reason)
    }

    fn varint(&mut self) -> Result<u64, GeoError> {
        let start = self.pos;
        let mut v: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos).filter(|_| self.pos < self.end) else {
                return Err(self.err(start, "truncated varint"));
            };
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(self.err(start, "varint longer than 64 bits"));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err(start, "varint longer than 10 bytes"))
    }

    /// The next field: (field number, value, offset of its tag), or `None` at the end.
    fn next(&mut self) -> Result<Option<(u64, Val, usize)>, GeoError> {
        if self.pos >= self.end {
            return Ok(None);
        }
        let at = self.pos;
        let tag = self.varint()?;
        let (field, wire) = (tag >> 3, tag & 7);
        if field == 0 {
            return Err(self.err(at, "field number 0"));
        }
        let val = match wire {
            0 => Val::Varint(self.varint()?),
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                if self.end - self.pos < n {
                    return Err(self.err(at, format!("truncated {n}-byte fixed field {field}")));
                }
                self.pos += n;
                Val::Fixed
            }
            2 => {
                let len_at = self.pos;
                let len = self.varint()?;
                let avail = (self.end - self.pos) as u64;
                if len > avail {
                    return Err(self.err(
                        len_at,
                        format!("field {field} claims {len} bytes but only {avail} remain (truncated file?)"),
                    ));
                }
                let s = self.pos;
                self.pos += len as usize;
                Val::Bytes(s, self.pos)
            }
            w => return Err(self.err(at, format!("field {field} has unsupported wire type {w}"))),
        };
        Ok(Some((field, val, at)))
    }
}

/// One `CIDR` message at `buf[s..e]`.
fn cidr(buf: &[u8], s: usize, e: usize) -> Result<IpNet, GeoError> {
    let mut w = Wire::new(buf, s, e);
    let mut ip: Option<(usize, usize)> = None;
    let mut prefix: u64 = 0;
    while let Some((field, val, at)) = w.next()? {
        match (field, val) {
            (1, Val::Bytes(a, b)) => ip = Some((a, b)),
            (2, Val::Varint(p)) => prefix = p,
            (1 | 2, _) => {
                return Err(w.err(at, format!("CIDR field {field} has the wrong wire type")));
            }
            _ => {}
        }
    }
    let Some((a, b)) = ip else {
        return Err(w.err(s, "CIDR without an ip"));
    };
    let bytes = &buf[a..b];
    let bad_prefix = |max: u64| w.err(s, format!("CIDR prefix {prefix} is longer than {max}"));
    match bytes.len() {
        4 => {
            if prefix > 32 {
                return Err(bad_prefix(32));
            }
            let addr = std::net::Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]);
            Ok(IpNet::V4(Ipv4Net::new(addr, prefix as u8).map_err(|e| w.err(s, e.to_string()))?.trunc()))
        }
        16 => {
            if prefix > 128 {
                return Err(bad_prefix(128));
            }
            let mut a16 = [0u8; 16];
            a16.copy_from_slice(bytes);
            let addr = std::net::Ipv6Addr::from(a16);
            Ok(IpNet::V6(Ipv6Net::new(addr, prefix as u8).map_err(|e| w.err(s, e.to_string()))?.trunc()))
        }
        n => Err(w.err(a, format!("CIDR ip is {n} bytes, expected 4 or 16"))),
    }
}

/// Parses a whole `geoip.dat`.
pub fn parse(bytes: &[u8]) -> Result<Ranges, GeoError> {
    let mut b = RangeBuilder::new();
    let mut list = Wire::new(bytes, 0, bytes.len());
    let mut entry_no = 0usize;
    while let Some((field, val, at)) = list.next()? {
        let (s, e) = match (field, val) {
            (1, Val::Bytes(s, e)) => (s, e),
            (1, _) => return Err(list.err(at, "GeoIPList.entry has the wrong wire type")),
            _ => continue,
        };
        let idx = entry_no;
        entry_no += 1;
        // First pass: code and flags; CIDRs are decoded only for entries kept.
        let mut w = Wire::new(bytes, s, e);
        let mut code: Option<&str> = None;
        let mut reverse = false;
        let mut cidrs: Vec<(usize, usize)> = Vec::new();
        while let Some((f, v, at)) = w.next()? {
            match (f, v) {
                (1, Val::Bytes(a, z)) => {
                    code = Some(
                        std::str::from_utf8(&bytes[a..z])
                            .map_err(|_| w.err(a, format!("entry #{idx}: country_code is not UTF-8")))?,
                    );
                }
                (2, Val::Bytes(a, z)) => cidrs.push((a, z)),
                (3, Val::Varint(v)) => reverse = v != 0,
                (1..=3, _) => {
                    return Err(w.err(at, format!("entry #{idx}: GeoIP field {f} has the wrong wire type")));
                }
                _ => {}
            }
        }
        let code = code.unwrap_or("").trim();
        let is_country = code.len() == 2 && code.bytes().all(|c| c.is_ascii_alphabetic());
        if !is_country || reverse {
            let why = if reverse { "reverse_match" } else { "not a country code" };
            b.stats.skipped.push(format!("{code:?} ({} CIDRs, {why})", cidrs.len()));
            // Still decode them: a corrupt CIDR is corruption wherever it is.
            for (a, z) in cidrs {
                cidr(bytes, a, z).map_err(|e| context(e, idx, code))?;
            }
            continue;
        }
        let region = region_from_fields(&code.to_ascii_uppercase(), "", "", "")
            .map_err(|r| list.err(s, format!("entry #{idx}: {r}")))?;
        for (a, z) in cidrs {
            let net = cidr(bytes, a, z).map_err(|e| context(e, idx, code))?;
            b.stats.records += 1;
            b.add(net, &region);
        }
    }
    Ok(b.finish())
}

/// Prefixes an error's reason with the entry it was found in.
fn context(e: GeoError, idx: usize, code: &str) -> GeoError {
    match e {
        GeoError::Syntax { format, at, reason } => {
            GeoError::Syntax { format, at, reason: format!("entry #{idx} ({code}): {reason}") }
        }
        other => other,
    }
}

/// Encodes a `GeoIPList` (tests, the fuzz corpus and `lagran geo build` fixtures).
pub fn encode(entries: &[(&str, bool, &[IpNet])]) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn bytes_field(out: &mut Vec<u8>, field: u64, b: &[u8]) {
        varint(out, (field << 3) | 2);
        varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }
    let mut list = Vec::new();
    for (code, reverse, nets) in entries {
        let mut entry = Vec::new();
        bytes_field(&mut entry, 1, code.as_bytes());
        for n in *nets {
            let mut c = Vec::new();
            match n {
                IpNet::V4(v) => bytes_field(&mut c, 1, &v.addr().octets()),
                IpNet::V6(v) => bytes_field(&mut c, 1, &v.addr().octets()),
            }
            varint(&mut c, 2 << 3);
            varint(&mut c, u64::from(n.prefix_len()));
            bytes_field(&mut entry, 2, &c);
        }
        if *reverse {
            varint(&mut entry, 3 << 3);
            varint(&mut entry, 1);
        }
        bytes_field(&mut list, 1, &entry);
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(v: &[&str]) -> Vec<IpNet> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn countries_kept_lists_skipped_more_specific_wins() {
        let cn = nets(&["1.0.1.0/24", "58.60.0.0/14", "240e::/20"]);
        let us = nets(&["8.8.8.0/24"]);
        let cloudflare = nets(&["1.1.1.0/24"]);
        let private = nets(&["10.0.0.0/8"]);
        let hk = nets(&["58.60.1.0/24"]);
        let bytes = encode(&[
            ("CN", false, &cn),
            ("us", false, &us),
            ("CLOUDFLARE", false, &cloudflare),
            ("PRIVATE", false, &private),
            ("HK", false, &hk),
            ("XX", true, &us),
        ]);
        let r = parse(&bytes).unwrap();
        assert_eq!(r.stats.records, 5);
        assert_eq!(r.stats.skipped.len(), 3, "{:?}", r.stats.skipped);
        assert!(r.v4.iter().any(|x| x.2 == "US|0|0|0"));
        // 58.60.0.0/14 is CN except the HK /24 inside it.
        let regions: Vec<_> = r.v4.iter().filter(|x| x.0 >> 24 == 58).map(|x| x.2.as_str()).collect();
        assert_eq!(regions, vec!["CN|0|0|0", "HK|0|0|0", "CN|0|0|0"]);
        assert_eq!(r.v6, vec![(0x240e << 112, (0x240e << 112) | ((1u128 << 108) - 1), "CN|0|0|0".into())]);
    }

    #[test]
    fn corrupt_files_name_the_byte_offset() {
        let good = encode(&[("CN", false, &nets(&["1.0.1.0/24"]))]);
        // truncated at every length: an error or (at 0) an empty list, never a panic
        for n in 0..good.len() {
            match parse(&good[..n]) {
                Ok(r) => assert!(r.v4.is_empty(), "prefix of {n} bytes"),
                Err(e) => assert!(e.to_string().contains("byte offset"), "{e}"),
            }
        }
        // a 5-byte ip
        let mut bad = good.clone();
        let i = bad.windows(2).position(|w| w == [0x0a, 4]).unwrap();
        bad[i + 1] = 5;
        let e = parse(&bad).unwrap_err().to_string();
        assert!(e.contains("geoip.dat byte offset"), "{e}");
        // prefix 40 for IPv4
        let p = encode(&[("CN", false, &nets(&["1.0.1.0/24"]))]);
        let mut p2 = p.clone();
        let last = p2.len() - 1;
        assert_eq!(p2[last], 24);
        p2[last] = 40;
        let e = parse(&p2).unwrap_err().to_string();
        assert!(e.contains("prefix 40") && e.contains("entry #0 (CN)"), "{e}");
        // group wire type
        let e = parse(&[0x0b]).unwrap_err().to_string();
        assert!(e.contains("wire type 3"), "{e}");
    }
}
