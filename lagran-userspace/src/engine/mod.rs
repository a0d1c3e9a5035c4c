//! The decision engine: a pure function from (nodes, client location, policy)
//! to a ranked list of candidates, each carrying its score and the reason for it.
//!
//! The default score is the reference design's formula, exactly (for a Shenzhen
//! China Telecom client its worked example comes out gz-01 = 233, hk-01 = 115,
//! kr-01 = 93):
//!
//! ```text
//! score = clamp(weight, 0, 1000) + 5·same_country + 80·same_province + 20·same_city
//!         + 40·same_isp − floor(cpu_usage·0.3) − floor(memory_usage·0.2)
//! ```
//!
//! Eligible nodes: `status = online` and a non-empty public address of the
//! family asked for, in the name's pool (the `default` pool holds every node).
//! Ties break by node name.
//!
//! A node with weight 0 (or below) is **drained**: still eligible, but its score
//! carries [`DRAINED_PENALTY`], so it is chosen only when no other node is
//! eligible (and it is never an overload-spill target).

pub mod planner;

use std::net::{Ipv4Addr, Ipv6Addr};

use serde::Serialize;

use crate::health::{Dead, Liveness};
use crate::location::Location;
use crate::model::{DEFAULT_POOL, Node, NodeStatus};

/// The address family an answer is for (`A` or `AAAA`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

/// The score term of a drained node (weight ≤ 0): larger than any spread the
/// other terms can make (weight ≤ 1000, bonuses ≤ 148, load and cap penalties ≥
/// −1000, the default distance cap −4000), so a drained node ranks after every
/// node that is not.
pub const DRAINED_PENALTY: i64 = 1_000_000;

/// Bonuses and penalty factors of the score: +5 same country, +80 same province,
/// +20 same city, +40 same ISP, − floor(cpu_usage · 0.3), − floor(memory_usage · 0.2)
/// by default.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub same_country: i64,
    pub same_province: i64,
    pub same_city: i64,
    pub same_isp: i64,
    pub cpu_factor: f64,
    pub memory_factor: f64,
    /// A total load penalty at or above this is called "overloaded" in reasons.
    pub overloaded_penalty: i64,
    /// Bandwidth / connection caps as penalties, never a veto: a fully overloaded
    /// pool still answers.
    pub caps: Option<CapPolicy>,
    /// Distance penalty from node and client coordinates (haversine).
    pub distance: Option<DistancePolicy>,
    /// Only nodes of the client's ISP, when at least one is eligible: across carriers
    /// a node a street away is often slower than a same-carrier one hundreds of km off.
    pub isp_must_match: bool,
    /// Overload spill: new traffic for a node over its load threshold goes to the next
    /// best same-ISP node (a little latency rather than a collapsed node).
    pub spill: Option<SpillPolicy>,
}

/// Penalties for nodes near or over their bandwidth / connection caps.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CapPolicy {
    /// Penalty at (or over) the cap.
    pub penalty: i64,
    /// Usage ratio from which the penalty ramps up linearly to `penalty` at 1.0.
    pub soft_ratio: f64,
}

impl Default for CapPolicy {
    fn default() -> Self {
        CapPolicy { penalty: 300, soft_ratio: 0.8 }
    }
}

/// A penalty growing with the great-circle distance between node and client, and
/// a bonus for a node on the client's continent (in another country): the level
/// between country and world, for clients the distance cannot place.
///
/// The defaults make distance outweigh load and the location bonuses beyond a few
/// hundred km (−200 per 1000 km: the province bonus is worth 400 km, the city
/// bonus 100 km, a 10 % load spread well under 100 km), capped only beyond half
/// the Earth's circumference (−4000 at 20 000 km), so a farther node always costs
/// more, on any continent.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DistancePolicy {
    /// Penalty per 1000 km.
    pub per_1000km: f64,
    /// Upper bound of the penalty.
    pub max_penalty: i64,
    /// Bonus for a node on the client's continent but not in its country.
    pub same_continent: i64,
}

