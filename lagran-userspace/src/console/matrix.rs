//! The answer matrix: who answers which province and carrier, for one
//! scheduled name, aggregated from a route table.
//!
//! Rows are the 31 mainland provinces, 香港, 澳门, 台湾, then 海外 (every other
//! country) and 未知 (nothing known); columns 电信, 联通, 移动 and 其他 (every
//! other carrier, and an unknown one). Names are the canonical short forms of
//! [`crate::location`].
//!
//! A cell is decided in two ways, both from compiled route tables:
//! - **by address**: the name's IPv4 answers laid over the partition table,
//!   each piece weighted by its IPv4 address count (a canary split weighted by
//!   its percentage). When more than one node serves the cell's addresses —
//!   cities, lines, overrides or canaries split it — the cell shows the node
//!   serving most of them and is `mixed`.
//! - **at province level**, when the geo data has no address in the cell: the
//!   answer a build gives the province-level location itself (country,
//!   province, carrier; no city), from a table compiled over
//!   [`province_level_partitions`].
//!
//! Pure: tables in, cells out.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use ipnet::{IpNet, Ipv4Net};
use serde::Serialize;

use crate::geo::GeoDb;
use crate::location::Location;
use crate::partition::{Override, PartitionTable};
use crate::route_table::{Answer, AnswerState, ScheduledName};

/// The mainland provinces, in the national standard's (GB/T 2260) order.
pub const MAINLAND: [&str; 31] = [
    "北京",
    "天津",
    "河北",
    "山西",
    "内蒙古",
    "辽宁",
    "吉林",
    "黑龙江",
    "上海",
    "江苏",
    "浙江",
    "安徽",
    "福建",
    "江西",
    "山东",
    "河南",
    "湖北",
    "湖南",
    "广东",
    "广西",
    "海南",
    "重庆",
    "四川",
    "贵州",
    "云南",
    "西藏",
    "陕西",
    "甘肃",
    "青海",
    "宁夏",
    "新疆",
];

/// Hong Kong, Macao and Taiwan: markets of their own (country HK / MO / TW).
pub const SEPARATE: [(&str, &str); 3] = [("香港", "HK"), ("澳门", "MO"), ("台湾", "TW")];

/// The row of every other country.
pub const OVERSEAS: &str = "海外";
/// The row of clients whose country is unknown (and unlocated mainland ones).
pub const UNKNOWN: &str = "未知";

/// The columns.
pub const CARRIERS: [&str; 4] = ["电信", "联通", "移动", "其他"];
/// The column of every other carrier.
pub const OTHER_CARRIER: usize = 3;

/// Every row's name, top to bottom.
pub fn rows() -> Vec<&'static str> {
    let mut r: Vec<&'static str> = MAINLAND.to_vec();
    r.extend(SEPARATE.iter().map(|(p, _)| *p));
    r.push(OVERSEAS);
    r.push(UNKNOWN);
    r
}

/// How many rows there are.
pub const ROW_COUNT: usize = MAINLAND.len() + SEPARATE.len() + 2;

/// The (row, column) of a client location.
pub fn cell_of(loc: &Location) -> (usize, usize) {
    let col = CARRIERS[..OTHER_CARRIER].iter().position(|c| *c == loc.isp).unwrap_or(OTHER_CARRIER);
    let row = if loc.country == "CN" {
        MAINLAND.iter().position(|p| *p == loc.province).unwrap_or(ROW_COUNT - 1)
    } else if let Some(i) = SEPARATE.iter().position(|(_, c)| *c == loc.country) {
        MAINLAND.len() + i
    } else if loc.country.is_empty() {
        ROW_COUNT - 1
    } else {
        ROW_COUNT - 2
    };
    (row, col)
}

/// The province-level location a cell stands for: country and province, the
/// column's carrier (none for 其他), no city. 海外 is a country no node is in.
pub fn cell_location(row: usize, col: usize) -> Location {
    let isp = if col == OTHER_CARRIER { "" } else { CARRIERS[col] };
    if row < MAINLAND.len() {
        Location::new("CN", MAINLAND[row], "", isp)
    } else if row < MAINLAND.len() + SEPARATE.len() {
        let (p, c) = SEPARATE[row - MAINLAND.len()];
        Location::new(c, p, "", isp)
    } else if row == ROW_COUNT - 2 {
        Location::new(OVERSEAS, "", "", isp)
    } else {
        Location::new("", "", "", isp)
    }
}

