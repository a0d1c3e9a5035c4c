//! Response rate limiting of the answers this program sends, with the account
//! arithmetic of userspace's `dns::rrl` (BIND/Knot semantics): per client /24
//! or /56 and response class — here always "answer", the only class the
//! program sends — a credit of one second's responses, refilled at the rate,
//! floored at `-window × rate`; every `slip`-th limited response goes out
//! truncated. Accounts are per CPU (`lagran_rrl`). Time is `clock::interval_ns`
//! (the last scheduler tick: the tick counter, or a clock helper), and credit
//! is kept in units that make the refill a multiplication (`rrl::COST`): the
//! same bucket as userspace's, refilled per tick instead of per millisecond,
//! with no division per packet.

use lagran_common::{
    config::Config,
    rrl::{self, Account, COST, MAX_ELAPSED_NS},
};

use crate::{Client, maps};

/// `dns::rrl::ResponseClass::Answer`.
const CLASS_ANSWER: u64 = 0;

/// What to do with one answer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Send,
    Slip,
    Drop,
}

/// The account key of `dns::rrl::account_key` for an answer to `source`.
#[inline(always)]
fn key(source: &Client) -> u64 {
    let a = source.addr;
    let mapped = source.v6 != 0 && a.hi == 0 && a.lo >> 32 == 0xffff;
    if source.v6 == 0 || mapped {
        ((a.lo as u32) & 0xffff_ff00) as u64 | CLASS_ANSWER
    } else {
        (a.hi & !0xff) | 0x80 | CLASS_ANSWER
    }
}

/// Debits one answer to `source`'s account (`cfg.rrl_rate` > 0).
#[inline(always)]
pub fn decide(source: &Client, cfg: &Config) -> Decision {
    let k = key(source);
    let rate = cfg.rrl_rate as i64;
    let full = rate * COST;
    let now = crate::clock::interval_ns();
    let Some(p) = maps::rrl_slot(rrl::slot(k, cfg.rrl_seed)) else { return Decision::Send };
    // SAFETY: this CPU's value of a per-CPU map; XDP programs do not nest on a CPU.
    let a = unsafe { &mut *p };
    if a.key != k || a.at_ns == 0 {
        // A new account (or one taking over the slot) starts full and pays for
        // this answer (rate ≥ 1: credit stays ≥ 0).
        *a = Account { key: k, credit: full - COST, at_ns: now, limited: 0, _pad: 0 };
        return Decision::Send;
    }
    let mut credit = a.credit;
    if now > a.at_ns {
        // `rate` responses per second: `rate` units per nanosecond.
        let mut elapsed = now - a.at_ns;
        if elapsed > MAX_ELAPSED_NS {
            elapsed = MAX_ELAPSED_NS;
        }
        credit += elapsed as i64 * rate;
        if credit > full {
            credit = full;
        }
        a.at_ns = now;
    }
    credit -= COST;
    if credit < cfg.rrl_floor {
        credit = cfg.rrl_floor;
    }
    a.credit = credit;
    if credit >= 0 {
        return Decision::Send;
    }
    let limited = a.limited.wrapping_add(1);
    a.limited = limited;
    let slip = cfg.rrl_slip;
    if slip > 0 && limited % slip == 0 { Decision::Slip } else { Decision::Drop }
}
