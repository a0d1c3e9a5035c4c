//! ASN → carrier: the built-in table of the major Chinese carriers' networks and the
//! operator's additions and corrections (`[geo.asn_carriers]`, `PUT
//! /api/v1/geo/asn-carriers`), so a client located by the ASN data gets the same
//! carrier name (`电信`, `联通`, `移动`, …) as one located by ip2region, and lines,
//! `isp_must_match` and the same-ISP term work for both. An ASN not in the mapping
//! keeps its organisation name as the carrier.

use std::collections::BTreeMap;

use crate::location::canonical_isp;

/// (ASN, carrier) of the built-in table.
const BUILT_IN: &[(u32, &str)] = &[
    // China Telecom: the 163 backbone, CN2, the global network, provincial networks.
    (4134, "电信"),
    (4809, "电信"),
    (4811, "电信"),
    (4812, "电信"),
    (4813, "电信"),
    (4816, "电信"),
    (4835, "电信"),
    (17633, "电信"),
    (17638, "电信"),
    (23764, "电信"),
    // China Unicom: the 169 backbone, CNC, CUII (9929), the global network.
    (4808, "联通"),
    (4837, "联通"),
    (9929, "联通"),
    (10099, "联通"),
    (17621, "联通"),
    (17622, "联通"),
    (17623, "联通"),
    (17816, "联通"),
    // China Mobile: the backbone, CMNET provincial networks, CMI.
    (9808, "移动"),
    (24400, "移动"),
    (24444, "移动"),
    (24445, "移动"),
    (24547, "移动"),
    (38019, "移动"),
    (56040, "移动"),
    (56041, "移动"),
    (56042, "移动"),
    (56044, "移动"),
    (56046, "移动"),
    (56047, "移动"),
    (56048, "移动"),
    (58453, "移动"),
    // China Tietong (China Railcom), now part of China Mobile, kept apart as 铁通.
    (9394, "铁通"),
    // CERNET and CERNET2.
    (4538, "教育网"),
    (23910, "教育网"),
    // CSTNET, the science network.
    (7497, "科技网"),
];

/// The mapping in force: the built-in table with the operator's entries on top.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsnCarriers {
    map: BTreeMap<u32, String>,
}

impl Default for AsnCarriers {
    fn default() -> Self {
        AsnCarriers::new(&BTreeMap::new())
    }
}

impl AsnCarriers {
    /// The built-in table with `operator` laid over it (an empty carrier removes an
    /// entry, so an ASN the table names can go back to its organisation name).
    pub fn new(operator: &BTreeMap<u32, String>) -> AsnCarriers {
        let mut map: BTreeMap<u32, String> = BUILT_IN.iter().map(|&(a, c)| (a, c.to_string())).collect();
        for (asn, carrier) in operator {
            let carrier = canonical_isp(carrier);
            if carrier.is_empty() {
                map.remove(asn);
            } else {
                map.insert(*asn, carrier);
            }
        }
        AsnCarriers { map }
    }

    /// The carrier of an ASN, if the mapping names one.
    pub fn get(&self, asn: u32) -> Option<&str> {
        self.map.get(&asn).map(String::as_str)
    }

    /// Every entry, by ASN.
    pub fn entries(&self) -> &BTreeMap<u32, String> {
        &self.map
    }
}

/// Parses an ASN as written by operators: `4134` or `AS4134` (any case).
pub fn parse_asn(s: &str) -> Option<u32> {
    let s = s.trim();
    let digits = s.strip_prefix("AS").or_else(|| s.strip_prefix("as")).or_else(|| s.strip_prefix("As")).unwrap_or(s);
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_and_operator_entries() {
        let c = AsnCarriers::default();
        assert_eq!(c.get(4134), Some("电信"));
        assert_eq!(c.get(4837), Some("联通"));
        assert_eq!(c.get(56040), Some("移动"));
        assert_eq!(c.get(4538), Some("教育网"));
        assert_eq!(c.get(3320), None);
        let op = BTreeMap::from([(3320, "Deutsche Telekom".to_string()), (4134, String::new()), (9808, "CMCC".into())]);
        let c = AsnCarriers::new(&op);
        assert_eq!(c.get(3320), Some("Deutsche Telekom"));
        assert_eq!(c.get(4134), None, "an empty carrier removes the built-in entry");
        assert_eq!(c.get(9808), Some("移动"), "carrier names are canonicalised");
        assert_eq!(parse_asn("AS4134"), Some(4134));
        assert_eq!(parse_asn(" 9929 "), Some(9929));
        assert_eq!(parse_asn("ASx"), None);
    }
}
