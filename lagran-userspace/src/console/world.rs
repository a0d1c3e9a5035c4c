//! The world matrix: who answers each continent, then each country with nodes
//! or clients, for one scheduled name — beside the province × carrier matrix,
//! from the same compiled route table.
//!
//! A country is listed when the fleet has a node in it or the geo data puts at
//! least [`LISTED_SHARE`] of the located IPv4 addresses in it; the others count
//! toward their continent's row only. Each row shows the node answering most of
//! its addresses, its share, and how many nodes answer there at all.
//!
//! Pure: tables in, rows out.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::location::continents::continent;
use crate::model::Node;
use crate::partition::PartitionTable;
use crate::route_table::ScheduledName;

/// The share of located IPv4 addresses that lists a country without nodes.
pub const LISTED_SHARE: f64 = 0.005;

/// Continent names, in the order the rows show them.
const CONTINENTS: [(&str, &str); 7] = [
    ("AS", "Asia"),
    ("EU", "Europe"),
    ("NA", "North America"),
    ("SA", "South America"),
    ("OC", "Oceania"),
    ("AF", "Africa"),
    ("AN", "Antarctica"),
];

/// One row: a continent (`country` empty) or a country of it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorldRow {
    /// The continent code (`EU`).
    pub continent: &'static str,
    /// The continent's name (`Europe`).
    pub continent_name: &'static str,
    /// The ISO country code; empty on a continent's row.
    pub country: String,
    /// The node answering most of the row's addresses; `None` when nothing answers.
    pub node: Option<String>,
    /// The share of the row's addresses that node answers (0..=1).
    pub share: f64,
    /// How many different nodes answer the row's addresses.
    pub nodes_answering: usize,
    /// IPv4 addresses the geo data places in the row.
    pub addresses: u64,
    /// The fleet's nodes located in the row's country (or continent).
    pub nodes_here: usize,
}

/// Addresses per answering node (`None`: no node).
type Tally = HashMap<Option<String>, u64>;

/// The rows of `name` over `partitions`: per continent with addresses or nodes,
/// its row, then its listed countries by addresses (most first).
pub fn world_rows(name: &ScheduledName, partitions: &PartitionTable, nodes: &[Node]) -> Vec<WorldRow> {
    let countries = tally(name, partitions);
    let mut nodes_in: HashMap<String, usize> = HashMap::new();
    for n in nodes {
        let loc = crate::location::Location::new(&n.country, &n.province, &n.city, &n.isp);
        *nodes_in.entry(loc.country).or_default() += 1;
    }
    let total: u64 = countries.values().flat_map(|t| t.values()).sum();
    let mut out = Vec::new();
    for (code, cname) in CONTINENTS {
        let members: Vec<(&String, &Tally)> = countries.iter().filter(|(c, _)| continent(c) == code).collect();
        let here: usize = nodes_in.iter().filter(|(c, _)| continent(c) == code).map(|(_, n)| n).sum();
        if members.is_empty() && here == 0 {
            continue;
        }
        let mut sum = Tally::new();
        for (_, t) in &members {
            for (n, a) in *t {
                *sum.entry(n.clone()).or_default() += a;
            }
        }
        out.push(row(code, cname, String::new(), &sum, here));
        let mut listed: Vec<WorldRow> = members
            .iter()
            .filter(|(c, t)| {
                let addresses: u64 = t.values().sum();
                nodes_in.contains_key(*c) || addresses as f64 >= LISTED_SHARE * total as f64
            })
            .map(|(c, t)| row(code, cname, (*c).clone(), t, nodes_in.get(*c).copied().unwrap_or(0)))
            .collect();
        // Countries with nodes but no located addresses come last.
        for (c, n) in nodes_in.iter().filter(|(c, _)| continent(c) == code && !countries.contains_key(*c)) {
            listed.push(row(code, cname, c.clone(), &Tally::new(), *n));
        }
        listed.sort_by(|a, b| b.addresses.cmp(&a.addresses).then_with(|| a.country.cmp(&b.country)));
        out.extend(listed);
    }
    out
}

fn row(code: &'static str, cname: &'static str, country: String, t: &Tally, nodes_here: usize) -> WorldRow {
    let addresses: u64 = t.values().sum();
    let answering = t.iter().filter(|(n, _)| n.is_some()).count();
    // Most addresses first; ties by name, a node before none.
    let top = t.iter().max_by(|a, b| a.1.cmp(b.1).then_with(|| a.0.is_some().cmp(&b.0.is_some())).then(b.0.cmp(a.0)));
    let (node, share) = match top {
        Some((n, a)) if addresses > 0 => (n.clone(), *a as f64 / addresses as f64),
        _ => (None, 0.0),
    };
    WorldRow {
        continent: code,
        continent_name: cname,
        country,
        node,
        share,
        nodes_answering: answering,
        addresses,
        nodes_here,
    }
}

