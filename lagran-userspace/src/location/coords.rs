//! Coordinates: those the geo data gives ([`Coords`], kept in the [`Location`]),
//! else a shipped table of Chinese provinces (their capitals), major cities (the
//! Chinese ones and the usual PoP cities elsewhere) and countries (a central city);
//! and the haversine (great-circle) distance between two of them.

use serde::{Deserialize, Serialize};

use super::Location;

/// Latitude and longitude in hundredths of a degree (about 1 km): integers, so a
/// [`Location`] carrying them stays `Eq` and `Hash`, and places the data puts a few
/// metres apart fall into one partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Coords {
    pub lat_centi: i32,
    pub lon_centi: i32,
}

impl Coords {
    /// Rounds degrees to hundredths.
    pub fn new(lat: f64, lon: f64) -> Coords {
        Coords { lat_centi: (lat * 100.0).round() as i32, lon_centi: (lon * 100.0).round() as i32 }
    }

    /// Degrees.
    pub fn degrees(self) -> (f64, f64) {
        (f64::from(self.lat_centi) / 100.0, f64::from(self.lon_centi) / 100.0)
    }

    /// Parses `lat,lon` in degrees; `None` for anything else or out of range.
    pub fn parse(s: &str) -> Option<Coords> {
        let (a, b) = s.split_once(',')?;
        let (lat, lon) = (a.trim().parse::<f64>().ok()?, b.trim().parse::<f64>().ok()?);
        ((-90.0..=90.0).contains(&lat) && (-180.0..=180.0).contains(&lon)).then(|| Coords::new(lat, lon))
    }
}

impl std::fmt::Display for Coords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (lat, lon) = self.degrees();
        write!(f, "{lat:.2},{lon:.2}")
    }
}

/// Major cities outside China as node records spell them (canonical city = the
/// name as given): the usual PoP locations, so a node typed as `Frankfurt` has
/// coordinates without its own `lat`/`lon`.
const WORLD_CITIES: &[(&str, f64, f64)] = &[
    ("Frankfurt", 50.11, 8.68),
    ("Frankfurt am Main", 50.11, 8.68),
    ("London", 51.51, -0.13),
    ("Amsterdam", 52.37, 4.90),
    ("Paris", 48.86, 2.35),
    ("Madrid", 40.42, -3.70),
    ("Milan", 45.46, 9.19),
    ("Stockholm", 59.33, 18.07),
    ("Warsaw", 52.23, 21.01),
    ("Moscow", 55.76, 37.62),
    ("Istanbul", 41.01, 28.98),
    ("Dubai", 25.20, 55.27),
    ("Mumbai", 19.08, 72.88),
    ("Chennai", 13.08, 80.27),
    ("New Delhi", 28.61, 77.21),
    ("Singapore", 1.35, 103.82),
    ("Jakarta", -6.21, 106.85),
    ("Bangkok", 13.76, 100.50),
    ("Tokyo", 35.68, 139.69),
    ("Osaka", 34.69, 135.50),
    ("Seoul", 37.57, 126.98),
    ("Taipei", 25.03, 121.57),
    ("Sydney", -33.87, 151.21),
    ("Melbourne", -37.81, 144.96),
    ("Perth", -31.95, 115.86),
    ("Auckland", -36.85, 174.76),
    ("Ashburn", 39.04, -77.49),
    ("New York", 40.71, -74.01),
    ("Miami", 25.76, -80.19),
    ("Atlanta", 33.75, -84.39),
    ("Chicago", 41.88, -87.63),
    ("Dallas", 32.78, -96.80),
    ("Denver", 39.74, -104.99),
    ("Seattle", 47.61, -122.33),
    ("San Jose", 37.34, -121.89),
    ("Los Angeles", 34.05, -118.24),
    ("Toronto", 43.65, -79.38),
    ("Montreal", 45.50, -73.57),
    ("Mexico City", 19.43, -99.13),
    ("São Paulo", -23.55, -46.63),
    ("Sao Paulo", -23.55, -46.63),
    ("Buenos Aires", -34.60, -58.38),
    ("Santiago", -33.45, -70.67),
    ("Bogotá", 4.71, -74.07),
    ("Lima", -12.05, -77.04),
    ("Johannesburg", -26.20, 28.05),
    ("Cape Town", -33.92, 18.42),
    ("Lagos", 6.52, 3.38),
    ("Nairobi", -1.29, 36.82),
    ("Cairo", 30.04, 31.24),
];

