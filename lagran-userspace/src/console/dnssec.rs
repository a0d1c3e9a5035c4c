//! The console's DNSSEC warning: a signed zone whose earliest signature
//! served expires within half its refresh time (signing has stopped: a
//! healthy signer keeps every signature above the refresh time), and a key
//! event overdue by more than [`STUCK_AFTER_SECS`] (a rollover that does not
//! advance: no leader, or a key that cannot be made or opened).

use serde::Serialize;

/// A key event this late means the rollover is stuck.
pub const STUCK_AFTER_SECS: i64 = 600;

/// One warning line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DnssecWarning {
    pub zone: String,
    pub message: String,
}

/// A signed zone as the warning sees it.
pub struct ZoneState<'a> {
    pub zone: &'a str,
    /// The earliest signature expiration served (Unix seconds).
    pub oldest_expiry: Option<i64>,
    /// The zone's refresh time (seconds).
    pub refresh_secs: u32,
    /// The next key event: when it is due (Unix seconds) and what it is.
    pub next_event: Option<(i64, &'a str)>,
}

/// The warnings at `now` (Unix seconds), zone by zone.
pub fn warnings<'a>(zones: impl IntoIterator<Item = ZoneState<'a>>, now: i64) -> Vec<DnssecWarning> {
    let mut out = Vec::new();
    for z in zones {
        if let Some(at) = z.oldest_expiry {
            let left = at - now;
            if left < i64::from(z.refresh_secs / 2) {
                let when = if left < 0 { "has expired".to_string() } else { format!("expires in {} h", left / 3600) };
                out.push(DnssecWarning {
                    zone: z.zone.into(),
                    message: format!("a signature served {when}: the zone is not being re-signed"),
                });
            }
        }
        if let Some((at, what)) = z.next_event
            && now - at > STUCK_AFTER_SECS
        {
            out.push(DnssecWarning {
                zone: z.zone.into(),
                message: format!("key rollover stuck: \"{what}\" was due {} min ago", (now - at) / 60),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_of_near_expiry_and_overdue_events_only() {
        let now = 1_000_000;
        let day = 86_400;
        let healthy = ZoneState {
            zone: "a.test",
            oldest_expiry: Some(now + 10 * day),
            refresh_secs: (10 * day) as u32,
            next_event: Some((now - 60, "soon")),
        };
        assert!(warnings([healthy], now).is_empty(), "a minute late is a build away, not stuck");
        let ageing = ZoneState {
            zone: "b.test",
            oldest_expiry: Some(now + 4 * day),
            refresh_secs: (10 * day) as u32,
            next_event: None,
        };
        let stuck = ZoneState {
            zone: "c.test",
            oldest_expiry: None,
            refresh_secs: 3600,
            next_event: Some((now - 3600, "ZSK 1 removed")),
        };
        let w = warnings([ageing, stuck], now);
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].message, "a signature served expires in 96 h: the zone is not being re-signed");
        assert_eq!(w[1].message, "key rollover stuck: \"ZSK 1 removed\" was due 60 min ago");
    }
}
