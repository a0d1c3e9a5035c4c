//! The fast path's maps: the only module that imports aya map types.
//!
//! [`MapWriter::sync`] makes the maps say what a [`RouteTable`] says, with
//! *diffed* writes: it remembers what it last wrote and only inserts, updates or
//! deletes what changed. Answer ids are content-addressed, so an answer that did
//! not change keeps its id and the trie entries pointing at it are not touched.
//! The LPM trie is never rebuilt (SPEC §2: freeing a large trie stalls a CPU).
//!
//! Write order, so that a packet racing a sync sees either the old answer, the
//! new answer, or no answer (and is passed to userspace), never a wrong one:
//! new answers → trie inserts/updates → name inserts → name deletes → trie
//! deletes → answer ids freed (they are reused only by a later sync, after
//! every trie entry pointing at them is gone).
//!
//! A failed write leaves the maps in an unknown state: the writer switches the
//! fast path off (every query goes to userspace, which answers correctly) and
//! the next sync clears the maps and writes everything again.

use std::collections::HashMap as StdHashMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use aya::Ebpf;
use aya::maps::{Array, HashMap, LpmTrie, Map, MapData, MapError, PerCpuArray, lpm_trie::Key};
use lagran_common::{
    answers::{self, AnswerV4, AnswerV6, MAX_ADDRS},
    config::{self, Config},
    cookie::{self, CookieConfig},
    counters::{self, Counter},
    listen::{self, ListenKey, ListenV4, ListenV6, ListenV6Entry, ListenValue},
    names::{self, NAME_MAX, NameValue, hash_wire},
    route_v4::{self, NAME_BITS, RouteV4Data, RouteValue},
    route_v6::{self, RouteV6Data},
};
use rustc_hash::FxHashMap;

use super::XdpError;
use super::name_slots::{NameSlots, Put};
use super::route4_flat::{self, FlatRoute, FlatV4};
use crate::config::DnsSettings;
use crate::prefix_map::{PrefixMapV4, PrefixMapV6};
use crate::route_table::{Answer, AnswerState, RouteTable, ScheduledName};

/// The map names the loader pins, in a stable order.
pub const MAP_NAMES: [&str; 9] = [
    config::MAP_NAME,
    listen::MAP_NAME,
    names::MAP_NAME,
    route_v4::MAP_NAME,
    answers::MAP_NAME,
    counters::MAP_NAME,
    route_v6::MAP_NAME,
    answers::MAP_NAME_V6,
    cookie::MAP_NAME,
];

/// Maps pinned beside [`MAP_NAMES`] when the object has them: the flat IPv4
/// route arrays (what the program reads for a name's IPv4 routes, so an SRE
/// and the bench see the answers the packets get) and the listen scans.
pub const OPTIONAL_MAP_NAMES: [&str; 4] = [
    lagran_common::route_v4_flat::MAP_NAME_L1,
    lagran_common::route_v4_flat::MAP_NAME_L2,
    listen::MAP_NAME_V4,
    listen::MAP_NAME_V6,
];

/// The `lagran_cookie` entry for `secrets`: the current secret as SipHash's
/// two key words, whether a previous one is still accepted at `now` (Unix
/// seconds), and the offset from the kernel's monotonic clock to Unix time.
/// `fixed_now` pins the program's clock (tests).
pub fn cookie_config(secrets: &crate::dns::cookie::Secrets, now: u64, fixed_now: Option<u32>) -> CookieConfig {
    let le = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 octets"));
    CookieConfig {
        k0: le(&secrets.current[..8]),
        k1: le(&secrets.current[8..]),
        unix_offset_ns: unix_minus_monotonic_ns(),
        enabled: 1,
        previous_in_grace: u32::from(secrets.previous.is_some_and(|(_, until)| now < until)),
        fixed_now: fixed_now.unwrap_or(0),
        _pad: 0,
    }
}

/// Unix time minus CLOCK_MONOTONIC (what `bpf_ktime_get_ns` reads), in nanoseconds.
pub fn unix_minus_monotonic_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only the struct passed.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let mono = ts.tv_sec * 1_000_000_000 + ts.tv_nsec;
    let unix =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0);
    unix - mono
}

fn map_err(map: &'static str) -> impl FnOnce(MapError) -> XdpError {
    move |source| XdpError::Map { map, source: Box::new(source) }
}

/// Typed handles on the fast path's maps.
pub struct Maps {
    config: Array<MapData, Config>,
    listen: HashMap<MapData, ListenKey, ListenValue>,
    names: NameSlots,
    routes: LpmTrie<MapData, RouteV4Data, RouteValue>,
    answers: Array<MapData, AnswerV4>,
    counters: PerCpuArray<MapData, u64>,
    routes6: LpmTrie<MapData, RouteV6Data, RouteValue>,
    answers6: Array<MapData, AnswerV6>,
    cookie: Array<MapData, CookieConfig>,
    /// The flat IPv4 route arrays (`None`: an object without them, or pinned maps).
    flat: Option<FlatV4>,
    /// The scanned IPv4 listen set (`None`: an object without it, or pinned maps).
    listen4: Option<Array<MapData, ListenV4>>,
    /// The scanned IPv6 listen set (`None`: an object without it, or pinned maps).
    listen6: Option<Array<MapData, ListenV6>>,
    /// Created by the load these handles came from, so still as the kernel made
    /// them: every entry zero, every hash and trie empty. The loader never
    /// reuses a pinned map (it replaces stale pins), so that is every writer's case.
    fresh: bool,
}

impl Maps {
    /// Takes the maps out of a loaded object.
    pub fn from_ebpf(ebpf: &mut Ebpf) -> Result<Maps, XdpError> {
        let mut take = |name: &'static str| ebpf.take_map(name).ok_or(XdpError::NoMap(name));
        let config = take(config::MAP_NAME)?;
        let listen = take(listen::MAP_NAME)?;
        let names = take(names::MAP_NAME)?;
        let routes = take(route_v4::MAP_NAME)?;
        let answers = take(answers::MAP_NAME)?;
        let counters = take(counters::MAP_NAME)?;
        let routes6 = take(route_v6::MAP_NAME)?;
        let answers6 = take(answers::MAP_NAME_V6)?;
        let cookie = take(cookie::MAP_NAME)?;
        let flat = FlatV4::new(
            ebpf.take_map(lagran_common::route_v4_flat::MAP_NAME_L1),
            ebpf.take_map(lagran_common::route_v4_flat::MAP_NAME_L2),
        )?;
        let listen4 = match ebpf.take_map(listen::MAP_NAME_V4) {
            Some(m) => Some(Array::try_from(m).map_err(map_err(listen::MAP_NAME_V4))?),
            None => None,
        };
        let listen6 = match ebpf.take_map(listen::MAP_NAME_V6) {
            Some(m) => Some(Array::try_from(m).map_err(map_err(listen::MAP_NAME_V6))?),
            None => None,
        };
        let mut maps =
            Maps::from_maps([config, listen, names, routes, answers, counters, routes6, answers6, cookie], true)?;
        maps.flat = flat;
        maps.listen4 = listen4;
        maps.listen6 = listen6;
        maps.fresh = true;
        Ok(maps)
    }

