//! The route-table stream's wire format: how an NS host follows the control
//! plane (`GET /api/v1/routes/table`), with deltas and fencing.
//!
//! # Request
//!
//! `GET /api/v1/routes/table?since=V&epoch=E&deltas=1&wait_ms=M&host=H&queries=Q&confirmed_ms_ago=C&prefixes=P`
//! with the agent token (`X-Lagran-Agent-Token`):
//!
//! - `since`, `epoch`: the table the NS host serves (0, 0: none). `since=0`
//!   asks for a full snapshot.
//! - `wait_ms`: how long the call may wait for a newer table (at most 30 s).
//! - `deltas=1`: the NS host understands [`TableUpdate`]; without it the
//!   answer is the bare [`RouteTable`] JSON (for `curl` and older hosts).
//! - `host`, `queries`, `confirmed_ms_ago` (optional): the NS host's report —
//!   its name, the DNS queries it has answered since it started, and how long
//!   ago its table was last confirmed. The control plane records the report
//!   with the host's `since`/`epoch` (`GET /api/v1/nshosts`).
//! - `prefixes` (optional, with `host`): the client prefixes the host answered
//!   most, with their queries ([`crate::answered::wire`]); kept in memory for
//!   the geo reload's check ([`crate::answered`]).
//!
//! # Answers
//!
//! - `200` with a [`TableUpdate`]: `{"full": <RouteTable>}` or
//!   `{"delta": <TableDelta>}`. A delta is sent when the control process still
//!   holds the NS host's table (the last [`HISTORY`] tables it published or
//!   loaded); otherwise — the gap is too large, or the host's table is unknown
//!   — a full snapshot.
//! - `304`: the NS host's table is still current; this confirms it (the NS host
//!   keeps answering from a table only while the control plane confirms it).
//! - `503`: the control plane cannot confirm (its scheduler has stopped
//!   confirming, or this control process is behind the NS host): the NS host
//!   tries another control process.
//!
//! # What an NS host accepts ([`accepts`])
//!
//! Every table carries the leadership `epoch` under which it was published
//! (a new leader of a cluster of control processes takes a higher one). An NS host never
//! takes a table from an epoch below the highest it has seen (a deposed leader
//! is fenced), and within one epoch only a higher version (a rollback arrives
//! as a new, higher version). A table from a higher epoch is taken whatever
//! its version: the new leader's first table.
//!
//! # How far an epoch may jump ([`max_epoch`])
//!
//! Since a higher epoch fences every lower one, a single forged table with a
//! huge epoch (from whoever sits on an `http://` path, or a compromised
//! control URL) would make the NS host refuse every legitimate table for good
//! — the saved state file carries the epoch across restarts. So a table is
//! also refused when its epoch is higher than the control plane can have
//! issued. The control plane starts at most one leadership term per election
//! round, and a process tries for the lead once a second; the NS host knows the
//! epoch in force at its last confirmation (any answer of the stream, kept
//! across restarts as the saved table's modification time). So an epoch is
//! refused above `known + EPOCH_SLACK + seconds since that confirmation`
//! ([`EPOCH_SLACK`] covers several processes trying in the same second),
//! measured on the NS host's own clock (a clock stepped back counts as no time
//! passed). With no table yet, the bound is the seconds since 1970: more terms
//! than seconds cannot have been started. A legitimate jump past the bound
//! (a long-absent host, a flapping cluster) is only delayed: the bound grows
//! while the host waits, and the next answer after that is taken.
//!
//! The bound is chosen over tying epochs to the control plane's identity
//! (signed tables) because that identity already exists where it matters:
//! over `https://` with `--ca` the table comes only from a certified control
//! plane; the bound limits what one forged table can do where that is not so.
//! A forged table within the bound fences the legitimate leader only until the
//! cluster's epoch passes it (as many leadership changes); removing the state
//! file and restarting the NS host clears it at once.
//!
//! # Delta
//!
//! A [`TableDelta`] names the base `(base_epoch, base_version)` it applies to
//! and lists the new table's zones in order; each zone lists its names in
//! order, each either the name alone (unchanged from the base) or the whole
//! new [`ScheduledName`]. Names absent from the list are gone. Node hostnames
//! and the signed zones' DNSSEC records are sent only when they changed.
//! Applying it to the base gives exactly the
//! new table; an NS host whose table is not the base asks again with `since=0`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use hyper::body::Bytes;
use serde::{Deserialize, Serialize};

use crate::model::Zone;
use crate::route_table::{NodeHost, RouteTable, ScheduledName, ZoneRoutes};
use crate::zone_signatures::ZoneSignatures;

