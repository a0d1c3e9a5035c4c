//! CIDR JSON, in two shapes.
//!
//! **Array of objects** (what `lagran` documents for new files):
//!
//! ```json
//! [
//!   {"cidr": "58.60.0.0/15", "country": "CN", "province": "广东", "city": "深圳", "isp": "电信"},
//!   {"cidr": "2408:8000::/20", "country": "中国", "isp": "联通", "note": "ignored"},
//!   {"cidr": "1.0.1.0/24", "region": "中国|0|福建省|福州市|电信"}
//! ]
//! ```
//!
//! The block is `cidr` (or `prefix` / `network` / `subnet` / `ip`); the tuple is the
//! fields `country` (or `country_code` / `iso`), `province` (or `state`), `city`,
//! `isp` (or `carrier`), strings or `null`, missing = unknown; or instead a `region`
//! string in either ip2region layout, stored as is. Other keys are ignored.
//!
//! **The old CIDR JSON** (the reference design's "旧版 CIDR JSON", legacy CIDR
//! JSON; its exact shape is not written down anywhere, so both object forms seen in the wild are accepted), one
//! object whose keys are either
//!
//! - a CIDR block, with a region string or a field object as the value:
//!   `{"58.60.0.0/15": "中国|0|广东省|深圳市|电信", "1.2.3.0/24": {"country": "CN"}}`
//! - or a country (code or name), with an array of CIDR strings — the country-list
//!   export of geoip tools: `{"CN": ["1.0.1.0/24", "1.0.2.0/23"], "US": ["8.8.8.0/24"]}`.
//!
//! Overlapping blocks: the more specific wins (see [`RangeBuilder`]). Errors name the
//! line and column (syntax) or the array entry / object key (content).

use serde_json::{Map, Value};

use super::{Position, RangeBuilder, Ranges, check_region, parse_cidr, region_from_fields};
use crate::geo::GeoError;

const FORMAT: &str = "CIDR JSON";

const CIDR_KEYS: &[&str] = &["cidr", "prefix", "network", "subnet", "ip"];

/// The first present key of `names` as a string (`null` = absent).
fn field<'a>(obj: &'a Map<String, Value>, names: &[&str]) -> Result<Option<&'a str>, String> {
    for n in names {
        match obj.get(*n) {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => return Ok(Some(s)),
            Some(other) => return Err(format!("\"{n}\" must be a string, found {}", kind(other))),
        }
    }
    Ok(None)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The region of a field object: `region` as is, else the four fields.
fn region_of(obj: &Map<String, Value>) -> Result<String, String> {
    if let Some(r) = field(obj, &["region"])? {
        let r = r.trim();
        check_region(r)?;
        return Ok(r.to_string());
    }
    region_from_fields(
        field(obj, &["country", "country_code", "iso"])?.unwrap_or(""),
        field(obj, &["province", "state"])?.unwrap_or(""),
        field(obj, &["city"])?.unwrap_or(""),
        field(obj, &["isp", "carrier"])?.unwrap_or(""),
    )
}

/// Parses a whole JSON document.
pub fn parse(bytes: &[u8]) -> Result<Ranges, GeoError> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| {
        GeoError::syntax(FORMAT, Position::LineColumn { line: e.line(), column: e.column() }, e.to_string())
    })?;
    let mut b = RangeBuilder::new();
    match doc {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let bad = |reason: String| GeoError::syntax(FORMAT, Position::Entry(i), reason);
                let Value::Object(obj) = item else {
                    return Err(bad(format!("expected an object, found {}", kind(item))));
                };
                let cidr = field(obj, CIDR_KEYS).map_err(bad)?.ok_or_else(|| bad("no \"cidr\" field".into()))?;
                let net = parse_cidr(cidr).map_err(bad)?;
                let region = region_of(obj).map_err(bad)?;
                b.stats.records += 1;
                b.add(net, &region);
            }
        }
        Value::Object(map) => {
            for (key, value) in &map {
                let bad = |reason: String| GeoError::syntax(FORMAT, Position::Key(key.clone()), reason);
                if let Ok(net) = parse_cidr(key) {
                    let region = match value {
                        Value::String(r) => {
                            check_region(r.trim()).map_err(bad)?;
                            r.trim().to_string()
                        }
                        Value::Object(obj) => region_of(obj).map_err(bad)?,
                        other => {
                            return Err(bad(format!(
                                "a CIDR key needs a region string or an object, found {}",
                                kind(other)
                            )));
                        }
                    };
                    b.stats.records += 1;
                    b.add(net, &region);
                    continue;
                }
                let Value::Array(list) = value else {
                    return Err(bad(format!(
                        "is neither a CIDR block nor a country with an array of CIDR blocks (found {})",
                        kind(value)
                    )));
                };
                let region = region_from_fields(key, "", "", "").map_err(bad)?;
                for (j, item) in list.iter().enumerate() {
                    let Value::String(s) = item else {
                        return Err(bad(format!("element #{j}: expected a CIDR string, found {}", kind(item))));
                    };
                    let net = parse_cidr(s).map_err(|e| bad(format!("element #{j}: {e}")))?;
                    b.stats.records += 1;
                    b.add(net, &region);
                }
            }
        }
        other => {
            return Err(GeoError::syntax(
                FORMAT,
                Position::LineColumn { line: 1, column: 1 },
                format!("expected an array or an object, found {}", kind(&other)),
            ));
        }
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_of_objects() {
        let r = parse(
            r#"[
              {"cidr": "58.60.0.0/15", "country": "CN", "province": "广东", "city": "深圳", "isp": "电信"},
              {"prefix": "2408:8000::/20", "country": "中国", "isp": "联通", "note": "x", "city": null},
              {"cidr": "1.0.1.0/24", "region": "中国|0|福建省|福州市|电信"}
            ]"#
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(r.v4.len(), 2);
        assert!(r.v4.iter().any(|x| x.2 == "CN|广东|深圳|电信"));
        assert!(r.v4.iter().any(|x| x.2 == "中国|0|福建省|福州市|电信"));
        assert_eq!(r.v6[0].2, "中国|0|0|联通");
    }

    #[test]
    fn old_object_forms() {
        let r = parse(
            r#"{"58.60.0.0/15": "中国|0|广东省|深圳市|电信",
                "1.2.3.0/24": {"country": "CN", "isp": "电信"},
                "US": ["8.8.8.0/24", "2001:4860::/32"]}"#
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(r.v4.len(), 3);
        assert!(r.v4.iter().any(|x| x.2 == "US|0|0|0"));
        assert_eq!(r.v6[0].2, "US|0|0|0");
    }

    #[test]
    fn errors_name_the_position() {
        for (text, want) in [
            ("[{\"cidr\": \"1.2.3.0/24\"},\n {\"cidr\": 5}]", "array entry #1"),
            ("[{\"country\": \"CN\"}]", "no \"cidr\""),
            ("[1]", "expected an object"),
            ("[{\"cidr\": \"1.2.3.0/24\",\n \"country\": ", "line 2 column"),
            ("{\"CN\": [\"1.0.1.0/24\", \"x\"]}", "key \"CN\": element #1"),
            ("{\"nope\": 3}", "key \"nope\""),
            ("\"str\"", "expected an array or an object"),
        ] {
            let err = parse(text.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
