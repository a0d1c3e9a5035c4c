//! The kernel side of `world`: a route table synced into the XDP program's
//! maps from empty (as a starting daemon writes them), the trie entries the
//! sync reports, and each map's memory as the kernel accounts it: the
//! `memlock:` line of the map's `/proc/self/fdinfo` entry (the kernel's
//! `map_mem_usage`: an LPM trie counts its entries × (node + key + value), an
//! array its preallocated slots), read the way `bpftool map show` reads it.

use std::os::fd::{AsFd as _, AsRawFd as _};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use aya::maps::{Map, MapInfo};
use lagran::config::DnsSettings;
use lagran::route_table::RouteTable;
use lagran::xdp::{MapWriter, Maps};

use super::ms;
use crate::result;

/// The object's maps (created by loading it; the program itself is not
/// needed to write them) and a writer on them.
pub(super) struct Kernel {
    writer: MapWriter,
    /// (map name, kernel map id) of every map the object created.
    ids: Vec<(String, u32)>,
    /// Held so the maps the writer did not take live as long as it.
    _ebpf: aya::Ebpf,
}

impl Kernel {
    pub(super) fn load() -> anyhow::Result<Kernel> {
        let obj = lagran::xdp::object_bytes()?;
        let mut ebpf =
            lagran::xdp::loader::ebpf_loader().load(&obj).context("loading the BPF object's maps (root needed)")?;
        let ids = ebpf.maps().filter_map(|(name, m)| Some((name.to_string(), map_id(m)?))).collect::<Vec<_>>();
        let writer = MapWriter::new(Maps::from_ebpf(&mut ebpf)?, 53, 1232)?;
        let k = Kernel { writer, ids, _ebpf: ebpf };
        for trie in [lagran_common::route_v4::MAP_NAME, lagran_common::route_v6::MAP_NAME] {
            if let Some(max) = k.id(trie).and_then(|id| MapInfo::from_id(id).ok()).map(|i| i.max_entries()) {
                result(&format!("{trie}_max_entries"), max);
            }
        }
        Ok(k)
    }

    fn id(&self, name: &str) -> Option<u32> {
        self.ids.iter().find(|(n, _)| n == name).map(|(_, id)| *id)
    }

    /// Empties the maps (untimed), syncs `table` into them (timed) and prints
    /// under `key`: the sync time, trie entries, names left to userspace and
    /// the memory of the route tries and of all maps. Returns the sync time.
    pub(super) fn measure(&mut self, key: &str, table: &RouteTable) -> anyhow::Result<Duration> {
        self.drain()?;
        let t = Instant::now();
        let s = self.writer.sync(table, &DnsSettings::default())?;
        let sync = t.elapsed();
        result(&format!("{key}_sync_ms"), ms(sync));
        result(&format!("{key}_trie_entries"), s.routes_total);
        result(&format!("{key}_names_skipped"), s.names_skipped);
        let mut total = 0u64;
        for (name, id) in &self.ids {
            let bytes = memlock(*id).with_context(|| format!("the memory of map {name}"))?;
            total += bytes;
            if name == lagran_common::route_v4::MAP_NAME || name == lagran_common::route_v6::MAP_NAME {
                result(&format!("{key}_mem_{name}_bytes"), bytes);
            }
        }
        result(&format!("{key}_mem_maps_bytes"), total);
        Ok(sync)
    }

    /// An empty table synced: the tries left small before they are freed
    /// (freeing a large trie stalls a CPU).
    pub(super) fn drain(&mut self) -> anyhow::Result<()> {
        self.writer.sync(&RouteTable::new(1, 0, vec![]), &DnsSettings::default())?;
        Ok(())
    }
}

/// The kernel id of a map of the kinds the object declares.
fn map_id(m: &Map) -> Option<u32> {
    let data = match m {
        Map::Array(d) | Map::HashMap(d) | Map::LpmTrie(d) | Map::PerCpuArray(d) | Map::PerCpuHashMap(d) => d,
        _ => return None,
    };
    data.info().ok().map(|i| i.id())
}

/// The `memlock:` bytes the kernel reports for map `id`.
fn memlock(id: u32) -> anyhow::Result<u64> {
    let fd = MapInfo::from_id(id)?.fd()?;
    let path = format!("/proc/self/fdinfo/{}", fd.as_fd().as_raw_fd());
    let info = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_memlock(&info).with_context(|| format!("no memlock line in {path}"))
}

/// The value of the `memlock:` line of an fdinfo text.
fn parse_memlock(fdinfo: &str) -> Option<u64> {
    fdinfo.lines().find_map(|l| l.strip_prefix("memlock:")).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::parse_memlock;

    #[test]
    fn the_memlock_line_of_a_map_fdinfo_is_read() {
        let info = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t2085\nmap_type:\t11\nkey_size:\t8\n\
                    value_size:\t4\nmax_entries:\t1000\nmap_flags:\t0x1\nmap_extra:\t0x0\nmemlock:\t1048576\n";
        assert_eq!(parse_memlock(info), Some(1_048_576));
        assert_eq!(parse_memlock("pos:\t0\n"), None);
    }
}
