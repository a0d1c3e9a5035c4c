//! The `lagran_names` key of a name: its DNS wire format, ASCII lowercased,
//! as the program builds it from a query; and back to text for dumps and logs.

use lagran_common::names::NAME_MAX;

/// The map key of a name: DNS wire format, ASCII lowercased, root label
/// included, zero-padded. `None` when the name cannot be one (label over 63
/// octets, empty label, over 255 octets) or holds a zero octet.
pub fn wire_key(name: &str) -> Option<Vec<u8>> {
    let name = name.trim_end_matches('.');
    let mut out = Vec::with_capacity(name.len() + 2);
    if !name.is_empty() {
        for label in name.split('.') {
            let bytes = label.as_bytes();
            // The fast path ends a name at its first zero octet (`dns::parse_name`
            // in lagran-ebpf): a label holding one is left to userspace.
            if bytes.is_empty() || bytes.len() > 63 || bytes.contains(&0) {
                return None;
            }
            out.push(bytes.len() as u8);
            out.extend(bytes.iter().map(u8::to_ascii_lowercase));
        }
    }
    out.push(0);
    (out.len() <= NAME_MAX).then_some(out)
}

/// `04 e d g e 03 n e t 00 …` back to `edge.net` (for dumps).
pub(super) fn wire_to_text(key: &[u8]) -> String {
    let mut labels = Vec::new();
    let mut i = 0;
    while i < key.len() && key[i] != 0 {
        let n = key[i] as usize;
        let end = (i + 1 + n).min(key.len());
        labels.push(String::from_utf8_lossy(&key[i + 1..end]).into_owned());
        i = end;
    }
    if labels.is_empty() { ".".to_string() } else { labels.join(".") }
}

#[cfg(test)]
mod tests {
    use lagran_common::names::NameValue;

    use super::*;

    #[test]
    fn wire_key_is_lowercase_wire_format() {
        assert_eq!(wire_key("Edge.Lagran.NET").unwrap(), b"\x04edge\x06lagran\x03net\x00".to_vec());
        assert_eq!(wire_key("edge.lagran.net.").unwrap(), b"\x04edge\x06lagran\x03net\x00".to_vec());
        assert_eq!(wire_key("").unwrap(), vec![0]);
        assert!(wire_key("a..b").is_none(), "empty label");
        assert!(wire_key(&"x".repeat(64)).is_none(), "label over 63 octets");
        assert!(wire_key("a\0b.edge.lagran.net").is_none(), "a zero octet ends a name in the fast path");
        let long = ["abcdefghi"; 26].join(".");
        assert_eq!(long.len(), 259);
        assert!(wire_key(&long).is_none(), "name over 255 octets");
    }

    #[test]
    fn wire_key_round_trips_for_dumps() {
        let v = NameValue::new(2, &wire_key("pool-a.edge.lagran.net").unwrap());
        assert_eq!(wire_to_text(&v.wire().collect::<Vec<u8>>()), "pool-a.edge.lagran.net");
    }
}
