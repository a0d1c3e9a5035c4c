//! CIDR CSV: `cidr,country,province,city,isp`, one block a line.
//!
//! - Optional header: when the first data line's first field has no digit and is
//!   not an address (`::1` is one), it is a header and columns are found by name (any order, case-
//!   insensitive; extra columns ignored): `cidr` / `prefix` / `network` / `subnet` /
//!   `ip`; `country` / `country_code` / `iso` / `cc`; `province` / `region` /
//!   `state` / `subdivision`; `city`; `isp` / `carrier` / `operator` / `org`.
//!   Without a header the columns are positional.
//! - Missing trailing fields and `0` / empty mean unknown. Fields may be quoted
//!   (`"Akamai Technologies, Inc."`, `""` for a quote inside); a quoted field cannot
//!   span lines.
//! - A bare address is a /32 or /128; host bits are cleared. Overlapping blocks:
//!   the more specific wins (see [`RangeBuilder`]).
//! - Blank lines and lines starting with `#` are skipped; a UTF-8 BOM is ignored.

use super::{Position, RangeBuilder, Ranges, data_lines, parse_cidr, region_from_fields};
use crate::geo::GeoError;

const FORMAT: &str = "CIDR CSV";

/// Column indexes of the five fields (country … isp may be absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Columns {
    cidr: usize,
    country: Option<usize>,
    province: Option<usize>,
    city: Option<usize>,
    isp: Option<usize>,
}

const POSITIONAL: Columns = Columns { cidr: 0, country: Some(1), province: Some(2), city: Some(3), isp: Some(4) };

fn header_columns(fields: &[String]) -> Result<Columns, String> {
    let find = |names: &[&str]| {
        fields.iter().position(|f| {
            let f = f.trim().to_ascii_lowercase();
            names.contains(&f.as_str())
        })
    };
    let cidr = find(&["cidr", "prefix", "network", "subnet", "ip", "ip_range"])
        .ok_or_else(|| format!("header {:?} has no cidr column", fields.join(",")))?;
    Ok(Columns {
        cidr,
        country: find(&["country", "country_code", "iso", "cc", "country_iso_code"]),
        province: find(&["province", "region", "state", "subdivision"]),
        city: find(&["city"]),
        isp: find(&["isp", "carrier", "operator", "org", "organization"]),
    })
}

/// Splits one CSV line (RFC 4180 quoting, no line breaks inside fields).
pub fn split_line(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut at_field_start = true;
    while let Some(c) = chars.next() {
        if quoted {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    cur.push('"');
                } else {
                    quoted = false;
                }
            } else {
                cur.push(c);
            }
            continue;
        }
        match c {
            '"' if at_field_start || cur.trim().is_empty() => {
                cur.clear();
                quoted = true;
                at_field_start = false;
            }
            ',' => {
                fields.push(std::mem::take(&mut cur));
                at_field_start = true;
            }
            _ => {
                cur.push(c);
                at_field_start = false;
            }
        }
    }
    if quoted {
        return Err("unterminated quoted field".into());
    }
    fields.push(cur);
    Ok(fields)
}

/// Parses the whole text.
pub fn parse(text: &str) -> Result<Ranges, GeoError> {
    let mut b = RangeBuilder::new();
    let mut columns: Option<Columns> = None;
    for (at, line) in data_lines(text) {
        let bad = |reason: String| GeoError::syntax(FORMAT, Position::Line(at), reason);
        let fields = split_line(line).map_err(bad)?;
        let cols = match columns {
            Some(c) => c,
            None => {
                // A header's first field is a column name: no digits, not an address.
                let first = fields.first().map(String::as_str).unwrap_or("");
                if !first.chars().any(|c| c.is_ascii_digit()) && parse_cidr(first).is_err() {
                    columns = Some(header_columns(&fields).map_err(bad)?);
                    continue;
                }
                columns = Some(POSITIONAL);
                POSITIONAL
            }
        };
        let get = |i: Option<usize>| i.and_then(|i| fields.get(i)).map_or("", |s| s.as_str());
        let Some(cidr) = fields.get(cols.cidr) else {
            return Err(bad(format!("no field {} (cidr)", cols.cidr + 1)));
        };
        let net = parse_cidr(cidr).map_err(bad)?;
        let region =
            region_from_fields(get(cols.country), get(cols.province), get(cols.city), get(cols.isp)).map_err(bad)?;
        b.stats.records += 1;
        b.add(net, &region);
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positional_and_header_forms_give_the_same_ranges() {
        let plain = "58.60.0.0/15,CN,广东,深圳,电信\n123.112.0.0/12,CN,北京,北京,联通\n";
        let header = "\u{feff}# exported\nisp,cidr,city,province,country,note\n\
                      电信,58.60.0.0/15,深圳,广东,CN,x\n联通,123.112.0.0/12,北京,北京,CN,y\n";
        let a = parse(plain).unwrap();
        let b = parse(header.trim_start_matches('\u{feff}')).unwrap();
        assert_eq!(a.v4, b.v4);
        assert_eq!(a.v4[0].2, "CN|广东|深圳|电信");
        let h = parse("cidr,country,province,city,isp\n1.2.3.0/24,CN\n").unwrap();
        assert_eq!(h.v4[0].2, "CN|0|0|0");
    }

    #[test]
    fn quoting_bare_addresses_and_host_bits() {
        let r = parse("\"8.8.8.0/24\",US,California,\"Mountain View\",\"Google, LLC\"\n1.2.3.4,AU\n10.1.2.3/8,X\n")
            .unwrap();
        assert_eq!(r.v4.len(), 3);
        assert!(r.v4.iter().any(|x| x.2 == "US|California|Mountain View|Google, LLC"));
        assert!(r.v4.iter().any(|x| x.0 == 0x0a00_0000 && x.1 == 0x0aff_ffff));
        assert!(r.v4.iter().any(|x| x.0 == x.1 && x.2 == "AU|0|0|0"));
        assert_eq!(split_line(r#"a,"b ""q"", c",d"#).unwrap(), vec!["a", "b \"q\", c", "d"]);
    }

    #[test]
    fn errors_name_the_line() {
        for (text, want) in [
            ("1.2.3.0/24,CN\n1.2.3.0/33,CN\n", "line 2:"),
            ("country,isp\n1.2.3.0/24,CN\n", "line 1: header"),
            ("1.2.3.0/24,\"CN\n", "unterminated"),
            ("1.2.3.0/24,C|N\n", "contains '|'"),
            ("1.2.3.0/24,CN\nfoo,CN\n", "line 2: \"foo\" is not a CIDR"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
