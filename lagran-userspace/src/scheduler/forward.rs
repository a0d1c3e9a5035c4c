//! Heartbeats a standby takes, passed on to the leader.
//!
//! In a cluster of control processes only the leader builds tables. An agent may
//! send its heartbeats to any control process; a standby writes them to the
//! database like the leader does, and the leader must learn of them without
//! reading the fleet again: a standby keeps what each heartbeat's statement
//! returned ([`Load`]) in an [`Outbox`] and sends it in `NOTIFY
//! lagran_changes` payloads ([`encode`]), which the leader lays over its
//! cached rows exactly as it does its own heartbeats (see
//! the node cache).
//!
//! The wire form is `loads:` and a JSON array of `[name, load]` pairs (names
//! are any string, so JSON does the quoting); `null` as the load means "read
//! this node again". PostgreSQL refuses payloads of 8 000 bytes or more, so
//! a batch is cut into several payloads of at most [`MAX_PAYLOAD`] bytes; a
//! single pair too long for one (a name of thousands of characters) is sent
//! as a full recompute instead. A payload the leader cannot read (a figure
//! JSON cannot carry, such as NaN, which heartbeats refuse anyway, comes out
//! as `null`) costs a full recompute there too: never a report taken as
//! something else.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::Notify;

use super::Change;
use super::node_cache::Load;

/// A standby's heartbeats on their way to the leader: held in an
/// [`Outbox`] until the cluster's loop takes them as payloads.
#[derive(Debug, Default)]
pub struct Forwarder {
    outbox: Mutex<Outbox>,
    /// Woken when `outbox` gains a heartbeat.
    wake: Notify,
}

impl Forwarder {
    /// Holds node `name`'s report for the leader.
    pub fn put(&self, name: &str, load: Option<Load>) {
        self.outbox.lock().expect("outbox lock poisoned").put(name, load);
        self.wake.notify_one();
    }

    /// Ends when heartbeats are held for the leader.
    pub async fn heard(&self) {
        self.wake.notified().await;
    }

    /// The heartbeats held since the last call, as `NOTIFY lagran_changes`
    /// payloads for the leader ([`encode`]).
    pub fn take_payloads(&self) -> Vec<String> {
        let heard = self.outbox.lock().expect("outbox lock poisoned").take();
        encode(&heard)
    }

    /// Drops what is held (this process leads now: it heard them itself).
    pub fn discard(&self) {
        self.outbox.lock().expect("outbox lock poisoned").take();
    }
}

/// What starts a payload that carries heartbeats.
pub const PREFIX: &str = "loads:";

/// The longest payload sent (PostgreSQL: "payload string too long" at 8 000 bytes).
pub const MAX_PAYLOAD: usize = 7_900;

/// One heartbeat as passed on: the node, and its figures (`None`: read the node).
pub type Heard = (String, Option<Load>);

/// The heartbeats a standby took since it last passed them on, by node.
#[derive(Debug, Default)]
pub struct Outbox {
    heard: HashMap<String, Option<Load>>,
}

impl Outbox {
    /// Node `name` reported `load` (`None`: the row carries no heartbeat).
    /// Reports of one node in order replace each other; one not after the
    /// report held (two heartbeats of a node within a millisecond, or out of
    /// order) makes the leader read the node instead, as its own cache does.
    pub fn put(&mut self, name: &str, load: Option<Load>) {
        match self.heard.get_mut(name) {
            None => {
                self.heard.insert(name.to_string(), load);
            }
            Some(held) => {
                *held = match (held.take(), load) {
                    (Some(h), Some(new)) if new.at_ms() > h.at_ms() => Some(new),
                    // A read is asked for already, or the reports are not in order.
                    _ => None,
                };
            }
        }
    }

