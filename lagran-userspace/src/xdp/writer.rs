//! [`MapWriter::sync`] makes the maps say what a [`RouteTable`] says, with
//! *diffed* writes: it remembers what it last wrote and only inserts, updates or
//! deletes what changed. Answer ids are content-addressed, so an answer that did
//! not change keeps its id and the trie entries pointing at it are not touched.
//! The LPM trie is never rebuilt: freeing a large trie stalls a CPU.
//!
//! Write order, so that a packet racing a sync sees either the old answer, the
//! new answer, or no answer (and is passed to userspace), never a wrong one:
//! new answers → new RRSIGs → trie inserts/updates → name inserts → name
//! deletes → trie deletes → RRSIGs gone → answer ids freed (they are reused
//! only by a later sync, after every trie entry pointing at them is gone).
//! A name whose zone becomes signed is marked so after its RRSIGs are in,
//! and unmarked before they go.
//!
//! A failed write leaves the maps in an unknown state: the writer switches the
//! fast path off (every query goes to userspace, which answers correctly) and
//! the next sync clears the maps and writes everything again.

use std::collections::{BTreeSet, HashMap as StdHashMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use lagran_common::{
    answers::{self, AnswerV4, AnswerV6, MAX_ADDRS},
    config::Config,
    cookie::CookieConfig,
    names::{self, hash_wire},
};
use rustc_hash::FxHashMap;

use super::XdpError;
use super::counters::CounterSnapshot;
use super::diff::{Route, RouteDiff, answer_of, diff_maps, diff_routes, diff_spliced, routes_in, routes_of};
use super::maps::Maps;
use super::name_slots::Put;
use super::route4_flat::{self, FlatRoute, FlatV4};
use super::rrsig::{self, RrsigWriter};
use super::wire_name::wire_key;
use crate::dns::settings::DnsSettings;
use crate::prefix_map::{PrefixMapV4, PrefixMapV6};
use crate::route_table::{Answer, AnswerState, RouteTable, ScheduledName};

/// What one [`MapWriter::sync`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncStats {
    pub names_upserted: usize,
    pub names_deleted: usize,
    pub routes_upserted: usize,
    pub routes_deleted: usize,
    /// Trie entries for the table after the sync.
    pub routes_total: usize,
    pub answers_written: usize,
    pub answers_freed: usize,
    /// Scheduled names left to userspace (name not representable, too many addresses…).
    pub names_skipped: usize,
    pub elapsed: Duration,
    /// Of `elapsed`: diffing the names' routes against those written last time.
    pub diff: Duration,
    /// Of `elapsed`: laying out and writing the flat IPv4 arrays.
    pub flat: Duration,
    /// Of `elapsed`: until the last changed name's IPv4 routes were where
    /// packets read them (its flat arrays, or the trie for a name without
    /// them); the trie's routes behind the arrays are written after.
    pub visible: Duration,
    /// Names whose routes were diffed over the blocks their build spliced
    /// only (their map was spliced from the one written last).
    pub names_spliced: usize,
    /// `lagran_rrsig` entries written (new or re-signed) and removed.
    pub rrsigs_written: usize,
    pub rrsigs_removed: usize,
}

impl SyncStats {
    /// Map writes (inserts, updates and deletes) done by the sync.
    pub fn writes(&self) -> usize {
        self.names_upserted
            + self.names_deleted
            + self.routes_upserted
            + self.routes_deleted
            + self.answers_written
            + self.answers_freed
            + self.rrsigs_written
            + self.rrsigs_removed
    }
}

/// The `A` and `AAAA` records of one route-table answer: written at one id of
/// `lagran_answers` and `lagran_answers6`, so one trie value names both.
type AnswerPair = (AnswerV4, AnswerV6);

/// A name's prefix maps and answer ids as last written: a table that shares
/// the same maps (an incremental build left the name alone) with the same ids
/// has nothing to write for it.
struct Written {
    v4: PrefixMapV4,
    v6: PrefixMapV6,
    ids: Vec<Option<u32>>,
    /// IPv4 trie entries made from them.
    routes4: usize,
}

