//! `xdp-insns`: how many BPF instructions the XDP program executes to answer one
//! query — the length of its path, which no clock on a busy guest disturbs.
//!
//! The object's `xdp` section (with the functions it calls in `.text`, as the
//! loader appends them) is run by a small interpreter over one frame, with
//! its maps stood in by memory holding what the map writer would put there (the
//! name in its `lagran_names` slot, a `/16` split into `/24`s in the flat IPv4
//! arrays, one answer, the listen set holding the destination). The count is of
//! the object's instructions, each helper call one of them; the kernel's verifier
//! rewrites a few sequences (array lookups become ~6 inline instructions, packet
//! loads stay one), so it is the path's length, not a time. The response the
//! interpreter leaves is parsed and checked, so a count is of an answered query.
//!
//! Per-packet time on these guests drifts 2–3× within minutes (docs/bench.md);
//! the instruction count does not, so a change to the hot path can be judged by
//! it first and timed after.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use anyhow::{Context as _, bail, ensure};
use lagran_common::answers::AnswerV4;
use lagran_common::config::Config;
use lagran_common::cookie::CookieConfig;
use lagran_common::listen::ListenV4;
use lagran_common::names::{self, NameValue};
use lagran_common::route_v4_flat as flat;
use object::{Object as _, ObjectSection as _, ObjectSymbol as _, RelocationTarget};

use crate::frames::{self, Addrs};

