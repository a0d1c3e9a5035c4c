//! Where each field of a client's location came from: `ip2region` (the GEOIP_PATH
//! file), `mmdb` (a MaxMind DB), `asn` (the ASN organisation), `asn-carriers` (the
//! ASN → carrier mapping), `table` (the built-in coordinate tables), `override` (an
//! operator's override). The merged region strings name them in their 7th field
//! (`country=mmdb,province=mmdb,city=mmdb,coords=mmdb,isp=asn-carriers`); any other
//! region string comes from the GEOIP_PATH file alone.

use serde::Serialize;

use super::{Location, coords};

/// The GEOIP_PATH file.
pub const IP2REGION: &str = "ip2region";
/// A MaxMind DB (GEOIP_MMDB_PATH).
pub const MMDB: &str = "mmdb";
/// The ASN data's organisation name (GEOIP_ASN_PATH).
pub const ASN: &str = "asn";
/// The ASN → carrier mapping (built in, `[geo.asn_carriers]`).
pub const ASN_CARRIERS: &str = "asn-carriers";
/// The built-in coordinate tables.
pub const TABLE: &str = "table";
/// An operator's geo override.
pub const OVERRIDE: &str = "override";

/// The source of each field; `""` where the field is unknown.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FieldSources {
    pub country: String,
    pub province: String,
    pub city: String,
    pub isp: String,
    pub coords: String,
}

impl FieldSources {
    /// The sources of `loc`, read from the region string it was parsed from.
    pub fn of_region(region: &str, loc: &Location) -> FieldSources {
        let fields: Vec<&str> = region.split('|').collect();
        let named = if fields.len() >= 7 { fields[6] } else { "" };
        let pick = |key: &str, value: &str| {
            if value.is_empty() {
                return String::new();
            }
            named
                .split(',')
                .find_map(|kv| kv.split_once('=').filter(|(k, _)| k.trim() == key).map(|(_, v)| v.trim().to_string()))
                .unwrap_or_else(|| IP2REGION.to_string())
        };
        let mut s = FieldSources {
            country: pick("country", &loc.country),
            province: pick("province", &loc.province),
            city: pick("city", &loc.city),
            isp: pick("isp", &loc.isp),
            coords: String::new(),
        };
        s.coords = if loc.coords.is_some() {
            pick("coords", "x")
        } else if coords::table_coordinates(loc).is_some() {
            TABLE.to_string()
        } else {
            String::new()
        };
        s
    }

    /// Every known field from an operator's override (coordinates from the tables).
    pub fn of_override(loc: &Location) -> FieldSources {
        let set = |v: &str| if v.is_empty() { String::new() } else { OVERRIDE.to_string() };
        FieldSources {
            country: set(&loc.country),
            province: set(&loc.province),
            city: set(&loc.city),
            isp: set(&loc.isp),
            coords: if coords::coordinates(loc).is_some() { TABLE.to_string() } else { String::new() },
        }
    }

    /// The sources of a decision's client location: from the region string when
    /// the location is the one it gives, else (an operator's override laid over the
    /// data) from the override.
    pub fn of_decision(region: Option<&str>, loc: &Location) -> FieldSources {
        match region {
            Some(r) if Location::from_region(r) == *loc => FieldSources::of_region(r, loc),
            _ if loc.is_unknown() => FieldSources::default(),
            _ => FieldSources::of_override(loc),
        }
    }

    /// `country=mmdb province=mmdb …`, known fields only.
    pub fn summary(&self) -> String {
        [
            ("country", &self.country),
            ("province", &self.province),
            ("city", &self.city),
            ("isp", &self.isp),
            ("coords", &self.coords),
        ]
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_strings_name_their_sources_others_are_ip2region() {
        let region = "DE|Hesse|Frankfurt am Main|Deutsche Telekom AG|DE|50.11,8.68|country=mmdb,province=mmdb,city=mmdb,coords=mmdb,isp=asn";
        let loc = Location::from_region(region);
        let s = FieldSources::of_region(region, &loc);
        assert_eq!(s.summary(), "country=mmdb province=mmdb city=mmdb isp=asn coords=mmdb");
        let region = "中国|0|广东省|深圳市|电信";
        let s = FieldSources::of_region(region, &Location::from_region(region));
        assert_eq!(s.summary(), "country=ip2region province=ip2region city=ip2region isp=ip2region coords=table");
        let s = FieldSources::of_override(&Location::new("CN", "北京", "", "联通"));
        assert_eq!(s.summary(), "country=override province=override isp=override coords=table");
        let overridden = Location::new("CN", "北京", "", "联通");
        assert_eq!(FieldSources::of_decision(Some(region), &overridden), s);
        assert_eq!(FieldSources::of_decision(None, &Location::default()).summary(), "");
    }
}