/// Walks the name's IPv4 answers and the partitions together: addresses per
/// country per answering node (a canary's share counted to the canary's node).
fn tally(name: &ScheduledName, partitions: &PartitionTable) -> BTreeMap<String, Tally> {
    let mut out: BTreeMap<String, Tally> = BTreeMap::new();
    let locations = partitions.locations();
    let answers = name.v4.ranges();
    let parts = partitions.v4_ranges();
    let (mut ai, mut pi) = (0, 0);
    while ai < answers.len() && pi < parts.len() {
        let (a_start, a_end, idx) = answers[ai];
        let (p_start, p_end, pid) = parts[pi];
        let (start, end) = (a_start.max(p_start), a_end.min(p_end));
        let country = &locations[pid as usize].country;
        if start <= end && !country.is_empty() {
            let count = u64::from(end - start) + 1;
            let t = out.entry(country.clone()).or_default();
            let answer = name.answers.get(idx as usize);
            let canary = answer.and_then(|a| a.canary).map_or(0, |c| {
                let part = count * u64::from(c.percent.min(100)) / 100;
                *t.entry(name.answers.get(c.answer as usize).and_then(|a| a.node.clone())).or_default() += part;
                part
            });
            *t.entry(answer.and_then(|a| a.node.clone())).or_default() += count - canary;
        }
        if a_end <= p_end {
            ai += 1;
        }
        if p_end <= a_end {
            pi += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::node;
    use crate::geo::{GeoDb, IpVersion, Xdb, write_xdb};
    use crate::model::Zone;
    use crate::scheduler::settings::ScheduleSettings;
    use crate::scheduler::{BuildState, Change, Inputs, build_route_table};

    fn ip(s: &str) -> u128 {
        u128::from(u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()))
    }

    /// A country-level region in the merged data's format.
    fn world(country: &str) -> String {
        format!("{country}||||{country}||country=mmdb")
    }

    #[test]
    fn continents_then_countries_with_nodes_or_clients() {
        // The US a /8, Shenzhen Telecom a /16, Germany a /9, France a /10,
        // Luxembourg a /24 (below the listing share).
        let ranges = vec![
            (ip("20.0.0.0"), ip("20.255.255.255"), world("US")),
            (ip("58.60.0.0"), ip("58.60.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
            (ip("80.0.0.0"), ip("80.127.255.255"), world("DE")),
            (ip("80.128.0.0"), ip("80.191.255.255"), world("FR")),
            (ip("80.192.0.0"), ip("80.192.0.255"), world("LU")),
        ];
        let db = GeoDb::from_xdbs(Some(Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap()), None);
        let parts = PartitionTable::build(&db, &[]);
        let nodes = vec![
            node("fra-01", "DE", "", "Frankfurt", "BGP", 100, 10.0, 10.0, [198, 51, 100, 1]),
            node("iad-01", "US", "", "Ashburn", "BGP", 100, 10.0, 10.0, [198, 51, 100, 2]),
            node("gz-01", "CN", "广东", "广州", "电信", 100, 10.0, 10.0, [198, 51, 100, 3]),
            node("syd-01", "AU", "", "Sydney", "BGP", 100, 10.0, 10.0, [198, 51, 100, 4]),
        ];
        let inputs = Inputs { nodes: nodes.clone(), zones: vec![Zone::new("w.test")], ..Default::default() };
        let settings = ScheduleSettings::default();
        let t = build_route_table(
            1,
            &inputs,
            &parts,
            &settings,
            &settings.policy(),
            &mut BuildState::default(),
            &Change::Everything,
        );
        let rows = world_rows(t.scheduled("w.test").unwrap(), &parts, &nodes);
        let shown: Vec<(&str, &str, Option<&str>)> =
            rows.iter().map(|r| (r.continent, r.country.as_str(), r.node.as_deref())).collect();
        assert_eq!(
            shown,
            [
                ("AS", "", Some("gz-01")),
                ("AS", "CN", Some("gz-01")),
                ("EU", "", Some("fra-01")),
                ("EU", "DE", Some("fra-01")),
                ("EU", "FR", Some("fra-01")),
                ("NA", "", Some("iad-01")),
                ("NA", "US", Some("iad-01")),
                ("OC", "", None),
                ("OC", "AU", None),
            ],
            "{rows:#?}"
        );
        let eu = &rows[2];
        assert_eq!(eu.addresses, (1 << 23) + (1 << 22) + 256, "Luxembourg counts toward Europe's row");
        assert_eq!((eu.nodes_here, eu.nodes_answering, eu.share), (1, 1, 1.0));
        assert_eq!((rows[7].addresses, rows[7].nodes_here), (0, 1), "Oceania: a node, no located clients");
    }
}