/// What a sync wants the maps to hold, worked out (and the new answers
/// written) before any trie entry or name is.
#[derive(Default)]
struct Plan {
    /// Wire key -> name id of every name the fast path serves.
    names: StdHashMap<Vec<u8>, u32>,
    /// The names in table order: the order they are placed in `lagran_names`.
    order: Vec<Vec<u8>>,
    /// IPv6 trie entries per name id, sorted by (addr, len).
    routes6: StdHashMap<u32, Vec<Route<u128>>>,
    /// Every answer the table uses, with its id.
    used: FxHashMap<AnswerPair, u32>,
    /// Names whose entries stand as written.
    kept: HashSet<u32>,
    /// What every name's entries are made from.
    written: StdHashMap<u32, Written>,
    /// Ids of the names in a signed zone (`NameValue::signed`).
    signed: HashSet<u32>,
    /// The RRSIG of every answer of those names.
    rrsigs: rrsig::Entries,
}

/// The steps of [`MapWriter::sync`], in the order it takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncStep {
    /// New answers and every RRSIG of the table's signed answers written.
    Answers,
    /// Route entries inserted, re-pointed and deleted for the names served.
    Routes,
    /// Names placed (and those no longer served given up).
    Names,
    /// Routes of names gone and RRSIGs of answers no longer signed removed.
    Removed,
    /// Answers nothing points at freed.
    Freed,
}

/// Keeps the maps equal to the route table, writing only differences.
pub struct MapWriter {
    maps: Maps,
    config: Config,
    /// Whether the fast path may answer (false: stale table with a fallback, or
    /// switched off by the operator). Answering also needs a synced table.
    allowed: bool,
    synced: bool,
    /// Written names: wire key -> (name id, its flat IPv4 block + 1).
    names: StdHashMap<Vec<u8>, (u32, u32)>,
    /// Written IPv6 trie entries per name id, sorted by (addr, len).
    routes6: StdHashMap<u32, Vec<Route<u128>>>,
    /// What each name's written entries were made from.
    written: StdHashMap<u32, Written>,
    /// Written answers: content -> id.
    /// Keyed by the answers' whole records (~200 bytes each, thousands per
    /// fleet-sized table): hashed with FxHash, not SipHash (our own data).
    answers: FxHashMap<AnswerPair, u32>,
    /// Written `lagran_rrsig` entries.
    rrsigs: RrsigWriter,
    free_ids: Vec<u32>,
    next_id: u32,
    /// A write failed: clear and rewrite everything on the next sync.
    needs_reset: bool,
}

