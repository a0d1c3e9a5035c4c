//! Every geo file format the daemon reads besides xdb (V2Ray `geoip.dat`, CIDR CSV
//! and JSON, ip2region source text), read into the same shape: sorted,
//! non-overlapping, inclusive `(start, end, region)` ranges per address family,
//! then built into an in-memory [`Xdb`] with the project's writer, so the rest of the
//! daemon ([`GeoDb`](super::GeoDb), partitions, diff, reload) only ever sees xdb.
//!
//! | format | [`Format`] | what it holds |
//! | --- | --- | --- |
//! | ip2region `.xdb` v4 / v6, both field layouts | `Xdb` | used as is, not rebuilt |
//! | V2Ray / Loyalsoldier `geoip.dat` | `GeoipDat` | country only (see [`dat`]) |
//! | CIDR CSV `cidr,country,province,city,isp` | `CidrCsv` | see [`csv`] |
//! | CIDR JSON (array of objects, or the old object form) | `CidrJson` | see [`json`] |
//! | ip2region source text `start_ip\|end_ip\|region` | `Source` | see [`source`] |
//!
//! Region strings built from field-wise formats are `Country|Province|City|ISP`
//! (unknown fields `0`): four fields, which [`Location::from_region`] reads in order,
//! so a CSV row and an xdb row give the same [`Location`] tuple.
//!
//! Overlapping CIDRs (common in merged CSV files and in `geoip.dat`): the more
//! specific prefix wins; for the very same prefix the later record wins. CIDR blocks
//! are always nested or disjoint, so [`ranges::RangeBuilder`] resolves this with one
//! sorted sweep.
//!
//! # Which reader ([`detect`])
//!
//! 1. The file extension, case-insensitive: `.xdb`, `.dat`, `.csv`, `.json`, and
//!    `.txt` / `.src` for ip2region source text.
//! 2. Otherwise the content: a header with structure version 2 or 3 at offset 0 and
//!    ip_version 0, 4 or 6 at offset 16 → xdb; UTF-8 text whose first non-blank
//!    character is `[` or `{` → JSON; text whose first data line has a `|` → source
//!    text, a `,` → CSV; binary starting with byte `0x0a` (protobuf field 1,
//!    length-delimited: `GeoIPList.entry`) → `geoip.dat`; anything else is
//!    [`GeoError::UnknownFormat`].
//!
//! Every reader returns an error naming the position (line, byte offset, JSON entry)
//! for corrupt or truncated input, and never panics (fuzzed in the unit tests and by
//! the `geo_files` cargo-fuzz target).
//!
//! [`Location::from_region`]: crate::location::Location::from_region
//! [`Location`]: crate::location::Location

pub mod csv;
pub mod dat;
pub mod json;
pub mod ranges;
pub mod source;

use std::fmt;
use std::path::Path;

use serde::Serialize;

use super::xdb::{DATA_START, IpVersion, Xdb};
use super::{GeoError, write_xdb_at};

pub use ranges::{RangeBuilder, Ranges};

/// A geo file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// ip2region `.xdb`, structure version 2 or 3, IPv4 or IPv6.
    Xdb,
    /// V2Ray / Loyalsoldier `geoip.dat` (protobuf `GeoIPList`), country only.
    GeoipDat,
    /// CIDR CSV: `cidr,country,province,city,isp`, optional header.
    CidrCsv,
    /// CIDR JSON: an array of objects, or the old object form.
    CidrJson,
    /// ip2region's source text: `start_ip|end_ip|region`, one range a line.
    Source,
}

impl Format {
    /// Every format, for tests and the fuzz target.
    pub const ALL: [Format; 5] = [Format::Xdb, Format::GeoipDat, Format::CidrCsv, Format::CidrJson, Format::Source];

