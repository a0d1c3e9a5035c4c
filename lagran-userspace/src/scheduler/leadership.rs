//! Leadership: whether this process builds and publishes tables, and under
//! which term (epoch) they are stamped and fenced.
//!
//! Outside a cluster a process is [`Role::Alone`] and always leads. In a
//! cluster of control processes sharing a database (PostgreSQL), the election
//! loop above the scheduler moves it between standby and leader; a leader
//! whose table could not be stored under its term is fenced: it stops
//! publishing until it wins a new term.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use super::{Scheduler, SchedulerError};

/// Where this process stands among the control processes of one database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Role {
    /// No cluster: this process builds and publishes.
    Alone = 0,
    /// In a cluster, not leading: writes are passed on, tables adopted.
    Standby = 1,
    /// In a cluster, leading under the current epoch.
    Leader = 2,
    /// In a cluster, the term ended while leading (a store was refused).
    Fenced = 3,
}

impl Role {
    fn of(v: u8) -> Role {
        match v {
            0 => Role::Alone,
            1 => Role::Standby,
            2 => Role::Leader,
            _ => Role::Fenced,
        }
    }
}

/// The role, the term and the leader's address. The role is one value, so
/// leading, clustered and fenced can never disagree.
pub struct Leadership {
    role: AtomicU8,
    /// The term stamped on every table published (0 outside a cluster).
    epoch: AtomicU64,
    /// The leader's API URL, for a standby's refusals.
    leader_hint: Mutex<String>,
}

impl Default for Leadership {
    fn default() -> Leadership {
        Leadership { role: AtomicU8::new(Role::Alone as u8), epoch: AtomicU64::new(0), leader_hint: Mutex::default() }
    }
}

impl Leadership {
    fn role(&self) -> Role {
        Role::of(self.role.load(Ordering::SeqCst))
    }

    fn set(&self, role: Role) {
        self.role.store(role as u8, Ordering::SeqCst);
    }

    /// Whether this process builds and publishes tables (always, outside a cluster).
    pub fn leading(&self) -> bool {
        matches!(self.role(), Role::Alone | Role::Leader)
    }

    /// Whether tables are stored, fenced by the epoch, before they are published.
    pub fn clustered(&self) -> bool {
        self.role() != Role::Alone
    }

    /// Whether storing a table found this process's term ended.
    pub fn fenced(&self) -> bool {
        self.role() == Role::Fenced
    }

    /// The leadership term stamped on the tables this process publishes.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Joins a cluster as a standby.
    pub fn join_cluster(&self) {
        self.set(Role::Standby);
    }

    /// Leads under `epoch` (the caller holds the build lock and has reset
    /// what a standby does not keep). A process outside a cluster stays
    /// alone: it leads already and stores no tables.
    fn take_lead(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::SeqCst);
        if self.role() != Role::Alone {
            self.set(Role::Leader);
        }
    }

    /// Stops leading (the term ended): back to a standby. A fenced process
    /// stays fenced until its next term.
    pub fn step_down(&self) {
        if self.role() != Role::Fenced {
            self.set(Role::Standby);
        }
    }

    /// The term ended while this process led: it no longer publishes.
    pub(super) fn fence(&self) {
        self.set(Role::Fenced);
    }

    /// The leader's API URL (for a standby's refusals).
    pub fn set_leader_hint(&self, leader: &str) {
        *self.leader_hint.lock().expect("leader hint lock poisoned") = leader.to_string();
    }

    /// `Ok` when this process leads; else the refusal naming the leader.
    pub(super) fn check_leading(&self) -> Result<(), SchedulerError> {
        if self.leading() {
            return Ok(());
        }
        let leader = self.leader_hint.lock().expect("leader hint lock poisoned").clone();
        Err(SchedulerError::NotLeader { leader: if leader.is_empty() { "none yet".into() } else { leader } })
    }
}

impl Scheduler {
    /// Takes the lead under `epoch`: tables are numbered above `stored_max`
    /// (every version any leader stored) and the next recompute publishes
    /// even if nothing changed, so every NS host moves to the new epoch.
    pub async fn lead(&self, epoch: u64, stored_max: u64) {
        let guard = self.build.lock().await;
        self.publisher.begin_term(&guard, stored_max);
        // As a standby this process built nothing: the leader's writes went by.
        self.pending.forget_reads();
        self.forwarder.discard();
        self.measurements_changed_elsewhere();
        self.health.fail_static().took_lead(crate::clock::now_ms());
        self.leadership.take_lead(epoch);
    }
}
