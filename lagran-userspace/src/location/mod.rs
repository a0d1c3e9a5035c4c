//! The location tuple (country, province, city, ISP) and the canonical form of each
//! field, so a client looked up in ip2region and a node record typed by an operator
//! compare equal when they mean the same place and carrier.
//!
//! Canonical forms: country = ISO 3166-1 alpha-2 upper case when known (Hong Kong,
//! Macao and Taiwan are their own markets: HK / MO / TW); province and city = the short
//! Chinese name without administrative suffix (广东, 深圳) for Chinese places, English
//! and pinyin spellings of the 34 provincial divisions and major cities mapped to it;
//! ISP = a short Chinese carrier name (电信, 联通, 移动, …). Names not in the tables are
//! kept as given, trimmed. "" means unknown; `0` and the files' other "unknown"
//! markers become "".

mod aliases;
pub mod continents;
pub mod coords;
pub mod sources;

pub use coords::Coords;

use serde::{Deserialize, Serialize};

/// Where a client or node is, in canonical form; `""` = unknown field.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Location {
    /// ISO 3166-1 alpha-2 (`CN`, `HK`, `US`), or the name as given when unknown to us.
    pub country: String,
    /// Short province name (`广东`, `内蒙古`), or as given for other countries.
    pub province: String,
    /// Short city name (`深圳`), or as given.
    pub city: String,
    /// Canonical carrier (`电信`, `联通`, `移动`, …), or as given.
    pub isp: String,
    /// Coordinates the geo data gives for the place (a city, else its region or
    /// country), when it gives any; [`coords::coordinates`] falls back to the
    /// built-in tables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coords: Option<Coords>,
}

/// Chinese regions that a CDN treats as markets of their own: province name → country code.
const SEPARATE_MARKETS: &[(&str, &str)] = &[("香港", "HK"), ("澳门", "MO"), ("台湾", "TW")];

impl Location {
    /// Parses an ip2region region string in either field layout.
    ///
    /// Layout rule:
    /// - 5 or more fields and the 5th is two ASCII letters (an ISO code) → the new
    ///   layout `Country|Province|City|ISP|ISO`; the ISO code gives the country.
    /// - 5 or more fields, the 5th is `0`/empty and the 2nd is a known Chinese
    ///   province → the new layout with an unknown ISO code.
    /// - any other 5-field string → the old layout `国家|区域|省份|城市|ISP` (its
    ///   区域 field, a macro-region such as 华南 or `0`, is dropped).
    /// - fewer fields → `Country|Province|City|ISP` in order, missing ones unknown.
    ///
    /// - 7 or more fields → the merged layout `Country|Province|City|ISP|ISO|lat,lon|sources`
    ///   that the geo data's merge writes (never found in ip2region files): the ISO
    ///   code gives the country, the 6th field the coordinates (empty when unknown);
    ///   the 7th names each field's source (see [`sources`]).
    ///
    /// Then every field is canonicalised as by [`Location::new`].
    pub fn from_region(raw: &str) -> Location {
        let fields: Vec<&str> = raw.split('|').map(str::trim).collect();
        let f = |i: usize| fields.get(i).copied().unwrap_or("");
        let is_iso = |s: &str| s.len() == 2 && s.bytes().all(|b| b.is_ascii_alphabetic());
        if fields.len() >= 7 {
            let mut loc = Location::new(f(4), f(1), f(2), f(3));
            loc.coords = Coords::parse(f(5));
            return loc;
        }
        if fields.len() >= 5 {
            let fifth = f(4);
            if is_iso(fifth) {
                return Location::new(fifth, f(1), f(2), f(3));
            }
            let second_is_province = aliases::province(&aliases::fold(&strip_province_suffix(f(1)))).is_some();
            if aliases::is_unknown(fifth) && second_is_province {
                return Location::new(f(0), f(1), f(2), f(3));
            }
            return Location::new(f(0), f(2), f(3), f(4));
        }
        Location::new(f(0), f(1), f(2), f(3))
    }