#[derive(clap::Args)]
pub struct Args {
    /// The BPF object (default: the one `LAGRAN_EBPF_OBJECT` names).
    #[arg(long)]
    object: Option<PathBuf>,
    /// Also write, per query kind, how often each instruction ran
    /// (`DIR/<kind>.txt`: index and count per line; the `xdp` section's
    /// instructions first, then `.text`'s), to read beside `llvm-objdump -d
    /// -l --section=xdp --section=.text`.
    #[arg(long)]
    trace: Option<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let path = match a.object {
        Some(p) => p,
        None => std::env::var_os("LAGRAN_EBPF_OBJECT").map(PathBuf::from).context("--object or LAGRAN_EBPF_OBJECT")?,
    };
    let obj = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    for (key, n) in counts(&obj)? {
        eprintln!("{key}: {} instructions ({} helper calls)", n.insns, n.calls);
        crate::result(&format!("xdp_insns_{key}"), n.insns);
        if let Some(dir) = &a.trace {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let lines: String =
                n.hits.iter().enumerate().filter(|(_, c)| **c > 0).map(|(i, c)| format!("{i} {c}\n")).collect();
            let path = dir.join(format!("{key}.txt"));
            std::fs::write(&path, lines).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}

/// The instructions executed per answered query of each kind: ECS `/24` (what
/// resolvers send), no OPT, and `dig`'s default (OPT with a client cookie).
pub fn counts(obj: &[u8]) -> anyhow::Result<Vec<(&'static str, Count)>> {
    let program = Program::parse(obj)?;
    let client = Ipv4Addr::new(1, 2, 3, 0);
    let mut out = Vec::new();
    for (key, msg) in [
        ("ecs", frames::dns_query(NAME, 7, Some((client, 24)))),
        ("no_opt", frames::dns_query(NAME, 7, None)),
        ("cookie", with_client_cookie(&frames::dns_query(NAME, 7, Some((client, 0))))),
    ] {
        let (n, reply) =
            program.answer(&frames::udp_frame(&ADDRS, &msg)).with_context(|| format!("the {key} query"))?;
        let r = frames::frame_payload(&reply).and_then(frames::parse_reply).context("the response does not parse")?;
        ensure!(r.a == [ANSWER], "{key}: the program answered {:?}, not {ANSWER}", r.a);
        out.push((key, n));
    }
    Ok(out)
}

const NAME: &str = "edge.lagran.net";
const ANSWER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 21);
const ADDRS: Addrs = Addrs {
    src_mac: [2, 0, 0, 0, 0, 2],
    dst_mac: [2, 0, 0, 0, 0, 1],
    src_ip: Ipv4Addr::new(198, 18, 0, 2),
    dst_ip: Ipv4Addr::new(198, 18, 0, 1),
    src_port: 40000,
    dst_port: 53,
};

/// The query with its OPT's options replaced by a COOKIE option holding an
/// 8-octet client cookie (RFC 7873 §4), as `dig` sends by default.
fn with_client_cookie(msg: &[u8]) -> Vec<u8> {
    // `dns_query` with ECS source 0 ends with OPT (11) + ECS header (8).
    let opt = msg.len() - 8 - 11;
    let mut m = msg[..opt + 11].to_vec();
    m[opt + 9..opt + 11].copy_from_slice(&12u16.to_be_bytes());
    m.extend_from_slice(&10u16.to_be_bytes());
    m.extend_from_slice(&8u16.to_be_bytes());
    m.extend_from_slice(&[0x5a; 8]);
    m
}

/// What one run executed.
#[derive(Clone, Debug)]
pub struct Count {
    pub insns: u64,
    pub calls: u64,
    /// Executions per instruction index of the section.
    pub hits: Vec<u32>,
}

/// Which map or global an `lddw` names.
enum Target {
    Map(String),
    Rodata(u64),
}

/// `call` with this source register: a BPF-to-BPF call (`BPF_PSEUDO_CALL`),
/// its `imm` the callee's offset; else a helper call, `imm` its number.
const PSEUDO_CALL: u8 = 1;

struct Program {
    /// The `xdp` section's instructions, then `.text`'s (the functions the
    /// program calls, which the compiler does not inline).
    insns: Vec<[u8; 8]>,
    /// Instruction index → the map (by name) or the `.rodata` offset it loads.
    lddw: HashMap<usize, Target>,
    /// Index of a relocated BPF-to-BPF call → the callee's first instruction.
    calls: HashMap<usize, usize>,
    rodata: Vec<u8>,
}

impl Program {
    fn parse(obj: &[u8]) -> anyhow::Result<Program> {
        let file = object::File::parse(obj).context("parsing the BPF object")?;
        let xdp = file.section_by_name("xdp").context("no `xdp` section")?;
        let text = file.section_by_name(".text");
        let mut p = Program { insns: Vec::new(), lddw: HashMap::new(), calls: HashMap::new(), rodata: Vec::new() };
        let text_base = xdp.size() as usize / 8;
        for (section, base) in std::iter::once((xdp, 0)).chain(text.map(|t| (t, text_base))) {
            let data = section.data()?;
            ensure!(data.len() % 8 == 0, "section {} is not whole instructions", section.name()?);
            p.insns.extend(data.chunks_exact(8).map(|c| <[u8; 8]>::try_from(c).expect("8 bytes")));
            for (offset, reloc) in section.relocations() {
                let RelocationTarget::Symbol(i) = reloc.target() else { continue };
                let sym = file.symbol_by_index(i)?;
                let at = base + offset as usize / 8;
                let in_section = sym.section_index().and_then(|s| file.section_by_index(s).ok());
                let ins = p.insns[at];
                if ins[0] == CALL && ins[1] >> 4 == PSEUDO_CALL {
                    // As libbpf resolves it: the symbol's instruction, plus `imm` + 1.
                    ensure!(in_section.is_some_and(|s| s.name().ok() == Some(".text")), "a call outside .text");
                    let imm = i32::from_le_bytes([ins[4], ins[5], ins[6], ins[7]]) as i64;
                    let callee = (text_base as i64 + sym.address() as i64 / 8 + imm + 1) as usize;
                    p.calls.insert(at, callee);
                    continue;
                }
                let target = match in_section {
                    Some(s) if s.name()? == ".rodata" => Target::Rodata(sym.address()),
                    _ => Target::Map(sym.name()?.to_string()),
                };
                p.lddw.insert(at, target);
            }
        }
        p.rodata =
            file.section_by_name(".rodata").map(|s| s.data().map(<[u8]>::to_vec)).transpose()?.unwrap_or_default();
        Ok(p)
    }

