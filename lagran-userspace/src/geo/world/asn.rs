//! ASN data as CSV ranges `start,end,asn,organisation` (the `@ip-location-db/asn`
//! package: addresses as text, or as integers in its `-num` files; organisation
//! names quoted when they hold a comma, `""` for a quote), IPv4 and IPv6 rows in
//! one file or two. A header line is skipped.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use super::AsnRecord;
use super::table::RangeTable;
use crate::geo::{GeoError, Position};

const FORMAT: &str = "ASN CSV";

/// Reads an ASN CSV file.
pub fn read(path: &Path) -> Result<RangeTable<AsnRecord>, GeoError> {
    let text = std::fs::read_to_string(path).map_err(|source| GeoError::Io { path: path.to_path_buf(), source })?;
    parse(&text).map_err(|e| GeoError::InFile { path: path.to_path_buf(), source: Box::new(e) })
}

/// Parses ASN CSV text.
pub fn parse(text: &str) -> Result<RangeTable<AsnRecord>, GeoError> {
    let mut table = RangeTable::default();
    let mut ids: HashMap<AsnRecord, u32> = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |reason: String| GeoError::Syntax { format: FORMAT, at: Position::Line(n + 1), reason };
        let fields = split_csv(line).map_err(|r| bad(r.to_string()))?;
        if fields.len() < 3 {
            return Err(bad(format!("{} fields, expected start,end,asn,organisation", fields.len())));
        }
        if n == 0 && fields[2].trim().parse::<u32>().is_err() {
            continue; // a header
        }
        let (v6a, start) =
            address(&fields[0]).ok_or_else(|| bad(format!("start {:?} is not an address", fields[0])))?;
        let (v6b, end) = address(&fields[1]).ok_or_else(|| bad(format!("end {:?} is not an address", fields[1])))?;
        let asn: u32 =
            fields[2].trim().trim_start_matches("AS").parse().map_err(|_| bad(format!("asn {:?}", fields[2])))?;
        let v6 = v6a || v6b || start > u128::from(u32::MAX) || end > u128::from(u32::MAX);
        if start > end {
            return Err(bad(format!("start {} after end {}", fields[0], fields[1])));
        }
        let record = AsnRecord { asn, organisation: fields.get(3).map_or("", |s| s.trim()).to_string() };
        let id = *ids.entry(record.clone()).or_insert_with(|| {
            table.values.push(record);
            (table.values.len() - 1) as u32
        });
        if v6 { table.v6.push((start, end, id)) } else { table.v4.push((start, end, id)) }
    }
    table.normalise();
    Ok(table)
}

/// An address as text (`1.0.0.0`, `2001::`) or an integer; whether it is IPv6 text.
fn address(s: &str) -> Option<(bool, u128)> {
    let s = s.trim();
    if let Ok(n) = s.parse::<u128>() {
        return Some((false, n));
    }
    match s.parse::<IpAddr>().ok()? {
        IpAddr::V4(a) => Some((false, u128::from(u32::from(a)))),
        IpAddr::V6(a) => Some((true, u128::from(a))),
    }
}

/// Splits one CSV line (RFC 4180 quoting). Written by hand: four fields a line, and
/// no CSV crate is among the dependencies.
fn split_csv(line: &str) -> Result<Vec<String>, &'static str> {
    let mut fields = Vec::with_capacity(4);
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (false, '"') if cur.is_empty() => quoted = true,
            (false, ',') => fields.push(std::mem::take(&mut cur)),
            (_, c) => cur.push(c),
        }
    }
    if quoted {
        return Err("unterminated quote");
    }
    fields.push(cur);
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_numeric_quoted_and_both_families() {
        let t = parse(
            "start,end,asn,organisation\n\
             1.0.0.0,1.0.0.255,13335,\"Cloudflare, Inc.\"\n\
             16778240,16779263,38803,Gtelecom Pty Ltd\n\
             2001:200::,2001:200:1b9:ffff:ffff:ffff:ffff:ffff,2500,\"WIDE \"\"Project\"\"\"\n",
        )
        .unwrap();
        assert_eq!(t.get(false, 0x0100_0010).unwrap().organisation, "Cloudflare, Inc.");
        assert_eq!(t.get(false, 16778300).unwrap().asn, 38803);
        let v6: u128 = "2001:200::1".parse::<std::net::Ipv6Addr>().unwrap().into();
        assert_eq!(t.get(true, v6).unwrap().organisation, "WIDE \"Project\"");
        assert!(t.get(false, 0x0100_0100).is_none());
    }

    #[test]
    fn bad_rows_name_their_line() {
        let e = parse("1.0.0.0,1.0.0.255,13335,x\n1.0.1.0,nope,1,y\n").unwrap_err();
        assert_eq!(e.to_string(), "ASN CSV line 2: end \"nope\" is not an address");
        assert!(parse("1.0.0.0,1.0.0.255,\"x\n").is_err());
        assert!(parse("1.0.0.9,1.0.0.1,5,x\n").is_err());
    }
}
