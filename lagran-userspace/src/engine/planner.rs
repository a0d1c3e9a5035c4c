//! The numeric planner: [`rank`](super::rank)'s results for every client
//! partition at once, computed on integers.
//!
//! [`rank`](super::rank) stays the explain path and the test oracle; this module
//! answers the same question for thousands of partitions without building a
//! string per (partition × node):
//!
//! - location fields are interned to integer ids shared by partitions, nodes and
//!   rules; a partition field that no node or rule can match becomes [`OTHER`],
//!   so partitions collapse into a few **effective location classes** — the
//!   partitions no score term and no rule filter can tell apart;
//! - nodes are held as struct-of-arrays with the part of the score formula that
//!   does not depend on the client (`clamp(weight) − cpu − memory − over-cap`)
//!   computed once, exactly as [`score`](super::score) does (same floors, same
//!   clamp); the tie-break by name becomes an integer rank;
//! - per (eligibility set, class) only the top `k` are kept, after
//!   ISP-must-match and overload spill, with what hysteresis, pins and the
//!   failover check need on the side ([`Plan::candidate_score`],
//!   [`Top::max_dead`]).
//!
//! Reasons and score terms are not built here: a caller renders them with
//! [`score`](super::score) for the few nodes that end up in an answer.
//! Pure: data in, numbers out.

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::{Family, NodeView, Policy, exclusion};
use crate::location::Location;
use crate::model::{DEFAULT_POOL, NodeStatus};

/// Field id of `""` (unknown: never matches a node).
pub const EMPTY: u32 = 0;
/// Field id of a value that no node and no rule mentions (collapsed).
pub const OTHER: u32 = 1;

/// A region filter (a rule's country / province / city / ISP) as field ids;
/// `None` = no filter on that field.
pub type RegionFilter = [Option<u32>; 4];

/// Interned values of the four location fields.
#[derive(Clone, Debug, Default)]
struct Fields {
    ids: [FxHashMap<String, u32>; 4],
}

impl Fields {
    fn intern(&mut self, field: usize, value: &str) -> u32 {
        if value.is_empty() {
            return EMPTY;
        }
        let map = &mut self.ids[field];
        if let Some(&id) = map.get(value) {
            return id;
        }
        let id = map.len() as u32 + 2;
        map.insert(value.to_string(), id);
        id
    }

    fn get(&self, field: usize, value: &str) -> u32 {
        if value.is_empty() {
            return EMPTY;
        }
        self.ids[field].get(value).copied().unwrap_or(OTHER)
    }
}

fn fields_of(l: &Location) -> [&str; 4] {
    [&l.country, &l.province, &l.city, &l.isp]
}

/// The effective class of a partition: field ids plus, with the distance
/// policy, the client coordinates (as bits) and continent.
type ClassKey = ([u32; 4], Option<(u64, u64)>, u8);

/// The nodes, as arrays indexed by node (the order of the `views` given).
#[derive(Clone, Debug, Default)]
struct NodeTable {
    /// `clamp(weight) − cpu − memory − over-cap`: the client-independent score.
    base: Vec<i64>,
    fields: Vec<[u32; 4]>,
    coords: Vec<Option<(f64, f64)>>,
    /// [`continent_id`](crate::location::continents::continent_id) of the country.
    continent: Vec<u8>,
    /// Position in name order (ties break by name).
    name_rank: Vec<u32>,
    /// The spill stage's "overloaded".
    overloaded: Vec<bool>,
}

/// One build's numeric view of nodes, partitions and rule filters.
#[derive(Clone, Debug)]
pub struct Plan {
    fields: Fields,
    nodes: NodeTable,
    policy: Policy,
    class_of: Vec<u32>,
    keys: Vec<ClassKey>,
    coords: Vec<Option<(f64, f64)>>,
    /// A partition standing for each class (its first).
    rep: Vec<u32>,
}

/// Most nodes a [`Top`] holds: `k` is at most `answers_per_query` (4) plus one.
pub const TOP_MAX: usize = 5;

/// The top of one class's ranking for one eligibility set, best first, after
/// ISP-must-match and spill.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Top {
    /// (node index, score), at most `k`; inline, so that the incremental
    /// build's scan of every class's top reads one array, not one allocation
    /// per class.
    pub nodes: SmallVec<[(u32, i64); TOP_MAX]>,
    /// ISP-must-match dropped the nodes of other ISPs.
    pub isp_filtered: bool,
    /// The first node was overloaded and gave way to `nodes[0]`.
    pub spilled_from: Option<u32>,
    /// The best score a dead node (probe down, heartbeat timeout) would have
    /// had, alive, without the distance term (the failover check); IPv4 only.
    pub max_dead: Option<i64>,
}

