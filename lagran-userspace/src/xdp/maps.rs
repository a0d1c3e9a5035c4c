//! Typed handles on the fast path's maps: every read and write of a map goes
//! through [`Maps`], which holds the aya handles (the loader only pins the
//! maps, through the loaded object). Besides this module, aya's
//! map types appear in [`mapping`](super::mapping), which maps an array's
//! memory, and in [`name_slots`](super::name_slots) and
//! [`route4_flat`](super::route4_flat), which take the `Map` of the array they
//! write through such a mapping.
//!
//! What to write, and in which order, is the [`MapWriter`](super::MapWriter)'s
//! (`writer`); `dump` prints the maps; `counters` sums the packet counters.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use aya::Ebpf;
use aya::maps::{Array, HashMap, LpmTrie, Map, MapData, MapError, PerCpuArray, lpm_trie::Key};
use lagran_common::{
    answers::{self, AnswerV4, AnswerV6},
    config::{self, Config},
    cookie::{self, CookieConfig},
    counters::{self, Counter},
    listen::{self, ListenKey, ListenV4, ListenV6, ListenV6Entry, ListenValue},
    names::{self, NameValue},
    route_v4::{self, NAME_BITS, RouteV4Data, RouteValue},
    route_v6::{self, RouteV6Data},
    rrsig::{self, RrsigKey, RrsigValue},
};

