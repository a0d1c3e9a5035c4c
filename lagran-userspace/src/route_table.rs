//! Immutable, versioned route tables: what every NS host answers.
//!
//! The scheduler produces a new [`RouteTable`] on every recompute; the DNS
//! responder, `lagran explain` and the XDP map writer only read it. Each
//! scheduled name carries, per address family of the *client*, a [`PrefixMap`]
//! from client prefix to an index into its answers: the answer for a client
//! is one binary search away, and the matched prefix length is the ECS scope.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::Zone;
use crate::prefix_map::{PrefixMapV4, PrefixMapV6};
use crate::zone_signatures::ZoneSignatures;

/// Why an answer has the TTL it has: steady, failover and canary answers each
/// carry their own TTL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerState {
    /// The best node for the partition is up and chosen.
    #[default]
    Steady,
    /// The partition's preferred node is down and another one answers.
    Failover,
    /// A canary rule chose this answer.
    Canary,
    /// No node is eligible: the answer is empty (fallback or SERVFAIL).
    Empty,
    /// A public block the geo files say nothing about (a client whose
    /// location cannot be found falls back to its resolver's): an ECS address
    /// here is answered for the resolver's address, with the block's width as
    /// SCOPE. The addresses are the unknown partition's, answered when the
    /// resolver cannot be located either. Never in the kernel's maps.
    Resolver,
}

/// The scheduled answer for one (name, partition).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Answer {
    /// The route TTL decided by the scheduler (before DNS_TTL and the 5 s floor).
    pub ttl: u32,
    /// `A` records, primary first then backups; empty when no node is eligible.
    pub ipv4: Vec<Ipv4Addr>,
    /// `AAAA` records, primary first then backups.
    pub ipv6: Vec<Ipv6Addr>,
    /// The primary node's name for the `A` answer, for logs and explanations.
    pub node: Option<String>,
    /// Human-readable reason for the choice.
    pub reason: String,
    pub state: AnswerState,
    /// A canary split: clients whose subnet bucket is below `percent` get the
    /// answer at index `answer` instead (same name's `answers`).
    pub canary: Option<Canary>,
    /// For a name in CNAME mode: the primary node's hostname, answered as
    /// `CNAME <hostname>` instead of the addresses (a name in CNAME mode). `None` for
    /// names in address mode and for nodes without a hostname (answered with
    /// the addresses, as in address mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

/// A share of the client subnets sent to another answer (a canary rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Canary {
    /// 1–100: buckets `0..percent` of [`lagran_common::canary`] take the canary.
    pub percent: u8,
    /// Index of the canary answer in the same name's `answers`.
    pub answer: u32,
}

/// A name answered with scheduled addresses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduledName {
    /// Lowercase, no trailing dot.
    pub name: String,
    /// Stable small integer naming this name in the data plane maps.
    pub id: u32,
    /// The distinct answers; the prefix maps index into this.
    pub answers: Arc<Vec<Answer>>,
    /// IPv4 client prefix -> index into `answers`.
    pub v4: PrefixMapV4,
    /// IPv6 client prefix -> index into `answers`.
    pub v6: PrefixMapV6,
    /// Whether an ECS address decides the answer (ECS only for the names
    /// the operator chose); `false`: the resolver's address decides and ECS
    /// is echoed with SCOPE 0.
    #[serde(default = "ecs_on")]
    pub ecs: bool,
}

fn ecs_on() -> bool {
    true
}

