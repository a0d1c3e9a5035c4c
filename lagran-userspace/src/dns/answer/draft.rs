//! The response under construction: what resolution decides and encoding writes.

use hickory_proto::rr::Record;

use super::parse::Question;
use super::reply::{ClientInfo, Outcome};
use crate::dns::cookie::CookieOut;
use crate::dns::ecs::Ecs;

/// The OPT record of the response.
#[derive(Clone, Copy, Debug)]
pub(super) struct OptOut {
    pub(super) dnssec_ok: bool,
    /// The query's ECS option, echoed with the scope decided by the answer.
    pub(super) ecs: Option<Ecs>,
    /// The COOKIE option data of the response (client cookie | server cookie).
    pub(super) cookie: Option<CookieOut>,
}

impl OptOut {
    /// The OPT record of a response that echoes no option of the query.
    pub(super) fn bare(dnssec_ok: bool) -> Self {
        OptOut { dnssec_ok, ecs: None, cookie: None }
    }
}

/// A response under construction.
pub(super) struct Draft<'q> {
    pub(super) rcode: u16,
    /// Authoritative answer.
    pub(super) aa: bool,
    pub(super) question: Option<&'q Question>,
    pub(super) answer: Vec<Record>,
    pub(super) authority: Vec<Record>,
    pub(super) additional: Vec<Record>,
    pub(super) opt: Option<OptOut>,
    /// ECS SCOPE PREFIX-LENGTH to echo (only for scheduled answers).
    pub(super) scope: u8,
    pub(super) outcome: Outcome,
    /// See [`super::reply::Reply::stale`].
    pub(super) stale: bool,
    /// See [`super::reply::Reply::scheduled`].
    pub(super) scheduled: bool,
    /// The node answered, for [`ClientInfo::node`].
    pub(super) node: Option<String>,
}

impl<'q> Draft<'q> {
    pub(super) fn new(
        question: Option<&'q Question>,
        opt: Option<OptOut>,
        rcode: u16,
        aa: bool,
        outcome: Outcome,
    ) -> Self {
        Draft {
            rcode,
            aa,
            question,
            answer: Vec::new(),
            authority: Vec::new(),
            additional: Vec::new(),
            opt,
            scope: 0,
            outcome,
            stale: false,
            scheduled: false,
            node: None,
        }
    }

    /// Turns this into an error response: no records, AA=0.
    pub(super) fn error(mut self, rcode: u16, outcome: Outcome) -> Self {
        self.rcode = rcode;
        self.aa = false;
        self.outcome = outcome;
        self.answer.clear();
        self.authority.clear();
        self.additional.clear();
        self.scope = 0;
        self
    }

    /// Copies the node answered and the ECS scope into `client`.
    pub(super) fn with_node_into(self, client: &mut ClientInfo) -> Self {
        client.node = self.node.clone();
        if let Some(e) = client.ecs.as_mut() {
            e.2 = self.scope;
        }
        self
    }
}