    /// Builds a location from free-form fields (node records, API overrides),
    /// canonicalising each. Hong Kong, Macao and Taiwan given as a Chinese province
    /// (country `CN` or unknown) become countries HK / MO / TW, keeping the province;
    /// and those countries with an unknown province get it filled in (`HK` → 香港), so
    /// both spellings compare equal.
    pub fn new(country: &str, province: &str, city: &str, isp: &str) -> Location {
        let mut country = canonical_country(country);
        let mut province = canonical_province(province);
        for (name, code) in SEPARATE_MARKETS {
            if province == *name && (country.is_empty() || country == "CN") {
                country = (*code).to_string();
            }
            if province.is_empty() && country == *code {
                province = (*name).to_string();
            }
        }
        Location { country, province, city: canonical_city(city), isp: canonical_isp(isp), coords: None }
    }

    /// The continent of the country (`AS`, `EU`, `NA`, `SA`, `AF`, `OC`, `AN`), `""`
    /// when the country is unknown or not an ISO code.
    pub fn continent(&self) -> &'static str {
        continents::continent(&self.country)
    }

    /// Whether nothing at all is known.
    pub fn is_unknown(&self) -> bool {
        self.country.is_empty() && self.province.is_empty() && self.city.is_empty() && self.isp.is_empty()
    }
}

/// Canonical country: ISO 3166-1 alpha-2 upper case when the name or code is known
/// (`中国`, `China`, `cn` → `CN`; `香港` → `HK`); any other two-letter code upper-cased;
/// other names kept trimmed; unknown markers (`0`, `""`) → `""`.
pub fn canonical_country(s: &str) -> String {
    let s = s.trim();
    if aliases::is_unknown(s) {
        return String::new();
    }
    if let Some(code) = aliases::country(&aliases::fold(s)) {
        return code.to_string();
    }
    if s.len() == 2 && s.bytes().all(|b| b.is_ascii_alphabetic()) {
        return s.to_ascii_uppercase();
    }
    s.to_string()
}

/// Chinese province-level suffixes, longest first.
const PROVINCE_SUFFIXES: &[&str] = &["维吾尔自治区", "壮族自治区", "回族自治区", "特别行政区", "自治区", "省", "市"];

/// Strips one Chinese province-level suffix, leaving at least two characters.
fn strip_province_suffix(s: &str) -> String {
    for suffix in PROVINCE_SUFFIXES {
        if let Some(rest) = s.strip_suffix(suffix)
            && rest.chars().count() >= 2
        {
            return rest.to_string();
        }
    }
    s.to_string()
}

/// Canonical province: Chinese suffixes 省 / 市 / 自治区 / 特别行政区 / 壮族自治区 /
/// 回族自治区 / 维吾尔自治区 stripped (广西壮族自治区 → 广西, 广东省 → 广东); English
/// and pinyin names of the 34 provincial divisions, any case and with trailing words
/// such as "Province" or "Zhuang Autonomous Region", mapped to the Chinese short name
/// (`Guangdong` → 广东); others kept trimmed; unknown markers → `""`.
pub fn canonical_province(s: &str) -> String {
    let s = s.trim();
    if aliases::is_unknown(s) {
        return String::new();
    }
    let stripped = strip_province_suffix(s);
    let mut key = aliases::fold(&stripped);
    loop {
        if let Some(p) = aliases::province(&key) {
            return p.to_string();
        }
        let Some(shorter) =
            aliases::PROVINCE_EN_SUFFIXES.iter().find_map(|suf| key.strip_suffix(suf).filter(|rest| !rest.is_empty()))
        else {
            break;
        };
        key = shorter.to_string();
    }
    stripped
}

/// Chinese city-level suffixes, longest first; stripped when at least two characters remain.
const CITY_SUFFIXES: &[&str] = &["特别行政区", "自治州", "自治县", "自治旗", "林区", "地区", "盟", "市", "县"];