impl ScheduledName {
    /// The answer for a client address and the ECS scope it is valid for.
    ///
    /// A canary split answers per client subnet (/24 or /48), so its scope is
    /// never wider than that subnet.
    pub fn answer_for(&self, client: IpAddr) -> (&Answer, u8) {
        use lagran_common::canary::{SPLIT_PREFIX_V4, SPLIT_PREFIX_V6, bucket_v4, bucket_v6};
        let v4 = match client {
            IpAddr::V4(a) => Some(u32::from(a)),
            IpAddr::V6(a) => a.to_ipv4_mapped().map(u32::from),
        };
        let mapped = matches!(client, IpAddr::V6(_));
        let (idx, len, bucket, split) = match v4 {
            Some(a) => {
                let (i, l) = self.v4.lookup(a);
                (i, l, bucket_v4(a), SPLIT_PREFIX_V4)
            }
            None => {
                let a = match client {
                    IpAddr::V6(a) => u128::from(a),
                    IpAddr::V4(_) => unreachable!("v4 handled above"),
                };
                let (i, l) = self.v6.lookup(a);
                (i, l, bucket_v6((a >> 64) as u64), SPLIT_PREFIX_V6)
            }
        };
        let mut answer = &self.answers[idx as usize];
        let mut len = len;
        if let Some(c) = answer.canary {
            len = len.max(split);
            if bucket < c.percent as u32 {
                answer = &self.answers[c.answer as usize];
            }
        }
        if mapped && v4.is_some() {
            len += 96;
        }
        (answer, len)
    }
}

/// What DNS serves one client for a scheduled name ([`ScheduledName::served`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served<'t> {
    /// The answer sent: addresses, or `CNAME <hostname>` when it has one.
    pub answer: &'t Answer,
    /// The prefix length matched for the deciding address: the ECS SCOPE when
    /// an ECS address decided (the unlocated block's width under the fallback).
    pub scope: u8,
    /// The resolver fallback applied: the ECS address lies in a public block the geo
    /// files cannot locate ([`AnswerState::Resolver`]) and `answer` is the
    /// one for the resolver's address.
    pub by_resolver: bool,
}

impl ScheduledName {
    /// The one decision of what DNS answers a client for this name; the DNS
    /// responder, the HTTP 302 entry point, `lagran explain` and
    /// `/api/v1/schedule` all ask it. `resolver` is the packet's source (for
    /// HTTP, the client itself); `ecs` the address of the query's ECS option
    /// when its SOURCE PREFIX-LENGTH is above 0. `None` when the table is
    /// inconsistent (see [`Self::checked_answer_for`]).
    ///
    /// The ECS address decides when the name uses ECS, else the
    /// resolver's. The requirement ("查不到…就回退到LDNS省份解析的结果": a
    /// location that cannot be found falls back to the resolver's): an ECS
    /// address in a public block the geo files say nothing about is answered
    /// for the resolver's address, with the block's width as SCOPE. Every
    /// address of that block gets the same answer from this resolver, so the
    /// scope the resolver caches under stays true. A resolver that cannot be
    /// located either gets the block's own (unknown) answer. Private and
    /// reserved ECS addresses are never flagged: they stay in the unknown
    /// partition.
    pub fn served(&self, resolver: IpAddr, ecs: Option<IpAddr>) -> Option<Served<'_>> {
        let ecs = ecs.filter(|_| self.ecs);
        let addr = ecs.unwrap_or(resolver);
        let (answer, scope) = self.checked_answer_for(addr)?;
        let own = Served { answer, scope, by_resolver: false };
        if answer.state != AnswerState::Resolver || ecs.is_none() || addr == resolver {
            return Some(own);
        }
        match self.checked_answer_for(resolver) {
            Some((by_resolver, _)) if by_resolver.state != AnswerState::Resolver => {
                Some(Served { answer: by_resolver, scope, by_resolver: true })
            }
            _ => Some(own),
        }
    }

    /// [`Self::answer_for`], but `None` instead of a panic when the table is
    /// inconsistent (empty prefix map, answer or canary index past the answers).
    pub fn checked_answer_for(&self, addr: IpAddr) -> Option<(&Answer, u8)> {
        let idx = match addr {
            IpAddr::V4(a) => (!self.v4.is_empty()).then(|| self.v4.lookup(u32::from(a)).0),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => (!self.v4.is_empty()).then(|| self.v4.lookup(u32::from(v4)).0),
                None => (!self.v6.is_empty()).then(|| self.v6.lookup(u128::from(a)).0),
            },
        }?;
        let primary = self.answers.get(idx as usize)?;
        if primary.canary.is_some_and(|c| c.answer as usize >= self.answers.len()) {
            return None;
        }
        Some(self.answer_for(addr))
    }
}

