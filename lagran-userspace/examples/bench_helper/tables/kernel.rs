//! The kernel part of `tables`: the route table in the maps (sync time,
//! trie entries) and the program's per-packet cost (`BPF_PROG_TEST_RUN`) with
//! tables of several sizes, answered and lookup-only, and with response rate
//! limiting on and off.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use aya::programs::{TestRun as _, TestRunOptions, Xdp};
use lagran::config::DnsSettings;
use lagran::geo::GeoDb;
use lagran::model::Zone;
use lagran::prefix_map::PrefixMapV4;
use lagran::route_table::{Answer, RouteTable, ScheduledName, ZoneRoutes};
use lagran::xdp::{MapWriter, Maps};

use super::{Args, ms, now_ms, stats};
use crate::frames::{self, Addrs};
use crate::result;

const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;

/// Query frames with their ECS /24, one per real client /24.
type Packets = Vec<(Ipv4Addr, Vec<u8>)>;

pub(super) fn run(
    a: &Args,
    geo: &GeoDb,
    real: &RouteTable,
    unmerged: ScheduledName,
    compiled: Duration,
) -> anyhow::Result<()> {
    let mut k = Kernel::load()?;
    let settings = DnsSettings::default();
    let t = Instant::now();
    let s = k.writer.sync(real, &settings)?;
    let sync = t.elapsed();
    result("map_sync_ms", ms(sync));
    result("trie_entries", s.routes_total);
    result("full_load_ms", ms(compiled + sync));

    let packets = query_packets(a, geo)?;
    measure_baselines(&k, a.repeat, packets.len())?;
    let mut sets = measured_sets(real)?;
    if !a.no_unmerged {
        sets.push(("unmerged", unmerged));
    }
    measure_lookups(&mut k, &sets, &packets, a.repeat)?;
    measure_answered(&mut k, &sets, &packets)?;
    k.writer.sync(real, &settings)?;
    measure_rrl(&mut k, &packets)?;
    measure_rrl_program(&mut k, &packets)?;
    k.writer.set_rrl(&lagran::config::RrlSettings::default())?;
    // Leave the maps small before they are freed (freeing a large trie stalls a CPU).
    let t = Instant::now();
    k.writer.sync(&RouteTable::new(1, now_ms(), vec![]), &settings)?;
    result("trie_drain_ms", ms(t.elapsed()));
    Ok(())
}

/// Query frames: one per real client /24 (ECS /24), as the load generator sends.
fn query_packets(a: &Args, geo: &GeoDb) -> anyhow::Result<Packets> {
    let subnets = crate::gun::real_subnets(geo.v4().context("no v4 xdb")?, a.packets, a.seed);
    let addrs = |i: usize| Addrs {
        src_mac: [0x02, 0, 0, 0, 0, 2],
        dst_mac: [0x02, 0, 0, 0, 0, 1],
        src_ip: Ipv4Addr::new(198, 18, 0, 2),
        dst_ip: Ipv4Addr::new(198, 18, 0, 1),
        src_port: 10_000 + i as u16,
        dst_port: 53,
    };
    Ok(subnets
        .iter()
        .enumerate()
        .map(|(i, s)| {
            (*s, frames::udp_frame(&addrs(i), &frames::dns_query("edge.lagran.net", i as u16, Some((*s, 24)))))
        })
        .collect())
}

/// The test-run overhead: a frame passed at the first check (ARP), `repeat`
/// runs at once and one run at a time (timed by the harness and by
/// bpf_stats), `3 × packets` single runs.
fn measure_baselines(k: &Kernel, repeat: u32, packets: usize) -> anyhow::Result<()> {
    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x08, 0x06]);
    arp.resize(60, 0);
    let (_, base, _) = k.run(&arp, repeat)?;
    result("testrun_baseline_ns", format!("{base:.1}"));
    // What one run's figures carry besides the program (an answered packet is
    // measured one run at a time): the same frame, one run at a time, timed by
    // the harness and by bpf_stats. On a KVM guest the clock reads alone are
    // tens of nanoseconds.
    let mut single = Vec::with_capacity(3 * packets);
    for _ in 0..3 * packets {
        single.push(k.run(&arp, 1)?.1);
    }
    result("testrun_single_baseline_ns", format!("{:.1}", stats(single).1));
    let on = crate::bpfstats::BpfStats::on();
    if on.counting() {
        let before = k.stats()?;
        for _ in 0..3 * packets {
            k.run(&arp, 1)?;
        }
        if let Some(ns) = crate::bpfstats::per_run(before, k.stats()?) {
            result("single_baseline_prog_ns", format!("{ns:.1}"));
        }
    }
    Ok(())
}