    /// Opens the maps pinned under `dir` by a running `lagran serve --xdp`
    /// (for `lagran maps dump` and the metrics of another process).
    pub fn open_pinned(dir: &Path) -> Result<Maps, XdpError> {
        let open = |name: &'static str| {
            let path = dir.join(name);
            let data = MapData::from_pin(&path)
                .map_err(|source| XdpError::OpenPinned { path: path.clone(), source: Box::new(source) })?;
            Map::from_map_data(data).map_err(|source| XdpError::OpenPinned { path, source: Box::new(source) })
        };
        Maps::from_maps(
            [
                open(config::MAP_NAME)?,
                open(listen::MAP_NAME)?,
                open(names::MAP_NAME)?,
                open(route_v4::MAP_NAME)?,
                open(answers::MAP_NAME)?,
                open(counters::MAP_NAME)?,
                open(route_v6::MAP_NAME)?,
                open(answers::MAP_NAME_V6)?,
                open(cookie::MAP_NAME)?,
            ],
            false,
        )
    }

    /// The maps in [`MAP_NAMES`] order; `writable`: the names' mapping too.
    fn from_maps(maps: [Map; 9], writable: bool) -> Result<Maps, XdpError> {
        let [config, listen, names, routes, answers, counters, routes6, answers6, cookie] = maps;
        Ok(Maps {
            config: Array::try_from(config).map_err(map_err(config::MAP_NAME))?,
            listen: HashMap::try_from(listen).map_err(map_err(listen::MAP_NAME))?,
            names: NameSlots::new(names, writable)?,
            routes: LpmTrie::try_from(routes).map_err(map_err(route_v4::MAP_NAME))?,
            answers: Array::try_from(answers).map_err(map_err(answers::MAP_NAME))?,
            counters: PerCpuArray::try_from(counters).map_err(map_err(counters::MAP_NAME))?,
            routes6: LpmTrie::try_from(routes6).map_err(map_err(route_v6::MAP_NAME))?,
            answers6: Array::try_from(answers6).map_err(map_err(answers::MAP_NAME_V6))?,
            cookie: Array::try_from(cookie).map_err(map_err(cookie::MAP_NAME))?,
            flat: None,
            listen4: None,
            listen6: None,
            fresh: false,
        })
    }

    /// Publishes the server cookie secret and clock (see `lagran_common::cookie`).
    pub fn set_cookie(&mut self, c: &CookieConfig) -> Result<(), XdpError> {
        self.cookie.set(cookie::INDEX, c, 0).map_err(map_err(cookie::MAP_NAME))
    }

    /// The cookie entry.
    pub fn cookie(&self) -> Result<CookieConfig, XdpError> {
        self.cookie.get(&cookie::INDEX, 0).map_err(map_err(cookie::MAP_NAME))
    }

    /// `lagran_route4_l2` groups in use (`None`: no flat arrays).
    pub fn flat_groups(&self) -> Option<usize> {
        self.flat.as_ref().map(FlatV4::groups_used)
    }

    /// The counters, summed over the CPUs.
    pub fn counters(&self) -> Result<CounterSnapshot, XdpError> {
        let mut values = Vec::with_capacity(Counter::ALL.len());
        for &c in Counter::ALL {
            let per_cpu = self.counters.get(&(c as u32), 0).map_err(map_err(counters::MAP_NAME))?;
            values.push((c, per_cpu.iter().sum()));
        }
        Ok(CounterSnapshot { values })
    }

    /// The config entry.
    pub fn config(&self) -> Result<Config, XdpError> {
        self.config.get(&config::INDEX, 0).map_err(map_err(config::MAP_NAME))
    }

    /// Makes `lagran_listen` hold exactly `addrs` (wildcards as given: the
    /// loader expands them to an interface's addresses first).
    pub fn set_listen(&mut self, addrs: &[SocketAddr]) -> Result<(), XdpError> {
        let want: std::collections::HashSet<ListenKey> = addrs.iter().map(listen_key).collect();
        if want.len() > listen::MAX_ENTRIES as usize {
            return Err(XdpError::Full {
                map: listen::MAP_NAME,
                max: listen::MAX_ENTRIES,
                what: "listen addresses".into(),
            });
        }
        // Insert before deleting: a packet racing the change sees the old or the new set.
        for k in &want {
            self.listen.insert(k, ListenValue { on: 1 }, 0).map_err(map_err(listen::MAP_NAME))?;
        }
        let have: Vec<ListenKey> = self.listen.keys().collect::<Result<_, _>>().map_err(map_err(listen::MAP_NAME))?;
        self.set_listen4(addrs)?;
        self.set_listen6(addrs)?;
        for k in have.iter().filter(|k| !want.contains(k)) {
            remove_ok_if_missing(self.listen.remove(k), listen::MAP_NAME)?;
        }
        Ok(())
    }

    /// Writes the IPv4 part of the listen set into `lagran_listen4` for the
    /// program's scan, or marks it "ask `lagran_listen`" when it does not fit.
    fn set_listen4(&mut self, addrs: &[SocketAddr]) -> Result<(), XdpError> {
        let Some(map) = self.listen4.as_mut() else { return Ok(()) };
        let mut v4: Vec<u64> = addrs
            .iter()
            .filter_map(|a| {
                // The same IPv4 addresses `listen_key` writes (IPv4-mapped ones included).
                let ip = match a.ip() {
                    IpAddr::V4(ip) => ip,
                    IpAddr::V6(ip) => ip.to_ipv4_mapped()?,
                };
                Some(ListenV4::entry(ip.octets(), a.port().to_be_bytes()))
            })
            .collect();
        v4.sort_unstable();
        v4.dedup();
        let mut set = ListenV4::default();
        if v4.len() <= set.entries.len() {
            set.exact = 1;
            set.entries[..v4.len()].copy_from_slice(&v4);
        }
        map.set(0, set, 0).map_err(map_err(listen::MAP_NAME_V4))
    }

    /// Writes the IPv6 part of the listen set (addresses not IPv4-mapped: those
    /// are in `lagran_listen4`) into `lagran_listen6` for the program's scan, or
    /// marks it "ask `lagran_listen`" when it does not fit.
    fn set_listen6(&mut self, addrs: &[SocketAddr]) -> Result<(), XdpError> {
        let Some(map) = self.listen6.as_mut() else { return Ok(()) };
        let mut v6: Vec<ListenV6Entry> = addrs
            .iter()
            .filter_map(|a| match a.ip() {
                IpAddr::V6(ip) if ip.to_ipv4_mapped().is_none() => {
                    Some(ListenV6Entry::new(ip.octets(), a.port().to_be_bytes()))
                }
                _ => None,
            })
            .collect();
        v6.sort_unstable_by_key(|e| (e.addr, e.port));
        v6.dedup();
        let mut set = ListenV6::default();
        if v6.len() <= set.entries.len() {
            set.exact = 1;
            set.entries[..v6.len()].copy_from_slice(&v6);
        }
        map.set(0, set, 0).map_err(map_err(listen::MAP_NAME_V6))
    }

    /// The listen set (for dumps and tests).
    pub fn listen(&self) -> Result<Vec<SocketAddr>, XdpError> {
        let keys: Vec<ListenKey> = self.listen.keys().collect::<Result<_, _>>().map_err(map_err(listen::MAP_NAME))?;
        let mut out: Vec<SocketAddr> = keys.iter().map(socket_of).collect();
        out.sort();
        Ok(out)
    }

    /// Writes one `lagran_names` entry as given, bypassing the writer: for tests
    /// that plant a colliding hash. The map writer owns the map otherwise.
    #[doc(hidden)]
    pub fn put_name_raw(&mut self, hash: u64, value: NameValue) -> Result<(), XdpError> {
        self.names.put_raw(hash, value)
    }

    /// The `lagran_names` entry the program finds for a lowercased wire name.
    pub fn name(&self, wire: &[u8]) -> Option<NameValue> {
        self.names.find(wire)
    }

    fn set_config(&mut self, c: &Config) -> Result<(), XdpError> {
        self.config.set(config::INDEX, c, 0).map_err(map_err(config::MAP_NAME))
    }

    /// A human-readable dump of every map (`lagran maps dump`). At most
    /// `route_limit` trie entries are listed (the trie can hold millions).
    pub fn dump(&self, route_limit: usize) -> Result<String, XdpError> {
        let mut out = String::new();
        let c = self.config()?;
        let _ = writeln!(
            out,
            "{}: dns_port={} udp_payload={} enabled={} rrl_rate={} rrl_slip={} rrl_floor={}",
            config::MAP_NAME,
            c.dns_port,
            c.udp_payload,
            c.enabled,
            c.rrl_rate,
            c.rrl_slip,
            c.rrl_floor
        );
        // Never the secret itself: a dump is pasted into tickets.
        let k = self.cookie()?;
        let _ = writeln!(
            out,
            "{}: enabled={} previous_in_grace={} unix_offset_ns={} fixed_now={} secret={}",
            cookie::MAP_NAME,
            k.enabled,
            k.previous_in_grace,
            k.unix_offset_ns,
            k.fixed_now,
            if k.k0 == 0 && k.k1 == 0 { "unset" } else { "set (not shown)" }
        );
        let listen: Vec<String> = self.listen()?.iter().map(ToString::to_string).collect();
        let _ = writeln!(out, "{}: {}", listen::MAP_NAME, listen.join(" "));
        let mut names: Vec<(String, u32)> = Vec::new();
        for v in self.names.entries() {
            names.push((wire_to_text(&v.wire().collect::<Vec<u8>>()), v.id));
        }
        names.sort();
        let _ = writeln!(out, "{} ({} entries):", names::MAP_NAME, names.len());
        for (n, id) in &names {
            let _ = writeln!(out, "  {n:<40} id={id}");
        }
        let mut used = Vec::new();
        for (id, item) in self.answers.iter().enumerate() {
            let a = item.map_err(map_err(answers::MAP_NAME))?;
            let a6 = self.answers6.get(&(id as u32), 0).map_err(map_err(answers::MAP_NAME_V6))?;
            if a != AnswerV4::default() || a6 != AnswerV6::default() {
                used.push((id, a, a6));
            }
        }
        let _ = writeln!(out, "{} ({} in use):", answers::MAP_NAME, used.len());
        for (id, a, a6) in &used {
            let addrs: Vec<String> = a
                .addrs
                .iter()
                .take((a.count as usize).min(MAX_ADDRS))
                .map(|b| Ipv4Addr::from(*b).to_string())
                .chain((0..(a6.count as usize).min(MAX_ADDRS)).map(|i| Ipv6Addr::from(a6.addr(i)).to_string()))
                .collect();
            let canary = if a.canary_percent > 0 {
                format!(" canary={}%->#{}", a.canary_percent, a.canary_id)
            } else {
                String::new()
            };
            let _ = writeln!(out, "  #{id:<6} ttl={:<6} [{}]{canary}", a.ttl, addrs.join(", "));
        }
        let mut total = 0usize;
        let mut shown = Vec::new();
        for item in self.routes.iter() {
            let (k, v) = item.map_err(map_err(route_v4::MAP_NAME))?;
            total += 1;
            if shown.len() < route_limit {
                let (plen, data) = (k.prefix_len(), k.data());
                shown.push((
                    u32::from_be_bytes(data.name_id),
                    Ipv4Addr::from(data.addr),
                    plen.saturating_sub(NAME_BITS),
                    v,
                ));
            }
        }
        shown.sort_by_key(|s| (s.0, s.1, s.2));
        let _ = writeln!(out, "{} ({total} entries, {} shown):", route_v4::MAP_NAME, shown.len());
        for (name_id, addr, len, v) in shown {
            let _ = writeln!(
                out,
                "  name={name_id:<4} {:<18} -> answer #{} scope /{}",
                format!("{addr}/{len}"),
                v.answer_id,
                v.scope
            );
        }
        let mut total = 0usize;
        let mut shown = Vec::new();
        for item in self.routes6.iter() {
            let (k, v) = item.map_err(map_err(route_v6::MAP_NAME))?;
            total += 1;
            if shown.len() < route_limit {
                let (plen, data) = (k.prefix_len(), k.data());
                shown.push((
                    u32::from_be_bytes(data.name_id),
                    Ipv6Addr::from(data.addr),
                    plen.saturating_sub(NAME_BITS),
                    v,
                ));
            }
        }
        shown.sort_by_key(|s| (s.0, s.1, s.2));
        let _ = writeln!(out, "{} ({total} entries, {} shown):", route_v6::MAP_NAME, shown.len());
        for (name_id, addr, len, v) in shown {
            let _ = writeln!(
                out,
                "  name={name_id:<4} {:<24} -> answer #{} scope /{}",
                format!("{addr}/{len}"),
                v.answer_id,
                v.scope
            );
        }
        let _ = writeln!(out, "{}:", counters::MAP_NAME);
        for (c, v) in self.counters()?.iter() {
            let _ = writeln!(out, "  {:<18} {v}", c.name());
        }
        Ok(out)
    }
}