use super::XdpError;
use super::counters::CounterSnapshot;
use super::name_slots::NameSlots;
use super::route4_flat::FlatV4;

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
/// The query log's ring and drop counts too (`bpftool map dump pinned
/// …/lagran_tap_drops`).
/// The RRSIGs of signed answers too (`lagran_rrsig`).
pub const OPTIONAL_MAP_NAMES: [&str; 7] = [
    lagran_common::route_v4_flat::MAP_NAME_L1,
    lagran_common::route_v4_flat::MAP_NAME_L2,
    listen::MAP_NAME_V4,
    listen::MAP_NAME_V6,
    lagran_common::tap::RING_MAP_NAME,
    lagran_common::tap::DROPS_MAP_NAME,
    rrsig::MAP_NAME,
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
    /// The RRSIGs of signed answers (`None`: an object without them, which
    /// answers unsigned only, or pinned maps).
    rrsig: Option<HashMap<MapData, RrsigKey, RrsigValue>>,
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
        let rrsig = match ebpf.take_map(rrsig::MAP_NAME) {
            Some(m) => Some(HashMap::try_from(m).map_err(map_err(rrsig::MAP_NAME))?),
            None => None,
        };
        let mut maps =
            Maps::from_maps([config, listen, names, routes, answers, counters, routes6, answers6, cookie], true)?;
        maps.flat = flat;
        maps.listen4 = listen4;
        maps.listen6 = listen6;
        maps.rrsig = rrsig;
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
        let mut maps = Maps::from_maps(
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
        )?;
        // Pinned only by an object that answers signed.
        if dir.join(rrsig::MAP_NAME).exists() {
            maps.rrsig = Some(HashMap::try_from(open(rrsig::MAP_NAME)?).map_err(map_err(rrsig::MAP_NAME))?);
        }
        Ok(maps)
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
            rrsig: None,
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
        Ok(CounterSnapshot::new(values))
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

    /// Writes the config entry.
    pub(super) fn set_config(&mut self, c: &Config) -> Result<(), XdpError> {
        self.config.set(config::INDEX, c, 0).map_err(map_err(config::MAP_NAME))
    }

    /// Whether these maps are as the load that made them left them (see the field).
    pub(super) fn fresh(&self) -> bool {
        self.fresh
    }

    /// The name slots of `lagran_names`.
    pub(super) fn names(&self) -> &NameSlots {
        &self.names
    }

    pub(super) fn names_mut(&mut self) -> &mut NameSlots {
        &mut self.names
    }

    /// The flat IPv4 route arrays, when the object has them.
    pub(super) fn flat(&self) -> Option<&FlatV4> {
        self.flat.as_ref()
    }

    pub(super) fn flat_mut(&mut self) -> Option<&mut FlatV4> {
        self.flat.as_mut()
    }

    /// Inserts or updates the IPv4 trie entry of block `addr/len` of name `name_id`.
    pub(super) fn insert_route4(
        &mut self,
        name_id: u32,
        addr: u32,
        len: u8,
        value: RouteValue,
    ) -> Result<(), XdpError> {
        self.routes
            .insert(&route_key(name_id, addr, len), value, 0)
            .map_err(|e| full_or(route_v4::MAP_NAME, route_v4::MAX_ENTRIES, e, "trie entries"))
    }

    /// Deletes the IPv4 trie entry of block `addr/len` of name `name_id` (gone already: fine).
    pub(super) fn remove_route4(&mut self, name_id: u32, addr: u32, len: u8) -> Result<(), XdpError> {
        remove_ok_if_missing(self.routes.remove(&route_key(name_id, addr, len)), route_v4::MAP_NAME)
    }

    /// Inserts or updates the IPv6 trie entry of block `addr/len` of name `name_id`.
    pub(super) fn insert_route6(
        &mut self,
        name_id: u32,
        addr: u128,
        len: u8,
        value: RouteValue,
    ) -> Result<(), XdpError> {
        self.routes6
            .insert(&route6_key(name_id, addr, len), value, 0)
            .map_err(|e| full_or(route_v6::MAP_NAME, route_v6::MAX_ENTRIES, e, "IPv6 trie entries"))
    }

    /// Deletes the IPv6 trie entry of block `addr/len` of name `name_id` (gone already: fine).
    pub(super) fn remove_route6(&mut self, name_id: u32, addr: u128, len: u8) -> Result<(), XdpError> {
        remove_ok_if_missing(self.routes6.remove(&route6_key(name_id, addr, len)), route_v6::MAP_NAME)
    }

    /// Writes answer `id`: its `AAAA` records into `lagran_answers6`, then its
    /// `A` records into `lagran_answers`.
    pub(super) fn set_answer(&mut self, id: u32, v4: AnswerV4, v6: AnswerV6) -> Result<(), XdpError> {
        self.answers6.set(id, v6, 0).map_err(map_err(answers::MAP_NAME_V6))?;
        self.answers.set(id, v4, 0).map_err(map_err(answers::MAP_NAME))
    }

    /// Clears answer `id` in `lagran_answers`, then in `lagran_answers6`.
    pub(super) fn clear_answer(&mut self, id: u32) -> Result<(), XdpError> {
        self.answers.set(id, AnswerV4::default(), 0).map_err(map_err(answers::MAP_NAME))?;
        self.answers6.set(id, AnswerV6::default(), 0).map_err(map_err(answers::MAP_NAME_V6))
    }

    /// Every answer slot in id order, with both families' records.
    pub(super) fn answers(&self) -> impl Iterator<Item = Result<(u32, AnswerV4, AnswerV6), XdpError>> + '_ {
        self.answers.iter().enumerate().map(|(id, item)| {
            let a = item.map_err(map_err(answers::MAP_NAME))?;
            let a6 = self.answers6.get(&(id as u32), 0).map_err(map_err(answers::MAP_NAME_V6))?;
            Ok((id as u32, a, a6))
        })
    }

    /// The IPv4 trie's entries: name id, block start, CIDR length, value.
    pub(super) fn routes4(&self) -> impl Iterator<Item = Result<(u32, Ipv4Addr, u8, RouteValue), XdpError>> + '_ {
        self.routes.iter().map(|item| {
            let (k, v) = item.map_err(map_err(route_v4::MAP_NAME))?;
            let (plen, data) = (k.prefix_len(), k.data());
            Ok((u32::from_be_bytes(data.name_id), Ipv4Addr::from(data.addr), prefix_len(plen), v))
        })
    }

    /// The IPv6 trie's entries: name id, block start, CIDR length, value.
    pub(super) fn routes6(&self) -> impl Iterator<Item = Result<(u32, Ipv6Addr, u8, RouteValue), XdpError>> + '_ {
        self.routes6.iter().map(|item| {
            let (k, v) = item.map_err(map_err(route_v6::MAP_NAME))?;
            let (plen, data) = (k.prefix_len(), k.data());
            Ok((u32::from_be_bytes(data.name_id), Ipv6Addr::from(data.addr), prefix_len(plen), v))
        })
    }

    /// Whether the program answers signed (its object has `lagran_rrsig`).
    pub(super) fn has_rrsig(&self) -> bool {
        self.rrsig.is_some()
    }

    /// Writes (or replaces, whole) the RRSIG of an answer.
    pub(super) fn set_rrsig(&mut self, key: RrsigKey, value: &RrsigValue) -> Result<(), XdpError> {
        let Some(map) = self.rrsig.as_mut() else { return Err(XdpError::NoMap(rrsig::MAP_NAME)) };
        map.insert(key, value, 0)
            .map_err(|e| full_or(rrsig::MAP_NAME, rrsig::MAX_ENTRIES, e, "too many signed answers"))
    }

    /// Removes the RRSIG of an answer.
    pub(super) fn remove_rrsig(&mut self, key: &RrsigKey) -> Result<(), XdpError> {
        let Some(map) = self.rrsig.as_mut() else { return Ok(()) };
        remove_ok_if_missing(map.remove(key), rrsig::MAP_NAME)
    }

    /// The RRSIG entries as they are in the map now.
    pub fn rrsigs(&self) -> Result<Vec<(RrsigKey, RrsigValue)>, XdpError> {
        let Some(map) = self.rrsig.as_ref() else { return Ok(Vec::new()) };
        map.iter().collect::<Result<_, _>>().map_err(map_err(rrsig::MAP_NAME))
    }

    /// Empties every map the writer fills (every key, including entries from
    /// an earlier process): the names, both tries, the answers, the flat
    /// arrays and the RRSIGs.
    pub(super) fn clear(&mut self) -> Result<(), XdpError> {
        self.names.reset()?;
        let keys: Vec<Key<RouteV4Data>> =
            self.routes.keys().collect::<Result<_, _>>().map_err(map_err(route_v4::MAP_NAME))?;
        for k in keys {
            remove_ok_if_missing(self.routes.remove(&k), route_v4::MAP_NAME)?;
        }
        let keys: Vec<Key<RouteV6Data>> =
            self.routes6.keys().collect::<Result<_, _>>().map_err(map_err(route_v6::MAP_NAME))?;
        for k in keys {
            remove_ok_if_missing(self.routes6.remove(&k), route_v6::MAP_NAME)?;
        }
        for id in 0..answers::MAX_ENTRIES {
            let a = self.answers.get(&id, 0).map_err(map_err(answers::MAP_NAME))?;
            if a != AnswerV4::default() {
                self.answers.set(id, AnswerV4::default(), 0).map_err(map_err(answers::MAP_NAME))?;
            }
            let a = self.answers6.get(&id, 0).map_err(map_err(answers::MAP_NAME_V6))?;
            if a != AnswerV6::default() {
                self.answers6.set(id, AnswerV6::default(), 0).map_err(map_err(answers::MAP_NAME_V6))?;
            }
        }
        if let Some(flat) = self.flat.as_mut() {
            flat.reset();
        }
        if let Some(map) = self.rrsig.as_mut() {
            let keys: Vec<RrsigKey> = map.keys().collect::<Result<_, _>>().map_err(map_err(rrsig::MAP_NAME))?;
            for k in keys {
                remove_ok_if_missing(map.remove(&k), rrsig::MAP_NAME)?;
            }
        }
        Ok(())
    }
}

/// The CIDR length of a trie key's prefix length (the name id's bits first).
fn prefix_len(plen: u32) -> u8 {
    plen.saturating_sub(NAME_BITS) as u8
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

fn route_key(name_id: u32, addr: u32, len: u8) -> Key<RouteV4Data> {
    Key::new(NAME_BITS + len as u32, RouteV4Data::new(name_id, addr))
}

fn route6_key(name_id: u32, addr: u128, len: u8) -> Key<RouteV6Data> {
    Key::new(NAME_BITS + len as u32, RouteV6Data::new(name_id, addr))
}

/// A delete of an entry that is already gone is not an error.
fn remove_ok_if_missing(res: Result<(), MapError>, map: &'static str) -> Result<(), XdpError> {
    match res {
        Ok(()) | Err(MapError::KeyNotFound) => Ok(()),
        Err(MapError::SyscallError(s)) if s.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(map_err(map)(e)),
    }
}
