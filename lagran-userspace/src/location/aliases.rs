//! Alias tables behind the canonical location names: countries (to ISO 3166-1
//! alpha-2), Chinese provincial divisions and major cities (English / pinyin to
//! Chinese), carriers (every spelling to one short Chinese name), and the values the
//! geo files use for "unknown".
//!
//! Keys are compared after [`fold`]: lower-cased, keeping only letters and digits, so
//! "Hong Kong", "hong-kong" and "HongKong" are one key. Chinese names are unaffected.

use std::collections::HashMap;
use std::sync::LazyLock;

/// Folds a name to its lookup key: lower case, letters and digits only.
pub(crate) fn fold(s: &str) -> String {
    s.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect()
}

/// Values the geo files (and people) write for "unknown"; compared after [`fold`].
/// ip2region uses `0`; its rows for private and reserved space say `内网IP`,
/// `Reserved` or `保留地址` in the place of a location.
const UNKNOWN: &[&str] = &[
    "",
    "0",
    "未知",
    "unknown",
    "none",
    "null",
    "reserved",
    "保留",
    "保留地址",
    "内网ip",
    "本机地址",
    "局域网",
    "本地局域网",
    "共享地址",
];

/// Whether a field value means "unknown".
pub(crate) fn is_unknown(s: &str) -> bool {
    let key = fold(s);
    UNKNOWN.contains(&key.as_str())
}