    /// Everything held, emptied.
    pub fn take(&mut self) -> Vec<Heard> {
        let mut all: Vec<Heard> = self.heard.drain().collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

/// `heard` as payloads of at most [`MAX_PAYLOAD`] bytes.
pub fn encode(heard: &[Heard]) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut current = String::new();
    let mut unsent = false;
    for pair in heard {
        // A pair that cannot be sent costs the leader a full recompute, never a lost report.
        let item = match serde_json::to_string(pair) {
            Ok(item) if PREFIX.len() + 2 + item.len() <= MAX_PAYLOAD => item,
            _ => {
                unsent = true;
                continue;
            }
        };
        if !current.is_empty() && current.len() + 1 + item.len() + 1 > MAX_PAYLOAD {
            current.push(']');
            payloads.push(std::mem::take(&mut current));
        }
        if current.is_empty() {
            current.push_str(PREFIX);
            current.push('[');
        } else {
            current.push(',');
        }
        current.push_str(&item);
    }
    if !current.is_empty() {
        current.push(']');
        payloads.push(current);
    }
    if unsent {
        payloads.push(Change::Everything.to_notification());
    }
    payloads
}

/// A payload of heartbeats read back: `None` when `payload` is another kind
/// of notification ([`Change::from_notification`]).
pub fn decode(payload: &str) -> Option<Result<Vec<Heard>, serde_json::Error>> {
    payload.strip_prefix(PREFIX).map(serde_json::from_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Node;

    fn load(cpu: f64, at: i64) -> Load {
        Load::of(&Node { cpu_usage: cpu, last_heartbeat_ms: Some(at), ..Node::new("x") }).unwrap()
    }

    #[test]
    fn the_outbox_keeps_the_newest_report_and_asks_for_a_read_when_out_of_order() {
        let mut o = Outbox::default();
        o.put("a", Some(load(10.0, 100)));
        o.put("a", Some(load(20.0, 200)));
        o.put("b", Some(load(50.0, 500)));
        o.put("b", Some(load(40.0, 400)));
        o.put("c", None);
        o.put("d", Some(load(1.0, 100)));
        o.put("d", Some(load(2.0, 100)));
        let taken = o.take();
        assert_eq!(
            taken,
            vec![("a".into(), Some(load(20.0, 200))), ("b".into(), None), ("c".into(), None), ("d".into(), None)],
            "in order: the newest; out of order or within a millisecond: read the node"
        );
        assert!(o.take().is_empty(), "taking empties it");
        o.put("b", Some(load(60.0, 600)));
        assert_eq!(o.take(), vec![("b".into(), Some(load(60.0, 600)))], "a new batch starts clean");
    }

    #[test]
    fn payloads_round_trip_under_postgres_limit_whatever_the_names() {
        let mut heard: Vec<Heard> = (0..1_000)
            .map(|i| (format!("edge-{i:04}.example"), Some(load(f64::from(i) / 7.0, 1_700_000_000_000 + i64::from(i)))))
            .collect();
        heard.push(("tab\tquote\"newline\n☃".into(), Some(load(99.9, 1))));
        heard.push(("read-me".into(), None));
        let payloads = encode(&heard);
        assert!(payloads.len() > 1, "1 000 reports do not fit one payload");
        let mut back = Vec::new();
        for p in &payloads {
            assert!(p.len() <= MAX_PAYLOAD, "{} bytes", p.len());
            back.extend(decode(p).expect("a loads payload").expect("valid JSON"));
        }
        assert_eq!(back.len(), heard.len());
        for (b, h) in back.iter().zip(&heard) {
            assert!(b == h, "every report, figures exact (f64 round-trips through JSON): {b:?} != {h:?}");
        }
        assert!(decode("node:gz-01").is_none() && decode("liveness").is_none(), "other notifications are not loads");
        assert!(decode("loads:[[\"a\"").unwrap().is_err(), "a cut payload is an error, not a guess");
    }

    #[test]
    fn a_report_too_long_for_any_payload_asks_for_a_full_recompute() {
        let heard = vec![("ok".to_string(), Some(load(1.0, 1))), ("n".repeat(MAX_PAYLOAD), Some(load(1.0, 1)))];
        let payloads = encode(&heard);
        assert_eq!(payloads.len(), 2, "{payloads:?}");
        assert_eq!(decode(&payloads[0]).unwrap().unwrap(), heard[..1].to_vec());
        assert_eq!(Change::from_notification(&payloads[1]), Change::Everything);
        // NaN goes out as `null`: the leader cannot read the payload (and recomputes in full).
        let nan = encode(&[("a".to_string(), Some(load(f64::NAN, 1)))]);
        assert!(decode(&nan[0]).unwrap().is_err(), "{nan:?}");
    }
}
