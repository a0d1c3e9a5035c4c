//! The records the control plane keeps: nodes, zones, scheduled names, rules,
//! lines and geo overrides.
//!
//! These are plain data shared by the store (which persists them), the engine
//! (which scores nodes) and the API (which exposes them as JSON). Field names
//! are the column names of `migrations/`.

mod dnssec;
mod geo_override;
mod line;
mod rule;
mod zone_spec;

use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

pub use dnssec::{
    DEFAULT_DELETE_WAIT_SECS, DEFAULT_REFRESH_SECS, DEFAULT_VALIDITY_SECS, Denial, DnssecAlgorithm, KeyRole, KeyState,
    MAX_NSEC3_ITERATIONS, Nsec3Salt, ZoneDnssec,
};
pub use geo_override::GeoOverride;
pub use line::{Line, LineAnswer};
pub use rule::{Rule, RuleKind};
pub use zone_spec::{InvalidZone, ZoneSpec, normalise_name};

pub use crate::steering::Steering;
pub use crate::steering::strategy::Strategy;

/// Whether a node may be scheduled: only `online` nodes (with a public address) are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeStatus {
    #[default]
    Online,
    Offline,
    Disabled,
}

impl NodeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Online => "online",
            NodeStatus::Offline => "offline",
            NodeStatus::Disabled => "disabled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "online" => Some(NodeStatus::Online),
            "offline" => Some(NodeStatus::Offline),
            "disabled" => Some(NodeStatus::Disabled),
            _ => None,
        }
    }
}

/// The name of the pool that holds every node.
pub const DEFAULT_POOL: &str = "default";

/// An edge node as the control plane knows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub status: NodeStatus,
    /// The IPv4 address answered to clients; `None` makes the node ineligible for `A`.
    pub public_ip: Option<Ipv4Addr>,
    /// The IPv6 address answered to clients; `None` makes the node ineligible for `AAAA`.
    pub public_ipv6: Option<Ipv6Addr>,
    /// The node's own DNS name (e.g. `gz-01.edge.lagran.net`), answered as the CNAME
    /// target for names in CNAME mode; `None` makes the node
    /// ineligible for them.
    #[serde(default)]
    pub hostname: Option<String>,
    pub country: String,
    pub province: String,
    pub city: String,
    pub isp: String,
    pub weight: i64,
    /// Percent, 0–100.
    pub cpu_usage: f64,
    /// Percent, 0–100.
    pub memory_usage: f64,
    pub bandwidth_mbps: f64,
    pub max_bandwidth_mbps: f64,
    pub conns: i64,
    pub max_conns: i64,
    pub agent_url: String,
    pub probe_port: Option<u16>,
    pub pool: String,
    pub lat: Option<f64>,
    pub lon: Option<f64>,
    /// Unix milliseconds of the last heartbeat; `None` for nodes that never had an agent.
    pub last_heartbeat_ms: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl Node {
    /// A node with the given name and defaults everywhere else (online, weight 100).
    pub fn new(name: impl Into<String>) -> Self {
        Node {
            name: name.into(),
            status: NodeStatus::Online,
            public_ip: None,
            public_ipv6: None,
            hostname: None,
            country: String::new(),
            province: String::new(),
            city: String::new(),
            isp: String::new(),
            weight: 100,
            cpu_usage: 0.0,
            memory_usage: 0.0,
            bandwidth_mbps: 0.0,
            max_bandwidth_mbps: 0.0,
            conns: 0,
            max_conns: 0,
            agent_url: String::new(),
            probe_port: None,
            pool: DEFAULT_POOL.to_string(),
            lat: None,
            lon: None,
            last_heartbeat_ms: None,
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }
}

/// An authoritative zone (e.g. `edge.lagran.net`) with its SOA and NS data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Zone {
    /// Lowercase, no trailing dot.
    pub name: String,
    /// SOA MNAME; defaults to the first NS host.
    pub soa_mname: String,
    /// SOA RNAME in domain form (`hostmaster.edge.lagran.net`).
    pub soa_rname: String,
    pub soa_serial: u32,
    pub soa_refresh: u32,
    pub soa_retry: u32,
    pub soa_expire: u32,
    /// Negative-caching TTL (RFC 2308).
    pub soa_minimum: u32,
    /// TTL of SOA, NS and glue records.
    pub ns_ttl: u32,
    pub ns_hosts: Vec<NsHost>,
    /// Signed with DNSSEC under this policy; `None`: unsigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dnssec: Option<ZoneDnssec>,
}

impl Zone {
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        Zone {
            soa_mname: format!("ns1.{name}"),
            soa_rname: format!("hostmaster.{name}"),
            name,
            soa_serial: 1,
            soa_refresh: 3600,
            soa_retry: 600,
            soa_expire: 604_800,
            soa_minimum: 60,
            ns_ttl: 3600,
            ns_hosts: Vec::new(),
            dnssec: None,
        }
    }
}

/// One of the zone's name servers, with its glue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsHost {
    /// Lowercase, no trailing dot.
    pub name: String,
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
}

/// A scheduled name inside a zone: the apex itself or e.g. `pool-a.edge.lagran.net`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Domain {
    /// Lowercase, no trailing dot.
    pub name: String,
    pub zone: String,
    /// The pool whose nodes answer this name (`default` = every node).
    pub pool: String,
    /// Per-name route TTL; `None` uses the scheduler's SCHEDULE_TTL.
    pub ttl: Option<u32>,
    /// Address answered for clients on a line that asks for the origin (e.g. a
    /// search-engine spider line).
    pub origin_ip: Option<Ipv4Addr>,
    /// Addresses (`a`, the default) or a CNAME to the chosen node's hostname.
    #[serde(default)]
    pub answer_mode: AnswerMode,
    /// Whether the ECS address decides (default); `false`: the resolver's address
    /// decides and ECS is echoed with SCOPE 0: ECS scheduling applies only to the
    /// names the operator marks for it.
    #[serde(default = "yes")]
    pub ecs: bool,
    /// `geo` (default): the location scoring decides; `latency`: the lowest
    /// measured RTT decides where a partition is measured enough.
    #[serde(default)]
    pub steering: Steering,
    /// `best` (default), `weighted` or `hash`: how a partition's clients are
    /// spread over the eligible nodes.
    #[serde(default)]
    pub strategy: Strategy,
}

fn yes() -> bool {
    true
}

/// How a scheduled name is answered: addresses, or a CNAME to the chosen node's
/// hostname (for a content provider whose own authoritative servers cannot do ECS).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerMode {
    /// `A`/`AAAA` with the chosen nodes' addresses.
    #[default]
    A,
    /// `CNAME <hostname of the chosen node>` (plus its address records when the
    /// hostname is in a served zone).
    Cname,
}

impl AnswerMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerMode::A => "a",
            AnswerMode::Cname => "cname",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "a" => Some(AnswerMode::A),
            "cname" => Some(AnswerMode::Cname),
            _ => None,
        }
    }
}