/// The probe prefix of a cell in [`province_level_partitions`]: a /24 of
/// 240.0.0.0/8 (reserved space, never a client), one per cell.
pub fn probe_prefix(row: usize, col: usize) -> Ipv4Net {
    Ipv4Net::new(Ipv4Addr::new(240, row as u8, col as u8, 0), 24).expect("a /24 is a valid prefix")
}

/// Partitions holding exactly one province-level location per cell, at its
/// [`probe_prefix`]: a build over them answers each cell at province level.
pub fn province_level_partitions() -> PartitionTable {
    let mut overrides = Vec::with_capacity(ROW_COUNT * CARRIERS.len());
    for row in 0..ROW_COUNT {
        for col in 0..CARRIERS.len() {
            overrides.push(Override { prefix: IpNet::V4(probe_prefix(row, col)), location: cell_location(row, col) });
        }
    }
    PartitionTable::build(&GeoDb::empty(), &overrides)
}

/// What the console shows of a cell (`data-state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CellState {
    Steady,
    Failover,
    Canary,
    Mixed,
    Empty,
}

impl CellState {
    fn of(state: AnswerState) -> CellState {
        match state {
            AnswerState::Steady | AnswerState::Resolver => CellState::Steady,
            AnswerState::Failover => CellState::Failover,
            AnswerState::Canary => CellState::Canary,
            AnswerState::Empty => CellState::Empty,
        }
    }
}

/// One node's share of a cell.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Share {
    /// `None`: no node answers these addresses.
    pub node: Option<String>,
    /// IPv4 addresses it answers in the cell.
    pub addresses: u64,
}

/// One (province, carrier) cell.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cell {
    /// Canonical short name (`广东`, `海外`, `未知`).
    pub province: &'static str,
    /// `电信`, `联通`, `移动` or `其他`.
    pub isp: &'static str,
    /// The node answering (most of) the cell; `None` when nothing answers.
    pub node: Option<String>,
    pub state: CellState,
    /// The route TTL of the shown node's answer.
    pub ttl: u32,
    /// The answer's reason.
    pub reason: String,
    /// IPv4 addresses the geo data puts in the cell (0: decided at province level).
    pub addresses: u64,
    /// Who answers the cell's addresses, most first (empty at province level).
    pub shares: Vec<Share>,
    /// An address of the cell answered by the shown node, for "explain" (none at province level).
    pub sample: Option<Ipv4Addr>,
}

/// Per answer, how many addresses of each cell it answers (canaries split).
#[derive(Default)]
struct Tally {
    /// (answer index) -> (addresses, first address)
    answers: HashMap<u32, (u64, u32)>,
}

/// The cells the geo data has addresses in, decided by address (`None` for
/// the others); the expensive half of [`matrix`], which depends only on the
/// table and the partitions.
#[derive(Clone, Debug)]
pub struct AddressCells(Vec<Option<Cell>>);

/// [`AddressCells`] of `name` over `partitions`.
pub fn address_cells(name: &ScheduledName, partitions: &PartitionTable) -> AddressCells {
    let tallies = tally(name, partitions);
    let row_names = rows();
    let mut out = Vec::with_capacity(tallies.len());
    for (row, province) in row_names.iter().enumerate() {
        for (col, isp) in CARRIERS.iter().enumerate() {
            let t = &tallies[row * CARRIERS.len() + col];
            out.push((!t.answers.is_empty()).then(|| by_address(province, isp, name, t)));
        }
    }
    AddressCells(out)
}

/// The matrix of `name` over `partitions`, cells without addresses taken from
/// `province_level` (the same name compiled over [`province_level_partitions`]).
/// Rows in [`rows`] order, columns in [`CARRIERS`] order.
pub fn matrix(
    name: &ScheduledName,
    partitions: &PartitionTable,
    province_level: Option<&ScheduledName>,
) -> Vec<Vec<Cell>> {
    matrix_with(&address_cells(name, partitions), province_level)
}