/// ISO 3166-1 alpha-2 code → names seen in ip2region (Chinese) and in English.
const COUNTRIES: &[(&str, &[&str])] = &[
    ("CN", &["中国", "中华人民共和国", "中国大陆", "China", "PRC", "People's Republic of China", "Mainland China"]),
    ("HK", &["香港", "中国香港", "香港特别行政区", "Hong Kong", "Hong Kong SAR"]),
    ("MO", &["澳门", "中国澳门", "澳门特别行政区", "Macau", "Macao"]),
    ("TW", &["台湾", "中国台湾", "台湾省", "Taiwan"]),
    ("US", &["美国", "United States", "United States of America", "USA", "America"]),
    ("JP", &["日本", "Japan"]),
    ("KR", &["韩国", "南韩", "South Korea", "Korea", "Republic of Korea", "Korea Republic of"]),
    ("KP", &["朝鲜", "北韩", "North Korea", "DPRK"]),
    ("SG", &["新加坡", "Singapore"]),
    ("MY", &["马来西亚", "Malaysia"]),
    ("TH", &["泰国", "Thailand"]),
    ("VN", &["越南", "Vietnam", "Viet Nam"]),
    ("PH", &["菲律宾", "Philippines"]),
    ("ID", &["印度尼西亚", "印尼", "Indonesia"]),
    ("IN", &["印度", "India"]),
    ("PK", &["巴基斯坦", "Pakistan"]),
    ("BD", &["孟加拉", "孟加拉国", "Bangladesh"]),
    ("LK", &["斯里兰卡", "Sri Lanka"]),
    ("NP", &["尼泊尔", "Nepal"]),
    ("MM", &["缅甸", "Myanmar", "Burma"]),
    ("KH", &["柬埔寨", "Cambodia"]),
    ("LA", &["老挝", "Laos"]),
    ("BN", &["文莱", "Brunei"]),
    ("TL", &["东帝汶", "Timor-Leste", "East Timor"]),
    ("MV", &["马尔代夫", "Maldives"]),
    ("BT", &["不丹", "Bhutan"]),
    ("MN", &["蒙古", "蒙古国", "Mongolia"]),
    ("KZ", &["哈萨克斯坦", "Kazakhstan"]),
    ("UZ", &["乌兹别克斯坦", "Uzbekistan"]),
    ("KG", &["吉尔吉斯斯坦", "Kyrgyzstan"]),
    ("TJ", &["塔吉克斯坦", "Tajikistan"]),
    ("TM", &["土库曼斯坦", "Turkmenistan"]),
    ("AF", &["阿富汗", "Afghanistan"]),
    ("GE", &["格鲁吉亚", "Georgia"]),
    ("AM", &["亚美尼亚", "Armenia"]),
    ("AZ", &["阿塞拜疆", "Azerbaijan"]),
    ("AE", &["阿联酋", "阿拉伯联合酋长国", "United Arab Emirates", "UAE"]),
    ("SA", &["沙特阿拉伯", "沙特", "Saudi Arabia"]),
    ("IL", &["以色列", "Israel"]),
    ("PS", &["巴勒斯坦", "Palestine"]),
    ("TR", &["土耳其", "Turkey", "Türkiye"]),
    ("IR", &["伊朗", "Iran"]),
    ("IQ", &["伊拉克", "Iraq"]),
    ("SY", &["叙利亚", "Syria"]),
    ("JO", &["约旦", "Jordan"]),
    ("LB", &["黎巴嫩", "Lebanon"]),
    ("QA", &["卡塔尔", "Qatar"]),
    ("KW", &["科威特", "Kuwait"]),
    ("OM", &["阿曼", "Oman"]),
    ("BH", &["巴林", "Bahrain"]),
    ("YE", &["也门", "Yemen"]),
    ("EG", &["埃及", "Egypt"]),
    ("ZA", &["南非", "South Africa"]),
    ("NG", &["尼日利亚", "Nigeria"]),
    ("KE", &["肯尼亚", "Kenya"]),
    ("ET", &["埃塞俄比亚", "Ethiopia"]),
    ("GH", &["加纳", "Ghana"]),
    ("TZ", &["坦桑尼亚", "Tanzania"]),
    ("UG", &["乌干达", "Uganda"]),
    ("CI", &["科特迪瓦", "Côte d'Ivoire", "Ivory Coast"]),
    ("CD", &["刚果金", "DR Congo", "Democratic Republic of the Congo"]),
    ("CG", &["刚果布", "Republic of the Congo"]),
    ("AO", &["安哥拉", "Angola"]),
    ("ZM", &["赞比亚", "Zambia"]),
    ("ZW", &["津巴布韦", "Zimbabwe"]),
    ("MZ", &["莫桑比克", "Mozambique"]),
    ("MG", &["马达加斯加", "Madagascar"]),
    ("SD", &["苏丹", "Sudan"]),
    ("LY", &["利比亚", "Libya"]),
    ("MA", &["摩洛哥", "Morocco"]),
    ("DZ", &["阿尔及利亚", "Algeria"]),
    ("TN", &["突尼斯", "Tunisia"]),
    ("GB", &["英国", "United Kingdom", "UK", "Great Britain", "Britain", "England"]),
    ("IE", &["爱尔兰", "Ireland"]),
    ("DE", &["德国", "Germany"]),
    ("FR", &["法国", "France"]),
    ("IT", &["意大利", "Italy"]),
    ("ES", &["西班牙", "Spain"]),
    ("PT", &["葡萄牙", "Portugal"]),
    ("NL", &["荷兰", "Netherlands", "The Netherlands", "Holland"]),
    ("BE", &["比利时", "Belgium"]),
    ("LU", &["卢森堡", "Luxembourg"]),
    ("CH", &["瑞士", "Switzerland"]),
    ("AT", &["奥地利", "Austria"]),
    ("LI", &["列支敦士登", "Liechtenstein"]),
    ("MC", &["摩纳哥", "Monaco"]),
    ("SE", &["瑞典", "Sweden"]),
    ("NO", &["挪威", "Norway"]),
    ("DK", &["丹麦", "Denmark"]),
    ("FI", &["芬兰", "Finland"]),
    ("IS", &["冰岛", "Iceland"]),
    ("PL", &["波兰", "Poland"]),
    ("CZ", &["捷克", "Czech Republic", "Czechia"]),
    ("SK", &["斯洛伐克", "Slovakia"]),
    ("HU", &["匈牙利", "Hungary"]),
    ("RO", &["罗马尼亚", "Romania"]),
    ("BG", &["保加利亚", "Bulgaria"]),
    ("GR", &["希腊", "Greece"]),
    ("CY", &["塞浦路斯", "Cyprus"]),
    ("MT", &["马耳他", "Malta"]),
    ("RS", &["塞尔维亚", "Serbia"]),
    ("HR", &["克罗地亚", "Croatia"]),
    ("SI", &["斯洛文尼亚", "Slovenia"]),
    ("BA", &["波黑", "Bosnia and Herzegovina"]),
    ("ME", &["黑山", "Montenegro"]),
    ("AL", &["阿尔巴尼亚", "Albania"]),
    ("MK", &["马其顿", "北马其顿", "North Macedonia", "Macedonia"]),
    ("UA", &["乌克兰", "Ukraine"]),
    ("BY", &["白俄罗斯", "Belarus"]),
    ("MD", &["摩尔多瓦", "Moldova"]),
    ("RU", &["俄罗斯", "Russia", "Russian Federation"]),
    ("LT", &["立陶宛", "Lithuania"]),
    ("LV", &["拉脱维亚", "Latvia"]),
    ("EE", &["爱沙尼亚", "Estonia"]),
    ("CA", &["加拿大", "Canada"]),
    ("MX", &["墨西哥", "Mexico"]),
    ("BR", &["巴西", "Brazil"]),
    ("AR", &["阿根廷", "Argentina"]),
    ("CL", &["智利", "Chile"]),
    ("CO", &["哥伦比亚", "Colombia"]),
    ("PE", &["秘鲁", "Peru"]),
    ("VE", &["委内瑞拉", "Venezuela"]),
    ("EC", &["厄瓜多尔", "Ecuador"]),
    ("UY", &["乌拉圭", "Uruguay"]),
    ("PY", &["巴拉圭", "Paraguay"]),
    ("BO", &["玻利维亚", "Bolivia"]),
    ("CR", &["哥斯达黎加", "Costa Rica"]),
    ("PA", &["巴拿马", "Panama"]),
    ("DO", &["多米尼加", "Dominican Republic"]),
    ("PR", &["波多黎各", "Puerto Rico"]),
    ("GT", &["危地马拉", "Guatemala"]),
    ("HN", &["洪都拉斯", "Honduras"]),
    ("SV", &["萨尔瓦多", "El Salvador"]),
    ("NI", &["尼加拉瓜", "Nicaragua"]),
    ("CU", &["古巴", "Cuba"]),
    ("JM", &["牙买加", "Jamaica"]),
    ("AU", &["澳大利亚", "澳洲", "Australia"]),
    ("NZ", &["新西兰", "New Zealand"]),
    ("GU", &["关岛", "Guam"]),
    ("FJ", &["斐济", "Fiji"]),
    ("PG", &["巴布亚新几内亚", "Papua New Guinea"]),
];