    /// Runs the program over `frame`; the count and the frame it left.
    fn answer(&self, frame: &[u8]) -> anyhow::Result<(Count, Vec<u8>)> {
        let mut m = Machine::new(self, frame);
        let action = m.run()?;
        ensure!(action == XDP_TX, "the program returned {action}, not XDP_TX (counters: {:?})", m.counters());
        let f = m.frame();
        Ok((Count { insns: m.insns, calls: m.calls, hits: m.hits }, f))
    }
}

const XDP_TX: u64 = 3;
/// `BPF_JMP | BPF_CALL`.
const CALL: u8 = 0x85;
/// Most nested BPF-to-BPF calls (the kernel's bound), each with its own stack.
const MAX_FRAMES: usize = 8;
/// Room before and after the frame, as an XDP buffer has.
const HEADROOM: usize = 256;
const BUF: usize = 2048;
const STACK: usize = 512;
/// Most instructions one run may execute (the kernel's own bound is far above
/// any path of this program; this only stops a runaway interpretation).
const LIMIT: u64 = 100_000;

/// One memory region of the interpreter's address space.
struct Region {
    base: u64,
    bytes: Vec<u8>,
}

/// A map handle as `lddw` loads it: an address no region holds.
const MAP_TAG: u64 = 0xffff_0000_0000_0000;

struct Machine<'p> {
    p: &'p Program,
    regions: Vec<Region>,
    maps: Vec<String>,
    /// `(map, key)` → region index of the value handed out.
    values: HashMap<(usize, u32), usize>,
    data: u64,
    end: u64,
    insns: u64,
    calls: u64,
    hits: Vec<u32>,
}

const CTX: u64 = 0x1000;
const PACKET: u64 = 0x10_0000;
const STACK_BASE: u64 = 0x20_0000;
const RODATA: u64 = 0x30_0000;