/// How many recent tables a control process keeps as delta bases.
pub const HISTORY: usize = 16;

/// One answer of the stream (with `deltas=1`).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TableUpdate {
    Full(RouteTable),
    Delta(TableDelta),
}

/// The changes from one table to the next (module docs, "Delta").
#[derive(Debug, Serialize, Deserialize)]
pub struct TableDelta {
    pub base_epoch: u64,
    pub base_version: u64,
    pub epoch: u64,
    pub version: u64,
    pub generated_at_ms: i64,
    pub zones: Vec<ZoneDelta>,
    /// The node hostnames, when they changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<NodeHost>>,
    /// The signed zones' DNSSEC records, when they changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signatures: Option<BTreeMap<String, ZoneSignatures>>,
}

/// One zone of the new table.
#[derive(Debug, Serialize, Deserialize)]
pub struct ZoneDelta {
    pub zone: Zone,
    pub names: Vec<NameEntry>,
}

/// A scheduled name of the new table: `{"same": "<name>"}` (unchanged) or
/// `{"changed": <ScheduledName>}` (externally tagged: the prefix maps hold
/// u128 values, which serde's untagged buffering cannot carry).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NameEntry {
    Same(String),
    Changed(ScheduledName),
}

impl TableDelta {
    /// The delta that turns `base` into `new`.
    pub fn between(base: &RouteTable, new: &RouteTable) -> TableDelta {
        let old: HashMap<&str, &ScheduledName> = base.scheduled_names().map(|n| (n.name.as_str(), n)).collect();
        let zones = new
            .zones
            .iter()
            .map(|z| ZoneDelta {
                zone: z.zone.clone(),
                names: z
                    .names
                    .iter()
                    .map(|n| match old.get(n.name.as_str()) {
                        Some(o) if *o == n => NameEntry::Same(n.name.clone()),
                        _ => NameEntry::Changed(n.clone()),
                    })
                    .collect(),
            })
            .collect();
        TableDelta {
            base_epoch: base.epoch,
            base_version: base.version,
            epoch: new.epoch,
            version: new.version,
            generated_at_ms: new.generated_at_ms,
            zones,
            hosts: (base.hosts != new.hosts).then(|| new.hosts.clone()),
            signatures: (base.signatures != new.signatures).then(|| new.signatures.clone()),
        }
    }

    /// The new table, from `base`; an error when `base` is not the delta's base.
    pub fn apply(self, base: &RouteTable) -> Result<RouteTable, String> {
        if base.position() != (self.base_epoch, self.base_version) {
            return Err(format!(
                "the delta applies to table {}/{}, this host serves {}/{}",
                self.base_epoch, self.base_version, base.epoch, base.version
            ));
        }
        let mut zones = Vec::with_capacity(self.zones.len());
        for z in self.zones {
            let mut names = Vec::with_capacity(z.names.len());
            for entry in z.names {
                names.push(match entry {
                    NameEntry::Changed(n) => n,
                    NameEntry::Same(name) => base
                        .scheduled(&name)
                        .cloned()
                        .ok_or_else(|| format!("the delta keeps {name:?}, which the base does not have"))?,
                });
            }
            zones.push(ZoneRoutes { zone: z.zone, names });
        }
        // Through the wire form, so the result is checked like a full table.
        let table = RouteTable::new(self.version, self.generated_at_ms, zones)
            .with_node_hosts(self.hosts.unwrap_or_else(|| base.hosts.clone()))
            .with_epoch(self.epoch)
            .with_signatures(self.signatures.unwrap_or_else(|| base.signatures.clone()));
        let json = serde_json::to_vec(&table).map_err(|e| e.to_string())?;
        serde_json::from_slice(&json).map_err(|e| format!("the delta gives an unusable table: {e}"))
    }
}

/// Whether an NS host serving `current`, having seen epochs up to
/// `highest_epoch`, takes a table at `offered` = `(epoch, version)`.
pub fn accepts(current: (u64, u64), highest_epoch: u64, offered: (u64, u64)) -> bool {
    let (epoch, version) = offered;
    if version == 0 || epoch < highest_epoch.max(current.0) {
        return false;
    }
    epoch > current.0 || version > current.1
}

/// Leadership terms allowed beyond one per second since the last confirmation.
pub const EPOCH_SLACK: u64 = 16;

