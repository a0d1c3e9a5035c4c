//! `xdp-cost`: where the XDP program's time goes, on a busy machine.
//!
//! Several objects (e.g. before and after a change) are loaded side by side and
//! measured back to back, round after round, so that load from other processes
//! falls on every variant alike; medians are reported. Each object is measured
//! with the real route table (the real xdb, the demo's nodes, one name) and with
//! a one-entry table, with and without ECS, with the listen set holding the
//! destination itself (one lookup) and only the wildcard (two lookups):
//!
//! - `answered`: one `BPF_PROG_TEST_RUN` per query (a repeated run would see the
//!   response), the kernel's duration (includes the test-run overhead);
//! - `stats`: the same runs as `bpf_stats` accounts them (`run_time_ns / run_cnt`,
//!   the program alone), when `kernel.bpf_stats_enabled` could be turned on;
//! - `lookup`: the answers emptied, so every run parses and looks up, then passes
//!   the query unchanged: `repeat` runs per query, warm caches.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use aya::programs::{TestRun as _, TestRunOptions, Xdp};
use lagran::config::{DnsSettings, ScheduleSettings};
use lagran::geo::{GeoDb, Xdb};
use lagran::partition::PartitionTable;
use lagran::prefix_map::PrefixMapV4;
use lagran::route_table::{Answer, RouteTable, ScheduledName, ZoneRoutes};
use lagran::scheduler::{BuildState, Change, Inputs, build_route_table};
use lagran::xdp::{MapWriter, Maps};
use lagran_common::names::NameValue;

use crate::frames::{self, Addrs};

const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
const SERVER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

#[derive(clap::Args)]
pub struct Args {
    /// The real ip2region file.
    #[arg(long)]
    xdb: PathBuf,
    /// BPF objects to compare (default: the one `LAGRAN_EBPF_OBJECT` names).
    #[arg(long = "object")]
    objects: Vec<PathBuf>,
    /// Distinct client /24s (real ones) per measurement.
    #[arg(long, default_value_t = 200)]
    packets: usize,
    /// Rounds over every variant (medians over all rounds).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Runs per query for the lookup-only measurement.
    #[arg(long, default_value_t = 200)]
    repeat: u32,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also measure each object with the names' IPv4 routes in the trie only.
    #[arg(long)]
    trie: bool,
    /// Also measure each object's cost of response rate limiting (full table,
    /// ECS, exact listen address): RRL on at its highest rate against off, the
    /// answered runs as per-packet differences within a round, and the
    /// lookup-only runs (`repeat` per packet, warm; they reach the account too).
    #[arg(long)]
    rrl: bool,
    /// The bare XDP_TX reflector object: its runs over the same frames, each
    /// round, are the floor of these measurements (the test-run harness and
    /// `bpf_stats`' own clock reads around a program that does nothing).
    #[arg(long)]
    floor: Option<PathBuf>,
}

/// One loaded object with its maps synced to one table.
struct Instance {
    ebpf: aya::Ebpf,
    writer: MapWriter,
}

impl Instance {
    /// `trie`: the names' IPv4 routes looked up in the trie only (`route4` 0).
    fn load(obj: &[u8], table: &RouteTable, trie: bool) -> anyhow::Result<Instance> {
        let mut ebpf = lagran::xdp::loader::ebpf_loader().load(obj).context("loading the BPF object (root needed)")?;
        let prog: &mut Xdp = ebpf.program_mut(lagran::xdp::loader::PROGRAM).context("no program")?.try_into()?;
        prog.load().context("the verifier rejected the program")?;
        let maps = Maps::from_ebpf(&mut ebpf)?;
        let mut writer = MapWriter::new(maps, 53, 1232)?;
        let st = writer.sync(table, &DnsSettings::default())?;
        eprintln!("  synced: {} trie entries, {:?} flat groups", st.routes_total, writer.maps().flat_groups());
        if trie {
            for name in table.scheduled_names() {
                let key = lagran::xdp::wire_name::wire_key(&name.name).context("name")?;
                let hash = lagran_common::names::hash_wire(&key);
                writer.maps_mut().put_name_raw(hash, NameValue::new(name.id, &key))?;
            }
        }
        Ok(Instance { ebpf, writer })
    }

