//! ip2region's own source text (the maker's input, e.g. `data/ip.merge.txt`): one
//! range a line, `start_ip|end_ip|region`, where the region is the rest of the line
//! in either field layout (`中国|0|广东省|深圳市|电信` or `中国|广东省|深圳市|电信|CN`).
//!
//! IPv4 and IPv6 lines may be mixed; each family is sorted by start. Blank lines and
//! lines starting with `#` are skipped. Ranges must not overlap (an error names both
//! lines); adjacent ranges with the same region are merged.

use std::net::IpAddr;

use super::ranges::{Explicit, from_explicit};
use super::{Position, Ranges, check_region, data_lines};
use crate::geo::GeoError;

const FORMAT: &str = "ip2region source";

/// Parses the whole text.
pub fn parse(text: &str) -> Result<Ranges, GeoError> {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    let mut records = 0;
    for (at, line) in data_lines(text) {
        let bad = |reason: String| GeoError::syntax(FORMAT, Position::Line(at), reason);
        let mut parts = line.splitn(3, '|');
        let (Some(s), Some(e), Some(region)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad("expected start_ip|end_ip|region".into()));
        };
        let ip = |f: &str, what: &str| {
            f.trim().parse::<IpAddr>().map_err(|_| bad(format!("{what} {:?} is not an IP address", f.trim())))
        };
        let (start, end) = (ip(s, "start_ip")?, ip(e, "end_ip")?);
        let region = region.trim();
        check_region(region).map_err(&bad)?;
        let (start, end, list) = match (start, end) {
            (IpAddr::V4(a), IpAddr::V4(b)) => (u128::from(u32::from(a)), u128::from(u32::from(b)), &mut v4),
            (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), &mut v6),
            _ => {
                return Err(bad("start_ip and end_ip are of different address families".into()));
            }
        };
        if start > end {
            return Err(bad(format!("start_ip {s} is after end_ip {e}")));
        }
        records += 1;
        list.push(Explicit { start, end, region: region.to_string(), at });
    }
    let mut r = Ranges { v4: from_explicit(FORMAT, v4)?, v6: from_explicit(FORMAT, v6)?, ..Ranges::default() };
    r.stats.records = records;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_layouts_and_families() {
        let r = parse(
            "# comment\n\
             1.0.0.0|1.0.0.255|澳大利亚|0|0|0|0\n\
             \n\
             58.60.0.0|58.61.255.255|中国|0|广东省|深圳市|电信\r\n\
             240e::|240e:ff:ffff:ffff:ffff:ffff:ffff:ffff|中国|广东省|深圳市|电信|CN\n",
        )
        .unwrap();
        assert_eq!(r.v4.len(), 2);
        assert_eq!(r.v4[1].2, "中国|0|广东省|深圳市|电信");
        assert_eq!(r.v6.len(), 1);
        assert_eq!(r.stats.records, 3);
    }

    #[test]
    fn errors_name_the_line() {
        for (text, want) in [
            ("1.0.0.0|1.0.0.255\n", "line 1: expected"),
            ("\n1.0.0.x|1.0.0.255|a\n", "line 2: start_ip"),
            ("1.0.0.9|1.0.0.1|a\n", "after end_ip"),
            ("1.0.0.0|::1|a\n", "different address families"),
            ("1.0.0.0|1.0.0.255|  \n", "empty region"),
            ("1.0.0.0|1.0.0.255|a\n1.0.0.128|1.0.1.0|b\n", "line 2: range overlaps the range of line 1"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