impl<'p> Machine<'p> {
    fn new(p: &'p Program, frame: &[u8]) -> Machine<'p> {
        let mut buf = vec![0; BUF];
        buf[HEADROOM..HEADROOM + frame.len()].copy_from_slice(frame);
        let regions = vec![
            Region { base: CTX, bytes: vec![0; 24] },
            Region { base: PACKET, bytes: buf },
            Region { base: STACK_BASE, bytes: vec![0; STACK * MAX_FRAMES] },
            Region { base: RODATA, bytes: p.rodata.clone() },
        ];
        let data = PACKET + HEADROOM as u64;
        let mut m = Machine {
            p,
            regions,
            maps: Vec::new(),
            values: HashMap::new(),
            data,
            end: data + frame.len() as u64,
            insns: 0,
            calls: 0,
            hits: vec![0; p.insns.len()],
        };
        m.sync_ctx();
        m
    }

    /// `xdp_md`: `data` and `data_end` as the 32-bit fields the program reads.
    fn sync_ctx(&mut self) {
        let (d, e) = (self.data as u32, self.end as u32);
        self.regions[0].bytes[..4].copy_from_slice(&d.to_le_bytes());
        self.regions[0].bytes[4..8].copy_from_slice(&e.to_le_bytes());
    }

    fn frame(&self) -> Vec<u8> {
        let b = &self.regions[1].bytes;
        b[(self.data - PACKET) as usize..(self.end - PACKET) as usize].to_vec()
    }

    fn counters(&self) -> Vec<(u32, u64)> {
        let Some(id) = self.maps.iter().position(|n| n == "lagran_counters") else { return Vec::new() };
        let mut v: Vec<_> = self
            .values
            .iter()
            .filter(|((map, _), _)| *map == id)
            .map(|((_, key), r)| (*key, u64::from_le_bytes(self.regions[*r].bytes[..8].try_into().unwrap())))
            .filter(|(_, n)| *n != 0)
            .collect();
        v.sort();
        v
    }

    fn slice(&mut self, addr: u64, n: usize) -> anyhow::Result<&mut [u8]> {
        for r in &mut self.regions {
            if addr >= r.base && addr + n as u64 <= r.base + r.bytes.len() as u64 {
                let o = (addr - r.base) as usize;
                // The packet: only [data, end) is the frame.
                if r.base == PACKET && (addr < self.data || addr + n as u64 > self.end) {
                    bail!("packet access at {addr:#x}+{n} outside the frame");
                }
                return Ok(&mut r.bytes[o..o + n]);
            }
        }
        bail!("access to unmapped {addr:#x}+{n}")
    }

    fn load(&mut self, addr: u64, n: usize) -> anyhow::Result<u64> {
        let s = self.slice(addr, n)?;
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(s);
        Ok(u64::from_le_bytes(b))
    }

    fn store(&mut self, addr: u64, n: usize, v: u64) -> anyhow::Result<()> {
        self.slice(addr, n)?.copy_from_slice(&v.to_le_bytes()[..n]);
        Ok(())
    }

    fn alloc(&mut self, bytes: Vec<u8>) -> usize {
        let base = self.regions.last().map_or(0x100_0000, |r| (r.base + r.bytes.len() as u64 + 0xffff) & !0xfff);
        let base = base.max(0x100_0000);
        self.regions.push(Region { base, bytes });
        self.regions.len() - 1
    }

    /// `bpf_map_lookup_elem`: the value the map writer would have stored, or
    /// NULL where it would have stored none.
    fn lookup(&mut self, map: u64, key: u64) -> anyhow::Result<u64> {
        let id = (map & !MAP_TAG) as usize;
        let name = self.maps.get(id).context("lookup in an unknown map")?.clone();
        let k = self.load(key, 4)? as u32;
        if let Some(&r) = self.values.get(&(id, k)) {
            return Ok(self.regions[r].base);
        }
        let value: Option<Vec<u8>> = match name.as_str() {
            "lagran_config" => Some(pod(&Config { dns_port: 53, udp_payload: 1232, enabled: 1, ..Config::default() })),
            "lagran_listen4" => {
                let mut l = ListenV4 { exact: 1, ..ListenV4::default() };
                l.entries[0] = ListenV4::entry(ADDRS.dst_ip.octets(), ADDRS.dst_port.to_be_bytes());
                Some(pod(&l))
            }
            "lagran_scratch" => Some(vec![0; 4096]),
            "lagran_counters" => Some(vec![0; 8]),
            "lagran_cookie" => Some(pod(&CookieConfig {
                k0: 0x0706_0504_0302_0100,
                k1: 0x0f0e_0d0c_0b0a_0908,
                unix_offset_ns: 1_700_000_000_000_000_000,
                enabled: 1,
                previous_in_grace: 0,
                fixed_now: 0,
                _pad: 0,
            })),
            "lagran_names" => {
                let wire = wire(NAME);
                let home = names::slot(names::hash_wire(&wire), 0);
                (k == home).then(|| pod(&NameValue { route4: 1, ..NameValue::new(1, &wire) }))
            }
            // Every /16 split into /24s (the longer of the flat paths), every
            // /24 a /20 route to answer 1.
            "lagran_route4_l1" => Some(words([flat::group(3); 2])),
            "lagran_route4_l2" => Some(words([flat::leaf(1, 20); 2])),
            "lagran_answers" => {
                Some(pod(&if k == 1 { AnswerV4::new(60, &[ANSWER.octets()]) } else { AnswerV4::default() }))
            }
            _ => None,
        };
        let Some(value) = value else { return Ok(0) };
        let r = self.alloc(value);
        self.values.insert((id, k), r);
        Ok(self.regions[r].base)
    }

    fn call(&mut self, helper: i32, r: &mut [u64; 11]) -> anyhow::Result<()> {
        self.calls += 1;
        r[0] = match helper {
            1 => self.lookup(r[1], r[2])?,
            // bpf_xdp_adjust_head / bpf_xdp_adjust_tail
            44 | 65 => {
                let delta = r[2] as i32 as i64;
                let (d, e) = if helper == 44 {
                    (self.data.wrapping_add_signed(delta), self.end)
                } else {
                    (self.data, self.end.wrapping_add_signed(delta))
                };
                if d < PACKET || e > PACKET + BUF as u64 || d + 14 > e {
                    u64::MAX
                } else {
                    (self.data, self.end) = (d, e);
                    self.sync_ctx();
                    0
                }
            }
            // bpf_ktime_get_ns, bpf_jiffies64, bpf_ktime_get_coarse_ns
            5 | 118 | 160 => 1_000_000_000,
            h => bail!("helper {h} is not modelled"),
        };
        // R1–R5 are clobbered by a call.
        for x in &mut r[1..6] {
            *x = 0xdead_beef;
        }
        Ok(())
    }

    fn run(&mut self) -> anyhow::Result<u64> {
        let mut r = [0u64; 11];
        r[1] = CTX;
        r[10] = STACK_BASE + (STACK * MAX_FRAMES) as u64;
        let mut pc = 0usize;
        // The callers' return addresses and their R6–R9 and R10 (callee-saved).
        let mut frames: Vec<(usize, [u64; 5])> = Vec::new();
        loop {
            ensure!(self.insns < LIMIT, "more than {LIMIT} instructions");
            let ins = *self.p.insns.get(pc).context("jumped out of the program")?;
            self.insns += 1;
            self.hits[pc] += 1;
            let op = ins[0];
            let (dst, src) = ((ins[1] & 0xf) as usize, (ins[1] >> 4) as usize);
            let off = i16::from_le_bytes([ins[2], ins[3]]);
            let imm = i32::from_le_bytes([ins[4], ins[5], ins[6], ins[7]]);
            let class = op & 7;
            pc += 1;
            match class {
                // lddw
                0 => {
                    ensure!(op == 0x18, "unknown load {op:#x}");
                    let hi = self.p.insns.get(pc).context("truncated lddw")?;
                    let hi = u32::from_le_bytes([hi[4], hi[5], hi[6], hi[7]]);
                    r[dst] = match self.p.lddw.get(&(pc - 1)) {
                        Some(Target::Map(name)) => {
                            let id = self.maps.iter().position(|n| n == name).unwrap_or_else(|| {
                                self.maps.push(name.clone());
                                self.maps.len() - 1
                            });
                            MAP_TAG | id as u64
                        }
                        Some(Target::Rodata(at)) => RODATA + at + imm as u32 as u64,
                        None => (imm as u32 as u64) | ((hi as u64) << 32),
                    };
                    pc += 1;
                }
                // ldx
                1 => {
                    let n = size(op);
                    let v = self.load(r[src].wrapping_add_signed(off as i64), n)?;
                    r[dst] = if op & 0xe0 == 0x80 { sign_extend(v, n * 8) } else { v };
                }
                // st, stx
                2 | 3 => {
                    let n = size(op);
                    let addr = r[dst].wrapping_add_signed(off as i64);
                    if op & 0xe0 == 0xc0 {
                        ensure!(imm == 0, "atomic op {imm:#x} is not modelled");
                        let old = self.load(addr, n)?;
                        self.store(addr, n, old.wrapping_add(r[src]))?;
                    } else {
                        let v = if class == 3 { r[src] } else { imm as i64 as u64 };
                        self.store(addr, n, v)?;
                    }
                }
                4 | 7 => alu(op, class == 7, &mut r, dst, src, off, imm)?,
                5 | 6 => {
                    let o = op & 0xf0;
                    if class == 5 && o == 0x80 && src == PSEUDO_CALL as usize {
                        ensure!(frames.len() + 1 < MAX_FRAMES, "calls nested deeper than {MAX_FRAMES}");
                        frames.push((pc, [r[6], r[7], r[8], r[9], r[10]]));
                        r[10] -= STACK as u64;
                        let local = pc.checked_add_signed(imm as isize).context("a call before the program");
                        pc = self.p.calls.get(&(pc - 1)).copied().map_or(local, Ok)?;
                        continue;
                    }
                    if class == 5 && o == 0x80 {
                        self.call(imm, &mut r)?;
                        continue;
                    }
                    if class == 5 && o == 0x90 {
                        let Some((back, saved)) = frames.pop() else { return Ok(r[0]) };
                        r[6..11].copy_from_slice(&saved);
                        pc = back;
                        continue;
                    }
                    if o == 0x00 {
                        let d = if class == 5 { off as i64 } else { imm as i64 };
                        pc = pc.checked_add_signed(d as isize).context("jump before the program")?;
                        continue;
                    }
                    let (mut a, mut b) = (r[dst], if op & 8 != 0 { r[src] } else { imm as i64 as u64 });
                    let (sa, sb) = if class == 6 {
                        (a, b) = (a as u32 as u64, b as u32 as u64);
                        (a as u32 as i32 as i64, b as u32 as i32 as i64)
                    } else {
                        (a as i64, b as i64)
                    };
                    let taken = match o {
                        0x10 => a == b,
                        0x20 => a > b,
                        0x30 => a >= b,
                        0x40 => a & b != 0,
                        0x50 => a != b,
                        0x60 => sa > sb,
                        0x70 => sa >= sb,
                        0xa0 => a < b,
                        0xb0 => a <= b,
                        0xc0 => sa < sb,
                        0xd0 => sa <= sb,
                        _ => bail!("unknown jump {op:#x}"),
                    };
                    if taken {
                        pc = pc.checked_add_signed(off as isize).context("jump before the program")?;
                    }
                }
                _ => bail!("unknown class {op:#x}"),
            }
        }
    }
}

fn alu(op: u8, is64: bool, r: &mut [u64; 11], dst: usize, src: usize, off: i16, imm: i32) -> anyhow::Result<()> {
    let o = op & 0xf0;
    if o == 0xd0 {
        // Byte swaps: `be16/32/64` (ALU with the source bit), `bswap` (ALU64).
        let v = r[dst];
        r[dst] = match (imm, is64 || op & 8 != 0) {
            (16, true) => (v as u16).swap_bytes() as u64,
            (32, true) => (v as u32).swap_bytes() as u64,
            (64, true) => v.swap_bytes(),
            (16, false) => v as u16 as u64,
            (32, false) => v as u32 as u64,
            (64, false) => v,
            _ => bail!("byte swap of {imm} bits"),
        };
        return Ok(());
    }
    // Signed division (`off` 1) is not modelled: the object has none.
    if matches!(o, 0x30 | 0x90) && off != 0 {
        bail!("signed division {op:#x} is not modelled");
    }
    let b = if op & 8 != 0 { r[src] } else { imm as i64 as u64 };
    // One table for both widths: ALU works on the low 32 bits and zero-extends
    // its result, so operands and result are masked to the width.
    let (bits, mask, class) = if is64 { (64, u64::MAX, "ALU64") } else { (32, u64::from(u32::MAX), "ALU") };
    let (a, b) = (r[dst] & mask, b & mask);
    let shift = b & (bits as u64 - 1);
    let v = match o {
        0x00 => a.wrapping_add(b),
        0x10 => a.wrapping_sub(b),
        0x20 => a.wrapping_mul(b),
        0x30 => a.checked_div(b).unwrap_or(0),
        0x40 => a | b,
        0x50 => a & b,
        0x60 => a << shift,
        0x70 => a >> shift,
        0x80 => a.wrapping_neg(),
        0x90 => a.checked_rem(b).unwrap_or(a),
        0xa0 => a ^ b,
        0xb0 if off == 0 => b,
        0xb0 => sign_extend(b, off as usize),
        0xc0 => ((sign_extend(a, bits) as i64) >> shift) as u64,
        _ => bail!("unknown {class} op {op:#x}"),
    } & mask;
    r[dst] = v;
    Ok(())
}

fn size(op: u8) -> usize {
    match op & 0x18 {
        0x00 => 4,
        0x08 => 2,
        0x10 => 1,
        _ => 8,
    }
}

fn sign_extend(v: u64, bits: usize) -> u64 {
    let s = 64 - bits;
    (((v << s) as i64) >> s) as u64
}

fn wire(name: &str) -> Vec<u8> {
    let mut w = Vec::new();
    for label in name.split('.') {
        w.push(label.len() as u8);
        w.extend_from_slice(label.as_bytes());
    }
    w.push(0);
    w
}

fn words(w: [u32; 2]) -> Vec<u8> {
    [w[0].to_le_bytes(), w[1].to_le_bytes()].concat()
}

/// The bytes of a plain-old-data map value.
fn pod<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: `T` is one of lagran-common's `repr(C)` map values (no pointers,
    // no uninitialised padding: each declares its padding as fields).
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, size_of::<T>()) }.to_vec()
}
