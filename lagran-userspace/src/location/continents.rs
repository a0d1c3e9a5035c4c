//! The continent of each country (ISO 3166-1 alpha-2), the codes MaxMind uses:
//! `AF` Africa, `AN` Antarctica, `AS` Asia, `EU` Europe, `NA` North America (with
//! Central America and the Caribbean), `OC` Oceania, `SA` South America. Countries
//! spanning two continents are placed where MaxMind places them (Russia and Turkey
//! in Europe, Egypt in Africa).

/// Space-separated country codes per continent.
const CONTINENTS: &[(&str, &str)] = &[
    (
        "AF",
        "AO BF BI BJ BW CD CF CG CI CM CV DJ DZ EG EH ER ET GA GH GM GN GQ GW KE KM LR LS LY MA MG ML MR MU MW MZ \
         NA NE NG RE RW SC SD SH SL SN SO SS ST SZ TD TG TN TZ UG YT ZA ZM ZW",
    ),
    ("AN", "AQ BV GS HM TF"),
    (
        "AS",
        "AE AF AM AZ BD BH BN BT CC CN CX GE HK ID IL IN IO IQ IR JO JP KG KH KP KR KW KZ LA LB LK MM MN MO MV MY \
         NP OM PH PK PS QA SA SG SY TH TJ TL TM TW UZ VN YE",
    ),
    (
        "EU",
        "AD AL AT AX BA BE BG BY CH CY CZ DE DK EE ES FI FO FR GB GG GI GR HR HU IE IM IS IT JE LI LT LU LV MC MD \
         ME MK MT NL NO PL PT RO RS RU SE SI SJ SK SM TR UA VA XK",
    ),
    (
        "NA",
        "AG AI AW BB BL BM BQ BS BZ CA CR CU CW DM DO GD GL GP GT HN HT JM KN KY LC MF MQ MS MX NI PA PM PR SV SX \
         TC TT US VC VG VI",
    ),
    ("OC", "AS AU CK FJ FM GU KI MH MP NC NF NR NU NZ PF PG PN PW SB TK TO TV UM VU WF WS"),
    ("SA", "AR BO BR CL CO EC FK GF GY PE PY SR UY VE"),
];

/// The continent code of an ISO country code (`DE` → `EU`), `""` when unknown.
pub fn continent(country: &str) -> &'static str {
    if country.len() != 2 {
        return "";
    }
    CONTINENTS.iter().find(|(_, list)| list.split_ascii_whitespace().any(|c| c == country)).map_or("", |(code, _)| code)
}

/// A small number per continent (1..=7, in the table's order), 0 when unknown: for
/// the numeric planner.
pub fn continent_id(country: &str) -> u8 {
    let c = continent(country);
    CONTINENTS.iter().position(|(code, _)| *code == c).map_or(0, |i| i as u8 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_country_is_on_one_continent() {
        let mut seen = std::collections::HashSet::new();
        for (_, list) in CONTINENTS {
            for c in list.split_ascii_whitespace() {
                assert!(seen.insert(c), "{c} listed twice");
                assert_eq!(c.len(), 2);
            }
        }
        assert!(seen.len() > 240, "{}", seen.len());
    }

    #[test]
    fn examples() {
        for (c, want) in [("CN", "AS"), ("HK", "AS"), ("DE", "EU"), ("US", "NA"), ("BR", "SA"), ("AU", "OC")] {
            assert_eq!(continent(c), want, "{c}");
        }
        assert_eq!(continent("ZZ"), "");
        assert_eq!(continent(""), "");
        assert_eq!(continent_id("DE"), continent_id("FR"));
        assert_ne!(continent_id("DE"), continent_id("US"));
        assert_eq!(continent_id("ZZ"), 0);
    }
}
