//! Node-state change → updated map entry: `PATCH /api/v1/nodes/{node}` with
//! `{"status":"offline"}` (then back `online`), while the pinned maps are polled
//! for the answer of a client the node serves. Run it inside the daemon's mount
//! and network namespaces (`nsenter -t PID -m -n`), where its API and its bpffs are.
//!
//! With `--rrsig` (a signed zone) it also times the new answer's RRSIG in
//! `lagran_rrsig` and counts the changes whose route was seen before it.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use aya::maps::{Array, HashMap, LpmTrie, Map, MapData, lpm_trie::Key};
use lagran_common::{
    answers::AnswerV4,
    route_v4::{FULL_PREFIX, RouteV4Data, RouteValue},
    route_v4_flat as flat,
    rrsig::{RrsigKey, RrsigValue},
};

use lagran::xdp::name_slots::NameSlots;

use crate::result;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "127.0.0.1:8080")]
    api: SocketAddr,
    /// Where the daemon pinned its maps (LAGRAN_PIN_DIR).
    #[arg(long)]
    pin_dir: PathBuf,
    /// The node switched off and on again; `auto`: the node the fast path
    /// answers the client with before the first change.
    #[arg(long, default_value = "gz-01")]
    node: String,
    /// A client the node answers for (Shenzhen China Telecom for gz-01).
    #[arg(long, default_value = "58.60.1.1")]
    client: Ipv4Addr,
    #[arg(long, default_value = "edge.lagran.net")]
    name: String,
    /// Offline/online rounds.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Give up on one change after this many milliseconds.
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// The zone is signed: time the new answer's RRSIG in `lagran_rrsig` too.
    #[arg(long)]
    rrsig: bool,
}

struct Pinned {
    routes: LpmTrie<MapData, RouteV4Data, RouteValue>,
    answers: Array<MapData, AnswerV4>,
    /// `lagran_route4_l1` and `_l2`, when pinned (a daemon that has them pins them).
    flat: Option<(Array<MapData, u64>, Array<MapData, u64>)>,
    names: NameSlots,
    /// `lagran_rrsig`, with `--rrsig`.
    rrsigs: Option<HashMap<MapData, RrsigKey, RrsigValue>>,
    wire: Vec<u8>,
    name_id: u32,
    client: u32,
}

impl Pinned {
    fn open(a: &Args) -> anyhow::Result<Pinned> {
        let open = |name: &str| -> anyhow::Result<Map> {
            let path = a.pin_dir.join(name);
            let data = MapData::from_pin(&path).with_context(|| format!("opening pinned map {}", path.display()))?;
            Ok(Map::from_map_data(data)?)
        };
        let names = NameSlots::new(open(lagran_common::names::MAP_NAME)?, false)?;
        let wire = lagran::xdp::wire_name::wire_key(&a.name).context("name is not a valid key")?;
        let name_id = names.find(&wire).with_context(|| format!("{} is not in lagran_names", a.name))?.id;
        let flat = match (open(flat::MAP_NAME_L1), open(flat::MAP_NAME_L2)) {
            (Ok(l1), Ok(l2)) => Some((Array::try_from(l1)?, Array::try_from(l2)?)),
            _ => {
                eprintln!("failover: the flat IPv4 arrays are not pinned: polling the trie only");
                None
            }
        };
        let rrsigs = match a.rrsig {
            true => Some(HashMap::try_from(open(lagran_common::rrsig::MAP_NAME)?)?),
            false => None,
        };
        Ok(Pinned {
            routes: LpmTrie::try_from(open(lagran_common::route_v4::MAP_NAME)?)?,
            answers: Array::try_from(open(lagran_common::answers::MAP_NAME)?)?,
            flat,
            names,
            rrsigs,
            wire,
            name_id,
            client: u32::from(a.client),
        })
    }

    /// The first address the fast path answers for the client right now, read
    /// as the program reads it (`lagran-ebpf/src/route4.rs`): the name's flat
    /// arrays when it has a block there, the trie where they say so. The map
    /// writer writes the arrays before the trie's routes of /24 and shorter,
    /// so polling the trie alone would see a change after the packets do.
    fn answer(&self) -> Option<Ipv4Addr> {
        self.answer_of(self.answer_id()?)
    }

    /// The answer id the fast path sends the client right now.
    fn answer_id(&self) -> Option<u32> {
        Some(match self.flat_route()? {
            Some(id) => id,
            None => {
                self.routes.get(&Key::new(FULL_PREFIX, RouteV4Data::new(self.name_id, self.client)), 0).ok()?.answer_id
            }
        })
    }

    fn answer_of(&self, answer_id: u32) -> Option<Ipv4Addr> {
        let a = self.answers.get(&answer_id, 0).ok()?;
        (a.count > 0).then(|| Ipv4Addr::from(a.addrs[0]))
    }