/// The highest epoch an NS host takes, knowing that `known` was in force when
/// the control plane last confirmed its table, at `confirmed_at_ms` (unix ms on
/// this host's clock; `None` or epoch 0: nothing known), at `now_ms`.
pub fn max_epoch(known: u64, confirmed_at_ms: Option<i64>, now_ms: i64) -> u64 {
    let secs = |ms: i64| u64::try_from(ms.max(0) / 1000).unwrap_or(0);
    match confirmed_at_ms {
        Some(at) if known > 0 => known.saturating_add(EPOCH_SLACK).saturating_add(secs(now_ms.saturating_sub(at))),
        _ => secs(now_ms).max(EPOCH_SLACK),
    }
}

/// `(epoch, version)` of a table.
type Position = (u64, u64);

/// What a control process keeps to answer the stream: its recent tables (the
/// delta bases) and the encoded answers, so many NS hosts cost one encoding.
#[derive(Default)]
pub struct TableHistory {
    inner: Mutex<HistoryInner>,
}

#[derive(Default)]
struct HistoryInner {
    tables: VecDeque<Arc<RouteTable>>,
    /// `(epoch, version)` of the full snapshot encoded, and its bytes.
    full: Option<((u64, u64), Bytes)>,
    /// `(base, new)` positions and the encoded delta, most recent last.
    deltas: VecDeque<((Position, Position), Bytes)>,
}

impl TableHistory {
    /// Records a table published or loaded by this control process.
    pub fn record(&self, table: Arc<RouteTable>) {
        let mut h = self.inner.lock().expect("table history lock poisoned");
        if h.tables.back().is_some_and(|t| t.position() == table.position()) {
            return;
        }
        h.tables.push_back(table);
        while h.tables.len() > HISTORY {
            h.tables.pop_front();
        }
    }

    /// A recent table at `position`.
    pub fn get(&self, position: (u64, u64)) -> Option<Arc<RouteTable>> {
        let h = self.inner.lock().expect("table history lock poisoned");
        h.tables.iter().rev().find(|t| t.position() == position).cloned()
    }

    /// The oldest recent table after `position` (the first one a host at `position` lacks).
    pub fn first_after(&self, position: (u64, u64)) -> Option<Arc<RouteTable>> {
        let h = self.inner.lock().expect("table history lock poisoned");
        h.tables.iter().find(|t| t.position() > position).cloned()
    }