/// The counters of the fast path, summed over the CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    values: Vec<(Counter, u64)>,
}

impl CounterSnapshot {
    pub fn get(&self, c: Counter) -> u64 {
        self.values.iter().find(|(k, _)| *k == c).map_or(0, |(_, v)| *v)
    }

    /// Every counter in index order.
    pub fn iter(&self) -> impl Iterator<Item = (Counter, u64)> + '_ {
        self.values.iter().copied()
    }

    /// Packets answered with `XDP_TX`.
    pub fn answered(&self) -> u64 {
        self.get(Counter::Answered)
    }

    /// Packets passed to the kernel stack, all reasons.
    pub fn passed(&self) -> u64 {
        self.values.iter().filter(|(c, _)| !Self::not_passed(*c)).map(|(_, v)| v).sum()
    }

    /// Counters of packets the program did not pass: answered, or rate limited
    /// (dropped, or slipped with `XDP_TX`).
    fn not_passed(c: Counter) -> bool {
        matches!(c, Counter::Answered | Counter::RrlLimited | Counter::RrlSlipped)
    }

    /// The counters as Prometheus text: one `lagran_xdp_packets_total` series per
    /// counter, `result="answered"`, `"rrl_limited"`, `"rrl_slipped"` or
    /// `result="passed",reason="…"`.
    pub fn render_prometheus(&self, out: &mut String) {
        out.push_str("# HELP lagran_xdp_packets_total Packets seen by the XDP fast path, by outcome.\n");
        out.push_str("# TYPE lagran_xdp_packets_total counter\n");
        for (c, v) in self.iter() {
            if Self::not_passed(c) {
                let _ = writeln!(out, "lagran_xdp_packets_total{{result=\"{}\"}} {v}", c.name());
            } else {
                let _ = writeln!(out, "lagran_xdp_packets_total{{result=\"passed\",reason=\"{}\"}} {v}", c.name());
            }
        }
    }
}

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
    }
}