    /// The answer ids of the name that have an `A` RRSIG in `lagran_rrsig`.
    fn signed_answers(&self) -> Vec<u32> {
        let Some(map) = &self.rrsigs else { return Vec::new() };
        map.keys()
            .filter_map(Result::ok)
            .filter(|k| k.name_id == self.name_id && k.aaaa == 0)
            .map(|k| k.answer_id)
            .collect()
    }

    /// `Some(Some(answer id))` from the flat arrays, `Some(None)` "ask the
    /// trie", `None` no route.
    fn flat_route(&self) -> Option<Option<u32>> {
        let Some((l1, l2)) = &self.flat else { return Some(None) };
        let block = self.names.find(&self.wire)?.route4;
        if block == 0 || block > flat::FLAT_NAMES {
            return Some(None);
        }
        let slot = |a: &Array<MapData, u64>, i: u32| -> Option<u32> {
            let w = a.get(&(i / flat::SLOTS_PER_ELEMENT), 0).ok()?;
            Some((w >> ((i % flat::SLOTS_PER_ELEMENT) * 32)) as u32)
        };
        let s = slot(l1, (block - 1) * flat::L1_SLOTS + (self.client >> 16))?;
        let leaf = match s & flat::KIND_MASK {
            flat::LEAF => s,
            flat::GROUP => {
                let t = slot(l2, flat::group_index(s) * flat::L2_SLOTS + ((self.client >> 8) & 0xff))?;
                match t & flat::KIND_MASK {
                    flat::LEAF => t,
                    flat::TRIE => return Some(None),
                    _ => return None,
                }
            }
            flat::TRIE => return Some(None),
            _ => return None,
        };
        Some(Some(flat::leaf_answer(leaf)))
    }
}