impl MapWriter {
    /// Writes the config (fast path off until the first successful sync) and
    /// the listen set `0.0.0.0:dns_port` — every IPv4 address, as where no
    /// interface is known; the loader narrows it with [`Maps::set_listen`].
    pub fn new(mut maps: Maps, dns_port: u16, udp_payload: u16) -> Result<MapWriter, XdpError> {
        // The RRL slot key: random per attach (std's RandomState draws it from the OS).
        let rrl_seed = std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0u64);
        let config = Config {
            dns_port,
            udp_payload,
            enabled: 0,
            rrl_rate: 0,
            rrl_slip: 0,
            rrl_floor: 0,
            rrl_seed,
            tap_every: 0,
            _pad: 0,
        };
        maps.set_config(&config)?;
        maps.set_listen(&[
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, dns_port)),
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, dns_port)),
        ])?;
        let fresh = maps.fresh();
        Ok(MapWriter {
            maps,
            config,
            allowed: true,
            synced: false,
            names: StdHashMap::new(),
            routes6: StdHashMap::new(),
            written: StdHashMap::new(),
            answers: FxHashMap::default(),
            rrsigs: RrsigWriter::default(),
            free_ids: Vec::new(),
            next_id: 0,
            // Maps a load just created are empty. Others (opened from pins) may
            // hold anything: emptying them walks every answer slot and both
            // flat arrays, 131 072 map reads and 20 MiB of stores, which is
            // why fresh maps skip it (seconds per writer in a TCG guest).
            needs_reset: !fresh,
        })
    }

    /// Publishes the server cookie secret and clock (see `lagran_common::cookie`).
    pub fn set_cookie(&mut self, c: &CookieConfig) -> Result<(), XdpError> {
        self.maps.set_cookie(c)
    }

    /// Sets the program's response rate limiting (`[rrl]`, see `dns::rrl`).
    pub fn set_rrl(&mut self, settings: &crate::dns::rrl::RrlSettings) -> Result<(), XdpError> {
        let (rrl_rate, rrl_slip, rrl_floor) = crate::dns::rrl::kernel_knobs(settings);
        let c = Config { rrl_rate, rrl_slip, rrl_floor, ..self.config };
        self.maps.set_config(&c)?;
        self.config = c;
        Ok(())
    }

    /// Samples one answer in `every` into the query log ring (0: none; see
    /// [`super::tap`]).
    pub fn set_tap_every(&mut self, every: u32) -> Result<(), XdpError> {
        let c = Config { tap_every: every, ..self.config };
        self.maps.set_config(&c)?;
        self.config = c;
        Ok(())
    }

    pub fn maps(&self) -> &Maps {
        &self.maps
    }

    /// Makes the program answer only packets to `addrs` (see [`Maps::set_listen`]).
    pub fn set_listen(&mut self, addrs: &[SocketAddr]) -> Result<(), XdpError> {
        self.maps.set_listen(addrs)
    }

    /// The maps, writable: for tests (see [`Maps::put_name_raw`]).
    #[doc(hidden)]
    pub fn maps_mut(&mut self) -> &mut Maps {
        &mut self.maps
    }

    pub fn counters(&self) -> Result<CounterSnapshot, XdpError> {
        self.maps.counters()
    }

    /// Whether the fast path currently answers.
    pub fn enabled(&self) -> bool {
        self.config.enabled != 0
    }

    /// Allows or forbids the fast path to answer (it answers only when allowed
    /// and synced). Forbid it when userspace would answer differently from the
    /// maps — see [`MapWriter::update_staleness`].
    pub fn set_allowed(&mut self, allowed: bool) -> Result<(), XdpError> {
        self.allowed = allowed;
        self.apply_enabled()
    }

    /// Once the control plane has not confirmed the table (last at
    /// `confirmed_at_ms`) for DNS_STALE_SECS and DNS_FALLBACK_IP is set,
    /// userspace answers the fallback; the maps still hold the stale answers,
    /// so the fast path must stand aside. Call it periodically.
    pub fn update_staleness(
        &mut self,
        confirmed_at_ms: i64,
        settings: &DnsSettings,
        now_ms: i64,
    ) -> Result<(), XdpError> {
        let stale = crate::dns::answer::is_stale(confirmed_at_ms, settings, now_ms) && settings.fallback_ip.is_some();
        if stale == self.allowed {
            self.set_allowed(!stale)?;
        }
        Ok(())
    }

    fn apply_enabled(&mut self) -> Result<(), XdpError> {
        let want = u32::from(self.allowed && self.synced && !self.needs_reset);
        if want != self.config.enabled {
            let c = Config { enabled: want, ..self.config };
            self.maps.set_config(&c)?;
            self.config = c;
        }
        Ok(())
    }

    /// Makes the maps answer what `table` answers, for `A` and `AAAA` queries.
    pub fn sync(&mut self, table: &RouteTable, settings: &DnsSettings) -> Result<SyncStats, XdpError> {
        self.sync_observed(table, settings, &mut |_| {})
    }

    /// [`MapWriter::sync`], calling `observe` after each of its steps with
    /// the maps as packets then see them (the fixtures check what the
    /// program answers between the steps).
    pub fn sync_observed(
        &mut self,
        table: &RouteTable,
        settings: &DnsSettings,
        observe: &mut dyn FnMut(SyncStep),
    ) -> Result<SyncStats, XdpError> {
        let started = Instant::now();
        if self.needs_reset {
            self.reset()?;
        }
        match self.sync_inner(table, settings, observe) {
            Ok(mut stats) => {
                // Version 0 is "no table": userspace answers fallback or SERVFAIL.
                self.synced = table.version != 0;
                self.apply_enabled()?;
                stats.elapsed = started.elapsed();
                Ok(stats)
            }
            Err(e) => {
                self.needs_reset = true;
                self.synced = false;
                let _ = self.apply_enabled();
                Err(e)
            }
        }
    }

    fn sync_inner(
        &mut self,
        table: &RouteTable,
        settings: &DnsSettings,
        observe: &mut dyn FnMut(SyncStep),
    ) -> Result<SyncStats, XdpError> {
        let started = Instant::now();
        let mut stats = SyncStats::default();
        // 1. Desired names, answers (written now, before anything points at
        //    them) with their RRSIGs (so a route re-pointed at a new answer
        //    of a signed zone is answered signed from its first packet), and
        //    trie entries.
        let mut plan = self.plan(table, settings, &mut stats)?;
        stats.rrsigs_written = self.rrsigs.write_changed(&mut self.maps, &plan.rrsigs)?;
        observe(SyncStep::Answers);
        // 2. Trie inserts, updates and deletes for every name still served.
        self.write_routes4(&mut plan, started, &mut stats)?;
        self.write_routes6(&plan, &mut stats)?;
        observe(SyncStep::Routes);
        // 3. Names.
        let (names, order) = (std::mem::take(&mut plan.names), std::mem::take(&mut plan.order));
        let placed = self.write_names(names, order, &plan.signed, &mut stats)?;
        observe(SyncStep::Names);
        // 4. Trie entries of names no longer served, and RRSIGs of answers no longer signed.
        self.remove_gone_routes(&plan, &mut stats)?;
        stats.rrsigs_removed = self.rrsigs.remove_gone(&mut self.maps, &plan.rrsigs)?;
        observe(SyncStep::Removed);
        // 5. Answers nothing points at any more.
        self.free_unused_answers(&plan.used, &mut stats)?;
        if let Some(flat) = self.maps.flat_mut() {
            flat.end_sync();
        }
        observe(SyncStep::Freed);
        self.names = placed;
        self.routes6 = plan.routes6;
        self.written = plan.written;
        Ok(stats)
    }

    /// Step 1 of a sync: the names the fast path serves, their answers (new
    /// ones written to the maps now) and what their trie entries are made from.
    fn plan(&mut self, table: &RouteTable, settings: &DnsSettings, stats: &mut SyncStats) -> Result<Plan, XdpError> {
        let mut plan = Plan::default();
        let mut owner: StdHashMap<u32, &str> = StdHashMap::new();
        // Name hash -> wire name: two names with one hash cannot share the key.
        let mut hashes: StdHashMap<u64, Vec<u8>> = StdHashMap::new();
        for name in table.scheduled_names() {
            let signatures = table.signed_zone_of(&name.name).map(|(_, s)| s);
            // A program without `lagran_rrsig` answers unsigned only: a signed
            // zone's names are then left to userspace.
            if signatures.is_some() && !self.maps.has_rrsig() {
                stats.names_skipped += 1;
                continue;
            }
            let Some(key) = fast_path_key(name, &mut hashes) else {
                stats.names_skipped += 1;
                continue;
            };
            if let Some(other) = owner.insert(name.id, &name.name) {
                return Err(XdpError::DuplicateNameId { id: name.id, a: other.to_string(), b: name.name.clone() });
            }
            let ids = self.answer_ids(name, settings, &mut plan.used, stats)?;
            if let Some(signatures) = signatures {
                plan.signed.insert(name.id);
                rrsig::add_name(name, &ids, signatures, settings, &mut plan.rrsigs);
            }
            if plan.names.insert(key.clone(), name.id).is_none() {
                plan.order.push(key);
            }
            self.plan_routes(name, ids, &mut plan);
        }
        Ok(plan)
    }

    /// What `name`'s trie entries are made from: when they are the very maps
    /// written last time with the same answers, the entries stand.
    fn plan_routes(&mut self, name: &ScheduledName, ids: Vec<Option<u32>>, plan: &mut Plan) {
        let last = self.written.get(&name.id);
        if last.is_some_and(|w| w.v4.shares(&name.v4) && w.v6.shares(&name.v6) && w.ids == ids) {
            let routes4 = last.map_or(0, |w| w.routes4);
            plan.routes6.insert(name.id, self.routes6.remove(&name.id).unwrap_or_default());
            plan.kept.insert(name.id);
            plan.written.insert(name.id, Written { v4: name.v4.clone(), v6: name.v6.clone(), ids, routes4 });
            return;
        }
        plan.routes6.insert(name.id, routes_of(&name.v6, &ids));
        plan.written.insert(name.id, Written { v4: name.v4.clone(), v6: name.v6.clone(), ids, routes4: 0 });
    }

    /// Step 2, IPv4: the prefix maps written last time against this table's,
    /// block by block (blocks without a valid answer get no entry: the
    /// program passes them), into the trie and the flat arrays.
    fn write_routes4(&mut self, plan: &mut Plan, started: Instant, stats: &mut SyncStats) -> Result<(), XdpError> {
        for (&id, want) in plan.written.iter_mut() {
            if plan.kept.contains(&id) {
                stats.routes_total += want.routes4;
                continue;
            }
            write_name_routes4(&mut self.maps, id, self.written.get(&id), want, started, stats)?;
        }
        Ok(())
    }

    /// Step 2, IPv6: the trie entries written last time against the plan's.
    fn write_routes6(&mut self, plan: &Plan, stats: &mut SyncStats) -> Result<(), XdpError> {
        let empty6 = Vec::new();
        for (&id, want) in &plan.routes6 {
            if plan.kept.contains(&id) {
                stats.routes_total += want.len();
                continue;
            }
            let have = self.routes6.get(&id).unwrap_or(&empty6);
            let (up, del, _) = diff_routes(have.iter().copied(), want.iter().copied());
            for r in &up {
                self.maps.insert_route6(id, r.addr, r.len, r.value)?;
            }
            for r in &del {
                self.maps.remove_route6(id, r.addr, r.len)?;
            }
            stats.routes_upserted += up.len();
            stats.routes_deleted += del.len();
            stats.routes_total += want.len();
        }
        Ok(())
    }

    /// Step 3: names gone are given up, then every served name placed (in
    /// `order`, the table's). Returns the names placed, with their flat blocks.
    fn write_names(
        &mut self,
        want: StdHashMap<Vec<u8>, u32>,
        order: Vec<Vec<u8>>,
        signed: &HashSet<u32>,
        stats: &mut SyncStats,
    ) -> Result<StdHashMap<Vec<u8>, (u32, u32)>, XdpError> {
        let want: StdHashMap<Vec<u8>, (u32, u32)> = want
            .into_iter()
            .map(|(key, id)| {
                let route4 = self.maps.flat().map_or(0, |f| f.route4(id));
                (key, (id, route4))
            })
            .collect();
        if want.len() > names::MAX_ENTRIES as usize {
            return Err(XdpError::Full {
                map: names::MAP_NAME,
                max: names::MAX_ENTRIES,
                what: format!("{} names", want.len()),
            });
        }
        // Slots given up in the last sync are reusable now; those of names gone
        // now, from the next sync on.
        self.maps.names_mut().begin_sync();
        for key in self.names.keys() {
            if !want.contains_key(key) && self.maps.names_mut().remove(key)? {
                stats.names_deleted += 1;
            }
        }
        // In table order, so which names a full probe window leaves to
        // userspace does not change from one sync to the next.
        let mut placed = StdHashMap::with_capacity(want.len());
        for key in order {
            let Some(&(id, route4)) = want.get(&key) else { continue };
            match self.maps.names_mut().put(&key, id, route4, u32::from(signed.contains(&id)))? {
                Put::Written => stats.names_upserted += 1,
                Put::Unchanged => {}
                // No slot: userspace answers it (warned by `NameSlots`); tried again next sync.
                Put::NoRoom => {
                    stats.names_skipped += 1;
                    continue;
                }
            }
            placed.insert(key, (id, route4));
        }
        Ok(placed)
    }

    /// Step 4: the trie entries (and flat blocks) of names the plan no longer serves.
    fn remove_gone_routes(&mut self, plan: &Plan, stats: &mut SyncStats) -> Result<(), XdpError> {
        for (&id, have) in &self.written {
            if !plan.written.contains_key(&id) {
                for r in routes_in(&have.v4, &have.ids) {
                    self.maps.remove_route4(id, r.addr, r.len)?;
                }
                stats.routes_deleted += have.routes4;
                if let Some(flat) = self.maps.flat_mut() {
                    flat.remove(id);
                }
            }
        }
        for (&id, have) in &self.routes6 {
            if !plan.routes6.contains_key(&id) {
                for r in have {
                    self.maps.remove_route6(id, r.addr, r.len)?;
                }
                stats.routes_deleted += have.len();
            }
        }
        Ok(())
    }

    /// Step 5: answers nothing points at any more are cleared, and their ids
    /// reusable from the next sync on.
    fn free_unused_answers(
        &mut self,
        used: &FxHashMap<AnswerPair, u32>,
        stats: &mut SyncStats,
    ) -> Result<(), XdpError> {
        let unused: Vec<(AnswerPair, u32)> =
            self.answers.iter().filter(|(a, _)| !used.contains_key(*a)).map(|(a, id)| (*a, *id)).collect();
        for (a, id) in unused {
            self.maps.clear_answer(id)?;
            self.answers.remove(&a);
            self.free_ids.push(id);
            stats.answers_freed += 1;
        }
        // Lowest ids first, so the array stays dense.
        self.free_ids.sort_unstable_by(|a, b| b.cmp(a));
        Ok(())
    }

    /// The answer id of every answer of `name` (index -> id; `None` for an answer
    /// the fast path must leave to userspace), writing new answers to the map.
    fn answer_ids(
        &mut self,
        name: &ScheduledName,
        settings: &DnsSettings,
        used: &mut FxHashMap<AnswerPair, u32>,
        stats: &mut SyncStats,
    ) -> Result<Vec<Option<u32>>, XdpError> {
        // Plain answers first: a canary answer refers to its target's id.
        let mut ids: Vec<Option<u32>> = Vec::with_capacity(name.answers.len());
        for a in name.answers.iter() {
            if !kernel_answers(a) {
                ids.push(None);
                continue;
            }
            let content = plain_answer(a, settings);
            ids.push(Some(self.ensure_answer(content, used, stats)?));
        }
        for (i, a) in name.answers.iter().enumerate() {
            let Some(c) = a.canary.filter(|_| kernel_answers(a)) else { continue };
            let target = ids.get(c.answer as usize).copied().flatten();
            ids[i] = match target {
                Some(target_id) if (1..=100).contains(&c.percent) => {
                    let (v4, v6) = plain_answer(a, settings);
                    let (canary_percent, canary_id) = (c.percent as u32, target_id);
                    let content =
                        (AnswerV4 { canary_percent, canary_id, ..v4 }, AnswerV6 { canary_percent, canary_id, ..v6 });
                    Some(self.ensure_answer(content, used, stats)?)
                }
                // An inconsistent split: userspace decides (it treats it as no table).
                _ => None,
            };
        }
        Ok(ids)
    }

    fn ensure_answer(
        &mut self,
        content: AnswerPair,
        used: &mut FxHashMap<AnswerPair, u32>,
        stats: &mut SyncStats,
    ) -> Result<u32, XdpError> {
        if let Some(&id) = used.get(&content) {
            return Ok(id);
        }
        let id = match self.answers.get(&content) {
            Some(&id) => id,
            None => {
                let id = match self.free_ids.pop() {
                    Some(id) => id,
                    None if self.next_id < answers::MAX_ENTRIES => {
                        self.next_id += 1;
                        self.next_id - 1
                    }
                    None => {
                        return Err(XdpError::Full {
                            map: answers::MAP_NAME,
                            max: answers::MAX_ENTRIES,
                            what: "too many distinct answers".into(),
                        });
                    }
                };
                if let Err(e) = self.maps.set_answer(id, content.0, content.1) {
                    self.free_ids.push(id);
                    return Err(e);
                }
                self.answers.insert(content, id);
                stats.answers_written += 1;
                id
            }
        };
        used.insert(content, id);
        Ok(id)
    }

    /// Empties the maps (every key, including entries from an earlier process)
    /// and forgets what was written.
    fn reset(&mut self) -> Result<(), XdpError> {
        self.maps.clear()?;
        self.names.clear();
        self.written.clear();
        self.routes6.clear();
        self.answers.clear();
        self.rrsigs.clear();
        self.free_ids.clear();
        self.next_id = 0;
        self.needs_reset = false;
        Ok(())
    }
}