/// A node's hostname inside a served zone, answerable with the node's
/// addresses (the target of a CNAME-mode name's answer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeHost {
    /// Lowercase, no trailing dot.
    pub name: String,
    /// The node it names.
    pub node: String,
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
}

impl NodeHost {
    /// The hostnames of `nodes` that lie inside one of `zones` (lowercase, no
    /// trailing dot), sorted by name; a hostname outside every served zone is
    /// some other server's business.
    ///
    /// Every node's hostname is published, whatever its status or health: a
    /// hostname is the node's own name, not a scheduling decision. The
    /// scheduler stops *choosing* an offline node at once, so no new CNAME
    /// names it; but resolvers hold the CNAMEs they already have for up to
    /// their TTL, and a target that stopped resolving would turn those into
    /// NODATA for every client behind them, while the node's address still
    /// reaches a draining node (or fails over in the client). Operators also
    /// use the name to reach a node that is out of rotation. So an offline
    /// node's hostname keeps answering its address.
    pub fn of_nodes(nodes: &[crate::model::Node], zones: &[Zone]) -> Vec<NodeHost> {
        let mut hosts: Vec<NodeHost> = nodes
            .iter()
            .filter_map(|n| {
                let name = n.hostname.as_deref()?.trim_end_matches('.').to_ascii_lowercase();
                let served = zones.iter().any(|z| name == z.name || name.ends_with(&format!(".{}", z.name)));
                served.then(|| NodeHost { name, node: n.name.clone(), ipv4: n.public_ip, ipv6: n.public_ipv6 })
            })
            .collect();
        hosts.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.node.cmp(&b.node)));
        hosts
    }
}

/// One served zone with its scheduled names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ZoneRoutes {
    pub zone: Zone,
    pub names: Vec<ScheduledName>,
}