/// One HTTP/1.1 request; returns the status code.
fn http(api: SocketAddr, method: &str, path: &str, body: &str) -> anyhow::Result<u16> {
    let mut s =
        TcpStream::connect_timeout(&api, Duration::from_secs(2)).with_context(|| format!("connecting to {api}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let token = std::env::var("ADMIN_TOKEN").ok().filter(|t| !t.is_empty());
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {api}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let status = resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).context("no HTTP status line")?;
    Ok(status)
}

/// One node-state change as the maps showed it.
struct Change {
    /// PATCH → the client's answer changed in the maps.
    map_ms: f64,
    /// PATCH → the API's response.
    api_ms: f64,
    answer: Ipv4Addr,
    /// With `--rrsig`: PATCH → the new answer's RRSIG in `lagran_rrsig` (0
    /// when the answer was signed before the PATCH), and whether the route
    /// was seen pointing at the answer before its RRSIG was there.
    rrsig: Option<(f64, bool)>,
}

/// Sends the PATCH on another thread and polls the maps until the answer is no
/// longer `from` (and, with `--rrsig`, until the new answer's RRSIG is in).
fn change(a: &Args, maps: &Pinned, status: &str, from: Ipv4Addr) -> anyhow::Result<Change> {
    let (api, path, body) = (a.api, format!("/api/v1/nodes/{}", a.node), format!("{{\"status\":\"{status}\"}}"));
    let signed_before = maps.signed_answers();
    // Answer ids whose RRSIG appeared after the PATCH, and when.
    let mut appeared: Vec<(u32, Duration)> = Vec::new();
    let t0 = Instant::now();
    let req = std::thread::spawn(move || {
        let code = http(api, "PATCH", &path, &body);
        (code, t0.elapsed())
    });
    let timeout = Duration::from_millis(a.timeout_ms);
    let (took, id, now) = loop {
        if maps.rrsigs.is_some() {
            let at = t0.elapsed();
            for id in maps.signed_answers() {
                if !signed_before.contains(&id) && !appeared.iter().any(|(a, _)| *a == id) {
                    appeared.push((id, at));
                }
            }
        }
        if let Some(id) = maps.answer_id()
            && let Some(now) = maps.answer_of(id).filter(|n| *n != from)
        {
            break (t0.elapsed(), id, now);
        }
        if t0.elapsed() > timeout {
            bail!("the map still answers {from:?} {} ms after PATCH status={status}", a.timeout_ms);
        }
        std::thread::sleep(Duration::from_micros(50));
    };
    let rrsig = match maps.rrsigs {
        Some(_) => Some(rrsig_of(maps, id, &signed_before, &appeared, t0, timeout)?),
        None => None,
    };
    let (code, api_took) = req.join().map_err(|_| anyhow::anyhow!("the PATCH thread panicked"))?;
    let code = code?;
    if code != 200 {
        bail!("PATCH /api/v1/nodes/{} status={status} answered HTTP {code}", a.node);
    }
    Ok(Change { map_ms: took.as_secs_f64() * 1e3, api_ms: api_took.as_secs_f64() * 1e3, answer: now, rrsig })
}

/// When answer `id`'s RRSIG was in `lagran_rrsig` (ms after the PATCH) and
/// whether the route got there first (then polled until the RRSIG is in).
fn rrsig_of(
    maps: &Pinned,
    id: u32,
    signed_before: &[u32],
    appeared: &[(u32, Duration)],
    t0: Instant,
    timeout: Duration,
) -> anyhow::Result<(f64, bool)> {
    if signed_before.contains(&id) {
        return Ok((0.0, false));
    }
    if let Some((_, at)) = appeared.iter().find(|(a, _)| *a == id) {
        return Ok((at.as_secs_f64() * 1e3, false));
    }
    loop {
        if maps.signed_answers().contains(&id) {
            return Ok((t0.elapsed().as_secs_f64() * 1e3, true));
        }
        if t0.elapsed() > timeout {
            bail!("answer {id} is served without an RRSIG in lagran_rrsig {timeout:?} after the PATCH");
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// The node whose public address is `ip` (`GET /api/v1/nodes`).
fn node_with_ip(api: SocketAddr, ip: Ipv4Addr) -> anyhow::Result<String> {
    let (code, body) =
        crate::fleet::Http::connect(api)?.request("GET", "/api/v1/nodes", &crate::fleet::admin_header(), "")?;
    if code != 200 {
        bail!("GET /api/v1/nodes answered HTTP {code}");
    }
    let nodes: Vec<serde_json::Value> = serde_json::from_str(&body).context("GET /api/v1/nodes: not a JSON list")?;
    let want = ip.to_string();
    nodes
        .iter()
        .find(|n| n["public_ip"].as_str() == Some(want.as_str()))
        .and_then(|n| n["name"].as_str().map(str::to_string))
        .with_context(|| format!("no node has public_ip {ip}"))
}

pub fn run(mut a: Args) -> anyhow::Result<()> {
    let maps = Pinned::open(&a)?;
    let mut before = maps.answer().context("no fast-path answer for the client before the change")?;
    // `auto` (the fleet step): the node serving the client, taken anew each round.
    // With a fleet, the node that takes over may be as good as the one that came
    // back, and hysteresis then keeps it (an answer moves only for a
    // better one): the answer need not return, and the next round takes the
    // node serving now offline. Only the offline change is timed then.
    let auto = a.node == "auto";
    if auto {
        a.node = node_with_ip(a.api, before)?;
    }
    eprintln!("failover: {} for {} answers {before} (node {})", a.name, a.client, a.node);
    let (mut down, mut up) = (Vec::new(), Vec::new());
    let mut api_ms = Vec::new();
    let (mut rrsig_ms, mut routes_first) = (Vec::new(), 0);
    for round in 0..a.rounds {
        let c = change(&a, &maps, "offline", before)?;
        let (ms, api, other) = (c.map_ms, c.api_ms, c.answer);
        eprintln!("failover: round {round}: offline → map says {other} after {ms:.2} ms (API answered in {api:.2} ms)");
        down.push(ms);
        api_ms.push(api);
        if let Some((at, late)) = c.rrsig {
            eprintln!("failover: round {round}: its RRSIG in lagran_rrsig after {at:.2} ms");
            rrsig_ms.push(at);
            routes_first += usize::from(late);
        }
        if auto {
            let code = http(a.api, "PATCH", &format!("/api/v1/nodes/{}", a.node), r#"{"status":"online"}"#)?;
            if code != 200 {
                bail!("PATCH /api/v1/nodes/{} status=online answered HTTP {code}", a.node);
            }
            std::thread::sleep(Duration::from_millis(300));
            before = maps.answer().context("no fast-path answer after status=online")?;
            a.node = node_with_ip(a.api, before)?;
            eprintln!("failover: round {round}: online → map says {before} (node {})", a.node);
            continue;
        }
        let c = change(&a, &maps, "online", other)?;
        let (ms, api, back) = (c.map_ms, c.api_ms, c.answer);
        routes_first += c.rrsig.map_or(0, |r| usize::from(r.1));
        if back != before {
            bail!("after status=online the map answers {back}, expected {before} again");
        }
        eprintln!("failover: round {round}: online → map says {back} after {ms:.2} ms (API answered in {api:.2} ms)");
        up.push(ms);
        api_ms.push(api);
        std::thread::sleep(Duration::from_millis(100));
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[v.len() - 1])
    };
    let (down_med, down_max) = stats(&mut down);

    let (api_med, _) = stats(&mut api_ms);
    result("answer_before", before);
    result("offline_median_ms", format!("{down_med:.2}"));
    result("offline_max_ms", format!("{down_max:.2}"));
    if !up.is_empty() {
        let (up_med, up_max) = stats(&mut up);
        result("online_median_ms", format!("{up_med:.2}"));
        result("online_max_ms", format!("{up_max:.2}"));
    }
    result("api_median_ms", format!("{api_med:.2}"));
    if !rrsig_ms.is_empty() {
        let (med, max) = stats(&mut rrsig_ms);
        result("rrsig_offline_median_ms", format!("{med:.2}"));
        result("rrsig_offline_max_ms", format!("{max:.2}"));
        result("routes_before_rrsig", routes_first);
    }
    result("rounds", a.rounds);
    Ok(())
}