/// The 34 provincial divisions of China: canonical (short Chinese) name → English and
/// pinyin spellings. Chinese long forms (广东省, 广西壮族自治区) are handled by suffix
/// stripping, not by this table.
const PROVINCES: &[(&str, &[&str])] = &[
    ("北京", &["Beijing", "Peking"]),
    ("天津", &["Tianjin"]),
    ("上海", &["Shanghai"]),
    ("重庆", &["Chongqing"]),
    ("河北", &["Hebei"]),
    ("山西", &["Shanxi"]),
    ("辽宁", &["Liaoning"]),
    ("吉林", &["Jilin"]),
    ("黑龙江", &["Heilongjiang"]),
    ("江苏", &["Jiangsu"]),
    ("浙江", &["Zhejiang"]),
    ("安徽", &["Anhui"]),
    ("福建", &["Fujian"]),
    ("江西", &["Jiangxi"]),
    ("山东", &["Shandong"]),
    ("河南", &["Henan"]),
    ("湖北", &["Hubei"]),
    ("湖南", &["Hunan"]),
    ("广东", &["Guangdong"]),
    ("海南", &["Hainan"]),
    ("四川", &["Sichuan"]),
    ("贵州", &["Guizhou"]),
    ("云南", &["Yunnan"]),
    ("陕西", &["Shaanxi"]),
    ("甘肃", &["Gansu"]),
    ("青海", &["Qinghai"]),
    ("台湾", &["Taiwan"]),
    ("内蒙古", &["Inner Mongolia", "Nei Mongol", "Neimenggu", "Nei Menggu"]),
    ("广西", &["Guangxi"]),
    ("西藏", &["Tibet", "Xizang"]),
    ("宁夏", &["Ningxia"]),
    ("新疆", &["Xinjiang"]),
    ("香港", &["Hong Kong"]),
    ("澳门", &["Macau", "Macao"]),
];