/// Which nodes can answer: (pool, family).
#[derive(Clone, Debug)]
pub struct Eligible {
    family: Family,
    /// Best client-independent score first (then name): [`Plan::top`] stops
    /// where no later member can reach its list any more.
    members: Vec<u32>,
    /// The members per province, city and ISP field id: the only ones a
    /// class can give more than the country's bonus.
    by_field: [FxHashMap<u32, Vec<u32>>; 3],
    /// Dead nodes that would be eligible for IPv4 in the pool if alive.
    dead: Vec<u32>,
    member: Vec<bool>,
}

impl Eligible {
    /// Whether `node` can answer.
    pub fn contains(&self, node: u32) -> bool {
        self.member.get(node as usize).copied().unwrap_or(false)
    }

    /// Whether `node` counts for the failover check (dead, else eligible).
    pub fn has_dead(&self, node: u32) -> bool {
        self.dead.contains(&node)
    }
}

impl Plan {
    /// Interns the nodes, the rule filters (already canonical locations, with
    /// which fields they filter on) and the partitions' locations into classes.
    pub fn new<'a>(
        views: &[NodeView],
        partitions: &[Location],
        filters: impl IntoIterator<Item = (&'a Location, [bool; 4])>,
        policy: &Policy,
    ) -> Plan {
        let mut fields = Fields::default();
        let mut nodes = NodeTable::default();
        for v in views {
            let f = fields_of(&v.location);
            nodes.fields.push(std::array::from_fn(|i| fields.intern(i, f[i])));
            nodes.base.push(base_score(v, policy));
            nodes.coords.push(v.coords);
            nodes.continent.push(crate::location::continents::continent_id(&v.location.country));
            nodes.overloaded.push(policy.spill.as_ref().is_some_and(|s| v.overloaded(s)));
        }
        let mut order: Vec<u32> = (0..views.len() as u32).collect();
        order.sort_by(|&a, &b| views[a as usize].node.name.cmp(&views[b as usize].node.name).then(a.cmp(&b)));
        nodes.name_rank = vec![0; views.len()];
        for (r, &i) in order.iter().enumerate() {
            nodes.name_rank[i as usize] = r as u32;
        }
        for (loc, on) in filters {
            let f = fields_of(loc);
            for i in 0..4 {
                if on[i] {
                    fields.intern(i, f[i]);
                }
            }
        }
        let mut plan = Plan {
            fields,
            nodes,
            policy: policy.clone(),
            class_of: Vec::with_capacity(partitions.len()),
            keys: Vec::new(),
            coords: Vec::new(),
            rep: Vec::new(),
        };
        let mut index: FxHashMap<ClassKey, u32> = FxHashMap::default();
        for (pid, loc) in partitions.iter().enumerate() {
            let f = fields_of(loc);
            let ids: [u32; 4] = std::array::from_fn(|i| plan.fields.get(i, f[i]));
            let coords = if policy.distance.is_some() { crate::location::coords::coordinates(loc) } else { None };
            let continent =
                if policy.same_continent() != 0 { crate::location::continents::continent_id(&loc.country) } else { 0 };
            let key = (ids, coords.map(|(a, b)| (a.to_bits(), b.to_bits())), continent);
            let class = *index.entry(key).or_insert_with(|| {
                plan.keys.push(key);
                plan.coords.push(coords);
                plan.rep.push(pid as u32);
                plan.keys.len() as u32 - 1
            });
            plan.class_of.push(class);
        }
        plan
    }

    /// The class of every partition, by partition id.
    pub fn class_of(&self) -> &[u32] {
        &self.class_of
    }

    pub fn class_count(&self) -> usize {
        self.keys.len()
    }

    /// The partition standing for `class` (any of its partitions scores alike).
    pub fn representative(&self, class: u32) -> u32 {
        self.rep[class as usize]
    }

    /// The client coordinates of `class` (only with the distance policy).
    pub fn class_coords(&self, class: u32) -> Option<(f64, f64)> {
        self.coords[class as usize]
    }

    /// A region filter's field ids.
    pub fn filter(&self, loc: &Location, on: [bool; 4]) -> RegionFilter {
        let f = fields_of(loc);
        std::array::from_fn(|i| on[i].then(|| self.fields.get(i, f[i])))
    }

    /// Whether a region filter matches every partition of `class`.
    pub fn filter_matches(&self, filter: &RegionFilter, class: u32) -> bool {
        let have = &self.keys[class as usize].0;
        filter.iter().zip(have).all(|(want, have)| want.is_none_or(|w| w == *have))
    }

