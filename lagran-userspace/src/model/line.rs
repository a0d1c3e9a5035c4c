//! Lines: named client prefix lists that override the geo partition,
//! e.g. a search-engine spider line that is answered the origin address.

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// What clients on a line are answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LineAnswer {
    /// Scheduled like any partition, by weight and load (the line has no geo tuple).
    #[default]
    Schedule,
    /// Always the line's `node`.
    Node,
    /// The domain's `origin_ip` (a search-engine spider line: spiders see the origin).
    Origin,
}

impl LineAnswer {
    pub fn as_str(self) -> &'static str {
        match self {
            LineAnswer::Schedule => "schedule",
            LineAnswer::Node => "node",
            LineAnswer::Origin => "origin",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "schedule" => Some(LineAnswer::Schedule),
            "node" => Some(LineAnswer::Node),
            "origin" => Some(LineAnswer::Origin),
            _ => None,
        }
    }
}

/// A line with its prefixes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Line {
    pub name: String,
    /// The scheduled names it applies to; empty = every domain.
    #[serde(default)]
    pub domains: Vec<String>,
    #[serde(default)]
    pub answer: LineAnswer,
    /// The node answered when `answer` is `node`; must be `None` otherwise.
    #[serde(default)]
    pub node: Option<String>,
    /// Client prefixes on this line, without host bits.
    #[serde(default)]
    pub prefixes: Vec<IpNet>,
    #[serde(default)]
    pub note: String,
    /// Set by the store; ignored on input.
    #[serde(default)]
    pub created_at_ms: i64,
    /// Set by the store; ignored on input.
    #[serde(default)]
    pub updated_at_ms: i64,
}

impl Line {
    /// A line answering `answer` for `prefixes` on every domain.
    pub fn new(name: impl Into<String>, answer: LineAnswer, prefixes: Vec<IpNet>) -> Self {
        Line {
            name: name.into(),
            domains: Vec::new(),
            answer,
            node: None,
            prefixes,
            note: String::new(),
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }
}