    fn prog(&self) -> anyhow::Result<&Xdp> {
        Ok(self.ebpf.program(lagran::xdp::loader::PROGRAM).context("no program")?.try_into()?)
    }

    fn verified_insns(&self) -> Option<u32> {
        self.prog().ok()?.info().ok()?.verified_instruction_count()
    }

    /// (run time ns, runs) as `bpf_stats` accounts them.
    fn stats(&self) -> anyhow::Result<(u64, u64)> {
        crate::bpfstats::read(self.prog()?)
    }

    fn run(&self, frame: &[u8], repeat: u32) -> anyhow::Result<(u32, f64)> {
        let mut out = vec![0u8; 2048];
        let opts =
            TestRunOptions { data_in: Some(frame), data_out: Some(&mut out), repeat, ..TestRunOptions::default() };
        let r = self.prog()?.test_run(opts).context("BPF_PROG_TEST_RUN")?;
        Ok((r.return_value, r.duration.as_nanos() as f64))
    }

    fn listen(&mut self, wildcard: bool) -> anyhow::Result<()> {
        let a = if wildcard { Ipv4Addr::UNSPECIFIED } else { SERVER };
        self.writer.set_listen(&[SocketAddr::from((a, 53))])?;
        Ok(())
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn table_of(name: ScheduledName) -> RouteTable {
    RouteTable::new(
        1,
        now_ms(),
        vec![ZoneRoutes { zone: lagran::model::Zone::new(lagran::demo::DEMO_ZONE), names: vec![name] }],
    )
}

fn emptied(name: &ScheduledName) -> ScheduledName {
    let mut n = name.clone();
    for a in std::sync::Arc::make_mut(&mut n.answers) {
        a.ipv4.clear();
        a.canary = None;
    }
    n
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Per (object, table, ecs, wildcard listen): the rounds' medians of the
/// answered runs, of `bpf_stats`' per-run time and of the lookup-only runs.
type Cells = BTreeMap<(usize, usize, bool, bool), (Vec<f64>, Vec<f64>, Vec<f64>)>;
/// Per object: the rounds' medians of RRL on − off, answered and lookup-only.
type RrlCells = BTreeMap<usize, (Vec<f64>, Vec<f64>)>;
/// Per object variant and table: the instance answering and the one emptied.
type Instances = Vec<Vec<(Instance, Instance)>>;

pub fn run(a: Args) -> anyhow::Result<()> {
    let objects: Vec<PathBuf> = if a.objects.is_empty() { vec![lagran::xdp::object_path()] } else { a.objects.clone() };
    let xdb = Xdb::open(&a.xdb).with_context(|| format!("opening {}", a.xdb.display()))?;
    let geo = GeoDb::from_xdbs(Some(xdb), None);
    let tables = measured_tables(&geo)?;
    let subnets = crate::gun::real_subnets(geo.v4().context("no v4 xdb")?, a.packets, a.seed);
    let with_ecs: Vec<Vec<u8>> = subnets.iter().enumerate().map(|(i, s)| query_frame(i, *s, true)).collect();
    let without: Vec<Vec<u8>> = subnets.iter().enumerate().map(|(i, s)| query_frame(i, *s, false)).collect();

    let mut inst = load_instances(&objects, a.trie, &tables)?;
    check_parity(&inst, &with_ecs, &without)?;
    let floor = a.floor.as_deref().map(load_reflector).transpose()?;
    // (test-run medians, bpf_stats means) per round
    let mut floor_cells: (Vec<f64>, Vec<f64>) = Default::default();

    let stats_on = crate::bpfstats::BpfStats::on();
    let have_stats = stats_on.counting();
    let mut cells = Cells::new();
    let mut rrl_cells = RrlCells::new();
    for round in 0..a.rounds {
        measure_round(&mut inst, (&with_ecs, &without), a.repeat, have_stats, &mut cells)?;
        if let Some(e) = &floor {
            measure_floor(e, &with_ecs, have_stats, &mut floor_cells)?;
        }
        if a.rrl {
            measure_rrl(&mut inst, &with_ecs, a.repeat, &mut rrl_cells)?;
        }
        eprintln!("round {} of {} done", round + 1, a.rounds);
    }
    drop(stats_on);
    report(cells, &tables, floor.is_some().then_some(floor_cells), rrl_cells);
    Ok(())
}

/// The tables measured: the real one's name (the demo zone's apex, real xdb,
/// the demo's nodes) and the same name with a one-entry table.
fn measured_tables(geo: &GeoDb) -> anyhow::Result<Vec<(&'static str, ScheduledName)>> {
    let partitions = PartitionTable::build(geo, &[]);
    let inputs = Inputs {
        nodes: lagran::demo::demo_nodes(),
        zones: vec![lagran::demo::demo_zone()],
        now_ms: now_ms(),
        ..Inputs::default()
    };
    let settings = ScheduleSettings::default();
    let real = build_route_table(
        1,
        &inputs,
        &partitions,
        &settings,
        &settings.policy(),
        &mut BuildState::default(),
        &Change::Everything,
    );
    let edge = real.scheduled(lagran::demo::DEMO_ZONE).context("the demo zone apex is not scheduled")?.clone();
    let tiny = one_entry(&edge);
    Ok(vec![("full", edge), ("tiny", tiny)])
}

/// `name` with a one-entry table: every address gets one answer.
pub(crate) fn one_entry(name: &ScheduledName) -> ScheduledName {
    ScheduledName {
        ecs: true,
        answers: std::sync::Arc::new(vec![Answer {
            ttl: 30,
            ipv4: vec![Ipv4Addr::new(203, 0, 113, 22)],
            ..Answer::default()
        }]),
        v4: PrefixMapV4::uniform(0),
        ..name.clone()
    }
}

/// Query `i` for the demo name from subnet `s`: with an ECS option for the
/// /24, or (without ECS) sent from an address in it.
fn query_frame(i: usize, s: Ipv4Addr, ecs: bool) -> Vec<u8> {
    let addrs = Addrs {
        src_mac: [0x02, 0, 0, 0, 0, 2],
        dst_mac: [0x02, 0, 0, 0, 0, 1],
        // Without ECS the client is the sender: one address in the subnet.
        src_ip: if ecs { Ipv4Addr::new(198, 18, 0, 2) } else { Ipv4Addr::from(u32::from(s) | 7) },
        dst_ip: SERVER,
        src_port: 10_000 + i as u16,
        dst_port: 53,
    };
    let q = frames::dns_query("edge.lagran.net", i as u16, ecs.then_some((s, 24)));
    frames::udp_frame(&addrs, &q)
}

/// (objects × {flat, trie}) × tables × (answered, emptied).
fn load_instances(objects: &[PathBuf], trie_too: bool, tables: &[(&str, ScheduledName)]) -> anyhow::Result<Instances> {
    let mut inst = Vec::new();
    let variants: Vec<(&PathBuf, bool)> =
        objects.iter().flat_map(|p| [(p, false), (p, true)]).filter(|(_, t)| trie_too || !t).collect();
    for (oi, (path, trie)) in variants.iter().enumerate() {
        eprintln!("o{oi}: {}{}", path.display(), if *trie { ", trie only" } else { "" });
        let obj = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let mut per = Vec::new();
        for (label, name) in tables {
            let ans = Instance::load(&obj, &table_of(name.clone()), *trie)?;
            let emp = Instance::load(&obj, &table_of(emptied(name)), *trie)?;
            if *label == "full" {
                eprintln!("object {oi} ({}): verified_insns {:?}", path.display(), ans.verified_insns());
                crate::result(&format!("o{oi}_verified_insns"), ans.verified_insns().map_or(-1, i64::from));
            }
            per.push((ans, emp));
        }
        inst.push(per);
    }
    Ok(inst)
}

/// Parity first: every query answered (or passed when emptied) as expected.
fn check_parity(inst: &Instances, with_ecs: &[Vec<u8>], without: &[Vec<u8>]) -> anyhow::Result<()> {
    for per in inst {
        for (ans, emp) in per {
            for f in with_ecs.iter().chain(without).take(8) {
                let (act, _) = ans.run(f, 1)?;
                if act != XDP_TX {
                    let c = ans.writer.counters()?;
                    let why: Vec<String> =
                        c.iter().filter(|(_, v)| *v > 0).map(|(k, v)| format!("{}={v}", k.name())).collect();
                    bail!("a query was not answered (action {act}): {}", why.join(" "));
                }
                let (act, _) = emp.run(f, 1)?;
                if act != XDP_PASS {
                    bail!("an emptied query was not passed (action {act})");
                }
            }
        }
    }
    Ok(())
}

/// The bare reflector object, loaded.
fn load_reflector(path: &std::path::Path) -> anyhow::Result<aya::Ebpf> {
    let obj = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut ebpf = aya::Ebpf::load(&obj).context("loading the reflector object")?;
    let prog: &mut Xdp = ebpf.program_mut("reflector").context("no `reflector` program")?.try_into()?;
    prog.load().context("the verifier rejected the reflector")?;
    Ok(ebpf)
}

/// One round over every object, table, ECS or not and listen set: the
/// answered runs (one per query) and the lookup-only runs (`repeat` each).
fn measure_round(
    inst: &mut Instances,
    (with_ecs, without): (&[Vec<u8>], &[Vec<u8>]),
    repeat: u32,
    have_stats: bool,
    cells: &mut Cells,
) -> anyhow::Result<()> {
    for wildcard in [false, true] {
        for ecs in [true, false] {
            let frames = if ecs { with_ecs } else { without };
            for ti in 0..inst.first().map_or(0, Vec::len) {
                for (oi, per) in inst.iter_mut().enumerate() {
                    let (ans, emp) = &mut per[ti];
                    ans.listen(wildcard)?;
                    emp.listen(wildcard)?;
                    let cell = cells.entry((oi, ti, ecs, wildcard)).or_default();
                    let before = ans.stats()?;
                    let mut one = Vec::with_capacity(frames.len());
                    for f in frames {
                        let (act, ns) = ans.run(f, 1)?;
                        if act != XDP_TX {
                            bail!("not answered (action {act})");
                        }
                        one.push(ns);
                    }
                    let after = ans.stats()?;
                    cell.0.push(median(one));
                    if have_stats && let Some(ns) = crate::bpfstats::per_run(before, after) {
                        cell.1.push(ns);
                    }
                    let mut look = Vec::with_capacity(frames.len());
                    for f in frames {
                        let (act, ns) = emp.run(f, repeat)?;
                        if act != XDP_PASS {
                            bail!("emptied query not passed (action {act})");
                        }
                        look.push(ns);
                    }
                    cell.2.push(median(look));
                }
            }
        }
    }
    Ok(())
}

/// One round of the reflector over the ECS frames.
fn measure_floor(
    e: &aya::Ebpf,
    frames: &[Vec<u8>],
    have_stats: bool,
    floor_cells: &mut (Vec<f64>, Vec<f64>),
) -> anyhow::Result<()> {
    let prog: &Xdp = e.program("reflector").context("no `reflector` program")?.try_into()?;
    let before = crate::bpfstats::read(prog)?;
    let mut one = Vec::with_capacity(frames.len());
    for f in frames {
        let mut out = vec![0u8; 2048];
        let opts =
            TestRunOptions { data_in: Some(f), data_out: Some(&mut out), repeat: 1, ..TestRunOptions::default() };
        let r = prog.test_run(opts).context("BPF_PROG_TEST_RUN (reflector)")?;
        if r.return_value != XDP_TX {
            bail!("the reflector did not reflect (action {})", r.return_value);
        }
        one.push(r.duration.as_nanos() as f64);
    }
    let after = crate::bpfstats::read(prog)?;
    floor_cells.0.push(median(one));
    if have_stats && let Some(ns) = crate::bpfstats::per_run(before, after) {
        floor_cells.1.push(ns);
    }
    Ok(())
}

/// One round of RRL off against on (at its highest rate), per object: the
/// full table, ECS, the exact listen address.
fn measure_rrl(inst: &mut Instances, frames: &[Vec<u8>], repeat: u32, rrl_cells: &mut RrlCells) -> anyhow::Result<()> {
    for (oi, per) in inst.iter_mut().enumerate() {
        let (ans, emp) = &mut per[0];
        ans.listen(false)?;
        emp.listen(false)?;
        let cell = rrl_cells.entry(oi).or_default();
        let mut times = [Vec::new(), Vec::new()];
        let mut look = [Vec::new(), Vec::new()];
        for (i, rps) in [0, lagran::dns::rrl::MAX_RATE].into_iter().enumerate() {
            let rrl = lagran::config::RrlSettings { responses_per_second: rps, slip: 2, window_secs: 15 };
            ans.writer.set_rrl(&rrl)?;
            emp.writer.set_rrl(&rrl)?;
            for f in frames {
                let (act, ns) = ans.run(f, 1)?;
                if act != XDP_TX {
                    bail!("RRL at {rps}/s: not answered (action {act})");
                }
                times[i].push(ns);
            }
            for f in frames {
                look[i].push(emp.run(f, repeat)?.1);
            }
        }
        for w in [&mut *ans, &mut *emp] {
            w.writer.set_rrl(&lagran::config::RrlSettings::default())?;
        }
        cell.0.push(median(times[1].iter().zip(&times[0]).map(|(b, a)| b - a).collect()));
        cell.1.push(median(look[1].iter().zip(&look[0]).map(|(b, a)| b - a).collect()));
    }
    Ok(())
}

/// Prints the medians and records them as results.
fn report(
    cells: Cells,
    tables: &[(&str, ScheduledName)],
    floor_cells: Option<(Vec<f64>, Vec<f64>)>,
    rrl_cells: RrlCells,
) {
    println!(
        "{:<8} {:<5} {:<4} {:<9} {:>9} {:>9} {:>9}",
        "object", "table", "ecs", "listen", "answered", "stats", "lookup"
    );
    for ((oi, ti, ecs, wildcard), (ans, st, look)) in cells {
        let (ans, st, look) = (median(ans), median(st), median(look));
        let listen = if wildcard { "wildcard" } else { "exact" };
        let ecs_s = if ecs { "ecs" } else { "-" };
        println!("o{oi:<7} {:<5} {ecs_s:<4} {listen:<9} {ans:>9.1} {st:>9.1} {look:>9.1}", tables[ti].0);
        let key = format!("o{oi}_{}_{}_{listen}", tables[ti].0, if ecs { "ecs" } else { "noecs" });
        crate::result(&format!("{key}_answered_ns"), format!("{ans:.1}"));
        crate::result(&format!("{key}_stats_ns"), format!("{st:.1}"));
        crate::result(&format!("{key}_lookup_ns"), format!("{look:.1}"));
    }
    if let Some((ans, st)) = floor_cells {
        let (ans, st) = (median(ans), median(st));
        println!("floor    reflector ecs  -         {ans:>9.1} {st:>9.1}");
        crate::result("floor_answered_ns", format!("{ans:.1}"));
        crate::result("floor_stats_ns", format!("{st:.1}"));
    }
    for (oi, (ans, look)) in rrl_cells {
        let (ans, look) = (median(ans), median(look));
        println!("o{oi:<7} RRL on − off: answered {ans:.1} ns, lookup-only {look:.1} ns");
        crate::result(&format!("o{oi}_rrl_cost_answered_ns"), format!("{ans:.1}"));
        crate::result(&format!("o{oi}_rrl_cost_lookup_ns"), format!("{look:.1}"));
    }
}