    /// The nodes that can answer `family` in `pool`, as [`exclusion`] decides.
    pub fn eligible(&self, views: &[NodeView], family: Family, pool: &str) -> Eligible {
        let mut members = Vec::new();
        let mut dead = Vec::new();
        let mut member = vec![false; views.len()];
        for (i, v) in views.iter().enumerate() {
            if exclusion(v, family, pool).is_none() {
                members.push(i as u32);
                member[i] = true;
            } else if v.dead.is_some()
                && v.node.status == NodeStatus::Online
                && v.node.public_ip.is_some()
                && (pool == DEFAULT_POOL || v.node.pool == pool)
            {
                dead.push(i as u32);
            }
        }
        let (base, rank) = (&self.nodes.base, &self.nodes.name_rank);
        members.sort_unstable_by_key(|&n| (std::cmp::Reverse(base[n as usize]), rank[n as usize]));
        let mut by_field: [FxHashMap<u32, Vec<u32>>; 3] = Default::default();
        for &n in &members {
            for (f, map) in by_field.iter_mut().enumerate() {
                let id = self.nodes.fields[n as usize][f + 1];
                if id >= 2 {
                    map.entry(id).or_default().push(n);
                }
            }
        }
        Eligible { family, members, by_field, dead, member }
    }

    /// The client-dependent part of a node's score for a class.
    #[inline]
    fn bonus(&self, node: usize, class: usize) -> i64 {
        let n = &self.nodes.fields[node];
        let c = &self.keys[class].0;
        let p = &self.policy;
        let same = |i: usize| n[i] >= 2 && n[i] == c[i];
        let mut s = 0;
        if same(0) {
            s += p.same_country;
        }
        if same(1) {
            s += p.same_province;
        }
        if same(2) {
            s += p.same_city;
        }
        if same(3) {
            s += p.same_isp;
        }
        let continent = self.keys[class].2;
        if continent != 0 && !same(0) && self.nodes.continent[node] == continent {
            s += p.same_continent();
        }
        s
    }

    #[inline]
    fn distance_penalty(&self, node: usize, class: usize) -> i64 {
        let (Some(d), Some(a), Some(b)) = (&self.policy.distance, self.nodes.coords[node], self.coords[class]) else {
            return 0;
        };
        let km = crate::location::coords::haversine_km(a, b);
        let p = ((km / 1000.0) * d.per_1000km).floor().min(d.max_penalty as f64) as i64;
        p.max(0)
    }

    /// [`score`](super::score)'s number for one node and class.
    #[inline]
    pub fn score(&self, node: usize, class: u32) -> i64 {
        let class = class as usize;
        self.nodes.base[node] + self.bonus(node, class) - self.distance_penalty(node, class)
    }

    /// Whether `a` (with score `sa`) ranks before `b`: higher score, then name.
    #[inline]
    fn before(&self, a: (u32, i64), b: (u32, i64)) -> bool {
        a.1 > b.1 || (a.1 == b.1 && self.nodes.name_rank[a.0 as usize] < self.nodes.name_rank[b.0 as usize])
    }

    fn push_top(&self, top: &mut Vec<(u32, i64)>, cap: usize, c: (u32, i64)) {
        if top.len() == cap && !self.before(c, top[cap - 1]) {
            return;
        }
        let at = top.iter().position(|&t| self.before(c, t)).unwrap_or(top.len());
        if top.len() == cap {
            top.pop();
        }
        top.insert(at, c);
    }

    /// The top `k` of `class`'s ranking among `set`, as [`rank`](super::rank)
    /// orders it (score, name, ISP-must-match, spill).
    pub fn top(&self, set: &Eligible, class: u32, k: usize) -> Top {
        let k = k.max(1);
        let client_isp = self.keys[class as usize].0[3];
        let want_isp = client_isp != EMPTY && (self.policy.isp_must_match || self.policy.spill.is_some());
        let cap = k + 1;
        let mut all: Vec<(u32, i64)> = Vec::with_capacity(cap);
        let key = &self.keys[class as usize].0;
        let nf = &self.nodes.fields;
        // Whether node `n` shares the class's province, city or ISP (fields 1..=3).
        let shares = |n: u32, upto: usize| (1..upto).any(|f| key[f] >= 2 && nf[n as usize][f] == key[f]);
        // The nodes sharing a province, city or ISP with the class, each once.
        for (f, &id) in key.iter().enumerate().skip(1) {
            if id < 2 {
                continue;
            }
            for &n in set.by_field[f - 1].get(&id).map_or(&[][..], Vec::as_slice) {
                if !shares(n, f) {
                    self.push_top(&mut all, cap, (n, self.score(n as usize, class)));
                }
            }
        }
        // The rest can gain the country's bonus at most: best base first, until
        // none can lift one above the last of a full list.
        let rest_bonus = self.policy.same_country.max(self.policy.same_continent()).max(0);
        for &n in &set.members {
            if shares(n, 4) {
                continue;
            }
            if all.len() == cap && self.nodes.base[n as usize] + rest_bonus < all[cap - 1].1 {
                break;
            }
            self.push_top(&mut all, cap, (n, self.score(n as usize, class)));
        }
        let mut same = Vec::new();
        let mut same_n = 0usize;
        let mut target: Vec<(u32, i64)> = Vec::new();
        if want_isp && let Some(group) = set.by_field[2].get(&client_isp) {
            same_n = group.len();
            for &n in group {
                let c = (n, self.score(n as usize, class));
                if self.policy.isp_must_match {
                    self.push_top(&mut same, cap, c);
                }
                if !self.nodes.overloaded[n as usize] {
                    self.push_top(&mut target, 1, c);
                }
            }
        }
        let isp_filtered = self.policy.isp_must_match && same_n > 0;
        let mut list = if isp_filtered { same } else { all };
        let mut spilled_from = None;
        if self.policy.spill.is_some()
            && client_isp != EMPTY
            && let Some(&first) = list.first()
            && self.nodes.overloaded[first.0 as usize]
            && let Some(&t) = target.first()
        {
            list.retain(|&c| c.0 != t.0);
            list.insert(0, t);
            spilled_from = Some(first.0);
        }
        list.truncate(k);
        let max_dead = self.max_dead(set, class);
        Top { nodes: SmallVec::from_slice(&list), isp_filtered, spilled_from, max_dead }
    }