    /// Human name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Format::Xdb => "xdb",
            Format::GeoipDat => "geoip.dat",
            Format::CidrCsv => "CIDR CSV",
            Format::CidrJson => "CIDR JSON",
            Format::Source => "ip2region source",
        }
    }

    /// The format a file extension stands for, if any.
    pub fn from_extension(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "xdb" => Format::Xdb,
            "dat" => Format::GeoipDat,
            "csv" => Format::CidrCsv,
            "json" => Format::CidrJson,
            "txt" | "src" => Format::Source,
            _ => return None,
        })
    }

    /// The format the content looks like (rule 2 of the module docs), if any.
    pub fn sniff(bytes: &[u8]) -> Option<Format> {
        let u16_at = |off: usize| bytes.get(off..off + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        if bytes.len() >= DATA_START && matches!(u16_at(0), Some(2 | 3)) && matches!(u16_at(16), Some(0 | 4 | 6)) {
            return Some(Format::Xdb);
        }
        if let Some(text) = text_prefix(bytes) {
            let text = text.trim_start_matches('\u{feff}');
            let first = text.trim_start().chars().next();
            if matches!(first, Some('[' | '{')) {
                return Some(Format::CidrJson);
            }
            let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#'))?;
            if line.contains('|') {
                return Some(Format::Source);
            }
            if line.contains(',') {
                return Some(Format::CidrCsv);
            }
            return None;
        }
        if bytes.first() == Some(&0x0a) {
            return Some(Format::GeoipDat);
        }
        None
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The first 4 KiB of `bytes` if they are text: valid UTF-8 (a character cut at the
/// end is allowed) without control characters other than tab, CR and LF.
fn text_prefix(bytes: &[u8]) -> Option<&str> {
    let head = &bytes[..bytes.len().min(4096)];
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).ok()?,
        Err(_) => return None,
    };
    if text.is_empty() || text.chars().any(|c| c.is_control() && !matches!(c, '\t' | '\r' | '\n')) {
        return None;
    }
    Some(text)
}

/// Picks the reader for a file: by extension, else by content (module docs).
pub fn detect(path: &Path, bytes: &[u8]) -> Result<Format, GeoError> {
    if let Some(f) = Format::from_extension(path) {
        return Ok(f);
    }
    Format::sniff(bytes).ok_or_else(|| GeoError::UnknownFormat {
        reason: format!(
            "{}: the extension is not .xdb/.dat/.csv/.json/.txt and the content ({} bytes) looks like none of them",
            path.display(),
            bytes.len()
        ),
    })
}

/// What reading a file found besides its ranges, for reports and logs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Records read: lines, JSON entries, `geoip.dat` CIDRs, xdb segments.
    pub records: usize,
    /// Records or lists not used, with the reason (e.g. `geoip.dat` lists that are
    /// not countries, such as `private` or `telegram`).
    pub skipped: Vec<String>,
}

/// A geo file read and built into one xdb per address family it holds.
#[derive(Debug)]
pub struct GeoFile {
    /// The format it was read as.
    pub format: Format,
    /// Its IPv4 data, if it has any.
    pub v4: Option<Xdb>,
    /// Its IPv6 data, if it has any.
    pub v6: Option<Xdb>,
    /// Records read and skipped.
    pub stats: Stats,
}

impl GeoFile {
    /// The database of one family.
    pub fn family(&self, version: IpVersion) -> Option<&Xdb> {
        match version {
            IpVersion::V4 => self.v4.as_ref(),
            IpVersion::V6 => self.v6.as_ref(),
        }
    }

    /// Takes the database of one family out.
    pub fn take(&mut self, version: IpVersion) -> Option<Xdb> {
        match version {
            IpVersion::V4 => self.v4.take(),
            IpVersion::V6 => self.v6.take(),
        }
    }
}

/// Reads a geo file of any format; errors name the path and the position.
pub fn read_file(path: &Path) -> Result<GeoFile, GeoError> {
    let bytes = std::fs::read(path).map_err(|source| GeoError::Io { path: path.to_path_buf(), source })?;
    let format = detect(path, &bytes).map_err(|e| e.in_file(path))?;
    from_bytes(bytes, format).map_err(|e| e.in_file(path))
}