/// What a query name is, as far as the route table knows.
#[derive(Debug)]
pub enum NameLookup<'a> {
    /// A scheduled name (the apex or a per-pool name).
    Scheduled { zone: &'a Zone, name: &'a ScheduledName },
    /// One of the zone's NS host names (answered with glue).
    NsHost { zone: &'a Zone, host: &'a crate::model::NsHost },
    /// `whoami.<zone>` (TXT: the querying address and ECS seen).
    Whoami { zone: &'a Zone },
    /// `_version.<zone>` (TXT: route-table version and generation time).
    Version { zone: &'a Zone },
    /// A node's hostname (answered with the node's addresses).
    NodeHost { zone: &'a Zone, host: &'a NodeHost },
    /// Inside a served zone, but no such name.
    Missing { zone: &'a Zone },
    /// Outside every served zone.
    OutOfZone,
}

/// An immutable snapshot of everything the NS hosts answer.
///
/// It travels as JSON from the control plane to the NS hosts
/// (`GET /api/v1/routes/table`); a received table is checked before use.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(try_from = "RouteTableWire")]
pub struct RouteTable {
    /// Monotonic per control plane; 0 means "no table yet".
    pub version: u64,
    /// The control-plane leadership term that published it (fencing: the
    /// route-table stream's NS hosts check it); 0 for a single control process without a
    /// cluster. A new leader publishes under a higher epoch; an NS host never
    /// takes a table from an epoch older than the newest it has seen.
    #[serde(default)]
    pub epoch: u64,
    /// Unix milliseconds when the table was computed.
    pub generated_at_ms: i64,
    pub zones: Vec<ZoneRoutes>,
    /// Node hostnames inside the served zones, sorted by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<NodeHost>,
    /// Zone name -> its DNSSEC records, for the signed zones. A host that
    /// does not know the field answers unsigned, as before.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub signatures: BTreeMap<String, ZoneSignatures>,
    /// name -> (zone index, scheduled name index)
    #[serde(skip)]
    index: HashMap<String, (usize, usize)>,
    /// node hostname -> index into `hosts`
    #[serde(skip)]
    host_index: HashMap<String, usize>,
}

/// A route table as received, before it is checked.
#[derive(Deserialize)]
struct RouteTableWire {
    version: u64,
    #[serde(default)]
    epoch: u64,
    generated_at_ms: i64,
    zones: Vec<ZoneRoutes>,
    #[serde(default)]
    hosts: Vec<NodeHost>,
    #[serde(default)]
    signatures: BTreeMap<String, ZoneSignatures>,
}

impl TryFrom<RouteTableWire> for RouteTable {
    type Error = String;

    fn try_from(w: RouteTableWire) -> Result<Self, String> {
        for z in &w.zones {
            for n in &z.names {
                let count = n.answers.len() as u32;
                n.v4.check(count).map_err(|e| format!("{} (IPv4): {e}", n.name))?;
                n.v6.check(count).map_err(|e| format!("{} (IPv6): {e}", n.name))?;
                if let Some(a) = n.answers.iter().find(|a| a.canary.is_some_and(|c| c.answer >= count)) {
                    return Err(format!("{}: canary of {:?} points past the answers", n.name, a.node));
                }
            }
        }
        if let Some(zone) = w.signatures.keys().find(|z| !w.zones.iter().any(|r| &r.zone.name == *z)) {
            return Err(format!("DNSSEC records for {zone:?}, which the table does not serve"));
        }
        Ok(RouteTable::new(w.version, w.generated_at_ms, w.zones)
            .with_node_hosts(w.hosts)
            .with_epoch(w.epoch)
            .with_signatures(w.signatures))
    }
}

impl RouteTable {
    pub fn new(version: u64, generated_at_ms: i64, zones: Vec<ZoneRoutes>) -> Self {
        let mut index = HashMap::new();
        for (zi, z) in zones.iter().enumerate() {
            for (ni, n) in z.names.iter().enumerate() {
                index.insert(n.name.clone(), (zi, ni));
            }
        }
        RouteTable {
            version,
            epoch: 0,
            generated_at_ms,
            zones,
            hosts: Vec::new(),
            signatures: BTreeMap::new(),
            index,
            host_index: HashMap::new(),
        }
    }

    /// This table as published under leadership term `epoch`.
    pub fn with_epoch(mut self, epoch: u64) -> Self {
        self.epoch = epoch;
        self
    }

    /// This table with `signatures` as its signed zones' DNSSEC records.
    pub fn with_signatures(mut self, signatures: BTreeMap<String, ZoneSignatures>) -> Self {
        self.signatures = signatures;
        self
    }

    /// The DNSSEC records of the most specific signed zone holding `name`
    /// (lowercase, no trailing dot), with that zone.
    pub fn signed_zone_of(&self, name: &str) -> Option<(&Zone, &ZoneSignatures)> {
        let zone = self
            .zones
            .iter()
            .filter(|z| name == z.zone.name || name.ends_with(&format!(".{}", z.zone.name)))
            .max_by_key(|z| z.zone.name.len())?;
        self.signatures.get(&zone.zone.name).map(|s| (&zone.zone, s))
    }

    /// `(epoch, version)`: what orders tables across leaders (the epoch first).
    pub fn position(&self) -> (u64, u64) {
        (self.epoch, self.version)
    }

    /// This table with `hosts` as its node hostnames (the first of a name wins).
    pub fn with_node_hosts(mut self, hosts: Vec<NodeHost>) -> Self {
        self.host_index.clear();
        for (i, h) in hosts.iter().enumerate() {
            self.host_index.entry(h.name.clone()).or_insert(i);
        }
        self.hosts = hosts;
        self
    }

    /// Classifies a query name (any case, with or without the trailing dot).
    pub fn lookup(&self, qname: &str) -> NameLookup<'_> {
        let name = qname.trim_end_matches('.').to_ascii_lowercase();
        if let Some(&(zi, ni)) = self.index.get(&name) {
            let z = &self.zones[zi];
            return NameLookup::Scheduled { zone: &z.zone, name: &z.names[ni] };
        }
        // The most specific zone containing the name.
        let zone = self
            .zones
            .iter()
            .filter(|z| name == z.zone.name || name.ends_with(&format!(".{}", z.zone.name)))
            .max_by_key(|z| z.zone.name.len());
        let Some(z) = zone else { return NameLookup::OutOfZone };
        let zone = &z.zone;
        if let Some(host) = zone.ns_hosts.iter().find(|h| h.name == name) {
            return NameLookup::NsHost { zone, host };
        }
        if let Some(&i) = self.host_index.get(&name) {
            return NameLookup::NodeHost { zone, host: &self.hosts[i] };
        }
        if name == format!("whoami.{}", zone.name) {
            return NameLookup::Whoami { zone };
        }
        if name == format!("_version.{}", zone.name) {
            return NameLookup::Version { zone };
        }
        NameLookup::Missing { zone }
    }

    /// The scheduled name, if `name` is one.
    pub fn scheduled(&self, name: &str) -> Option<&ScheduledName> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.index.get(&name).map(|&(zi, ni)| &self.zones[zi].names[ni])
    }

    /// Whether `other` makes every NS host answer exactly as `self` does: the
    /// same zones, names and ids, the same prefix blocks (so the same ECS
    /// scopes) and, block by block, the same served answer (TTL, addresses,
    /// node, state, canary split). Versions, generation times and `reason`
    /// texts (explanations: a score that moved inside the hysteresis margin
    /// rewrites them) do not count; new DNSSEC signatures do. The scheduler publishes only tables that
    /// are not the same as the current one.
    pub fn serves_same_as(&self, other: &RouteTable) -> bool {
        type Served<'a> = (u32, &'a [Ipv4Addr], &'a [Ipv6Addr], Option<&'a str>, AnswerState, Option<&'a str>);
        fn served(a: &Answer) -> Served<'_> {
            (a.ttl, &a.ipv4, &a.ipv6, a.node.as_deref(), a.state, a.hostname.as_deref())
        }
        fn same_answer(x: &ScheduledName, xi: u32, y: &ScheduledName, yi: u32) -> bool {
            let (Some(a), Some(b)) = (x.answers.get(xi as usize), y.answers.get(yi as usize)) else { return false };
            if served(a) != served(b) {
                return false;
            }
            match (a.canary, b.canary) {
                (None, None) => true,
                (Some(ca), Some(cb)) => {
                    ca.percent == cb.percent
                        && x.answers.get(ca.answer as usize).map(served)
                            == y.answers.get(cb.answer as usize).map(served)
                }
                _ => false,
            }
        }
        fn same_name(x: &ScheduledName, y: &ScheduledName) -> bool {
            if x.name != y.name
                || x.id != y.id
                || x.ecs != y.ecs
                || x.v4.len() != y.v4.len()
                || x.v6.len() != y.v6.len()
            {
                return false;
            }
            // A build renumbers answers, so equal blocks may hold different
            // values: each pair of values is compared once (`same_as[v]`: the
            // value of `y` found to serve what `x`'s value `v` serves), not
            // once per block (the real data's maps have 10⁵ blocks and more).
            let mut same_as = vec![u32::MAX; x.answers.len()];
            let mut same_values = |a: u32, b: u32| match same_as.get_mut(a as usize) {
                Some(known) if *known == b => true,
                Some(known) if same_answer(x, a, y, b) => {
                    *known = b;
                    true
                }
                _ => false,
            };
            let ((xs, xl, xv), (ys, yl, yv)) = (x.v4.columns(), y.v4.columns());
            if xs != ys || xl != yl || !xv.iter().zip(yv).all(|(&a, &b)| same_values(a, b)) {
                return false;
            }
            let ((xs, xl, xv), (ys, yl, yv)) = (x.v6.columns(), y.v6.columns());
            xs == ys && xl == yl && xv.iter().zip(yv).all(|(&a, &b)| same_values(a, b))
        }
        self.hosts == other.hosts
            && self.signatures == other.signatures
            && self.zones.len() == other.zones.len()
            && self.zones.iter().zip(&other.zones).all(|(a, b)| {
                a.zone == b.zone
                    && a.names.len() == b.names.len()
                    && a.names.iter().zip(&b.names).all(|(x, y)| same_name(x, y))
            })
    }

    /// The same content under another version and generation time (a rollback
    /// republishes the old table this way, so followers see a newer version).
    pub fn republished(&self, version: u64, generated_at_ms: i64) -> RouteTable {
        RouteTable::new(version, generated_at_ms, self.zones.clone())
            .with_node_hosts(self.hosts.clone())
            .with_epoch(self.epoch)
            .with_signatures(self.signatures.clone())
    }

    /// Every scheduled name in every zone.
    pub fn scheduled_names(&self) -> impl Iterator<Item = &ScheduledName> {
        self.zones.iter().flat_map(|z| z.names.iter())
    }
}