/// One trie entry as last written: block start (host order: `u32` for IPv4,
/// `u128` for IPv6), CIDR length, value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Route<A = u32> {
    addr: A,
    len: u8,
    value: RouteValue,
}

/// The `A` and `AAAA` records of one route-table answer: written at one id of
/// `lagran_answers` and `lagran_answers6`, so one trie value names both.
type AnswerPair = (AnswerV4, AnswerV6);

/// Keeps the maps equal to the route table, writing only differences.
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
        let config = Config { dns_port, udp_payload, enabled: 0, rrl_rate: 0, rrl_slip: 0, rrl_floor: 0, rrl_seed };
        maps.set_config(&config)?;
        maps.set_listen(&[
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, dns_port)),
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, dns_port)),
        ])?;
        let fresh = maps.fresh;
        Ok(MapWriter {
            maps,
            config,
            allowed: true,
            synced: false,
            names: StdHashMap::new(),
            routes6: StdHashMap::new(),
            written: StdHashMap::new(),
            answers: FxHashMap::default(),
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
    pub fn set_rrl(&mut self, settings: &crate::config::RrlSettings) -> Result<(), XdpError> {
        let (rrl_rate, rrl_slip, rrl_floor) = crate::dns::rrl::kernel_knobs(settings);
        let c = Config { rrl_rate, rrl_slip, rrl_floor, ..self.config };
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

    /// SPEC §7: once the control plane has not confirmed the table (last at
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
        let started = Instant::now();
        if self.needs_reset {
            self.reset()?;
        }
        match self.sync_inner(table, settings) {
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

    fn sync_inner(&mut self, table: &RouteTable, settings: &DnsSettings) -> Result<SyncStats, XdpError> {
        let started = Instant::now();
        let mut stats = SyncStats::default();

        // 1. Desired names, answers (written now, before anything points at them)
        //    and trie entries.
        let mut want_names: StdHashMap<Vec<u8>, u32> = StdHashMap::new();
        // The names in table order: the order they are placed in `lagran_names`.
        let mut name_order: Vec<Vec<u8>> = Vec::new();
        let mut owner: StdHashMap<u32, &str> = StdHashMap::new();
        let mut want_routes6: StdHashMap<u32, Vec<Route<u128>>> = StdHashMap::new();
        let mut used: FxHashMap<AnswerPair, u32> = FxHashMap::default();
        // Name hash -> wire name: two names with one hash cannot share the key.
        let mut hashes: StdHashMap<u64, Vec<u8>> = StdHashMap::new();
        // Names whose entries stand as written, and what every name's are made from.
        let mut kept: std::collections::HashSet<u32> = std::collections::HashSet::new();
        let mut written: StdHashMap<u32, Written> = StdHashMap::new();
        for name in table.scheduled_names() {
            let Some(key) = wire_key(&name.name) else {
                tracing::warn!(name = %name.name, "name cannot be a fast-path key; userspace answers it");
                stats.names_skipped += 1;
                continue;
            };
            if !name.ecs {
                // The kernel decides by the ECS address when there is one; a name with
                // ECS off is answered for the resolver's address: userspace answers it.
                stats.names_skipped += 1;
                continue;
            }
            let hash = hash_wire(&key);
            match hashes.get(&hash) {
                Some(other) if *other != key => {
                    tracing::warn!(name = %name.name, "name hashes like another scheduled name; userspace answers it");
                    stats.names_skipped += 1;
                    continue;
                }
                _ => {
                    hashes.insert(hash, key.clone());
                }
            }
            if let Some(other) = owner.insert(name.id, &name.name) {
                return Err(XdpError::DuplicateNameId { id: name.id, a: other.to_string(), b: name.name.clone() });
            }
            let ids = self.answer_ids(name, settings, &mut used, &mut stats)?;
            if want_names.insert(key.clone(), name.id).is_none() {
                name_order.push(key);
            }
            if self
                .written
                .get(&name.id)
                .is_some_and(|w| w.v4.shares(&name.v4) && w.v6.shares(&name.v6) && w.ids == ids)
            {
                // The very maps written last time, with the same answers: the entries stand.
                want_routes6.insert(name.id, self.routes6.remove(&name.id).unwrap_or_default());
                kept.insert(name.id);
                let routes4 = self.written.get(&name.id).map_or(0, |w| w.routes4);
                written.insert(name.id, Written { v4: name.v4.clone(), v6: name.v6.clone(), ids, routes4 });
                continue;
            }
            want_routes6.insert(name.id, routes_of(&name.v6, &ids));
            written.insert(name.id, Written { v4: name.v4.clone(), v6: name.v6.clone(), ids, routes4: 0 });
        }

        // 2. Trie inserts, updates and deletes for every name still served: the
        //    prefix maps written last time against this table's, block by block
        //    (blocks without a valid answer get no entry: the program passes them).
        let empty6 = Vec::new();
        for (&id, want) in written.iter_mut() {
            if kept.contains(&id) {
                stats.routes_total += want.routes4;
                continue;
            }
            let old = self.written.get(&id);
            let diffing = Instant::now();
            // The usual incremental build splices the name's map from the one
            // written last: then only the blocks it split again are compared.
            let spliced = old.and_then(|o| diff_spliced((&o.v4, &o.ids, o.routes4), (&want.v4, &want.ids)));
            stats.names_spliced += usize::from(spliced.is_some());
            let (up, del, count) = match spliced {
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
            let insert = |routes: &mut LpmTrie<MapData, RouteV4Data, RouteValue>, r: &Route| {
                routes
                    .insert(&route_key(id, r.addr, r.len), r.value, 0)
                    .map_err(|e| full_or(route_v4::MAP_NAME, route_v4::MAX_ENTRIES, e, "trie entries"))
            };
            let split_before = |r: &Route| old.is_some_and(|o| o.v4.lookup_prefix(r.addr & !0xff).len > 24);
            let newly_split = |r: &&Route| r.len > 24 && !split_before(r);
            for r in up.iter().filter(newly_split) {
                insert(&mut self.maps.routes, r)?;
            }
            // Only the /16s a changed route covers are laid out again.
            if let Some(flat) = self.maps.flat.as_mut() {
                let laying = Instant::now();
                let touched: std::collections::BTreeSet<u16> =
                    up.iter().chain(&del).flat_map(|r| route4_flat::sixteens(r.addr, r.len)).collect();
                let routes16 = |hi: u16| -> Vec<FlatRoute> {
                    let (lo, top) = (u32::from(hi) << 16, u32::from(hi) << 16 | 0xffff);
                    let blocks = want.v4.iter_from(lo).take_while(|p| p.addr <= top);
                    blocks.filter_map(|p| answer_of(&want.ids, p.value).map(|a| (p.addr, p.len, a))).collect()
                };
                let all = || routes_in(&want.v4, &want.ids).map(|r| (r.addr, r.len, r.value.answer_id)).collect();
                let route4 = flat.update(id, &touched, routes16, all, old.is_none());
                stats.flat += laying.elapsed();
                if route4 != 0 {
                    stats.visible = started.elapsed();
                }
            }
            for r in up.iter().filter(|r| !newly_split(r)) {
                insert(&mut self.maps.routes, r)?;
            }
            for r in &del {
                remove_route(&mut self.maps.routes, id, r)?;
            }
            if self.maps.flat.as_ref().is_none_or(|f| f.route4(id) == 0) {
                stats.visible = started.elapsed();
            }
            stats.routes_upserted += up.len();
            stats.routes_deleted += del.len();
            stats.routes_total += count;
        }
        for (&id, want) in &want_routes6 {
            if kept.contains(&id) {
                stats.routes_total += want.len();
                continue;
            }
            let have = self.routes6.get(&id).unwrap_or(&empty6);
            let (up, del, _) = diff_routes(have.iter().copied(), want.iter().copied());
            for r in &up {
                self.maps
                    .routes6
                    .insert(&route6_key(id, r.addr, r.len), r.value, 0)
                    .map_err(|e| full_or(route_v6::MAP_NAME, route_v6::MAX_ENTRIES, e, "IPv6 trie entries"))?;
            }
            for r in &del {
                remove_route6(&mut self.maps.routes6, id, r)?;
            }
            stats.routes_upserted += up.len();
            stats.routes_deleted += del.len();
            stats.routes_total += want.len();
        }

        // 3. Names.
        let want_names: StdHashMap<Vec<u8>, (u32, u32)> = want_names
            .into_iter()
            .map(|(key, id)| {
                let route4 = self.maps.flat.as_ref().map_or(0, |f| f.route4(id));
                (key, (id, route4))
            })
            .collect();
        if want_names.len() > names::MAX_ENTRIES as usize {
            return Err(XdpError::Full {
                map: names::MAP_NAME,
                max: names::MAX_ENTRIES,
                what: format!("{} names", want_names.len()),
            });
        }
        // Slots given up in the last sync are reusable now; those of names gone
        // now, from the next sync on.
        self.maps.names.begin_sync();
        for key in self.names.keys() {
            if !want_names.contains_key(key) && self.maps.names.remove(key)? {
                stats.names_deleted += 1;
            }
        }
        // In table order, so which names a full probe window leaves to
        // userspace does not change from one sync to the next.
        let mut placed = StdHashMap::with_capacity(want_names.len());
        for key in name_order {
            let Some(&(id, route4)) = want_names.get(&key) else { continue };
            match self.maps.names.put(&key, id, route4)? {
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

        // 4. Trie entries of names no longer served.
        for (&id, have) in &self.written {
            if !written.contains_key(&id) {
                for r in routes_in(&have.v4, &have.ids) {
                    remove_route(&mut self.maps.routes, id, &r)?;
                }
                stats.routes_deleted += have.routes4;
                if let Some(flat) = self.maps.flat.as_mut() {
                    flat.remove(id);
                }
            }
        }
        for (&id, have) in &self.routes6 {
            if !want_routes6.contains_key(&id) {
                for r in have {
                    remove_route6(&mut self.maps.routes6, id, r)?;
                }
                stats.routes_deleted += have.len();
            }
        }

        // 5. Answers nothing points at any more: cleared, and their ids reusable
        //    from the next sync on.
        let unused: Vec<(AnswerPair, u32)> =
            self.answers.iter().filter(|(a, _)| !used.contains_key(*a)).map(|(a, id)| (*a, *id)).collect();
        for (a, id) in unused {
            self.maps.answers.set(id, AnswerV4::default(), 0).map_err(map_err(answers::MAP_NAME))?;
            self.maps.answers6.set(id, AnswerV6::default(), 0).map_err(map_err(answers::MAP_NAME_V6))?;
            self.answers.remove(&a);
            self.free_ids.push(id);
            stats.answers_freed += 1;
        }
        // Lowest ids first, so the array stays dense.
        self.free_ids.sort_unstable_by(|a, b| b.cmp(a));

        if let Some(flat) = self.maps.flat.as_mut() {
            flat.end_sync();
        }
        self.names = placed;
        self.routes6 = want_routes6;
        self.written = written;
        Ok(stats)
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
                if let Err(e) = self.maps.answers6.set(id, content.1, 0) {
                    self.free_ids.push(id);
                    return Err(map_err(answers::MAP_NAME_V6)(e));
                }
                if let Err(e) = self.maps.answers.set(id, content.0, 0) {
                    self.free_ids.push(id);
                    return Err(map_err(answers::MAP_NAME)(e));
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
        self.maps.names.reset()?;
        let keys: Vec<Key<RouteV4Data>> =
            self.maps.routes.keys().collect::<Result<_, _>>().map_err(map_err(route_v4::MAP_NAME))?;
        for k in keys {
            remove_ok_if_missing(self.maps.routes.remove(&k), route_v4::MAP_NAME)?;
        }
        let keys: Vec<Key<RouteV6Data>> =
            self.maps.routes6.keys().collect::<Result<_, _>>().map_err(map_err(route_v6::MAP_NAME))?;
        for k in keys {
            remove_ok_if_missing(self.maps.routes6.remove(&k), route_v6::MAP_NAME)?;
        }
        for id in 0..answers::MAX_ENTRIES {
            let a = self.maps.answers.get(&id, 0).map_err(map_err(answers::MAP_NAME))?;
            if a != AnswerV4::default() {
                self.maps.answers.set(id, AnswerV4::default(), 0).map_err(map_err(answers::MAP_NAME))?;
            }
            let a = self.maps.answers6.get(&id, 0).map_err(map_err(answers::MAP_NAME_V6))?;
            if a != AnswerV6::default() {
                self.maps.answers6.set(id, AnswerV6::default(), 0).map_err(map_err(answers::MAP_NAME_V6))?;
            }
        }
        if let Some(flat) = self.maps.flat.as_mut() {
            flat.reset();
        }
        self.names.clear();
        self.written.clear();
        self.routes6.clear();
        self.answers.clear();
        self.free_ids.clear();
        self.next_id = 0;
        self.needs_reset = false;
        Ok(())
    }
}

/// The `lagran_listen` key of a socket address (IPv4 as IPv4-mapped IPv6).
fn listen_key(a: &SocketAddr) -> ListenKey {
    let port = a.port().to_be_bytes();
    match a.ip() {
        IpAddr::V4(v4) => ListenKey::v4(v4.octets(), port),
        IpAddr::V6(v6) => ListenKey::v6(v6.octets(), port),
    }
}

fn socket_of(k: &ListenKey) -> SocketAddr {
    let v6 = Ipv6Addr::from(k.addr);
    let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
    SocketAddr::new(ip, u16::from_be_bytes(k.port))
}

/// A failed insert: "map full" when the kernel says so, the raw error otherwise.
fn full_or(map: &'static str, max: u32, e: MapError, what: &str) -> XdpError {
    let full = matches!(&e, MapError::SyscallError(s)
        if matches!(s.io_error.raw_os_error(), Some(libc::E2BIG) | Some(libc::ENOSPC)));
    if full { XdpError::Full { map, max, what: what.to_string() } } else { map_err(map)(e) }
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

/// The IPv6 trie entries of a name: one per block with a valid answer (the
/// program passes the others). Blocks inside `::ffff:0:0/96` are written too;
/// the program never looks an IPv4-mapped client up there (it uses the IPv4
/// trie, as the responder does).
/// The answer id of a block's answer index (`None`: no valid answer, no entry).
fn answer_of(ids: &[Option<u32>], value: u32) -> Option<u32> {
    ids.get(value as usize).copied().flatten()
}

/// The trie entries a name's prefix map makes, in order.
fn routes_in<'a, A: crate::prefix_map::PrefixAddr>(
    map: &'a crate::prefix_map::PrefixMap<A>,
    ids: &'a [Option<u32>],
) -> impl Iterator<Item = Route<A>> + 'a {
    map.iter().filter_map(|p| {
        let answer_id = answer_of(ids, p.value)?;
        Some(Route { addr: p.addr, len: p.len, value: RouteValue { answer_id, scope: p.len as u32 } })
    })
}

fn routes_of(v6: &crate::prefix_map::PrefixMapV6, ids: &[Option<u32>]) -> Vec<Route<u128>> {
    routes_in(v6, ids).collect()
}

/// [`diff_routes`] of the trie entries two prefix maps make (`have`: none
/// when `None`), each block's value turned into an answer id through its
/// map's `ids` (a block without one makes no entry), walked over the maps'
/// columns: the real data's names have hundreds of thousands of blocks.
/// [`diff_spliced`] does the same for a map and one spliced from it, over
/// the blocks the splice split again only.
fn diff_maps<A: crate::prefix_map::PrefixAddr>(
    have: Option<(&crate::prefix_map::PrefixMap<A>, &[Option<u32>])>,
    want: (&crate::prefix_map::PrefixMap<A>, &[Option<u32>]),
) -> RouteDiff<A> {
    let (hs, hl, hv, hids) = match have {
        Some((m, ids)) => {
            let (s, l, v) = m.columns();
            (s, l, v, ids)
        }
        None => (&[][..], &[][..], &[][..], &[][..]),
    };
    let ((ws, wl, wv), wids) = (want.0.columns(), want.1);
    let count = entries(wv, wids);
    let (mut up, mut del) = (Vec::new(), Vec::new());
    let same = same_values(hids, wids);
    diff_columns((hs, hl, hv, hids), (ws, wl, wv, wids), &same, &mut up, &mut del);
    (up, del, count)
}

/// Per value, whether it makes the same entry in both maps (a value neither
/// id list holds makes none in either).
fn same_values(hids: &[Option<u32>], wids: &[Option<u32>]) -> Vec<bool> {
    (0..hids.len().max(wids.len())).map(|v| answer_of(hids, v as u32) == answer_of(wids, v as u32)).collect()
}

/// Trie entries to insert or update, entries to delete, and how many the
/// wanted routes make in all.
type RouteDiff<A> = (Vec<Route<A>>, Vec<Route<A>>, usize);

/// How many trie entries blocks with these values make.
fn entries(values: &[u32], ids: &[Option<u32>]) -> usize {
    values.iter().filter(|&&v| answer_of(ids, v).is_some()).count()
}

/// [`diff_maps`] of a map (with the number of entries it made) and one
/// spliced from it: `None` when `want` was not spliced from that very map, or
/// when a copied block's answer id changed (the answers' kernel ids moved:
/// every block is compared then).
fn diff_spliced<A: crate::prefix_map::PrefixAddr>(
    have: (&crate::prefix_map::PrefixMap<A>, &[Option<u32>], usize),
    want: (&crate::prefix_map::PrefixMap<A>, &[Option<u32>]),
) -> Option<RouteDiff<A>> {
    let (hm, hids, mut count) = have;
    let (wm, wids) = want;
    let copied = wm.copied_from(hm)?;
    let ((hs, hl, hv), (ws, wl, wv)) = (hm.columns(), wm.columns());
    // A copied block makes the same entry in both maps when its old value and
    // the value it became have the same answer id (or neither has one).
    let to = |v: u32| copied.remap.map_or(Some(v), |m| m.get(v as usize).copied());
    let keeps = |v: u32| to(v).is_some_and(|n| answer_of(hids, v) == answer_of(wids, n));
    let kept: Vec<bool> = (0..hids.len() as u32).map(keeps).collect();
    for r in copied.runs {
        let values = &hv[r.from..r.from + r.len];
        if !values.iter().all(|&v| kept.get(v as usize).copied().unwrap_or_else(|| keeps(v))) {
            return None;
        }
    }
    // Between runs (and before the first, after the last), both maps' blocks
    // cover the same addresses: those are diffed block by block.
    let (mut up, mut del) = (Vec::new(), Vec::new());
    let same = same_values(hids, wids);
    for (hg, wg) in copied.gaps(hs.len(), ws.len()) {
        let h = (&hs[hg.clone()], &hl[hg.clone()], &hv[hg], hids);
        let w = (&ws[wg.clone()], &wl[wg.clone()], &wv[wg], wids);
        count = count - entries(h.2, hids) + entries(w.2, wids);
        diff_columns(h, w, &same, &mut up, &mut del);
    }
    Some((up, del, count))
}

/// One map's blocks as columns (starts, lengths, values) and its answer ids.
type Blocks<'a, A> = (&'a [A], &'a [u8], &'a [u32], &'a [Option<u32>]);

/// The merge of two maps' blocks over the same addresses: entries to write
/// into `up`, entries to remove into `del`. `same`: [`same_values`] of the
/// two maps' ids.
fn diff_columns<A: crate::prefix_map::PrefixAddr>(
    have: Blocks<'_, A>,
    want: Blocks<'_, A>,
    same: &[bool],
    up: &mut Vec<Route<A>>,
    del: &mut Vec<Route<A>>,
) {
    let ((hs, hl, hv, hids), (ws, wl, wv, wids)) = (have, want);
    let route =
        |addr: A, len: u8, answer_id: u32| Route { addr, len, value: RouteValue { answer_id, scope: len as u32 } };
    let unchanged = |v: u32| same.get(v as usize).copied().unwrap_or(true);
    let (mut i, mut j) = (0, 0);
    while i < hs.len() && j < ws.len() {
        // The long stretches one node's change leaves alone: same block, same value.
        if hs[i] == ws[j] && hl[i] == wl[j] && hv[i] == wv[j] && unchanged(hv[i]) {
            i += 1;
            j += 1;
            continue;
        }
        let (h, w) = ((hs[i], hl[i]), (ws[j], wl[j]));
        if h == w {
            match (answer_of(hids, hv[i]), answer_of(wids, wv[j])) {
                (Some(a), Some(b)) if a != b => up.push(route(w.0, w.1, b)),
                (None, Some(b)) => up.push(route(w.0, w.1, b)),
                (Some(a), None) => del.push(route(h.0, h.1, a)),
                _ => {}
            }
            i += 1;
            j += 1;
        } else if h < w {
            if let Some(a) = answer_of(hids, hv[i]) {
                del.push(route(h.0, h.1, a));
            }
            i += 1;
        } else {
            if let Some(b) = answer_of(wids, wv[j]) {
                up.push(route(w.0, w.1, b));
            }
            j += 1;
        }
    }
    for i in i..hs.len() {
        if let Some(a) = answer_of(hids, hv[i]) {
            del.push(route(hs[i], hl[i], a));
        }
    }
    for j in j..ws.len() {
        if let Some(b) = answer_of(wids, wv[j]) {
            up.push(route(ws[j], wl[j], b));
        }
    }
}

/// Trie entries to insert or update, and to delete, to go from `have` to `want`
/// (both sorted by address, then length), and how many `want` holds.
fn diff_routes<A: Copy + Ord>(
    have: impl IntoIterator<Item = Route<A>>,
    want: impl IntoIterator<Item = Route<A>>,
) -> RouteDiff<A> {
    let (mut up, mut del, mut count) = (Vec::new(), Vec::new(), 0);
    let (mut have, mut want) = (have.into_iter().peekable(), want.into_iter().peekable());
    loop {
        match (have.peek().copied(), want.peek().copied()) {
            (Some(h), Some(w)) if (h.addr, h.len) == (w.addr, w.len) => {
                if h.value != w.value {
                    up.push(w);
                }
                have.next();
                want.next();
                count += 1;
            }
            (Some(h), Some(w)) if (h.addr, h.len) < (w.addr, w.len) => {
                del.push(h);
                have.next();
            }
            (Some(_), Some(w)) | (None, Some(w)) => {
                up.push(w);
                want.next();
                count += 1;
            }
            (Some(h), None) => {
                del.push(h);
                have.next();
            }
            (None, None) => break,
        }
    }
    (up, del, count)
}

fn route_key(name_id: u32, addr: u32, len: u8) -> Key<RouteV4Data> {
    Key::new(NAME_BITS + len as u32, RouteV4Data::new(name_id, addr))
}

fn remove_route(trie: &mut LpmTrie<MapData, RouteV4Data, RouteValue>, name_id: u32, r: &Route) -> Result<(), XdpError> {
    remove_ok_if_missing(trie.remove(&route_key(name_id, r.addr, r.len)), route_v4::MAP_NAME)
}

fn route6_key(name_id: u32, addr: u128, len: u8) -> Key<RouteV6Data> {
    Key::new(NAME_BITS + len as u32, RouteV6Data::new(name_id, addr))
}

fn remove_route6(
    trie: &mut LpmTrie<MapData, RouteV6Data, RouteValue>,
    name_id: u32,
    r: &Route<u128>,
) -> Result<(), XdpError> {
    remove_ok_if_missing(trie.remove(&route6_key(name_id, r.addr, r.len)), route_v6::MAP_NAME)
}

/// A delete of an entry that is already gone is not an error.
fn remove_ok_if_missing(res: Result<(), MapError>, map: &'static str) -> Result<(), XdpError> {
    match res {
        Ok(()) | Err(MapError::KeyNotFound) => Ok(()),
        Err(MapError::SyscallError(s)) if s.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(map_err(map)(e)),
    }
}

/// The map key of a name: DNS wire format, ASCII lowercased, root label
/// included, zero-padded. `None` when the name cannot be one (label over 63
/// octets, empty label, over 255 octets) or holds a zero octet.
pub fn wire_key(name: &str) -> Option<Vec<u8>> {
    let name = name.trim_end_matches('.');
    let mut out = Vec::with_capacity(name.len() + 2);
    if !name.is_empty() {
        for label in name.split('.') {
            let bytes = label.as_bytes();
            // The fast path ends a name at its first zero octet (`dns::parse_name`
            // in lagran-ebpf): a label holding one is left to userspace.
            if bytes.is_empty() || bytes.len() > 63 || bytes.contains(&0) {
                return None;
            }
            out.push(bytes.len() as u8);
            out.extend(bytes.iter().map(u8::to_ascii_lowercase));
        }
    }
    out.push(0);
    (out.len() <= NAME_MAX).then_some(out)
}

/// `04 e d g e 03 n e t 00 …` back to `edge.net` (for dumps).
pub(super) fn wire_to_text(key: &[u8]) -> String {
    let mut labels = Vec::new();
    let mut i = 0;
    while i < key.len() && key[i] != 0 {
        let n = key[i] as usize;
        let end = (i + 1 + n).min(key.len());
        labels.push(String::from_utf8_lossy(&key[i + 1..end]).into_owned());
        i = end;
    }
    if labels.is_empty() { ".".to_string() } else { labels.join(".") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(addr: u32, len: u8, id: u32) -> Route {
        Route { addr, len, value: RouteValue { answer_id: id, scope: len as u32 } }
    }

    #[test]
    fn wire_key_is_lowercase_wire_format() {
        assert_eq!(wire_key("Edge.Lagran.NET").unwrap(), b"\x04edge\x06lagran\x03net\x00".to_vec());
        assert_eq!(wire_key("edge.lagran.net.").unwrap(), b"\x04edge\x06lagran\x03net\x00".to_vec());
        assert_eq!(wire_key("").unwrap(), vec![0]);
        assert!(wire_key("a..b").is_none(), "empty label");
        assert!(wire_key(&"x".repeat(64)).is_none(), "label over 63 octets");
        assert!(wire_key("a\0b.edge.lagran.net").is_none(), "a zero octet ends a name in the fast path");
        let long = ["abcdefghi"; 26].join(".");
        assert_eq!(long.len(), 259);
        assert!(wire_key(&long).is_none(), "name over 255 octets");
    }

    #[test]
    fn wire_key_round_trips_for_dumps() {
        let v = NameValue::new(2, &wire_key("pool-a.edge.lagran.net").unwrap());
        assert_eq!(wire_to_text(&v.wire().collect::<Vec<u8>>()), "pool-a.edge.lagran.net");
    }

    #[test]
    fn diff_touches_only_changes() {
        let have = [r(0, 1, 1), r(0x8000_0000, 2, 2), r(0xc000_0000, 2, 3)];
        let want = [r(0, 1, 1), r(0x8000_0000, 2, 9), r(0xc000_0000, 3, 3), r(0xe000_0000, 3, 3)];
        let (up, del, n) = diff_routes(have, want);
        assert_eq!(up, vec![r(0x8000_0000, 2, 9), r(0xc000_0000, 3, 3), r(0xe000_0000, 3, 3)]);
        assert_eq!(del, vec![r(0xc000_0000, 2, 3)]);
        assert_eq!(n, want.len());
        let (up, del, _) = diff_routes(want, want);
        assert!(up.is_empty() && del.is_empty(), "no change, no writes");
    }

    #[test]
    fn the_column_diff_writes_what_the_route_diff_writes() {
        use crate::prefix_map::PrefixMapV4;
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        // Random maps over a few answers; ids with gaps (answers the kernel cannot serve).
        let map = |rng: &mut rand::rngs::StdRng| {
            let mut cuts: Vec<u32> = (0..rng.gen_range(0..40)).map(|_| rng.r#gen::<u32>() & 0xffff_ff00).collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut ranges = Vec::new();
            let mut start = 0u32;
            for c in cuts.into_iter().filter(|&c| c > 0) {
                ranges.push((start, c - 1, rng.gen_range(0..5)));
                start = c;
            }
            ranges.push((start, u32::MAX, rng.gen_range(0..5)));
            PrefixMapV4::from_ranges(ranges, 0)
        };
        let ids = |rng: &mut rand::rngs::StdRng| -> Vec<Option<u32>> {
            (0..5).map(|_| if rng.gen_bool(0.2) { None } else { Some(rng.gen_range(1..4)) }).collect()
        };
        let mut refused = 0;
        for round in 0..1000 {
            let (a, b) = (map(&mut rng), map(&mut rng));
            let ia = ids(&mut rng);
            let (b, ib) = match round % 4 {
                // Unrelated maps.
                0 => (b, ids(&mut rng)),
                // Spliced, and every answer's kernel id moved.
                1 => (a.splice(&[(0x0a00_0000, 0x0a0f_ffff, 4)], None), ids(&mut rng)),
                // Spliced with a few random changes and a build's renumbering of
                // the answers (each answer's id follows it); in round 3, one
                // answer's id changed as well.
                _ => {
                    let mut perm: Vec<u32> = (0..5).collect();
                    for i in (1..5).rev() {
                        perm.swap(i, rng.gen_range(0..=i));
                    }
                    let mut cuts: Vec<u32> = (0..rng.gen_range(0..4) * 2).map(|_| rng.r#gen::<u32>()).collect();
                    cuts.sort_unstable();
                    cuts.dedup();
                    let changes: Vec<(u32, u32, u32)> =
                        cuts.chunks_exact(2).map(|c| (c[0], c[1], rng.gen_range(0..5))).collect();
                    let b = a.splice(&changes, Some(&perm));
                    let mut ib = vec![None; 5];
                    for (v, &to) in perm.iter().enumerate() {
                        ib[to as usize] = ia[v];
                    }
                    if round % 4 == 3 {
                        ib[rng.gen_range(0..5)] = Some(rng.gen_range(1..4));
                    }
                    (b, ib)
                }
            };
            let want = diff_routes(routes_in(&a, &ia), routes_in(&b, &ib));
            let count = routes_in(&a, &ia).count();
            assert_eq!(diff_maps(Some((&a, &ia)), (&b, &ib)), want, "round {round}");
            let spliced = diff_spliced((&a, &ia, count), (&b, &ib));
            // (In rounds 1 and 3 it may or may not apply: the moved ids need not be in copied blocks.)
            assert!(spliced.is_some() || round % 4 != 2, "round {round}: the splice alone compared");
            if let Some(d) = spliced {
                assert_eq!(d, want, "round {round}: spliced");
            } else if round % 2 == 1 {
                refused += 1;
            }
            let fresh = diff_routes(std::iter::empty(), routes_in(&b, &ib));
            assert_eq!(diff_maps(None, (&b, &ib)), fresh, "round {round}: nothing written before");
        }
        assert!(refused > 100, "copied blocks whose ids moved send the diff over every block ({refused} times)");
    }

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