/// [`matrix`] from already computed [`AddressCells`].
pub fn matrix_with(address: &AddressCells, province_level: Option<&ScheduledName>) -> Vec<Vec<Cell>> {
    let row_names = rows();
    let mut out = Vec::with_capacity(ROW_COUNT);
    for (row, province) in row_names.iter().enumerate() {
        let mut cells = Vec::with_capacity(CARRIERS.len());
        for (col, isp) in CARRIERS.iter().enumerate() {
            let cell = match &address.0[row * CARRIERS.len() + col] {
                Some(c) => c.clone(),
                None => at_province_level(province, isp, province_level, row, col),
            };
            cells.push(cell);
        }
        out.push(cells);
    }
    out
}

/// Walks the name's IPv4 answers and the partitions together.
fn tally(name: &ScheduledName, partitions: &PartitionTable) -> Vec<Tally> {
    let mut tallies: Vec<Tally> = (0..ROW_COUNT * CARRIERS.len()).map(|_| Tally::default()).collect();
    let cell_of_partition: Vec<usize> = partitions
        .locations()
        .iter()
        .map(|l| {
            let (r, c) = cell_of(l);
            r * CARRIERS.len() + c
        })
        .collect();
    let answers = name.v4.ranges();
    let parts = partitions.v4_ranges();
    let (mut ai, mut pi) = (0, 0);
    while ai < answers.len() && pi < parts.len() {
        let (a_start, a_end, idx) = answers[ai];
        let (p_start, p_end, pid) = parts[pi];
        let start = a_start.max(p_start);
        let end = a_end.min(p_end);
        if start <= end {
            let count = u64::from(end - start) + 1;
            let t = &mut tallies[cell_of_partition[pid as usize]];
            let answer = name.answers.get(idx as usize);
            match answer.and_then(|a| a.canary) {
                Some(c) => {
                    let canary = count * u64::from(c.percent.min(100)) / 100;
                    add(t, c.answer, canary, start);
                    add(t, idx, count - canary, start);
                }
                None => add(t, idx, count, start),
            }
        }
        if a_end <= p_end {
            ai += 1;
        }
        if p_end <= a_end {
            pi += 1;
        }
    }
    tallies
}

fn add(t: &mut Tally, answer: u32, addresses: u64, first: u32) {
    if addresses == 0 {
        return;
    }
    let e = t.answers.entry(answer).or_insert((0, first));
    e.0 += addresses;
}

/// One node's part of a cell.
#[derive(Clone, Copy)]
struct NodeTally {
    addresses: u64,
    /// Its largest answer in the cell (which gives state and TTL), that
    /// answer's addresses and its first address.
    answer: u32,
    answer_addresses: u64,
    first: u32,
}

fn by_address(province: &'static str, isp: &'static str, name: &ScheduledName, t: &Tally) -> Cell {
    let mut nodes: HashMap<Option<&str>, NodeTally> = HashMap::new();
    for (&idx, &(count, first)) in &t.answers {
        let node = name.answers.get(idx as usize).and_then(|a| a.node.as_deref());
        let e = nodes.entry(node).or_insert(NodeTally { addresses: 0, answer: idx, answer_addresses: 0, first });
        e.addresses += count;
        if count > e.answer_addresses || (count == e.answer_addresses && idx < e.answer) {
            (e.answer, e.answer_addresses, e.first) = (idx, count, first);
        }
    }
    let mut shares: Vec<(Option<&str>, NodeTally)> = nodes.into_iter().collect();
    // Most addresses first; ties by name, a node before none.
    shares.sort_by(|a, b| {
        b.1.addresses.cmp(&a.1.addresses).then_with(|| b.0.is_some().cmp(&a.0.is_some())).then(a.0.cmp(&b.0))
    });
    let (node, top) = shares[0];
    let answer = &name.answers[top.answer as usize];
    let state = if shares.len() > 1 { CellState::Mixed } else { CellState::of(answer.state) };
    Cell {
        province,
        isp,
        node: node.map(str::to_string),
        state: if node.is_none() { CellState::Empty } else { state },
        ttl: answer.ttl,
        reason: answer.reason.clone(),
        addresses: shares.iter().map(|s| s.1.addresses).sum(),
        shares: shares.iter().map(|(n, v)| Share { node: n.map(str::to_string), addresses: v.addresses }).collect(),
        sample: Some(Ipv4Addr::from(top.first)),
    }
}

