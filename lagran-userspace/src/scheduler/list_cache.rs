//! The zones, domains, rules and lines as the last recompute read them, so
//! that a recompute after a node's write or a heartbeat does not read them
//! again.
//!
//! On the path from `PATCH /api/v1/nodes/{name}` to the XDP maps, the four
//! list reads and the purge of expired rules (a `DELETE`, so a write
//! transaction that waits for the heartbeats' commits on SQLite) took 1–3 ms
//! of a 13–24 ms path, and every build a fleet's heartbeats start paid them
//! too. Only API writes change these lists, and every such write asks for a
//! full recompute ([`Change::Everything`](super::Change::Everything), or
//! [`Change::Rules`](super::Change::Rules) through a standby's
//! notification), which reads them again; so do the periodic full recompute
//! (the safety net), a new leadership term, and the leader's `LISTEN` coming
//! back after a gap in which a standby's notification may have been lost
//! (in a cluster). A hand edit of the database, which no one announces,
//! waits for the periodic full recompute, as a hand edit of a node does.
//!
//! A rule that expires ends the reuse: from its `expires_at_ms` on, the next
//! recompute purges the expired rules from the store and reads the lists
//! again (the build itself never applies an expired rule, cached
//! or not: `Rule::is_active`).

use crate::model::{Domain, Line, Rule, Zone};

/// What the build reads besides the nodes, as one read found it.
#[derive(Clone, Debug, Default)]
pub struct Lists {
    pub zones: Vec<Zone>,
    pub domains: Vec<Domain>,
    pub rules: Vec<Rule>,
    pub lines: Vec<Line>,
}

impl Lists {
    /// The first moment one of the rules expires (`None`: none expires).
    fn next_expiry_ms(&self) -> Option<i64> {
        self.rules.iter().filter_map(|r| r.expires_at_ms).min()
    }
}

/// The last read, while nothing is known to have changed it.
#[derive(Debug, Default)]
pub struct ListCache {
    kept: Option<(Lists, Option<i64>)>,
}

impl ListCache {
    /// The lists as last read, when a recompute at `now_ms` after a change
    /// that may not have written them (`reusable`) can take them: `None`
    /// means read (and purge) again.
    pub fn get(&self, reusable: bool, now_ms: i64) -> Option<Lists> {
        let (lists, expiry) = self.kept.as_ref().filter(|_| reusable)?;
        if expiry.is_some_and(|t| t <= now_ms) {
            return None;
        }
        Some(lists.clone())
    }

    /// Keeps what a read found.
    pub fn put(&mut self, lists: &Lists) {
        self.kept = Some((lists.clone(), lists.next_expiry_ms()));
    }

    /// The next recompute reads the lists again.
    pub fn invalidate(&mut self) {
        self.kept = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: i64, expires_at_ms: Option<i64>) -> Rule {
        Rule {
            id,
            kind: crate::model::RuleKind::Manual,
            domain: None,
            country: None,
            province: None,
            city: None,
            isp: None,
            prefix: None,
            node: "gz-01".into(),
            percent: 100,
            priority: 0,
            expires_at_ms,
            note: String::new(),
            created_at_ms: 0,
        }
    }

    #[test]
    fn kept_until_a_change_that_may_have_written_them_or_a_rule_expires() {
        let mut c = ListCache::default();
        assert!(c.get(true, 0).is_none(), "nothing read yet");
        let lists = Lists { rules: vec![rule(1, None), rule(2, Some(1_000)), rule(3, Some(500))], ..Lists::default() };
        c.put(&lists);
        let got = c.get(true, 499).expect("before the first expiry");
        assert_eq!(got.rules.len(), 3);
        assert!(c.get(false, 499).is_none(), "a change that may have written the lists reads them");
        assert!(c.get(true, 500).is_none(), "rule 3 expired: read and purge again");
        c.put(&Lists { rules: vec![rule(1, None)], ..Lists::default() });
        assert!(c.get(true, i64::MAX).is_some(), "no rule expires");
        c.invalidate();
        assert!(c.get(true, 0).is_none());
    }
}