    /// The encoded [`TableUpdate`] taking an NS host at `from` to `current`:
    /// a delta when `from` is a recent table, a full snapshot otherwise.
    pub fn update(&self, from: (u64, u64), current: &Arc<RouteTable>) -> Result<Bytes, serde_json::Error> {
        let to = current.position();
        let base = if from.1 == 0 { None } else { self.get(from) };
        let h = self.inner.lock().expect("table history lock poisoned");
        match base {
            Some(base) => {
                if let Some((_, b)) = h.deltas.iter().find(|(k, _)| *k == (from, to)) {
                    return Ok(b.clone());
                }
                drop(h);
                let bytes = Bytes::from(serde_json::to_vec(&TableUpdate::Delta(TableDelta::between(&base, current)))?);
                let mut h = self.inner.lock().expect("table history lock poisoned");
                h.deltas.push_back(((from, to), bytes.clone()));
                while h.deltas.len() > HISTORY {
                    h.deltas.pop_front();
                }
                Ok(bytes)
            }
            None => {
                if let Some((k, b)) = &h.full
                    && *k == to
                {
                    return Ok(b.clone());
                }
                drop(h);
                let mut out = br#"{"full":"#.to_vec();
                serde_json::to_writer(&mut out, &**current)?;
                out.push(b'}');
                let bytes = Bytes::from(out);
                self.inner.lock().expect("table history lock poisoned").full = Some((to, bytes.clone()));
                Ok(bytes)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route_table::Answer;

    fn name(n: &str, ip: [u8; 4]) -> ScheduledName {
        let answers = vec![Answer { ttl: 60, ipv4: vec![ip.into()], ..Answer::default() }];
        let json = serde_json::json!({
            "name": n, "id": 1, "answers": answers,
            "v4": {"starts": [0], "lens": [0], "values": [0]},
            "v6": {"starts": [0], "lens": [0], "values": [0]},
        });
        serde_json::from_value(json).expect("a test name")
    }

    fn table(epoch: u64, version: u64, names: Vec<ScheduledName>) -> RouteTable {
        let zones = vec![ZoneRoutes { zone: Zone::new("example.test"), names }];
        RouteTable::new(version, 1_000, zones).with_epoch(epoch)
    }

    #[test]
    fn a_delta_carries_only_what_changed_and_rebuilds_the_table() {
        let base = table(3, 10, vec![name("a.example.test", [192, 0, 2, 1]), name("b.example.test", [192, 0, 2, 2])]);
        let new = table(3, 11, vec![name("b.example.test", [192, 0, 2, 2]), name("c.example.test", [192, 0, 2, 3])]);
        let d = TableDelta::between(&base, &new);
        let entries = &d.zones[0].names;
        assert!(matches!(&entries[0], NameEntry::Same(n) if n == "b.example.test"), "{entries:?}");
        assert!(matches!(&entries[1], NameEntry::Changed(n) if n.name == "c.example.test"), "{entries:?}");
        assert!(d.hosts.is_none(), "hosts did not change");
        let json = serde_json::to_string(&TableUpdate::Delta(d)).unwrap();
        let TableUpdate::Delta(d) = serde_json::from_str(&json).unwrap() else { panic!("a delta") };
        let got = d.apply(&base).unwrap();
        assert_eq!(got.position(), (3, 11));
        assert_eq!(got.zones, new.zones, "the delta rebuilds the new table exactly");
        assert!(got.scheduled("a.example.test").is_none(), "a removed name is gone");
    }

    #[test]
    fn a_delta_refuses_another_base() {
        let base = table(3, 10, vec![name("a.example.test", [192, 0, 2, 1])]);
        let other = table(3, 9, vec![]);
        let d = TableDelta::between(&base, &table(3, 11, vec![name("a.example.test", [192, 0, 2, 1])]));
        assert!(d.apply(&other).unwrap_err().contains("applies to table 3/10"));
    }

    #[test]
    fn epochs_jump_no_further_than_the_control_plane_can_have_gone() {
        let now = 1_700_000_000_000;
        assert_eq!(max_epoch(7, Some(now), now), 7 + EPOCH_SLACK, "just confirmed: the slack only");
        assert_eq!(max_epoch(7, Some(now - 60_000), now), 7 + EPOCH_SLACK + 60, "one term per second since");
        assert_eq!(max_epoch(7, Some(now + 3_600_000), now), 7 + EPOCH_SLACK, "a clock stepped back adds nothing");
        assert_eq!(max_epoch(0, None, now), 1_700_000_000, "nothing known: no more terms than seconds since 1970");
        assert_eq!(max_epoch(u64::MAX - 1, Some(0), now), u64::MAX, "no overflow");
        assert!(max_epoch(7, Some(now - 1000), now) < u64::MAX / 2, "a huge forged epoch is out of bounds");
    }

    #[test]
    fn only_the_current_epoch_moving_forward_is_accepted() {
        assert!(accepts((0, 0), 0, (1, 5)), "the first table");
        assert!(accepts((2, 10), 2, (2, 11)), "a newer version");
        assert!(!accepts((2, 10), 2, (2, 10)), "the same table");
        assert!(!accepts((2, 10), 2, (2, 9)), "an older version");
        assert!(accepts((2, 10), 2, (3, 10)), "a new leader publishes the same version under its epoch");
        assert!(accepts((2, 10), 2, (3, 4)), "a new epoch wins whatever its version");
        assert!(!accepts((2, 10), 2, (1, 99)), "a deposed leader is fenced");
        assert!(!accepts((2, 10), 4, (3, 99)), "below the highest epoch seen");
    }

    #[test]
    fn history_answers_deltas_for_recent_bases_and_full_tables_otherwise() {
        let h = TableHistory::default();
        let t1 = Arc::new(table(1, 1, vec![name("a.example.test", [192, 0, 2, 1])]));
        let t2 = Arc::new(table(1, 2, vec![name("a.example.test", [192, 0, 2, 9])]));
        h.record(t1.clone());
        h.record(t2.clone());
        let delta: TableUpdate = serde_json::from_slice(&h.update((1, 1), &t2).unwrap()).unwrap();
        assert!(matches!(delta, TableUpdate::Delta(_)));
        let full: TableUpdate = serde_json::from_slice(&h.update((1, 0), &t2).unwrap()).unwrap();
        assert!(matches!(full, TableUpdate::Full(t) if t.position() == (1, 2)));
        let unknown: TableUpdate = serde_json::from_slice(&h.update((0, 77), &t2).unwrap()).unwrap();
        assert!(matches!(unknown, TableUpdate::Full(_)), "an unknown base gets a full snapshot");
        for v in 3..(3 + HISTORY as u64) {
            h.record(Arc::new(table(1, v, vec![])));
        }
        assert!(h.get((1, 1)).is_none(), "old bases fall out of the window");
    }
}