fn at_province_level(
    province: &'static str,
    isp: &'static str,
    province_level: Option<&ScheduledName>,
    row: usize,
    col: usize,
) -> Cell {
    let empty = Answer { reason: "no eligible node".into(), state: AnswerState::Empty, ..Answer::default() };
    let (answer, state) = match province_level {
        Some(n) => {
            let (a, _) = n.answer_for(probe_prefix(row, col).network().into());
            match a.canary.map(|c| (c, &n.answers[c.answer as usize])) {
                // A canary splits the cell: the larger side shows, and the cell is mixed.
                Some((c, canary)) if canary.node != a.node => {
                    let shown = if c.percent > 50 { canary } else { a };
                    (shown.clone(), CellState::Mixed)
                }
                _ => (a.clone(), CellState::of(a.state)),
            }
        }
        None => (empty, CellState::Empty),
    };
    let state = if answer.node.is_none() { CellState::Empty } else { state };
    Cell {
        province,
        isp,
        node: answer.node.clone(),
        state,
        ttl: answer.ttl,
        reason: answer.reason,
        addresses: 0,
        shares: Vec::new(),
        sample: None,
    }
}

/// A cell whose node differs between two matrices.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Move {
    pub province: &'static str,
    pub isp: &'static str,
    pub from: Option<String>,
    pub to: Option<String>,
    /// The state after the change.
    pub state: CellState,
}