/// Whether the fast path can send this answer: a CNAME (a name in CNAME mode)
/// and an unlocated public block (answered for the resolver's address, which
/// the program does not look up) are userspace's, so their blocks get no trie
/// entry and the program passes them.
fn kernel_answers(a: &Answer) -> bool {
    a.hostname.is_none() && a.state != AnswerState::Resolver
}

/// The answer as the fast path sends it: the TTL the responder would answer
/// (`dns::scheduled_ttl`, the same for `A` and `AAAA`), at most four addresses
/// of each family (the responder takes the same four), no canary.
fn plain_answer(a: &Answer, settings: &DnsSettings) -> AnswerPair {
    let ttl = crate::dns::scheduled_ttl(a.ttl, settings);
    let addrs: Vec<[u8; 4]> = a.ipv4.iter().take(MAX_ADDRS).map(|ip| ip.octets()).collect();
    let addrs6: Vec<[u8; 16]> = a.ipv6.iter().take(MAX_ADDRS).map(|ip| ip.octets()).collect();
    (AnswerV4::new(ttl, &addrs), AnswerV6::new(ttl, &addrs6))
}

/// The `lagran_names` key of a scheduled name, or `None` when userspace
/// answers it: a name that cannot be a key, a name with ECS off, or one that
/// hashes like another name already planned (recorded in `hashes`).
fn fast_path_key(name: &ScheduledName, hashes: &mut StdHashMap<u64, Vec<u8>>) -> Option<Vec<u8>> {
    let Some(key) = wire_key(&name.name) else {
        tracing::warn!(name = %name.name, "name cannot be a fast-path key; userspace answers it");
        return None;
    };
    if !name.ecs {
        // The kernel decides by the ECS address when there is one; a name with
        // ECS off is answered for the resolver's address: userspace answers it.
        return None;
    }
    let hash = hash_wire(&key);
    match hashes.get(&hash) {
        Some(other) if *other != key => {
            tracing::warn!(name = %name.name, "name hashes like another scheduled name; userspace answers it");
            None
        }
        _ => {
            hashes.insert(hash, key.clone());
            Some(key)
        }
    }
}

