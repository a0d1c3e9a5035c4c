//! Where the geo databases are and how much a reload may change (`[geo]`).

use std::path::PathBuf;

use serde::Deserialize;

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
    /// A reload changing the partition of more than this share of the sampled
    /// addresses is refused unless forced (GEO_MAX_CHANGE_RATIO).
    pub max_change_ratio: f64,
}

impl Default for GeoSettings {
    fn default() -> Self {
        GeoSettings { ipv4_path: None, ipv6_path: None, max_change_ratio: DEFAULT_MAX_CHANGE_RATIO }
    }
}

impl GeoSettings {
    /// The ratio is a fraction.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if !(0.0..=1.0).contains(&self.max_change_ratio) {
            return Err(InvalidSetting::new(
                "geo.max_change_ratio",
                format!("{} is not a fraction within 0..=1", self.max_change_ratio),
            ));
        }
        Ok(())
    }
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
        "geo.max_change_ratio",
        KeyDefault::Toml("0.01"),
        "0.05",
        "a geo reload changing more sampled addresses than this is refused unless forced",
    )
    .env("GEO_MAX_CHANGE_RATIO"),
];