    /// [`Top::max_dead`] of `class` among `set`.
    pub fn max_dead(&self, set: &Eligible, class: u32) -> Option<i64> {
        if set.family != Family::V4 {
            return None;
        }
        set.dead.iter().map(|&n| self.nodes.base[n as usize] + self.bonus(n as usize, class as usize)).max()
    }

    /// Takes a node's new load, weight, status or liveness (`view`; its name,
    /// pool, location and coordinates unchanged): what [`Plan::new`] would
    /// have computed for it.
    pub fn update_node(&mut self, node: usize, view: &NodeView) {
        self.nodes.base[node] = base_score(view, &self.policy);
        self.nodes.overloaded[node] = self.policy.spill.as_ref().is_some_and(|s| view.overloaded(s));
    }

    /// Whether `class`'s top among `new` (`k` long) may differ from `old_top`
    /// (its top among `old`) when only `node` changed between the two
    /// (score, overload, eligibility; [`Plan::update_node`] already applied).
    /// False only when [`Plan::top`] would give `old_top`'s nodes again:
    /// `node` was not in it, does not enter it, and plays no part in the
    /// ISP-must-match and spill stages of the class. Dead nodes are not
    /// looked at ([`Plan::max_dead`] answers for them).
    pub fn top_may_change(
        &self,
        old: &Eligible,
        new: &Eligible,
        old_top: &Top,
        class: u32,
        k: usize,
        node: u32,
    ) -> bool {
        let k = k.max(1);
        if old_top.nodes.iter().any(|&(n, _)| n == node) || old_top.spilled_from == Some(node) {
            return true;
        }
        let (was, is) = (old.contains(node), new.contains(node));
        if !was && !is {
            return false;
        }
        let client_isp = self.keys[class as usize].0[3];
        let want_isp = client_isp != EMPTY && (self.policy.isp_must_match || self.policy.spill.is_some());
        if want_isp && self.nodes.fields[node as usize][3] == client_isp {
            return true;
        }
        if !is {
            return false; // it left without having been in the top
        }
        let c = (node, self.score(node as usize, class));
        match old_top.nodes.last() {
            Some(&last) if old_top.nodes.len() >= k => self.before(c, last),
            _ => true,
        }
    }

    /// The score `node` has in `class`'s full ranking among `set`, if it is
    /// in it at all (eligible, and not dropped by ISP-must-match).
    pub fn candidate_score(&self, set: &Eligible, top: &Top, node: usize, class: u32) -> Option<i64> {
        if !set.member.get(node).copied().unwrap_or(false) {
            return None;
        }
        if top.isp_filtered && self.nodes.fields[node][3] != self.keys[class as usize].0[3] {
            return None;
        }
        Some(self.score(node, class))
    }
}

/// The client-independent terms of [`score`](super::score), with its floors and clamp.
fn base_score(view: &NodeView, policy: &Policy) -> i64 {
    let n = &view.node;
    let mut s = n.weight.clamp(0, 1000);
    if view.drained() {
        s -= super::DRAINED_PENALTY;
    }
    let cpu = (n.cpu_usage.max(0.0) * policy.cpu_factor).floor() as i64;
    let mem = (n.memory_usage.max(0.0) * policy.memory_factor).floor() as i64;
    s -= cpu.max(0) + mem.max(0);
    s - super::over_cap_penalty(view, policy)
}