/// The tables measured besides the unmerged one: a one-entry table, 1 024
/// blocks, and the real table's name.
fn measured_sets(real: &RouteTable) -> anyhow::Result<Vec<(&'static str, ScheduledName)>> {
    let edge = real.scheduled(lagran::demo::DEMO_ZONE).context("no apex")?.clone();
    let tiny = crate::xdpcost::one_entry(&edge);
    // 1 024 /10 blocks over 7 answers (adjacent blocks differ, so none merge).
    let small = ScheduledName {
        ecs: true,
        answers: (0..7u8)
            .map(|i| Answer { ttl: 30, ipv4: vec![Ipv4Addr::new(203, 0, 113, 20 + i)], ..Answer::default() })
            .collect::<Vec<_>>()
            .into(),
        v4: PrefixMapV4::from_ranges((0..1024u32).map(|i| (i << 22, (i << 22) | 0x3f_ffff, i % 7)), 0),
        ..edge.clone()
    };
    Ok(vec![("tiny", tiny), ("small", small), ("full", edge)])
}

/// Each table: its sync, a parity pass (every answer and scope against
/// userspace's), and the lookup-only runs.
fn measure_lookups(
    k: &mut Kernel,
    sets: &[(&str, ScheduledName)],
    packets: &[(Ipv4Addr, Vec<u8>)],
    repeat: u32,
) -> anyhow::Result<()> {
    let settings = DnsSettings::default();
    for (label, name) in sets {
        let t = Instant::now();
        let st = k.writer.sync(&table_of(name.clone()), &settings)?;
        result(&format!("{label}_sync_ms"), ms(t.elapsed()));
        result(&format!("{label}_entries"), st.routes_total);
        let (_, mismatches) = answered_pass(k, packets, label, Some(name))?;
        result(&format!("{label}_parity_mismatches"), mismatches);
        // Lookup only: answers emptied, so the packet is passed after the lookups.
        k.writer.sync(&table_of(emptied(name)), &settings)?;
        let mut lookup = Vec::with_capacity(packets.len());
        for (subnet, f) in packets {
            let (action, ns, _) = k.run(f, repeat)?;
            if action != XDP_PASS {
                bail!("{label}: lookup-only run for {subnet}/24 returned action {action}, expected XDP_PASS");
            }
            lookup.push(ns);
        }
        let (mean, median) = stats(lookup);
        result(&format!("{label}_lookup_mean_ns"), format!("{mean:.1}"));
        result(&format!("{label}_lookup_median_ns"), format!("{median:.1}"));
        eprintln!("tables: {label}: {} trie entries measured", st.routes_total);
    }
    Ok(())
}

/// Answered (XDP_TX), one run per packet (a repeat would see the response),
/// in five rounds that visit every table in turn: the single runs' timing
/// drifts by 2× over minutes on a guest, and tables measured one after the
/// other compared that drift (whichever table came first looked slowest).
/// Each visit: the table synced, one pass to warm it, one timed pass, one
/// pass with the kernel's accounting on (off for the timed pass, so the
/// harness's timing stays comparable with runs made without it). The
/// unmerged trie (a million entries) takes seconds to sync: measured in one
/// visit of five timed passes.
fn measure_answered(
    k: &mut Kernel,
    sets: &[(&str, ScheduledName)],
    packets: &[(Ipv4Addr, Vec<u8>)],
) -> anyhow::Result<()> {
    let settings = DnsSettings::default();
    let mut answered = vec![Vec::with_capacity(packets.len() * 5); sets.len()];
    let mut program = vec![Vec::new(); sets.len()];
    for round in 0..5 {
        for (i, (label, name)) in sets.iter().enumerate() {
            let visits = if *label == "unmerged" { usize::from(round == 0) * 5 } else { 1 };
            if visits == 0 {
                continue;
            }
            k.writer.sync(&table_of(name.clone()), &settings)?;
            answered_pass(k, packets, label, None)?;
            for _ in 0..visits {
                answered[i].extend(answered_pass(k, packets, label, None)?.0);
                program[i].extend(program_ns(k, packets, 1)?);
            }
        }
    }
    for (i, (label, _)) in sets.iter().enumerate() {
        let (mean, median) = stats(std::mem::take(&mut answered[i]));
        result(&format!("{label}_answered_mean_ns"), format!("{mean:.1}"));
        result(&format!("{label}_answered_median_ns"), format!("{median:.1}"));
        // The program alone (without the harness): the mean over all visits.
        if !program[i].is_empty() {
            let ns = program[i].iter().sum::<f64>() / program[i].len() as f64;
            result(&format!("{label}_answered_prog_ns"), format!("{ns:.1}"));
        }
    }
    Ok(())
}

