//! Byte ranges cut from stored objects (RFC 9110 §14).

use hyper::header::{self, HeaderMap};

/// The part of a stored object of `len` bytes, with `stored` headers, that a
/// request with `asked` headers gets.
pub fn resolve(asked: &HeaderMap, stored: &HeaderMap, len: u64) -> ByteRange {
    let Some(range) = asked.get(header::RANGE).and_then(|v| v.to_str().ok()) else {
        return ByteRange::Full;
    };
    // RFC 9110 §13.1.5: a range applies only if the validator still matches.
    if let Some(v) = asked.get(header::IF_RANGE) {
        let matches = |name| stored.get(name) == Some(v);
        let strong_etag = !v.as_bytes().starts_with(b"W/") && matches(header::ETAG);
        if !strong_etag && !matches(header::LAST_MODIFIED) {
            return ByteRange::Full;
        }
    }
    byte_range(range, len)
}

/// The part of an object a `Range` header asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// No (usable) range: the whole object, 200.
    Full,
    /// Inclusive first and last byte, 206.
    Part(u64, u64),
    /// 416.
    Unsatisfiable,
}

/// Interprets a single `bytes=` range against an object of `len` bytes. Malformed and
/// multi-range requests get the whole object ("a server MAY ignore the Range header
/// field", RFC 9110 §14.2).
pub fn byte_range(range: &str, len: u64) -> ByteRange {
    let Some(spec) = range.trim().strip_prefix("bytes=") else {
        return ByteRange::Full;
    };
    if spec.contains(',') {
        return ByteRange::Full;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return ByteRange::Full;
    };
    let (first, last) = (first.trim(), last.trim());
    let num = |s: &str| s.parse::<u64>().ok();
    match (first.is_empty(), last.is_empty()) {
        // Suffix: the last N bytes.
        (true, false) => match num(last) {
            Some(0) => ByteRange::Unsatisfiable,
            Some(_) if len == 0 => ByteRange::Unsatisfiable,
            Some(n) => ByteRange::Part(len.saturating_sub(n), len - 1),
            None => ByteRange::Full,
        },
        (false, _) => {
            let Some(first) = num(first) else {
                return ByteRange::Full;
            };
            let last = if last.is_empty() { Some(u64::MAX) } else { num(last) };
            match last {
                Some(last) if last < first => ByteRange::Full,
                Some(_) if first >= len => ByteRange::Unsatisfiable,
                Some(last) => ByteRange::Part(first, last.min(len - 1)),
                None => ByteRange::Full,
            }
        }
        (true, true) => ByteRange::Full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        use ByteRange::*;
        assert_eq!(byte_range("bytes=0-4", 10), Part(0, 4));
        assert_eq!(byte_range("bytes=5-", 10), Part(5, 9));
        assert_eq!(byte_range("bytes=-3", 10), Part(7, 9));
        assert_eq!(byte_range("bytes=-30", 10), Part(0, 9));
        assert_eq!(byte_range("bytes=8-100", 10), Part(8, 9));
        assert_eq!(byte_range("bytes=10-", 10), Unsatisfiable);
        assert_eq!(byte_range("bytes=-0", 10), Unsatisfiable);
        assert_eq!(byte_range("bytes=0-0", 0), Unsatisfiable);
        for ignored in ["bytes=4-2", "bytes=0-1,3-4", "items=0-1", "bytes=a-b", "bytes=-"] {
            assert_eq!(byte_range(ignored, 10), Full, "{ignored}");
        }
    }
}