/// (canonical city, lat, lon)
const CITIES: &[(&str, f64, f64)] = &[
    ("北京", 39.90, 116.41),
    ("上海", 31.23, 121.47),
    ("广州", 23.13, 113.26),
    ("深圳", 22.54, 114.06),
    ("杭州", 30.27, 120.16),
    ("南京", 32.06, 118.80),
    ("成都", 30.57, 104.07),
    ("重庆", 29.56, 106.55),
    ("武汉", 30.59, 114.31),
    ("西安", 34.34, 108.94),
    ("天津", 39.34, 117.36),
    ("苏州", 31.30, 120.59),
    ("郑州", 34.75, 113.63),
    ("长沙", 28.23, 112.94),
    ("沈阳", 41.81, 123.43),
    ("青岛", 36.07, 120.38),
    ("厦门", 24.48, 118.09),
    ("福州", 26.07, 119.30),
    ("东莞", 23.02, 113.75),
    ("佛山", 23.02, 113.12),
    ("济南", 36.65, 117.12),
    ("合肥", 31.82, 117.23),
    ("昆明", 24.88, 102.83),
    ("哈尔滨", 45.80, 126.53),
    ("大连", 38.91, 121.61),
    ("宁波", 29.87, 121.54),
    ("无锡", 31.49, 120.31),
    ("香港", 22.32, 114.17),
];

/// (canonical province, lat, lon) — the provincial capital.
const PROVINCES: &[(&str, f64, f64)] = &[
    ("北京", 39.90, 116.41),
    ("天津", 39.34, 117.36),
    ("上海", 31.23, 121.47),
    ("重庆", 29.56, 106.55),
    ("河北", 38.04, 114.51),
    ("山西", 37.87, 112.55),
    ("辽宁", 41.81, 123.43),
    ("吉林", 43.82, 125.32),
    ("黑龙江", 45.80, 126.53),
    ("江苏", 32.06, 118.80),
    ("浙江", 30.27, 120.16),
    ("安徽", 31.82, 117.23),
    ("福建", 26.07, 119.30),
    ("江西", 28.68, 115.86),
    ("山东", 36.65, 117.12),
    ("河南", 34.75, 113.63),
    ("湖北", 30.59, 114.31),
    ("湖南", 28.23, 112.94),
    ("广东", 23.13, 113.26),
    ("海南", 20.04, 110.20),
    ("四川", 30.57, 104.07),
    ("贵州", 26.65, 106.63),
    ("云南", 24.88, 102.83),
    ("陕西", 34.34, 108.94),
    ("甘肃", 36.06, 103.83),
    ("青海", 36.62, 101.78),
    ("台湾", 25.03, 121.57),
    ("内蒙古", 40.84, 111.75),
    ("广西", 22.82, 108.37),
    ("西藏", 29.65, 91.17),
    ("宁夏", 38.49, 106.23),
    ("新疆", 43.83, 87.62),
    ("香港", 22.32, 114.17),
    ("澳门", 22.20, 113.54),
];