/// Canonical city: Chinese suffixes 市 / 地区 / 自治州 / 自治县 / 盟 / 县 / 林区 stripped
/// when at least two characters remain (深圳市 → 深圳, 大兴安岭地区 → 大兴安岭, 义县
/// stays), with the ethnic-group names of autonomous prefectures (延边朝鲜族自治州 →
/// 延边); English names of major Chinese cities mapped to Chinese (`Shenzhen` → 深圳);
/// others kept trimmed; unknown markers → `""`.
pub fn canonical_city(s: &str) -> String {
    let s = s.trim();
    if aliases::is_unknown(s) {
        return String::new();
    }
    if let Some(c) = aliases::city(&aliases::fold(s)) {
        return c.to_string();
    }
    let mut out = s;
    for suffix in CITY_SUFFIXES {
        if let Some(rest) = out.strip_suffix(suffix)
            && rest.chars().count() >= 2
        {
            out = rest;
            if suffix.starts_with("自治") {
                out = strip_ethnic_groups(out);
            }
            break;
        }
    }
    out.to_string()
}

/// Removes trailing ethnic-group names (with or without 族) from an autonomous
/// prefecture's name, keeping at least two characters: 文山壮族苗族 → 文山.
fn strip_ethnic_groups(mut s: &str) -> &str {
    'outer: loop {
        for group in aliases::ETHNIC_GROUPS {
            // Single-character names only with 族, so a place name is never cut.
            let with_zu = format!("{group}族");
            let candidates: [Option<&str>; 2] = [
                s.strip_suffix(with_zu.as_str()),
                if group.chars().count() > 1 { s.strip_suffix(group) } else { None },
            ];
            for rest in candidates.into_iter().flatten() {
                if rest.chars().count() >= 2 {
                    s = rest;
                    continue 'outer;
                }
            }
        }
        return s;
    }
}

