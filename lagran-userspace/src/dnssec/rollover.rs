//! When each key of a zone moves to its next state: the rollover timings of
//! RFC 7583, as pure functions of the stored keys, the zone's policy and
//! the clock. The leader applies the events that are due before it builds a
//! table (the keeper); `lagran dnssec status` prints the others.
//!
//! - ZSK, pre-publication (RFC 6781 §4.1.1.1): a new ZSK is published
//!   without signing; after the DNSKEY TTL plus the propagation delay
//!   (RFC 7583 Ipub) it becomes active and the old one retired; the old one
//!   leaves the DNSKEY RRset after the largest TTL of the zone plus the
//!   propagation delay (Iret), when no cache holds a signature it made.
//! - KSK, double signature (RFC 6781 §4.1.2): a new KSK is published and
//!   signs the DNSKEY RRset beside the old one, and the CDS/CDNSKEY RRsets
//!   list both; after Ipub plus the time the parent takes to publish the new
//!   DS and that DS's TTL (`ds_wait_secs`), the new KSK is the only active
//!   one and the old one is removed (the CDS then lists the new key only).
//! - Turning signing off (RFC 8078 §4): every key is withdrawing — still
//!   signing, with the CDS/CDNSKEY DELETE records — for
//!   `dnssec_delete_wait_secs`, then removed and the zone served unsigned.

use crate::model::{KeyRole, KeyState, ZoneDnssec};
use crate::store::dnssec_keys::StoredKey;

/// The zone's timing, in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// The DNSKEY RRset's TTL (the zone's NS TTL).
    pub dnskey_ttl: u32,
    /// The largest TTL of any RRset the zone signs.
    pub max_ttl: u32,
    pub propagation: u32,
    pub ds_wait: u32,
    pub zsk_lifetime: u32,
    pub ksk_lifetime: u32,
    pub delete_wait: u32,
}

impl Timing {
    /// The timing of a zone with `policy` (`None`: signing off).
    pub fn of(policy: Option<&ZoneDnssec>, dnskey_ttl: u32, max_ttl: u32, delete_wait: u32) -> Timing {
        let p = policy.cloned().unwrap_or_default();
        Timing {
            dnskey_ttl,
            max_ttl: max_ttl.max(dnskey_ttl),
            propagation: p.propagation_secs,
            ds_wait: p.ds_wait_secs,
            zsk_lifetime: p.zsk_lifetime_secs,
            ksk_lifetime: p.ksk_lifetime_secs,
            delete_wait,
        }
    }

    /// RFC 7583 Ipub: a new key is in every cache's DNSKEY RRset.
    fn publish_ms(&self) -> i64 {
        (i64::from(self.dnskey_ttl) + i64::from(self.propagation)) * 1000
    }

    /// RFC 7583 Iret for a ZSK: no cache holds a signature the old key made.
    fn retire_ms(&self) -> i64 {
        (i64::from(self.max_ttl) + i64::from(self.propagation)) * 1000
    }
}

/// What an event does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Make a new key of `role`, stored in `state`.
    Generate { role: KeyRole, state: KeyState },
    /// Move the key `id` to `to`.
    Move { id: String, to: KeyState },
}

/// One event of a zone's keys: due at `at_ms` (`i64::MIN`: now).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub at_ms: i64,
    pub steps: Vec<Step>,
    /// What it is, for people.
    pub what: String,
}

const NOW: i64 = i64::MIN;

fn at(ms: Option<i64>) -> i64 {
    ms.unwrap_or(0)
}

/// Every coming event of one zone's keys (those not removed), signing on
/// (`signed`) or off. Several may be due at once; apply them in order.
pub fn events(keys: &[StoredKey], signed: bool, t: &Timing) -> Vec<Event> {
    if !signed {
        return withdrawal(keys, t);
    }
    let withdrawing: Vec<&StoredKey> = keys.iter().filter(|k| k.state == KeyState::Withdrawing).collect();
    if !withdrawing.is_empty() {
        return resumed(&withdrawing);
    }
    let mut out = Vec::new();
    for role in [KeyRole::Ksk, KeyRole::Zsk] {
        role_events(keys, role, t, &mut out);
    }
    out.sort_by_key(|e| e.at_ms);
    out
}

fn of(keys: &[StoredKey], role: KeyRole, state: KeyState) -> Vec<&StoredKey> {
    keys.iter().filter(|k| k.role == role && k.state == state).collect()
}

fn move_all(keys: &[&StoredKey], to: KeyState) -> Vec<Step> {
    keys.iter().map(|k| Step::Move { id: k.id.clone(), to }).collect()
}

