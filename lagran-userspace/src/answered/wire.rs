//! The answered prefixes as an NS host reports them on the table stream
//! (`&prefixes=`): `PREFIX_QUERIES` pairs joined by commas, for example
//! `58.60.0.0/24_120,240e:1:2::/48_30`. Every character is allowed in a URL's
//! query as it is, so the list needs no escaping.

use std::fmt::Write as _;

use ipnet::IpNet;

/// The most prefixes one report carries (and the control plane takes).
pub const MAX_REPORTED: usize = 64;

/// `prefixes` in the report's form (the first [`MAX_REPORTED`]).
pub fn encode(prefixes: &[(IpNet, u64)]) -> String {
    let mut out = String::new();
    for (i, (net, queries)) in prefixes.iter().take(MAX_REPORTED).enumerate() {
        let _ = write!(out, "{}{net}_{queries}", if i == 0 { "" } else { "," });
    }
    out
}

/// A report's prefixes: each an IPv4 /24 or IPv6 /48 with a query count.
pub fn decode(text: &str) -> Result<Vec<(IpNet, u64)>, String> {
    let mut out = Vec::new();
    for item in text.split(',').filter(|s| !s.is_empty()) {
        if out.len() == MAX_REPORTED {
            return Err(format!("more than {MAX_REPORTED} prefixes"));
        }
        let (net, queries) = item.rsplit_once('_').ok_or_else(|| format!("{item:?} is not PREFIX_QUERIES"))?;
        let net: IpNet = net.parse().map_err(|_| format!("{net:?} is not a CIDR prefix"))?;
        let wanted = match net {
            IpNet::V4(_) => 24,
            IpNet::V6(_) => 48,
        };
        if net.prefix_len() != wanted || net.trunc() != net {
            return Err(format!("{net} is not an IPv4 /24 or IPv6 /48 network"));
        }
        let queries: u64 = queries.parse().map_err(|_| format!("{queries:?} is not a query count"))?;
        out.push((net, queries));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_round_trips_and_bad_ones_are_named() {
        let list: Vec<(IpNet, u64)> =
            vec![("58.60.0.0/24".parse().unwrap(), 120), ("240e:1:2::/48".parse().unwrap(), 30)];
        let text = encode(&list);
        assert_eq!(text, "58.60.0.0/24_120,240e:1:2::/48_30");
        assert_eq!(decode(&text).unwrap(), list);
        assert_eq!(decode("").unwrap(), vec![]);
        assert!(decode("58.60.0.0/16_3").unwrap_err().contains("/24"));
        assert!(decode("58.60.0.9/24_3").unwrap_err().contains("/24"));
        assert!(decode("58.60.0.0/24").unwrap_err().contains("PREFIX_QUERIES"));
        assert!(decode("58.60.0.0/24_x").unwrap_err().contains("query count"));
        let many = vec![("1.2.3.0/24".parse().unwrap(), 1); MAX_REPORTED + 5];
        assert_eq!(decode(&encode(&many)).unwrap().len(), MAX_REPORTED, "encode keeps the first ones");
        let too_many = vec!["1.2.3.0/24_1"; MAX_REPORTED + 1].join(",");
        assert!(decode(&too_many).unwrap_err().contains("more than"));
    }
}