/// Canonical carrier: every alias of the same network to one short name, compared
/// without case, spaces or punctuation (电信 / 中国电信 / China Telecom / Chinanet / CT
/// → 电信; 联通 / China Unicom / CU / 网通 → 联通; 移动 / China Mobile / CM / CMCC →
/// 移动; 铁通, 广电 (also any regional `…广电`), 教育网 / CERNET, 科技网, 鹏博士,
/// 长城宽带, BGP, …); unknown carriers kept trimmed; unknown markers → `""`.
pub fn canonical_isp(s: &str) -> String {
    let s = s.trim();
    if aliases::is_unknown(s) {
        return String::new();
    }
    if let Some(i) = aliases::isp(&aliases::fold(s)) {
        return i.to_string();
    }
    if s.ends_with("广电") {
        return "广电".to_string();
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(c: &str, p: &str, ci: &str, i: &str) -> Location {
        Location { country: c.into(), province: p.into(), city: ci.into(), isp: i.into(), coords: None }
    }

    #[test]
    fn seed_examples_both_layouts() {
        let want = loc("CN", "广东", "深圳", "电信");
        assert_eq!(Location::from_region("中国|广东省|深圳市|电信|CN"), want);
        assert_eq!(Location::from_region("中国|0|广东省|深圳市|电信"), want);
        // The real file's private-space row is entirely unknown.
        assert!(Location::from_region("0|0|0|内网IP|内网IP").is_unknown());
        assert!(Location::from_region("0|0|Reserved|Reserved|Reserved").is_unknown());
        assert!(Location::from_region("Reserved|Reserved|0|0|0").is_unknown());
        assert!(Location::from_region("").is_unknown());
    }

    #[test]
    fn layout_detection() {
        // New layout with unknown province, ISO decides the country.
        assert_eq!(Location::from_region("Singapore|0|Singapore|0|SG"), loc("SG", "", "Singapore", ""));
        assert_eq!(
            Location::from_region("United States|Virginia|Emporia|Akamai Technologies, Inc.|US"),
            loc("US", "Virginia", "Emporia", "Akamai Technologies, Inc.")
        );
        assert_eq!(
            Location::from_region("Japan|Aichi|Nagoya|KDDI CORPORATION|JP"),
            loc("JP", "Aichi", "Nagoya", "KDDI CORPORATION")
        );
        // New layout, unknown ISO, 2nd field a province.
        assert_eq!(Location::from_region("中国|北京市|0|联通|0"), loc("CN", "北京", "", "联通"));
        // Old layout with a macro-region in the 2nd field.
        assert_eq!(Location::from_region("中国|华南|广东省|广州市|移动"), loc("CN", "广东", "广州", "移动"));
        // Old layout, ISP unknown.
        assert_eq!(Location::from_region("美国|0|加利福尼亚|洛杉矶|0"), loc("US", "加利福尼亚", "洛杉矶", ""));
        // Short forms.
        assert_eq!(Location::from_region("中国|广东省|深圳市|电信"), loc("CN", "广东", "深圳", "电信"));
        assert_eq!(Location::from_region("中国"), loc("CN", "", "", ""));
        // Extra spaces around fields.
        assert_eq!(Location::from_region(" 中国 | 0 | 广东省 | 深圳市 | 电信 "), loc("CN", "广东", "深圳", "电信"));
    }

    #[test]
    fn hong_kong_macao_taiwan_are_separate_markets() {
        assert_eq!(Location::from_region("中国|0|香港|0|电讯盈科"), loc("HK", "香港", "", "电讯盈科"));
        assert_eq!(Location::from_region("中国|0|澳门|0|澳门电讯"), loc("MO", "澳门", "", "澳门电讯"));
        assert_eq!(Location::from_region("中国|0|台湾省|台北|中华电信"), loc("TW", "台湾", "台北", "中华电信"));
        assert_eq!(Location::from_region("中国|香港特别行政区|0|0|CN"), loc("HK", "香港", "", ""));
        // A node typed as just "HK" gets the province, so it matches the client above.
        assert_eq!(Location::new("HK", "", "", ""), loc("HK", "香港", "", ""));
        assert_eq!(Location::new("Hong Kong", "Hong Kong", "", ""), loc("HK", "香港", "", ""));
        assert_eq!(Location::new("", "香港", "", ""), loc("HK", "香港", "", ""));
        // Other countries are left alone.
        assert_eq!(Location::new("US", "", "", ""), loc("US", "", "", ""));
    }

    #[test]
    fn countries() {
        for (input, want) in [
            ("中国", "CN"),
            ("China", "CN"),
            ("cn", "CN"),
            (" CN ", "CN"),
            ("中华人民共和国", "CN"),
            ("香港", "HK"),
            ("Hong Kong", "HK"),
            ("韩国", "KR"),
            ("South Korea", "KR"),
            ("美国", "US"),
            ("United States", "US"),
            ("usa", "US"),
            ("日本", "JP"),
            ("英国", "GB"),
            ("United Kingdom", "GB"),
            ("俄罗斯", "RU"),
            ("德国", "DE"),
            ("新加坡", "SG"),
            ("澳大利亚", "AU"),
            ("越南", "VN"),
            ("印度尼西亚", "ID"),
            ("Türkiye", "TR"),
            ("zz", "ZZ"),
            ("欧洲", "欧洲"),
            ("  Atlantis ", "Atlantis"),
            ("0", ""),
            ("", ""),
        ] {
            assert_eq!(canonical_country(input), want, "canonical_country({input:?})");
        }
    }

    #[test]
    fn provinces() {
        for (input, want) in [
            ("广东省", "广东"),
            ("广东", "广东"),
            ("北京市", "北京"),
            ("广西壮族自治区", "广西"),
            ("内蒙古自治区", "内蒙古"),
            ("香港特别行政区", "香港"),
            ("澳门特别行政区", "澳门"),
            ("新疆维吾尔自治区", "新疆"),
            ("宁夏回族自治区", "宁夏"),
            ("西藏自治区", "西藏"),
            ("台湾省", "台湾"),
            ("Guangdong", "广东"),
            ("GUANGDONG", "广东"),
            ("guangdong province", "广东"),
            ("Shaanxi", "陕西"),
            ("Shanxi", "山西"),
            ("Anhui", "安徽"),
            ("Inner Mongolia", "内蒙古"),
            ("Guangxi Zhuang Autonomous Region", "广西"),
            ("Ningxia Hui", "宁夏"),
            ("Tibet", "西藏"),
            ("Beijing Shi", "北京"),
            ("Hong Kong SAR", "香港"),
            ("California", "California"),
            ("加利福尼亚", "加利福尼亚"),
            ("省", "省"),
            ("0", ""),
            ("", ""),
        ] {
            assert_eq!(canonical_province(input), want, "canonical_province({input:?})");
        }
    }

    #[test]
    fn cities() {
        for (input, want) in [
            ("深圳市", "深圳"),
            ("深圳", "深圳"),
            ("Shenzhen", "深圳"),
            ("xi'an", "西安"),
            ("大兴安岭地区", "大兴安岭"),
            ("阿拉善盟", "阿拉善"),
            ("锡林郭勒盟", "锡林郭勒"),
            ("延边朝鲜族自治州", "延边"),
            ("湘西土家族苗族自治州", "湘西"),
            ("文山壮族苗族自治州", "文山"),
            ("博尔塔拉蒙古自治州", "博尔塔拉"),
            ("克孜勒苏柯尔克孜自治州", "克孜勒苏"),
            ("伊犁哈萨克自治州", "伊犁"),
            ("海西蒙古族藏族自治州", "海西"),
            ("临夏回族自治州", "临夏"),
            ("神农架林区", "神农架"),
            ("苗栗县", "苗栗"),
            ("义县", "义县"),
            ("Nagoya", "Nagoya"),
            ("内网IP", ""),
            ("0", ""),
        ] {
            assert_eq!(canonical_city(input), want, "canonical_city({input:?})");
        }
    }

    #[test]
    fn isps() {
        for (input, want) in [
            ("电信", "电信"),
            ("中国电信", "电信"),
            ("China Telecom", "电信"),
            ("CHINANET", "电信"),
            ("ct", "电信"),
            ("联通", "联通"),
            ("中国联通", "联通"),
            ("china unicom", "联通"),
            ("CU", "联通"),
            ("网通", "联通"),
            ("移动", "移动"),
            ("中国移动", "移动"),
            ("China Mobile", "移动"),
            ("cm", "移动"),
            ("CMCC", "移动"),
            ("铁通", "铁通"),
            ("中国广电", "广电"),
            ("陕西广电", "广电"),
            ("CERNET", "教育网"),
            ("教育网", "教育网"),
            ("鹏博士", "鹏博士"),
            ("长城宽带", "长城宽带"),
            ("bgp", "BGP"),
            ("Akamai", "Akamai"),
            ("0", ""),
            ("内网IP", ""),
        ] {
            assert_eq!(canonical_isp(input), want, "canonical_isp({input:?})");
        }
    }

    #[test]
    fn new_canonicalises_every_field() {
        assert_eq!(Location::new("China", "Guangdong", "Shenzhen", "China Telecom"), loc("CN", "广东", "深圳", "电信"));
        assert_eq!(Location::new("中国", "广东省", "深圳市", "中国电信"), loc("CN", "广东", "深圳", "电信"));
        assert!(Location::new("0", "0", "0", "0").is_unknown());
        assert!(!Location::new("", "", "", "电信").is_unknown());
    }

    #[test]
    fn merged_layout_carries_coordinates() {
        let l = Location::from_region("US|California|San Jose|Comcast|US|37.3394,-121.895|country=mmdb");
        assert_eq!((l.country.as_str(), l.province.as_str(), l.city.as_str()), ("US", "California", "San Jose"));
        assert_eq!(l.coords, Some(Coords::new(37.3394, -121.895)));
        assert_eq!(l.continent(), "NA");
        let unknown = Location::from_region("|||AS4134|||isp=asn");
        assert_eq!((unknown.country.as_str(), unknown.isp.as_str(), unknown.coords), ("", "AS4134", None));
        assert_eq!(Location::new("DE", "", "", "").continent(), "EU");
        assert_eq!(Location::default().continent(), "");
    }

    #[test]
    fn serde_round_trip() {
        let l = Location::new("CN", "广东", "深圳", "电信");
        let json = serde_json::to_string(&l).unwrap();
        assert_eq!(json, r#"{"country":"CN","province":"广东","city":"深圳","isp":"电信"}"#);
        assert_eq!(serde_json::from_str::<Location>(&json).unwrap(), l);
    }
}