/// The events of one role of a signed zone.
fn role_events(keys: &[StoredKey], role: KeyRole, t: &Timing, out: &mut Vec<Event>) {
    let name = role.as_str().to_uppercase();
    let active = of(keys, role, KeyState::Active);
    let published = of(keys, role, KeyState::Published);
    let generated = of(keys, role, KeyState::Generated);
    if active.is_empty() && published.is_empty() {
        let steps = match generated.last() {
            Some(g) => vec![Step::Move { id: g.id.clone(), to: KeyState::Active }],
            None => vec![Step::Generate { role, state: KeyState::Active }],
        };
        out.push(Event { at_ms: NOW, steps, what: format!("first {name} made active") });
        return;
    }
    if let Some(new) = published.last() {
        let wait = match role {
            KeyRole::Zsk => t.publish_ms(),
            KeyRole::Ksk => t.publish_ms() + i64::from(t.ds_wait) * 1000,
        };
        let mut steps = vec![Step::Move { id: new.id.clone(), to: KeyState::Active }];
        let old_to = if role == KeyRole::Zsk { KeyState::Retired } else { KeyState::Removed };
        steps.extend(move_all(&active, old_to));
        let what = format!("{name} {} becomes active, {name} {} {}", new.tag, tags(&active), old_to.as_str());
        out.push(Event { at_ms: at(new.published_at_ms).saturating_add(wait), steps, what });
    } else if let Some(g) = generated.first() {
        let steps = vec![Step::Move { id: g.id.clone(), to: KeyState::Published }];
        out.push(Event { at_ms: NOW, steps, what: format!("{name} {} published (rollover asked for)", g.tag) });
    } else if let Some(a) = active.last() {
        let lifetime = match role {
            KeyRole::Zsk => t.zsk_lifetime,
            KeyRole::Ksk => t.ksk_lifetime,
        };
        if lifetime > 0 {
            let due = at(a.active_at_ms).saturating_add(i64::from(lifetime) * 1000);
            let steps = vec![Step::Generate { role, state: KeyState::Published }];
            out.push(Event { at_ms: due, steps, what: format!("{name} rollover starts (a new {name} published)") });
        }
    }
    for old in of(keys, role, KeyState::Retired) {
        let due = at(old.retired_at_ms).saturating_add(t.retire_ms());
        let steps = vec![Step::Move { id: old.id.clone(), to: KeyState::Removed }];
        out.push(Event { at_ms: due, steps, what: format!("{name} {} removed", old.tag) });
    }
}

fn tags(keys: &[&StoredKey]) -> String {
    keys.iter().map(|k| k.tag.to_string()).collect::<Vec<_>>().join(",")
}

/// Signing turned off: every served key withdraws now, then all are removed.
fn withdrawal(keys: &[StoredKey], t: &Timing) -> Vec<Event> {
    let serving: Vec<&StoredKey> =
        keys.iter().filter(|k| k.state.served() && k.state != KeyState::Withdrawing).collect();
    let generated: Vec<&StoredKey> = keys.iter().filter(|k| k.state == KeyState::Generated).collect();
    let withdrawing: Vec<&StoredKey> = keys.iter().filter(|k| k.state == KeyState::Withdrawing).collect();
    let mut out = Vec::new();
    if !serving.is_empty() || !generated.is_empty() {
        let mut steps = move_all(&serving, KeyState::Withdrawing);
        steps.extend(move_all(&generated, KeyState::Removed));
        out.push(Event { at_ms: NOW, steps, what: "signing off: CDS/CDNSKEY DELETE published".into() });
    }
    if let Some(first) = withdrawing.iter().filter_map(|k| k.withdrawing_at_ms).min() {
        let due = first.saturating_add(i64::from(t.delete_wait) * 1000);
        let steps = move_all(&withdrawing, KeyState::Removed);
        out.push(Event { at_ms: due, steps, what: "keys removed, zone served unsigned".into() });
    }
    out
}

/// Signing turned back on during a withdrawal: the newest key of each role
/// signs again (the parent may still hold its DS), the others are removed.
fn resumed(withdrawing: &[&StoredKey]) -> Vec<Event> {
    let mut steps = Vec::new();
    for role in [KeyRole::Ksk, KeyRole::Zsk] {
        let of_role: Vec<&&StoredKey> = withdrawing.iter().filter(|k| k.role == role).collect();
        for (i, k) in of_role.iter().enumerate() {
            let to = if i + 1 == of_role.len() { KeyState::Active } else { KeyState::Removed };
            steps.push(Step::Move { id: k.id.clone(), to });
        }
    }
    vec![Event { at_ms: NOW, steps, what: "signing on again: the withdrawing keys sign".into() }]
}

/// The events of `events` due at `now_ms`.
pub fn due(events: Vec<Event>, now_ms: i64) -> Vec<Event> {
    events.into_iter().filter(|e| e.at_ms <= now_ms).collect()
}