/// English words that may trail a province name ("Guangxi Zhuang Autonomous Region"),
/// folded; stripped one at a time until the rest is a known province.
pub(crate) const PROVINCE_EN_SUFFIXES: &[&str] = &[
    "province",
    "municipality",
    "specialadministrativeregion",
    "autonomousregion",
    "sar",
    "zhuang",
    "hui",
    "uygur",
    "uyghur",
    "uighur",
    "sheng",
    "shi",
    "city",
];

/// Major Chinese cities: canonical Chinese name → English / pinyin spellings, so a node
/// entered as "Shenzhen" matches a client in 深圳市.
const CITIES: &[(&str, &[&str])] = &[
    ("北京", &["Beijing", "Peking"]),
    ("上海", &["Shanghai"]),
    ("天津", &["Tianjin"]),
    ("重庆", &["Chongqing"]),
    ("广州", &["Guangzhou", "Canton"]),
    ("深圳", &["Shenzhen"]),
    ("东莞", &["Dongguan"]),
    ("佛山", &["Foshan"]),
    ("珠海", &["Zhuhai"]),
    ("汕头", &["Shantou"]),
    ("成都", &["Chengdu"]),
    ("杭州", &["Hangzhou"]),
    ("宁波", &["Ningbo"]),
    ("温州", &["Wenzhou"]),
    ("武汉", &["Wuhan"]),
    ("西安", &["Xi'an", "Xian"]),
    ("南京", &["Nanjing"]),
    ("苏州", &["Suzhou"]),
    ("无锡", &["Wuxi"]),
    ("郑州", &["Zhengzhou"]),
    ("长沙", &["Changsha"]),
    ("青岛", &["Qingdao"]),
    ("济南", &["Jinan"]),
    ("沈阳", &["Shenyang"]),
    ("大连", &["Dalian"]),
    ("厦门", &["Xiamen", "Amoy"]),
    ("福州", &["Fuzhou"]),
    ("合肥", &["Hefei"]),
    ("昆明", &["Kunming"]),
    ("哈尔滨", &["Harbin"]),
    ("长春", &["Changchun"]),
    ("石家庄", &["Shijiazhuang"]),
    ("太原", &["Taiyuan"]),
    ("南宁", &["Nanning"]),
    ("南昌", &["Nanchang"]),
    ("贵阳", &["Guiyang"]),
    ("兰州", &["Lanzhou"]),
    ("乌鲁木齐", &["Urumqi", "Wulumuqi"]),
    ("呼和浩特", &["Hohhot", "Huhehaote"]),
    ("银川", &["Yinchuan"]),
    ("西宁", &["Xining"]),
    ("拉萨", &["Lhasa"]),
    ("海口", &["Haikou"]),
    ("三亚", &["Sanya"]),
    ("香港", &["Hong Kong"]),
    ("澳门", &["Macau", "Macao"]),
    ("台北", &["Taipei"]),
];

/// Carriers: canonical name → every spelling seen in geo files and node records.
const ISPS: &[(&str, &[&str])] = &[
    ("电信", &["电信", "中国电信", "China Telecom", "Chinanet", "CHINANET-BACKBONE", "CT", "CN2"]),
    (
        "联通",
        &[
            "联通",
            "中国联通",
            "China Unicom",
            "Unicom",
            "CU",
            "CUCC",
            "网通",
            "中国网通",
            "China Netcom",
            "CNC",
            "CNCGROUP",
            "China169",
        ],
    ),
    ("移动", &["移动", "中国移动", "China Mobile", "CM", "CMCC", "CMNET"]),
    ("铁通", &["铁通", "中国铁通", "China Tietong", "Tietong", "CTT", "China Railcom"]),
    ("广电", &["广电", "中国广电", "China Broadnet", "CBN", "China Broadcasting Network"]),
    ("教育网", &["教育网", "中国教育网", "中国教育和科研计算机网", "CERNET", "CERNET2", "EDU"]),
    ("科技网", &["科技网", "中国科技网", "CSTNET"]),
    ("鹏博士", &["鹏博士", "鹏博士宽带", "Dr.Peng", "Dr Peng", "DrPeng"]),
    ("长城宽带", &["长城宽带", "GWBN", "Great Wall Broadband"]),
    ("BGP", &["BGP", "多线", "BGP多线"]),
    ("阿里云", &["阿里云", "Aliyun", "Alibaba Cloud"]),
    ("腾讯云", &["腾讯云", "腾讯", "Tencent", "Tencent Cloud"]),
    ("华为云", &["华为云", "Huawei Cloud"]),
];