/// [`DistancePolicy::per_1000km`]'s default.
pub const DEFAULT_PER_1000KM: f64 = 200.0;
/// [`DistancePolicy::max_penalty`]'s default.
pub const DEFAULT_MAX_DISTANCE_PENALTY: i64 = 4000;
/// [`DistancePolicy::same_continent`]'s default.
pub const DEFAULT_SAME_CONTINENT: i64 = 3;

impl Default for DistancePolicy {
    fn default() -> Self {
        DistancePolicy {
            per_1000km: DEFAULT_PER_1000KM,
            max_penalty: DEFAULT_MAX_DISTANCE_PENALTY,
            same_continent: DEFAULT_SAME_CONTINENT,
        }
    }
}

impl Policy {
    /// The same-continent bonus in force (0 without the distance policy).
    pub fn same_continent(&self) -> i64 {
        self.distance.as_ref().map_or(0, |d| d.same_continent)
    }
}

/// Whether the client and node are in different countries on one continent.
pub fn same_continent_only(node: &Location, client: &Location) -> bool {
    let c = node.continent();
    !c.is_empty() && c == client.continent() && (node.country.is_empty() || node.country != client.country)
}

/// When the best node is overloaded, answer the next best node of the client's ISP.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpillPolicy {
    /// CPU percent from which a node counts as overloaded.
    pub cpu_percent: f64,
    /// Cap usage ratio from which a node counts as overloaded.
    pub cap_ratio: f64,
}

impl Default for SpillPolicy {
    fn default() -> Self {
        SpillPolicy { cpu_percent: 90.0, cap_ratio: 1.0 }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            same_country: 5,
            same_province: 80,
            same_city: 20,
            same_isp: 40,
            cpu_factor: 0.3,
            memory_factor: 0.2,
            overloaded_penalty: 30,
            caps: None,
            distance: None,
            isp_must_match: false,
            spill: None,
        }
    }
}

/// A node prepared for scoring: its location canonicalised once per recompute.
#[derive(Clone, Debug)]
pub struct NodeView {
    pub node: Node,
    pub location: Location,
    /// The node's own coordinates, else those of its city/province/country.
    pub coords: Option<(f64, f64)>,
    /// Why the node is not alive (probe down, heartbeat timeout), if it is not.
    pub dead: Option<Dead>,
}

impl NodeView {
    pub fn new(node: Node) -> Self {
        let location = Location::new(&node.country, &node.province, &node.city, &node.isp);
        let coords = match (node.lat, node.lon) {
            (Some(lat), Some(lon)) => Some((lat, lon)),
            _ => crate::location::coords::coordinates(&location),
        };
        NodeView { node, location, coords, dead: None }
    }

    /// Prepares nodes with the liveness verdicts at `now_ms`.
    pub fn prepare_live(nodes: impl IntoIterator<Item = Node>, liveness: &Liveness, now_ms: i64) -> Vec<NodeView> {
        nodes
            .into_iter()
            .map(|n| {
                let dead = liveness.verdict(&n, now_ms);
                NodeView { dead, ..NodeView::new(n) }
            })
            .collect()
    }

    /// Usage of the tighter of the bandwidth and connection caps (0 when uncapped).
    pub fn cap_ratio(&self) -> f64 {
        let n = &self.node;
        let bw = if n.max_bandwidth_mbps > 0.0 { n.bandwidth_mbps / n.max_bandwidth_mbps } else { 0.0 };
        let conns = if n.max_conns > 0 { n.conns as f64 / n.max_conns as f64 } else { 0.0 };
        bw.max(conns)
    }

    /// Whether the spill stage counts the node as overloaded.
    /// A drained node counts as overloaded, so it is never a spill target.
    pub fn overloaded(&self, spill: &SpillPolicy) -> bool {
        self.drained() || self.node.cpu_usage >= spill.cpu_percent || self.cap_ratio() >= spill.cap_ratio
    }