/// The rate limiting settings at `rps` responses per second.
fn rrl(rps: u32) -> lagran::config::RrlSettings {
    lagran::config::RrlSettings { responses_per_second: rps, slip: 2, window_secs: 15 }
}

/// Response rate limiting on vs off (it must add less than 20 ns), the table
/// synced (the full real one), answered packets; RRL at its highest rate, so
/// every answer is sent and each packet pays the account lookup and update.
/// Rounds alternate off and on, and each packet's on − off is taken within a
/// pair of rounds, so load from other processes falls on both alike.
fn measure_rrl(k: &mut Kernel, packets: &[(Ipv4Addr, Vec<u8>)]) -> anyhow::Result<()> {
    let (mut off, mut on, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..12 {
        let mut times = [Vec::with_capacity(packets.len()), Vec::with_capacity(packets.len())];
        for (i, rps) in [0, lagran::dns::rrl::MAX_RATE].into_iter().enumerate() {
            k.writer.set_rrl(&rrl(rps))?;
            for (subnet, f) in packets {
                let (action, ns, _) = k.run(f, 1)?;
                if action != XDP_TX {
                    bail!("RRL at {rps}/s: a query for ECS {subnet}/24 was not answered by XDP (action {action})");
                }
                times[i].push(ns);
            }
        }
        // The first pair warms the accounts and caches.
        if round > 0 {
            diff.extend(times[1].iter().zip(&times[0]).map(|(b, a)| b - a));
            let [a, b] = times;
            off.extend(a);
            on.extend(b);
        }
    }
    for (label, v) in [("rrl_off", off), ("rrl_on", on)] {
        let (mean, median) = stats(v);
        result(&format!("{label}_answered_mean_ns"), format!("{mean:.1}"));
        result(&format!("{label}_answered_median_ns"), format!("{median:.1}"));
    }
    let (mean, median) = stats(diff);
    result("rrl_cost_mean_ns", format!("{mean:.1}"));
    result("rrl_cost_median_ns", format!("{median:.1}"));
    Ok(())
}

/// The program alone, RRL off and on in alternating rounds of two passes
/// each; the cost is the median of the rounds' on − off.
fn measure_rrl_program(k: &mut Kernel, packets: &[(Ipv4Addr, Vec<u8>)]) -> anyhow::Result<()> {
    let (mut prog_off, mut prog_on, mut prog_diff) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..6 {
        k.writer.set_rrl(&rrl(0))?;
        let a = program_ns(k, packets, 2)?;
        k.writer.set_rrl(&rrl(lagran::dns::rrl::MAX_RATE))?;
        let b = program_ns(k, packets, 2)?;
        if let (Some(a), Some(b)) = (a, b) {
            prog_off.push(a);
            prog_on.push(b);
            prog_diff.push(b - a);
        }
    }
    if !prog_diff.is_empty() {
        result("rrl_off_prog_ns", format!("{:.1}", stats(prog_off).1));
        result("rrl_on_prog_ns", format!("{:.1}", stats(prog_on).1));
        result("rrl_cost_prog_ns", format!("{:.1}", stats(prog_diff).1));
    }
    Ok(())
}

/// The program loaded (verified) with a map writer on its maps.
struct Kernel {
    ebpf: aya::Ebpf,
    writer: MapWriter,
}

impl Kernel {
    fn load() -> anyhow::Result<Kernel> {
        let obj = lagran::xdp::object_bytes()?;
        let mut ebpf = lagran::xdp::loader::ebpf_loader().load(&obj).context("loading the BPF object (root needed)")?;
        let prog: &mut Xdp = ebpf.program_mut(lagran::xdp::loader::PROGRAM).context("no program")?.try_into()?;
        prog.load().context("the verifier rejected the program")?;
        let maps = Maps::from_ebpf(&mut ebpf)?;
        let writer = MapWriter::new(maps, 53, 1232)?;
        Ok(Kernel { ebpf, writer })
    }

    fn prog(&self) -> anyhow::Result<&Xdp> {
        Ok(self.ebpf.program(lagran::xdp::loader::PROGRAM).context("no program")?.try_into()?)
    }

    /// (run time ns, runs) as `bpf_stats` accounts them.
    fn stats(&self) -> anyhow::Result<(u64, u64)> {
        crate::bpfstats::read(self.prog()?)
    }

    /// Runs `frame` `repeat` times; (action, ns per run as the kernel measured it, output).
    fn run(&self, frame: &[u8], repeat: u32) -> anyhow::Result<(u32, f64, Vec<u8>)> {
        let mut out = vec![0u8; 2048];
        let opts =
            TestRunOptions { data_in: Some(frame), data_out: Some(&mut out), repeat, ..TestRunOptions::default() };
        let r = self.prog()?.test_run(opts).context("BPF_PROG_TEST_RUN")?;
        out.truncate(r.data_size_out as usize);
        Ok((r.return_value, r.duration.as_nanos() as f64, out))
    }
}

/// The program's own nanoseconds per answered packet as the kernel accounts
/// them (`kernel.bpf_stats_enabled`, on only for these runs), over `passes`
/// single runs of every packet; `None` where the sysctl cannot be turned on.
fn program_ns(k: &Kernel, packets: &[(Ipv4Addr, Vec<u8>)], passes: usize) -> anyhow::Result<Option<f64>> {
    let on = crate::bpfstats::BpfStats::on();
    if !on.counting() {
        return Ok(None);
    }
    let before = k.stats()?;
    for _ in 0..passes {
        for (subnet, f) in packets {
            let (action, _, _) = k.run(f, 1)?;
            if action != XDP_TX {
                bail!("a query for ECS {subnet}/24 was not answered by XDP (action {action})");
            }
        }
    }
    Ok(crate::bpfstats::per_run(before, k.stats()?))
}

/// One run of every packet, each answered (XDP_TX) or an error; the run
/// times, and with `check` the answers whose addresses or ECS scope differ
/// from userspace's.
fn answered_pass(
    k: &Kernel,
    packets: &[(Ipv4Addr, Vec<u8>)],
    label: &str,
    check: Option<&ScheduledName>,
) -> anyhow::Result<(Vec<f64>, usize)> {
    let mut times = Vec::with_capacity(packets.len());
    let mut mismatches = 0usize;
    for (subnet, f) in packets {
        let (action, ns, out) = k.run(f, 1)?;
        if action != XDP_TX {
            bail!("{label}: a query for ECS {subnet}/24 was not answered by XDP (action {action})");
        }
        times.push(ns);
        if let Some(name) = check {
            let reply = frames::frame_payload(&out).and_then(frames::parse_reply);
            let (want, scope) = name.answer_for(IpAddr::V4(*subnet));
            mismatches += usize::from(!reply.is_some_and(|r| r.a == want.ipv4 && r.scope == Some(scope)));
        }
    }
    Ok((times, mismatches))
}

fn table_of(name: ScheduledName) -> RouteTable {
    RouteTable::new(1, now_ms(), vec![ZoneRoutes { zone: Zone::new(lagran::demo::DEMO_ZONE), names: vec![name] }])
}

/// The same prefixes with every answer emptied: the program finds the route and
/// the answer, then passes the packet unchanged — so `repeat` runs the full
/// lookup path each time (an answered packet is rewritten in place, and a
/// repeated run would see a response).
fn emptied(name: &ScheduledName) -> ScheduledName {
    let mut n = name.clone();
    for a in std::sync::Arc::make_mut(&mut n.answers) {
        a.ipv4.clear();
        a.canary = None;
    }
    n
}