fn table(rows: &'static [(&'static str, &'static [&'static str])], with_key: bool) -> HashMap<String, &'static str> {
    let mut m = HashMap::new();
    for (canon, names) in rows {
        if with_key {
            m.insert(fold(canon), *canon);
        }
        for n in *names {
            m.insert(fold(n), *canon);
        }
    }
    m
}

static COUNTRY_MAP: LazyLock<HashMap<String, &'static str>> = LazyLock::new(|| table(COUNTRIES, true));
static PROVINCE_MAP: LazyLock<HashMap<String, &'static str>> = LazyLock::new(|| table(PROVINCES, true));
static CITY_MAP: LazyLock<HashMap<String, &'static str>> = LazyLock::new(|| table(CITIES, false));
static ISP_MAP: LazyLock<HashMap<String, &'static str>> = LazyLock::new(|| table(ISPS, true));

/// ISO code for a folded country name or code, if known.
pub(crate) fn country(key: &str) -> Option<&'static str> {
    COUNTRY_MAP.get(key).copied()
}

/// Canonical province for a folded key (short Chinese name or English spelling).
pub(crate) fn province(key: &str) -> Option<&'static str> {
    PROVINCE_MAP.get(key).copied()
}

/// Canonical Chinese city for a folded English spelling.
pub(crate) fn city(key: &str) -> Option<&'static str> {
    CITY_MAP.get(key).copied()
}

/// Canonical carrier for a folded key.
pub(crate) fn isp(key: &str) -> Option<&'static str> {
    ISP_MAP.get(key).copied()
}

/// Ethnic-group names that follow a place name in autonomous prefectures
/// (延边朝鲜族自治州, 博尔塔拉蒙古自治州); stripped after 自治州 / 自治县.
pub(crate) const ETHNIC_GROUPS: &[&str] = &[
    "柯尔克孜",
    "维吾尔",
    "哈萨克",
    "土家",
    "布依",
    "朝鲜",
    "蒙古",
    "景颇",
    "哈尼",
    "傈僳",
    "拉祜",
    "纳西",
    "仫佬",
    "毛南",
    "仡佬",
    "达斡尔",
    "鄂温克",
    "鄂伦春",
    "锡伯",
    "撒拉",
    "东乡",
    "保安",
    "裕固",
    "塔吉克",
    "羌",
    "藏",
    "回",
    "苗",
    "彝",
    "壮",
    "侗",
    "瑶",
    "白",
    "傣",
    "黎",
    "佤",
    "畲",
    "水",
    "土",
    "满",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_have_no_conflicting_keys() {
        for rows in [COUNTRIES, PROVINCES, CITIES, ISPS] {
            let mut seen: HashMap<String, &str> = HashMap::new();
            for (canon, names) in rows {
                for n in names.iter().chain(std::iter::once(canon)) {
                    if let Some(prev) = seen.insert(fold(n), canon) {
                        assert_eq!(prev, *canon, "key {n:?} maps to both {prev} and {canon}");
                    }
                }
            }
        }
    }

    #[test]
    fn country_table_is_large_enough_and_uses_iso_codes() {
        assert!(COUNTRIES.len() >= 60, "only {} countries", COUNTRIES.len());
        for (code, _) in COUNTRIES {
            assert!(code.len() == 2 && code.bytes().all(|b| b.is_ascii_uppercase()), "{code} is not an alpha-2 code");
        }
        assert_eq!(PROVINCES.len(), 34);
    }
}