    /// Weight 0 (or below): chosen only when nothing else is eligible.
    pub fn drained(&self) -> bool {
        self.node.weight <= 0
    }

    pub fn prepare(nodes: impl IntoIterator<Item = Node>) -> Vec<NodeView> {
        nodes.into_iter().map(NodeView::new).collect()
    }
}

/// Why a node took no part in a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Exclusion {
    NotOnline,
    NoPublicIp,
    NoPublicIpv6,
    OtherPool,
    ProbeDown,
    HeartbeatTimeout,
    IspMismatch,
}

impl Exclusion {
    pub fn as_str(self) -> &'static str {
        match self {
            Exclusion::NotOnline => "not online",
            Exclusion::NoPublicIp => "no public_ip",
            Exclusion::NoPublicIpv6 => "no public_ipv6",
            Exclusion::OtherPool => "not in the pool",
            Exclusion::ProbeDown => "health probe failing",
            Exclusion::HeartbeatTimeout => "heartbeat timed out",
            Exclusion::IspMismatch => "other ISP (isp_must_match)",
        }
    }
}

/// One scored, eligible node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Candidate {
    pub name: String,
    pub public_ip: Option<Ipv4Addr>,
    pub public_ipv6: Option<Ipv6Addr>,
    /// Not in the JSON: the node JSON of `GET /api/v1/schedule` (this struct
    /// as it serializes) names the province, city and ISP only.
    #[serde(skip_serializing)]
    pub country: String,
    pub province: String,
    pub city: String,
    pub isp: String,
    pub weight: i64,
    pub score: i64,
    /// Human-readable: "same-province same-city same-isp", "overloaded -30", …
    pub reason: String,
    /// Every term of the score, in order, e.g. `[("weight", 100), ("same-province", 80), ("cpu", -6)]`.
    pub terms: Vec<(String, i64)>,
}

/// The ranked decision for one client partition.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Ranking {
    /// Best first.
    pub candidates: Vec<Candidate>,
    /// Nodes that were not eligible, and why.
    pub excluded: Vec<(String, Exclusion)>,
}

impl Ranking {
    pub fn primary(&self) -> Option<&Candidate> {
        self.candidates.first()
    }

    pub fn backup(&self) -> Option<&Candidate> {
        self.candidates.get(1)
    }
}

/// The over-cap term (positive, subtracted): 0 up to `caps.soft_ratio` of the
/// node's cap, then ramping linearly to `caps.penalty` at the cap.
pub fn over_cap_penalty(view: &NodeView, policy: &Policy) -> i64 {
    let Some(caps) = &policy.caps else { return 0 };
    let ratio = view.cap_ratio();
    if ratio <= caps.soft_ratio {
        return 0;
    }
    let ramp = ((ratio - caps.soft_ratio) / (1.0 - caps.soft_ratio).max(1e-9)).min(1.0);
    ((caps.penalty as f64 * ramp).round() as i64).max(0)
}