/// The current route table, swapped atomically by the scheduler (or the
/// route-table stream on an NS host) and read lock-free by every responder.
pub type SharedRouteTable = std::sync::Arc<arc_swap::ArcSwap<RouteTable>>;

/// A shared handle holding an empty table (version 0: "no table yet").
pub fn empty_shared() -> SharedRouteTable {
    std::sync::Arc::new(arc_swap::ArcSwap::from_pointee(RouteTable::default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Node, NodeStatus};

    #[test]
    fn an_offline_nodes_hostname_still_answers() {
        let mut n = Node::new("gz-01");
        n.hostname = Some("GZ-01.edge.lagran.net.".into());
        n.public_ip = Some(Ipv4Addr::new(203, 0, 113, 21));
        n.status = NodeStatus::Offline;
        let mut out = Node::new("x-01");
        out.hostname = Some("x-01.example.org".into());
        let hosts = NodeHost::of_nodes(&[n, out], &[Zone::new("edge.lagran.net")]);
        assert_eq!(hosts.len(), 1, "a hostname outside the served zones is not ours: {hosts:?}");
        assert_eq!(hosts[0].name, "gz-01.edge.lagran.net");
        assert_eq!(hosts[0].ipv4, Some(Ipv4Addr::new(203, 0, 113, 21)), "offline, and still its address");
    }

    /// Answers renumbered by a build serve the same; a block whose answer
    /// moved does not, also when its value pair was seen before with another.
    #[test]
    fn renumbered_answers_serve_the_same_and_a_moved_block_does_not() {
        use crate::prefix_map::{PrefixMapV4, PrefixMapV6};
        let answer = |n: &str, last: u8| Answer {
            node: Some(n.into()),
            ipv4: vec![Ipv4Addr::new(192, 0, 2, last)],
            ..Answer::default()
        };
        let (a, b, c) = (answer("a", 1), answer("b", 2), answer("c", 3));
        // IPv6 clients all get `a`.
        let table = |answers: Vec<Answer>, ranges: Vec<(u32, u32, u32)>| {
            let v6 = answers.iter().position(|x| x.node.as_deref() == Some("a")).unwrap() as u32;
            let name = ScheduledName {
                name: "edge.lagran.net".into(),
                id: 1,
                answers: Arc::new(answers),
                v4: PrefixMapV4::from_ranges(ranges, 0),
                v6: PrefixMapV6::uniform(v6),
                ecs: true,
            };
            RouteTable::new(1, 0, vec![ZoneRoutes { zone: Zone::new("lagran.net"), names: vec![name] }])
        };
        let q = |i: u32| i << 30;
        let before = table(
            vec![a.clone(), b.clone(), c.clone()],
            vec![(0, q(1) - 1, 0), (q(1), q(2) - 1, 1), (q(2), u32::MAX, 2)],
        );
        // The same content, answers in another order.
        let renumbered = table(
            vec![c.clone(), a.clone(), b.clone()],
            vec![(0, q(1) - 1, 1), (q(1), q(2) - 1, 2), (q(2), u32::MAX, 0)],
        );
        assert!(renumbered.serves_same_as(&before) && before.serves_same_as(&renumbered));
        // The last quarter moves from c to a (value 0 already seen paired with 0).
        let mut v = vec![(0, q(1) - 1, 0), (q(1), q(2) - 1, 1), (q(2), q(3) - 1, 2), (q(3), u32::MAX, 0)];
        let moved = table(vec![a.clone(), b.clone(), c.clone()], v.clone());
        assert!(!moved.serves_same_as(&before));
        v[3].2 = 2;
        assert!(table(vec![a, b, c], v).serves_same_as(&before), "the same blocks after a split and merge back");
    }
}