/// Step 2 of a sync for one name's IPv4 routes (`old`: what was written for
/// it last time, if anything): diffs them, then writes the trie and the flat
/// arrays in the order packets need.
fn write_name_routes4(
    maps: &mut Maps,
    id: u32,
    old: Option<&Written>,
    want: &mut Written,
    started: Instant,
    stats: &mut SyncStats,
) -> Result<(), XdpError> {
    let diffing = Instant::now();
    // The usual incremental build splices the name's map from the one
    // written last: then only the blocks it split again are compared.
    let spliced = old.and_then(|o| diff_spliced((&o.v4, &o.ids, o.routes4), (&want.v4, &want.ids)));
    stats.names_spliced += usize::from(spliced.is_some());
    let (up, del, count): RouteDiff<u32> = match spliced {
        Some(d) => d,
        None => diff_maps(old.map(|o| (&o.v4, o.ids.as_slice())), (&want.v4, &want.ids)),
    };
    stats.diff += diffing.elapsed();
    want.routes4 = count;
    // Packets read the flat arrays first and the trie only where a slot says
    // "ask the trie" (a /24 split into longer routes). So the trie's routes
    // in a /24 that becomes split go in before the arrays say so, and
    // every other write after the arrays: the change reaches packets
    // without waiting for those. (A /24 split before and after is read
    // from the trie all along: old routes until the new ones are in.
    // Without the arrays, or for a name that did not fit them, packets
    // read the trie alone and get the change when the sync is done.)
    let split_before = |r: &Route| old.is_some_and(|o| o.v4.lookup_prefix(r.addr & !0xff).len > 24);
    let newly_split = |r: &&Route| r.len > 24 && !split_before(r);
    for r in up.iter().filter(newly_split) {
        maps.insert_route4(id, r.addr, r.len, r.value)?;
    }
    if let Some(flat) = maps.flat_mut() {
        let laying = Instant::now();
        let route4 = update_flat(flat, id, want, (&up, &del), old.is_none());
        stats.flat += laying.elapsed();
        if route4 != 0 {
            stats.visible = started.elapsed();
        }
    }
    for r in up.iter().filter(|r| !newly_split(r)) {
        maps.insert_route4(id, r.addr, r.len, r.value)?;
    }
    for r in &del {
        maps.remove_route4(id, r.addr, r.len)?;
    }
    if maps.flat().is_none_or(|f| f.route4(id) == 0) {
        stats.visible = started.elapsed();
    }
    stats.routes_upserted += up.len();
    stats.routes_deleted += del.len();
    stats.routes_total += count;
    Ok(())
}