/// Scores one node for a client (eligibility is [`exclusion`]'s business).
pub fn score(view: &NodeView, client: &Location, client_coords: Option<(f64, f64)>, policy: &Policy) -> Candidate {
    let n = &view.node;
    let loc = &view.location;
    let mut terms: Vec<(String, i64)> = Vec::with_capacity(7);
    let weight = n.weight.clamp(0, 1000);
    terms.push(("weight".into(), weight));
    if view.drained() {
        terms.push(("drained".into(), -DRAINED_PENALTY));
    }
    let same = |a: &str, b: &str| !a.is_empty() && a == b;
    let same_country = same(&loc.country, &client.country);
    let same_province = same(&loc.province, &client.province);
    let same_city = same(&loc.city, &client.city);
    let same_isp = same(&loc.isp, &client.isp);
    if same_country {
        terms.push(("same-country".into(), policy.same_country));
    }
    if same_province {
        terms.push(("same-province".into(), policy.same_province));
    }
    if same_city {
        terms.push(("same-city".into(), policy.same_city));
    }
    if same_isp {
        terms.push(("same-isp".into(), policy.same_isp));
    }
    if policy.same_continent() != 0 && same_continent_only(loc, client) {
        terms.push(("same-continent".into(), policy.same_continent()));
    }
    // floor() of a non-negative product; usage is validated to 0..=100 on the way in.
    let cpu = (n.cpu_usage.max(0.0) * policy.cpu_factor).floor() as i64;
    let mem = (n.memory_usage.max(0.0) * policy.memory_factor).floor() as i64;
    if cpu > 0 {
        terms.push(("cpu".into(), -cpu));
    }
    if mem > 0 {
        terms.push(("memory".into(), -mem));
    }
    let p = over_cap_penalty(view, policy);
    if p > 0 {
        terms.push(("over-cap".into(), -p));
    }
    if let (Some(d), Some(a), Some(b)) = (&policy.distance, view.coords, client_coords) {
        let km = crate::location::coords::haversine_km(a, b);
        let p = ((km / 1000.0) * d.per_1000km).floor().min(d.max_penalty as f64) as i64;
        if p > 0 {
            terms.push((format!("distance {km:.0}km"), -p));
        }
    }
    let score = terms.iter().map(|(_, v)| v).sum();
    Candidate {
        name: n.name.clone(),
        public_ip: n.public_ip,
        public_ipv6: n.public_ipv6,
        country: n.country.clone(),
        province: n.province.clone(),
        city: n.city.clone(),
        isp: n.isp.clone(),
        weight: n.weight,
        score,
        reason: reason(view, client, policy),
        terms,
    }
}

/// The reason [`score`] gives `view` for `client`: drained first, then the
/// location terms that matched (province, city, ISP; else country), overload
/// and over-cap, or "weight and load" when none did. One string, built in place.
pub fn reason(view: &NodeView, client: &Location, policy: &Policy) -> String {
    use std::fmt::Write as _;
    let (n, loc) = (&view.node, &view.location);
    let same = |a: &str, b: &str| !a.is_empty() && a == b;
    let mut r = String::new();
    let add = |r: &mut String, part: std::fmt::Arguments| {
        if !r.is_empty() {
            r.push(' ');
        }
        let _ = r.write_fmt(part);
    };
    if view.drained() {
        add(&mut r, format_args!("drained (weight 0)"));
    }
    for (hit, term) in [
        (same(&loc.province, &client.province), "same-province"),
        (same(&loc.city, &client.city), "same-city"),
        (same(&loc.isp, &client.isp), "same-isp"),
    ] {
        if hit {
            add(&mut r, format_args!("{term}"));
        }
    }
    if !(same(&loc.province, &client.province) || same(&loc.city, &client.city) || same(&loc.isp, &client.isp))
        && same(&loc.country, &client.country)
    {
        add(&mut r, format_args!("same-country"));
    }
    if policy.same_continent() != 0
        && same_continent_only(loc, client)
        && !(same(&loc.province, &client.province) || same(&loc.city, &client.city) || same(&loc.isp, &client.isp))
    {
        add(&mut r, format_args!("same-continent"));
    }
    let cpu = (n.cpu_usage.max(0.0) * policy.cpu_factor).floor() as i64;
    let mem = (n.memory_usage.max(0.0) * policy.memory_factor).floor() as i64;
    if cpu + mem >= policy.overloaded_penalty {
        add(&mut r, format_args!("overloaded -{}", cpu + mem));
    }
    let p = over_cap_penalty(view, policy);
    if p > 0 {
        add(&mut r, format_args!("over-cap -{p}"));
    }
    if r.is_empty() {
        r.push_str("weight and load");
    }
    r
}

/// A [`Candidate`] with the score the numeric planner computed and
/// [`score`]'s reason, without the score terms and location copies that only
/// explain shows: what a route table keeps of a ranked node.
pub fn brief(view: &NodeView, client: &Location, score: i64, policy: &Policy) -> Candidate {
    let n = &view.node;
    Candidate {
        name: n.name.clone(),
        public_ip: n.public_ip,
        public_ipv6: n.public_ipv6,
        country: String::new(),
        province: String::new(),
        city: String::new(),
        isp: String::new(),
        weight: n.weight,
        score,
        reason: reason(view, client, policy),
        terms: Vec::new(),
    }
}