/// (ISO country, lat, lon) — a central or capital city.
#[expect(clippy::approx_constant, reason = "Kuala Lumpur is at 3.14 N, not at π")]
const COUNTRIES: &[(&str, f64, f64)] = &[
    ("CN", 34.75, 113.63),
    ("HK", 22.32, 114.17),
    ("MO", 22.20, 113.54),
    ("TW", 25.03, 121.57),
    ("JP", 35.68, 139.69),
    ("KR", 37.57, 126.98),
    ("SG", 1.35, 103.82),
    ("MY", 3.14, 101.69),
    ("TH", 13.76, 100.50),
    ("VN", 21.03, 105.85),
    ("PH", 14.60, 120.98),
    ("ID", -6.21, 106.85),
    ("IN", 28.61, 77.21),
    ("AU", -33.87, 151.21),
    ("NZ", -36.85, 174.76),
    ("US", 39.83, -98.58),
    ("CA", 45.42, -75.70),
    ("MX", 19.43, -99.13),
    ("BR", -23.55, -46.63),
    ("AR", -34.60, -58.38),
    ("GB", 51.51, -0.13),
    ("DE", 50.11, 8.68),
    ("FR", 48.86, 2.35),
    ("NL", 52.37, 4.90),
    ("IT", 41.90, 12.50),
    ("ES", 40.42, -3.70),
    ("SE", 59.33, 18.07),
    ("RU", 55.76, 37.62),
    ("TR", 41.01, 28.98),
    ("AE", 25.20, 55.27),
    ("SA", 24.71, 46.68),
    ("ZA", -26.20, 28.05),
    ("EG", 30.04, 31.24),
    ("NG", 6.52, 3.38),
    ("IL", 32.09, 34.78),
    ("PK", 24.86, 67.01),
];

/// The most specific coordinates known for a location: its own (from the geo
/// data), else the tables' city, province or country.
pub fn coordinates(loc: &Location) -> Option<(f64, f64)> {
    loc.coords.map(Coords::degrees).or_else(|| table_coordinates(loc))
}

/// The tables' coordinates for a location: city, else province, else country.
pub fn table_coordinates(loc: &Location) -> Option<(f64, f64)> {
    let find = |table: &[(&str, f64, f64)], key: &str| {
        (!key.is_empty()).then(|| table.iter().find(|(k, _, _)| *k == key).map(|&(_, a, b)| (a, b))).flatten()
    };
    find(CITIES, &loc.city)
        .or_else(|| find(WORLD_CITIES, &loc.city))
        .or_else(|| find(PROVINCES, &loc.province))
        .or_else(|| find(COUNTRIES, &loc.country))
}

/// Great-circle distance in km.
pub fn haversine_km(a: (f64, f64), b: (f64, f64)) -> f64 {
    const R: f64 = 6371.0;
    let (la1, lo1) = (a.0.to_radians(), a.1.to_radians());
    let (la2, lo2) = (b.0.to_radians(), b.1.to_radians());
    let h = ((la2 - la1) / 2.0).sin().powi(2) + la1.cos() * la2.cos() * ((lo2 - lo1) / 2.0).sin().powi(2);
    2.0 * R * h.sqrt().asin()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shenzhen_to_beijing_is_about_1950_km() {
        let sz = coordinates(&Location::new("CN", "广东省", "深圳市", "")).unwrap();
        let bj = coordinates(&Location::new("CN", "北京市", "", "")).unwrap();
        let d = haversine_km(sz, bj);
        assert!((1900.0..2000.0).contains(&d), "{d}");
    }

    #[test]
    fn falls_back_from_city_to_province_to_country() {
        assert_eq!(coordinates(&Location::new("CN", "广东", "汕尾", "")), Some((23.13, 113.26)));
        assert_eq!(coordinates(&Location::new("KR", "", "", "")), Some((37.57, 126.98)));
        assert_eq!(coordinates(&Location::default()), None);
        assert_eq!(coordinates(&Location::new("DE", "Hesse", "Frankfurt", "")), Some((50.11, 8.68)));
    }

    #[test]
    fn the_data_s_own_coordinates_win() {
        let mut l = Location::new("US", "California", "Los Angeles", "");
        l.coords = Coords::parse("34.0544,-118.2441");
        assert_eq!(coordinates(&l), Some((34.05, -118.24)));
        assert_eq!(Coords::parse("91,0"), None);
        assert_eq!(Coords::parse("x"), None);
        assert_eq!(Coords::new(1.234, -5.678).to_string(), "1.23,-5.68");
    }
}