/// The cells whose node differs from `before` to `after`, in row/column order.
pub fn moves(before: &[Vec<Cell>], after: &[Vec<Cell>]) -> Vec<Move> {
    let mut out = Vec::new();
    for (rb, ra) in before.iter().zip(after) {
        for (b, a) in rb.iter().zip(ra) {
            if b.node != a.node {
                out.push(Move {
                    province: a.province,
                    isp: a.isp,
                    from: b.node.clone(),
                    to: a.node.clone(),
                    state: a.state,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix_map::PrefixMapV4;
    use crate::route_table::Canary;

    fn v4(s: &str) -> u32 {
        u32::from(s.parse::<Ipv4Addr>().unwrap())
    }

    fn answer(node: Option<&str>, state: AnswerState, ttl: u32) -> Answer {
        Answer {
            ttl,
            ipv4: node.map(|_| vec![Ipv4Addr::new(192, 0, 2, 1)]).unwrap_or_default(),
            node: node.map(str::to_string),
            reason: format!("test {node:?}"),
            state,
            ..Answer::default()
        }
    }

    fn name(answers: Vec<Answer>, ranges: Vec<(u32, u32, u32)>) -> ScheduledName {
        ScheduledName {
            name: "edge.example".into(),
            id: 1,
            answers: std::sync::Arc::new(answers),
            v4: PrefixMapV4::from_ranges(ranges, 0),
            v6: crate::prefix_map::PrefixMapV6::uniform(0),
            ecs: true,
        }
    }

    /// Shenzhen and Guangzhou Telecom, Beijing Unicom, a Hong Kong block and the US.
    fn partitions() -> PartitionTable {
        let o = |p: &str, l: Location| Override { prefix: p.parse().unwrap(), location: l };
        PartitionTable::build(
            &GeoDb::empty(),
            &[
                o("58.60.0.0/16", Location::new("CN", "广东", "深圳", "电信")),
                o("58.61.0.0/16", Location::new("CN", "广东", "广州", "电信")),
                o("123.112.0.0/16", Location::new("CN", "北京", "北京", "联通")),
                o("1.64.0.0/16", Location::new("HK", "", "", "电讯盈科")),
                o("8.0.0.0/8", Location::new("US", "California", "", "Level3")),
                o("100.1.0.0/16", Location::new("CN", "", "", "移动")),
            ],
        )
    }

    fn cell<'a>(m: &'a [Vec<Cell>], province: &str, isp: &str) -> &'a Cell {
        m.iter().flatten().find(|c| c.province == province && c.isp == isp).unwrap()
    }

    #[test]
    fn rows_and_columns_use_the_canonical_names() {
        let r = rows();
        assert_eq!(r.len(), ROW_COUNT);
        assert_eq!(r.len(), 36);
        assert_eq!(&r[31..], &["香港", "澳门", "台湾", "海外", "未知"]);
        for p in MAINLAND {
            assert_eq!(crate::location::canonical_province(p), p, "{p} is canonical");
            assert_eq!(
                cell_of(&Location::new("中国", &format!("{p}省"), "", "中国电信")).0,
                r.iter().position(|x| *x == p).unwrap()
            );
        }
        assert_eq!(cell_of(&Location::new("CN", "广东省", "深圳", "China Telecom")), (18, 0));
        assert_eq!(cell_of(&Location::new("中国", "香港", "", "电讯盈科")), (31, 3));
        assert_eq!(cell_of(&Location::new("US", "", "", "移动")), (34, 2));
        assert_eq!(cell_of(&Location::default()), (35, 3));
        assert_eq!(
            cell_of(&Location::new("CN", "", "", "CMCC")),
            (35, 2),
            "a mainland client without province is unknown"
        );
        assert_eq!(cell_of(&cell_location(18, 1)), (18, 1));
        assert_eq!(cell_of(&cell_location(34, 0)), (34, 0));
    }

    #[test]
    fn a_cell_answered_by_one_node_shows_it_with_state_and_ttl() {
        let pt = partitions();
        // gz-01 everywhere, failover in the US.
        let n = name(
            vec![answer(Some("gz-01"), AnswerState::Steady, 60), answer(Some("hk-01"), AnswerState::Failover, 10)],
            vec![(0, v4("7.255.255.255"), 0), (v4("8.0.0.0"), v4("8.255.255.255"), 1), (v4("9.0.0.0"), u32::MAX, 0)],
        );
        let m = matrix(&n, &pt, None);
        let c = cell(&m, "广东", "电信");
        assert_eq!((c.node.as_deref(), c.state, c.ttl), (Some("gz-01"), CellState::Steady, 60));
        assert_eq!(c.addresses, 2 * 65536);
        assert_eq!(c.shares.len(), 1);
        let us = cell(&m, "海外", "其他");
        assert_eq!((us.node.as_deref(), us.state, us.ttl), (Some("hk-01"), CellState::Failover, 10));
        assert_eq!(us.sample, Some(Ipv4Addr::new(8, 0, 0, 0)));
        // No addresses, no province-level table: empty.
        let gx = cell(&m, "广西", "移动");
        assert_eq!((gx.node.as_deref(), gx.state), (None, CellState::Empty));
    }

    #[test]
    fn cities_lines_and_canaries_split_a_cell_into_mixed() {
        let pt = partitions();
        // Shenzhen (58.60/16) gz-01; Guangzhou (58.61/16) 3/4 hk-01, 1/4 gz-01 via a /18 line.
        let n = name(
            vec![
                answer(Some("gz-01"), AnswerState::Steady, 60),
                answer(Some("hk-01"), AnswerState::Steady, 60),
                answer(Some("kr-01"), AnswerState::Canary, 20),
            ],
            vec![
                (0, v4("58.60.255.255"), 0),
                (v4("58.61.0.0"), v4("58.61.191.255"), 1),
                (v4("58.61.192.0"), u32::MAX, 0),
            ],
        );
        let m = matrix(&n, &pt, None);
        let c = cell(&m, "广东", "电信");
        assert_eq!(c.state, CellState::Mixed);
        assert_eq!(c.node.as_deref(), Some("gz-01"), "gz-01 answers 5/8 of the addresses");
        assert_eq!(
            c.shares,
            vec![
                Share { node: Some("gz-01".into()), addresses: 65536 + 16384 },
                Share { node: Some("hk-01".into()), addresses: 49152 }
            ]
        );
        // A 10 % canary to kr-01 on Beijing Unicom: mixed, the base node shown.
        let mut answers = (*n.answers).clone();
        answers.push(Answer { canary: Some(Canary { percent: 10, answer: 2 }), ..answers[1].clone() });
        let n = name(
            answers,
            vec![
                (0, v4("123.111.255.255"), 0),
                (v4("123.112.0.0"), v4("123.112.255.255"), 3),
                (v4("123.113.0.0"), u32::MAX, 0),
            ],
        );
        let m = matrix(&n, &pt, None);
        let bj = cell(&m, "北京", "联通");
        assert_eq!((bj.node.as_deref(), bj.state), (Some("hk-01"), CellState::Mixed));
        assert_eq!(bj.shares[1], Share { node: Some("kr-01".into()), addresses: 6553 });
        // Every other cell is unsplit.
        assert_eq!(cell(&m, "广东", "电信").state, CellState::Steady);
    }

    #[test]
    fn cells_without_addresses_are_answered_at_province_level() {
        let pt = partitions();
        let n = name(vec![answer(Some("gz-01"), AnswerState::Steady, 60)], vec![(0, u32::MAX, 0)]);
        // The province-level table: 广西/移动 to hk-01 (failover), 西藏/电信 empty,
        // 云南/联通 with a 75 % canary to kr-01.
        let probe = |r: usize, c: usize| {
            let p = probe_prefix(r, c);
            (u32::from(p.network()), u32::from(p.broadcast()))
        };
        let row = |p: &str| rows().iter().position(|x| *x == p).unwrap();
        let (gx, xz, yn) = (probe(row("广西"), 2), probe(row("西藏"), 0), probe(row("云南"), 1));
        let mut ranges = vec![(gx.0, gx.1, 1), (xz.0, xz.1, 2), (yn.0, yn.1, 4)];
        ranges.sort();
        let mut all = Vec::new();
        let mut next = 0u32;
        for (s, e, v) in ranges {
            if s > next {
                all.push((next, s - 1, 0));
            }
            all.push((s, e, v));
            next = e + 1;
        }
        all.push((next, u32::MAX, 0));
        let canary = Answer {
            canary: Some(Canary { percent: 75, answer: 3 }),
            ..answer(Some("gz-01"), AnswerState::Steady, 20)
        };
        let province = name(
            vec![
                answer(Some("gz-01"), AnswerState::Steady, 60),
                answer(Some("hk-01"), AnswerState::Failover, 10),
                answer(None, AnswerState::Empty, 60),
                answer(Some("kr-01"), AnswerState::Canary, 20),
                canary,
            ],
            all,
        );
        let m = matrix(&n, &pt, Some(&province));
        let c = cell(&m, "广西", "移动");
        assert_eq!((c.node.as_deref(), c.state, c.ttl, c.addresses), (Some("hk-01"), CellState::Failover, 10, 0));
        assert_eq!(c.sample, None);
        let c = cell(&m, "西藏", "电信");
        assert_eq!((c.node.as_deref(), c.state), (None, CellState::Empty));
        let c = cell(&m, "云南", "联通");
        assert_eq!((c.node.as_deref(), c.state), (Some("kr-01"), CellState::Mixed), "the 75 % canary side shows");
        // Cells with addresses still come from the real table.
        assert_eq!(cell(&m, "广东", "电信").node.as_deref(), Some("gz-01"));
    }

    #[test]
    fn province_level_partitions_hold_one_location_per_cell() {
        let pt = province_level_partitions();
        for row in 0..ROW_COUNT {
            for col in 0..CARRIERS.len() {
                let hit = pt.lookup(probe_prefix(row, col).network().into());
                assert_eq!(hit.location, &cell_location(row, col));
                assert_eq!(cell_of(hit.location), (row, col));
            }
        }
    }

    #[test]
    fn moves_list_the_cells_whose_node_changes() {
        let pt = partitions();
        let before = name(vec![answer(Some("gz-01"), AnswerState::Steady, 60)], vec![(0, u32::MAX, 0)]);
        let after = name(
            vec![answer(Some("gz-01"), AnswerState::Steady, 60), answer(Some("hk-01"), AnswerState::Failover, 10)],
            vec![
                (0, v4("58.59.255.255"), 0),
                (v4("58.60.0.0"), v4("58.61.255.255"), 1),
                (v4("58.62.0.0"), u32::MAX, 0),
            ],
        );
        let m = moves(&matrix(&before, &pt, None), &matrix(&after, &pt, None));
        assert_eq!(
            m,
            vec![Move {
                province: "广东",
                isp: "电信",
                from: Some("gz-01".into()),
                to: Some("hk-01".into()),
                state: CellState::Failover
            }]
        );
    }
}