/// Why `view` cannot answer for `family` in `pool`, if it cannot.
pub fn exclusion(view: &NodeView, family: Family, pool: &str) -> Option<Exclusion> {
    let n = &view.node;
    if n.status != NodeStatus::Online {
        return Some(Exclusion::NotOnline);
    }
    match view.dead {
        Some(Dead::ProbeDown) => return Some(Exclusion::ProbeDown),
        Some(Dead::HeartbeatTimeout) => return Some(Exclusion::HeartbeatTimeout),
        None => {}
    }
    match family {
        Family::V4 if n.public_ip.is_none() => return Some(Exclusion::NoPublicIp),
        Family::V6 if n.public_ipv6.is_none() => return Some(Exclusion::NoPublicIpv6),
        _ => {}
    }
    if pool != DEFAULT_POOL && n.pool != pool {
        return Some(Exclusion::OtherPool);
    }
    None
}

/// Ranks every eligible node for a client in `pool`, best first, ties by name.
pub fn rank(nodes: &[NodeView], client: &Location, family: Family, pool: &str, policy: &Policy) -> Ranking {
    let client_coords = if policy.distance.is_some() { crate::location::coords::coordinates(client) } else { None };
    let mut ranking = Ranking::default();
    for view in nodes {
        match exclusion(view, family, pool) {
            Some(why) => ranking.excluded.push((view.node.name.clone(), why)),
            None => ranking.candidates.push(score(view, client, client_coords, policy)),
        }
    }
    ranking.candidates.sort_by(|a, b| b.score.cmp(&a.score).then_with(|| a.name.cmp(&b.name)));
    if policy.isp_must_match {
        isp_must_match(&mut ranking, client);
    }
    if let Some(spill) = &policy.spill {
        spill_overload(&mut ranking, nodes, client, spill);
    }
    ranking
}

/// ISP-must-match: when some candidate has the client's ISP, the others go.
fn isp_must_match(ranking: &mut Ranking, client: &Location) {
    if client.isp.is_empty() {
        return;
    }
    let same = |c: &Candidate| Location::new("", "", "", &c.isp).isp == client.isp;
    if !ranking.candidates.iter().any(same) {
        return;
    }
    let (keep, drop): (Vec<_>, Vec<_>) = ranking.candidates.drain(..).partition(|c| same(c));
    ranking.candidates = keep;
    ranking.excluded.extend(drop.into_iter().map(|c| (c.name, Exclusion::IspMismatch)));
}

/// Overload spill: an overloaded best node gives way to the next best node of
/// the client's ISP that is not overloaded.
fn spill_overload(ranking: &mut Ranking, nodes: &[NodeView], client: &Location, spill: &SpillPolicy) {
    let view = |name: &str| nodes.iter().find(|v| v.node.name == name);
    let Some(first) = ranking.candidates.first() else { return };
    if client.isp.is_empty() || !view(&first.name).is_some_and(|v| v.overloaded(spill)) {
        return;
    }
    let from = first.name.clone();
    let target = ranking
        .candidates
        .iter()
        .skip(1)
        .position(|c| view(&c.name).is_some_and(|v| v.location.isp == client.isp && !v.overloaded(spill)));
    if let Some(i) = target {
        let mut c = ranking.candidates.remove(i + 1);
        c.reason = format!("{} (spill from overloaded {from})", c.reason);
        ranking.candidates.insert(0, c);
    }
}