/// Lays out again the /16s of name `id` that a changed route (`changed`:
/// the diff's upserts and deletes) covers, from `want`; `new_name`: nothing
/// was written for it before. Returns the name's flat block (0: none).
fn update_flat(flat: &mut FlatV4, id: u32, want: &Written, changed: (&[Route], &[Route]), new_name: bool) -> u32 {
    let touched: BTreeSet<u16> =
        changed.0.iter().chain(changed.1).flat_map(|r| route4_flat::sixteens(r.addr, r.len)).collect();
    let routes16 = |hi: u16| -> Vec<FlatRoute> {
        let (lo, top) = (u32::from(hi) << 16, u32::from(hi) << 16 | 0xffff);
        let blocks = want.v4.iter_from(lo).take_while(|p| p.addr <= top);
        blocks.filter_map(|p| answer_of(&want.ids, p.value).map(|a| (p.addr, p.len, a))).collect()
    };
    let all = || routes_in(&want.v4, &want.ids).map(|r| (r.addr, r.len, r.value.answer_id)).collect();
    flat.update(id, &touched, routes16, all, new_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_answer_applies_the_responders_ttl_and_four_addresses() {
        let settings = DnsSettings { ttl: 30, min_ttl: 5, ..DnsSettings::default() };
        let a = Answer { ttl: 300, ipv4: (1..=6).map(|i| Ipv4Addr::new(10, 0, 0, i)).collect(), ..Answer::default() };
        let (v, _) = plain_answer(&a, &settings);
        assert_eq!(v.ttl, 30, "min(route ttl, DNS_TTL)");
        assert_eq!(v.count, 4);
        assert_eq!(v.addrs[3], [10, 0, 0, 4]);
        let a = Answer { ttl: 1, ..a };
        assert_eq!(plain_answer(&a, &settings).0.ttl, 5, "never below 5 s");
    }

    #[test]
    fn cname_answers_are_left_to_userspace() {
        let a = Answer { ipv4: vec![Ipv4Addr::new(10, 0, 0, 1)], ..Answer::default() };
        assert!(kernel_answers(&a), "addresses: the fast path answers");
        let c = Answer { hostname: Some("gz-01.edge.lagran.net".into()), ..a };
        assert!(!kernel_answers(&c), "a CNAME: no trie entry, the program passes the query");
        let u = Answer { state: AnswerState::Resolver, ..Answer::default() };
        assert!(!kernel_answers(&u), "an unlocated block: userspace asks the resolver's address");
    }
}