/// Reads a whole file held in memory as `format`. Text and protobuf formats are
/// built into xdb with the project's writer (`created_at` 0: the content, not the
/// time, decides the bytes).
pub fn from_bytes(bytes: Vec<u8>, format: Format) -> Result<GeoFile, GeoError> {
    if format == Format::Xdb {
        let xdb = Xdb::from_bytes(bytes)?;
        let stats = Stats { records: xdb.len(), skipped: Vec::new() };
        let (v4, v6) = match xdb.ip_version() {
            IpVersion::V4 => (Some(xdb), None),
            IpVersion::V6 => (None, Some(xdb)),
        };
        return Ok(GeoFile { format, v4, v6, stats });
    }
    let ranges = parse_ranges(&bytes, format)?;
    let build = |version: IpVersion, r: &[(u128, u128, String)]| -> Result<Option<Xdb>, GeoError> {
        if r.is_empty() {
            return Ok(None);
        }
        Ok(Some(Xdb::from_bytes(write_xdb_at(version, r, 0)?)?))
    };
    Ok(GeoFile {
        format,
        v4: build(IpVersion::V4, &ranges.v4)?,
        v6: build(IpVersion::V6, &ranges.v6)?,
        stats: ranges.stats,
    })
}

/// Parses a file held in memory into sorted, non-overlapping ranges per family
/// (an xdb gives its merged segments).
pub fn parse_ranges(bytes: &[u8], format: Format) -> Result<Ranges, GeoError> {
    match format {
        Format::Xdb => {
            let xdb = Xdb::from_bytes(bytes.to_vec())?;
            let list: Vec<_> = xdb.merged_segments().map(|s| (s.start, s.end, s.region.to_string())).collect();
            let mut r = Ranges::default();
            r.stats.records = xdb.len();
            match xdb.ip_version() {
                IpVersion::V4 => r.v4 = list,
                IpVersion::V6 => r.v6 = list,
            }
            Ok(r)
        }
        Format::GeoipDat => dat::parse(bytes),
        Format::CidrCsv => csv::parse(text(bytes, format)?),
        Format::CidrJson => json::parse(bytes),
        Format::Source => source::parse(text(bytes, format)?),
    }
}

/// The bytes as UTF-8 text without a leading byte-order mark, or an error naming the
/// line and byte offset of the first invalid byte.
pub(crate) fn text(bytes: &[u8], format: Format) -> Result<&str, GeoError> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    std::str::from_utf8(bytes).map_err(|e| {
        let at = e.valid_up_to();
        let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        GeoError::syntax(format.name(), Position::Line(line), format!("not UTF-8 (invalid byte at offset {at})"))
    })
}

/// The lines of a line-oriented text format that carry data, numbered from 1 and
/// trimmed: blank lines and lines starting with `#` are skipped.
pub(crate) fn data_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, raw)| (i + 1, raw.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
}

pub use super::Position;

/// A region string `Country|Province|City|ISP` from separate fields: each trimmed,
/// empty → `0`. A field holding `|` or a control character is refused (it would
/// shift the fields of the region string).
pub fn region_from_fields(country: &str, province: &str, city: &str, isp: &str) -> Result<String, String> {
    let mut out = String::new();
    for (i, (name, v)) in
        [("country", country), ("province", province), ("city", city), ("isp", isp)].into_iter().enumerate()
    {
        let v = v.trim();
        if v.contains('|') || v.chars().any(char::is_control) {
            return Err(format!("{name} {v:?} contains '|' or a control character"));
        }
        if i > 0 {
            out.push('|');
        }
        out.push_str(if v.is_empty() { "0" } else { v });
    }
    check_region(&out)?;
    Ok(out)
}

/// A region string taken as is (source text, old JSON): non-empty, at most 65 535
/// bytes (the xdb length field), no line breaks.
pub fn check_region(region: &str) -> Result<(), String> {
    if region.trim().is_empty() {
        return Err("empty region".into());
    }
    if region.len() > usize::from(u16::MAX) {
        return Err(format!("region is {} bytes, more than the 65535 an xdb can store", region.len()));
    }
    if region.contains(['\n', '\r', '\0']) {
        return Err("region contains a line break or NUL".into());
    }
    Ok(())
}

/// Parses `a.b.c.d/n`, `x::/n` or a bare address (a /32 or /128). Host bits are
/// cleared (`1.2.3.4/24` → `1.2.3.0/24`): data files are often written that way.
pub fn parse_cidr(s: &str) -> Result<ipnet::IpNet, String> {
    let s = s.trim();
    if let Ok(net) = s.parse::<ipnet::IpNet>() {
        return Ok(net.trunc());
    }
    if let Ok(ip) = s.parse::<std::net::IpAddr>() {
        return Ok(ipnet::IpNet::from(ip));
    }
    Err(format!("{s:?} is not a CIDR block or an address"))
}

#[cfg(test)]
mod tests;