/// Hysteresis against flapping: keep `previous` first unless the new best beats its
/// score by more than `margin` of its size (0.15 = 15 %: keep the current result
/// while the top two differ by no more than 15 %) and by more than `points` (an
/// absolute threshold: switch only when the new result is markedly better). A
/// relative margin alone is a point or two where scores are small, which load
/// jitter crosses. The margin is of the score's magnitude, so it holds the same
/// where distance penalties make scores negative. Returns whether it held.
pub fn apply_hysteresis(ranking: &mut Ranking, previous: Option<&str>, margin: f64, points: i64) -> bool {
    let Some(prev) = previous else { return false };
    let Some(best) = ranking.candidates.first() else { return false };
    if best.name == prev {
        return false;
    }
    let (best_name, best_score) = (best.name.clone(), best.score);
    let Some(i) = ranking.candidates.iter().position(|c| c.name == prev) else { return false };
    let prev_score = ranking.candidates[i].score;
    let gain = best_score - prev_score;
    if gain as f64 > margin * prev_score.abs().max(1) as f64 && gain > points {
        return false;
    }
    let mut c = ranking.candidates.remove(i);
    c.reason = format!("{} (hysteresis: kept over {best_name} {best_score} vs {})", c.reason, c.score);
    ranking.candidates.insert(0, c);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scored(name: &str, score: i64) -> Candidate {
        Candidate {
            name: name.into(),
            public_ip: None,
            public_ipv6: None,
            country: String::new(),
            province: String::new(),
            city: String::new(),
            isp: String::new(),
            weight: 100,
            score,
            reason: String::new(),
            terms: Vec::new(),
        }
    }

    #[test]
    fn hysteresis_lets_a_much_nearer_node_win_where_distance_makes_scores_negative() {
        // A client 875 km from São Paulo and 9 171 km from Frankfurt, which answered it first.
        let mut r = Ranking { candidates: vec![scored("gru-01", -69), scored("fra-01", -1734)], excluded: Vec::new() };
        assert!(!apply_hysteresis(&mut r, Some("fra-01"), 0.15, 10), "a gain of 1 665 points moves the answer");
        assert_eq!(r.candidates[0].name, "gru-01");
        // Within 15 % of the held node's magnitude: kept.
        let mut r = Ranking { candidates: vec![scored("b", -900), scored("a", -1000)], excluded: Vec::new() };
        assert!(apply_hysteresis(&mut r, Some("a"), 0.15, 10));
        assert_eq!(r.candidates[0].name, "a");
    }

    /// The reference design's three example nodes: gz-01 (广东/深圳/电信, weight 100,
    /// CPU 20 %, memory 30 %), hk-01 (香港 BGP, 120, 10 %, 10 %), kr-01 (韩国 BGP, 100, 10 %, 20 %).
    pub(crate) fn seed_nodes() -> Vec<Node> {
        let mk = |name: &str, country: &str, province: &str, city: &str, isp: &str, w, cpu, mem, ip: &str| {
            let mut n = Node::new(name);
            n.country = country.into();
            n.province = province.into();
            n.city = city.into();
            n.isp = isp.into();
            n.weight = w;
            n.cpu_usage = cpu;
            n.memory_usage = mem;
            n.public_ip = Some(ip.parse().unwrap());
            n
        };
        vec![
            mk("gz-01", "CN", "广东", "深圳", "电信", 100, 20.0, 30.0, "203.0.113.21"),
            mk("hk-01", "HK", "香港", "", "BGP", 120, 10.0, 10.0, "203.0.113.22"),
            mk("kr-01", "KR", "韩国", "", "BGP", 100, 10.0, 20.0, "203.0.113.23"),
        ]
    }

    fn shenzhen_telecom() -> Location {
        Location::from_region("中国|0|广东省|深圳市|电信")
    }

    #[test]
    fn seed_000_worked_example_shenzhen_telecom() {
        let nodes = NodeView::prepare(seed_nodes());
        let r = rank(&nodes, &shenzhen_telecom(), Family::V4, DEFAULT_POOL, &Policy::default());
        let scores: Vec<(&str, i64)> = r.candidates.iter().map(|c| (c.name.as_str(), c.score)).collect();
        assert_eq!(
            scores,
            vec![("gz-01", 233), ("hk-01", 115), ("kr-01", 93)],
            "the reference design's worked example"
        );
        assert_eq!(r.primary().unwrap().reason, "same-province same-city same-isp");
        assert_eq!(r.backup().unwrap().name, "hk-01");
    }

    #[test]
    fn same_continent_is_the_fallback_between_country_and_world() {
        // A German client without coordinates: the French node shares its
        // continent, the Brazilian one nothing; the distance term cannot tell.
        let mut fr = crate::demo::node("par-01", "FR", "", "Paris", "BGP", 100, 0.0, 0.0, [203, 0, 113, 1]);
        let mut br = crate::demo::node("gru-01", "BR", "", "São Paulo", "BGP", 100, 0.0, 0.0, [203, 0, 113, 2]);
        fr.lat = None;
        br.lat = None;
        let nodes = NodeView::prepare([br, fr]);
        let client = Location::new("DE", "", "", "");
        let policy = Policy {
            distance: Some(DistancePolicy { per_1000km: 0.0, ..DistancePolicy::default() }),
            ..Policy::default()
        };
        let r = rank(&nodes, &client, Family::V4, DEFAULT_POOL, &policy);
        let first = r.primary().unwrap();
        assert_eq!((first.name.as_str(), first.score), ("par-01", 100 + DEFAULT_SAME_CONTINENT));
        assert_eq!(first.reason, "same-continent");
        assert!(first.terms.contains(&("same-continent".to_string(), DEFAULT_SAME_CONTINENT)), "{:?}", first.terms);
        // Without the distance policy the reference formula stands alone.
        let r = rank(&nodes, &client, Family::V4, DEFAULT_POOL, &Policy::default());
        assert_eq!((r.primary().unwrap().name.as_str(), r.primary().unwrap().score), ("gru-01", 100));
        // Same country is not also same continent.
        assert!(!same_continent_only(&Location::new("DE", "", "", ""), &client));
    }

    #[test]
    fn unknown_client_ranks_by_weight_and_load() {
        // No geo match: the score is weight - cpu penalty - memory penalty.
        let nodes = NodeView::prepare(seed_nodes());
        let r = rank(&nodes, &Location::default(), Family::V4, DEFAULT_POOL, &Policy::default());
        let scores: Vec<(&str, i64)> = r.candidates.iter().map(|c| (c.name.as_str(), c.score)).collect();
        assert_eq!(scores, vec![("hk-01", 115), ("kr-01", 93), ("gz-01", 88)]);
        assert_eq!(r.primary().unwrap().reason, "weight and load");
    }

    #[test]
    fn offline_and_addressless_nodes_are_excluded() {
        // A node without a public address, or offline, is never returned.
        let mut nodes = seed_nodes();
        nodes[0].status = NodeStatus::Offline;
        nodes[1].public_ip = None;
        let r = rank(&NodeView::prepare(nodes), &shenzhen_telecom(), Family::V4, DEFAULT_POOL, &Policy::default());
        assert_eq!(r.candidates.len(), 1);
        assert_eq!(r.primary().unwrap().name, "kr-01");
        assert!(r.excluded.contains(&("gz-01".into(), Exclusion::NotOnline)));
        assert!(r.excluded.contains(&("hk-01".into(), Exclusion::NoPublicIp)));
    }

    #[test]
    fn no_eligible_node_gives_an_empty_ranking() {
        // No online node: no primary, no backup.
        let mut nodes = seed_nodes();
        for n in &mut nodes {
            n.status = NodeStatus::Disabled;
        }
        let r = rank(&NodeView::prepare(nodes), &shenzhen_telecom(), Family::V4, DEFAULT_POOL, &Policy::default());
        assert!(r.primary().is_none());
        assert_eq!(r.excluded.len(), 3);
    }

    #[test]
    fn aaaa_needs_public_ipv6() {
        let mut nodes = seed_nodes();
        nodes[2].public_ipv6 = Some("2001:db8::23".parse().unwrap());
        let r = rank(&NodeView::prepare(nodes), &shenzhen_telecom(), Family::V6, DEFAULT_POOL, &Policy::default());
        assert_eq!(r.candidates.len(), 1);
        assert_eq!(r.primary().unwrap().name, "kr-01");
    }

    #[test]
    fn ties_break_by_name() {
        let mut a = Node::new("b-node");
        a.public_ip = Some(Ipv4Addr::new(192, 0, 2, 1));
        let mut b = Node::new("a-node");
        b.public_ip = Some(Ipv4Addr::new(192, 0, 2, 2));
        let r = rank(&NodeView::prepare([a, b]), &Location::default(), Family::V4, DEFAULT_POOL, &Policy::default());
        assert_eq!(r.primary().unwrap().name, "a-node");
    }

    #[test]
    fn weight_is_clamped() {
        let mut a = Node::new("heavy");
        a.weight = 50_000;
        a.public_ip = Some(Ipv4Addr::new(192, 0, 2, 1));
        let mut b = Node::new("negative");
        b.weight = -5;
        b.public_ip = Some(Ipv4Addr::new(192, 0, 2, 2));
        let r = rank(&NodeView::prepare([a, b]), &Location::default(), Family::V4, DEFAULT_POOL, &Policy::default());
        assert_eq!(r.candidates[0].score, 1000);
        assert_eq!(r.candidates[1].score, -DRAINED_PENALTY, "a negative weight drains the node");
    }

    #[test]
    fn a_drained_node_answers_only_when_nothing_else_is_eligible() {
        // gz-01 is the Shenzhen Telecom client's best node by far (same province,
        // city and ISP); with weight 0 it gives way even to a loaded node abroad.
        let mut nodes = seed_nodes();
        nodes[0].weight = 0;
        nodes[2].cpu_usage = 95.0;
        let client = Location::new("CN", "广东", "深圳", "电信");
        let views = NodeView::prepare(nodes.clone());
        let r = rank(&views, &client, Family::V4, DEFAULT_POOL, &Policy::default());
        assert_eq!(r.primary().unwrap().name, "hk-01");
        let last = r.candidates.last().unwrap();
        assert_eq!(last.name, "gz-01", "the drained node is still eligible, last");
        assert!(last.reason.contains("drained"), "{}", last.reason);
        // Spill never moves a client onto a drained node.
        let spill = Policy { spill: Some(SpillPolicy::default()), ..Policy::default() };
        let r = rank(&views, &client, Family::V4, DEFAULT_POOL, &spill);
        assert_ne!(r.primary().unwrap().name, "gz-01");
        // With every other node offline, the drained node answers.
        for n in nodes.iter_mut().skip(1) {
            n.status = NodeStatus::Offline;
        }
        let r = rank(&NodeView::prepare(nodes), &client, Family::V4, DEFAULT_POOL, &Policy::default());
        assert_eq!(r.primary().unwrap().name, "gz-01");
    }

    #[test]
    fn pools_filter_nodes_and_default_holds_all() {
        let mut nodes = seed_nodes();
        nodes[1].pool = "pool-a".into();
        let views = NodeView::prepare(nodes);
        let r = rank(&views, &Location::default(), Family::V4, "pool-a", &Policy::default());
        assert_eq!(r.candidates.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), vec!["hk-01"]);
        let r = rank(&views, &Location::default(), Family::V4, DEFAULT_POOL, &Policy::default());
        assert_eq!(r.candidates.len(), 3);
    }

    #[test]
    fn heavy_load_says_overloaded() {
        let mut n = Node::new("busy");
        n.public_ip = Some(Ipv4Addr::new(192, 0, 2, 1));
        n.cpu_usage = 100.0;
        n.memory_usage = 0.0;
        let r = rank(&NodeView::prepare([n]), &Location::default(), Family::V4, DEFAULT_POOL, &Policy::default());
        assert_eq!(r.primary().unwrap().reason, "overloaded -30");
        assert_eq!(r.primary().unwrap().score, 70);
    }
}
