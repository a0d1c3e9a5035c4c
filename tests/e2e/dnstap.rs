//! Query logs: `[dnstap] socket` read by a real dnstap reader, Debian's
//! `dnstap` tool (golang-dnstap) listening on a Unix socket: every query sent
//! by dig over UDP and TCP and by kdig over TLS comes back decoded as an
//! `AUTH_QUERY` and an `AUTH_RESPONSE` with its name, type, addresses, ports
//! and answer; the reader going away and coming back loses only what was
//! sent in between (counted). With `--xdp` and `xdp_sample = "1/1"`, the
//! answers the XDP program sends in the kernel come back the same way.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Daemon, Dig, Options, XdpNamespaces, have_tool, metric_value, write_test_certificate};

/// `dnstap -u SOCKET -j -w FILE`: one JSON line per message, flushed as it
/// comes; killed on drop.
struct Reader {
    child: Child,
    out: PathBuf,
}

impl Reader {
    fn start(socket: &Path, out: PathBuf) -> Reader {
        let _ = std::fs::remove_file(socket);
        let child = Command::new("dnstap")
            .arg("-u")
            .arg(socket)
            .arg("-j")
            .arg("-w")
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the dnstap reader");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "the dnstap reader did not listen on {}", socket.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        Reader { child, out }
    }

    /// The messages read so far.
    fn messages(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// Waits (bounded) until at least `n` messages were read.
    fn wait_for(&self, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let m = self.messages();
            if m.len() >= n || Instant::now() >= deadline {
                return m;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A DNS message as the reader prints it, whitespace collapsed: `;name. IN A`
/// for a question, `name. TTL IN A address` for a record.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `AUTH_QUERY` and `AUTH_RESPONSE` over `protocol` whose query asks `question`.
fn exchange<'a>(messages: &'a [Value], protocol: &str, question: &str) -> (&'a Value, &'a Value) {
    let find = |kind: &str, field: &str| {
        messages
            .iter()
            .map(|m| &m["message"])
            .find(|m| {
                m["type"] == kind
                    && m["socket_protocol"] == protocol
                    && flat(m[field].as_str().unwrap_or_default()).contains(question)
            })
            .unwrap_or_else(|| panic!("no {kind} over {protocol} for {question:?} in {messages:#?}"))
    };
    (find("AUTH_QUERY", "query_message"), find("AUTH_RESPONSE", "response_message"))
}

fn kdig_tls(d: &Daemon, args: &[&str]) -> Dig {
    let dot = d.entry("dot");
    let out = Command::new("kdig")
        .args([format!("@{}", dot.ip()), "-p".into(), dot.port().to_string()])
        .args(["+tls", "+time=3", "+retry=0"])
        .args(args)
        .output()
        .expect("running kdig");
    Dig::parse(&String::from_utf8_lossy(&out.stdout))
}

#[test]
fn a_dnstap_reader_decodes_every_userspace_query_and_response() {
    let test = "dnstap_reader";
    if !["dig", "kdig", "dnstap"].into_iter().all(|t| have_tool(t, test)) {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("dnstap.sock");
    let reader = Reader::start(&socket, dir.path().join("first.json"));
    let (cert, key) = write_test_certificate(dir.path());
    let args = ["--dot-listen", "127.0.0.1:0", "--tls-cert"]
        .iter()
        .map(|s| s.to_string())
        .chain([cert.display().to_string(), "--tls-key".into(), key.display().to_string()])
        .collect();
    let config = Some(format!("[dnstap]\nsocket = {:?}\n", socket.display().to_string()));
    let d = Daemon::start(Options { args, config, ..Options::default() });

    let udp = d.dig(&["edge.lagran.net", "A"]);
    let address = udp.answers("A").first().cloned().unwrap_or_else(|| panic!("an answer:\n{}", udp.text));
    let tcp = d.dig(&["whoami.edge.lagran.net", "TXT", "+tcp"]);
    assert_eq!(tcp.status, "NOERROR", "{}", tcp.text);
    let dot = kdig_tls(&d, &["nope.edge.lagran.net", "AAAA"]);
    assert!(dot.status.starts_with("NXDOMAIN"), "{}", dot.text);

    let messages = reader.wait_for(6);
    assert_eq!(messages.len(), 6, "a query and a response each: {messages:#?}\n{}", d.log());
    let (q, r) = exchange(&messages, "UDP", ";edge.lagran.net. IN A");
    assert!(flat(r["response_message"].as_str().unwrap()).contains(&format!("IN A {address}")), "{r:#}");
    for m in [q, r] {
        assert_eq!(m["socket_family"], "INET", "{m:#}");
        assert_eq!(m["query_address"], "127.0.0.1", "{m:#}");
        assert_eq!(m["response_address"], "127.0.0.1", "{m:#}");
        assert_eq!(m["response_port"], d.dns.port(), "{m:#}");
        assert!(m["query_port"].as_u64().is_some_and(|p| p > 0), "{m:#}");
        assert!(m["query_time"].is_string(), "{m:#}");
    }
    assert!(r["response_time"].is_string() && q["response_time"].is_null(), "{q:#}\n{r:#}");
    let (_, r) = exchange(&messages, "TCP", ";whoami.edge.lagran.net. IN TXT");
    assert!(flat(r["response_message"].as_str().unwrap()).contains("127.0.0.1"), "whoami answers the client: {r:#}");
    assert_eq!(r["response_port"], d.dns.port(), "{r:#}");
    let (_, r) = exchange(&messages, "DOT", ";nope.edge.lagran.net. IN AAAA");
    assert!(r["response_message"].as_str().unwrap().contains("NXDOMAIN"), "{r:#}");
    assert_eq!(r["response_port"], d.entry("dot").port(), "{r:#}");

    // The reader goes away: answers go on, and the writer connects to the next one.
    drop(reader);
    let second = Reader::start(&socket, dir.path().join("second.json"));
    let mut logged = Vec::new();
    for _ in 0..40 {
        assert_eq!(d.dig(&["edge.lagran.net", "A"]).answers("A"), vec![address.clone()], "answers go on");
        logged = second.messages();
        if !logged.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let logged = second.wait_for(2).into_iter().chain(logged).collect::<Vec<_>>();
    exchange(&logged, "UDP", ";edge.lagran.net. IN A");
    let (_, metrics) = d.get("/metrics");
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert!(
        metric_value(&metrics, "lagran_dnstap_dropped_total{source=\"userspace\"}") >= 1,
        "the exchange written to the gone reader is counted:\n{metrics}"
    );
    assert!(metric_value(&metrics, "lagran_dnstap_messages_total") >= 8, "{metrics}");

    // A clean shutdown ends the stream with STOP, answered by the reader's FINISH.
    let _ = Command::new("kill").args(["-TERM", &d.pid().to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !d.log().contains("lagran stopped") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(d.log().contains("dnstap stream closed"), "STOP answered by FINISH:\n{}", d.log());
}

/// The `id: N` of a DNS header as dig and the dnstap reader both print it.
fn header_id(text: &str) -> Option<u16> {
    text.split(", id: ").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

#[test]
fn a_dnstap_reader_decodes_the_answers_the_xdp_program_samples() {
    let test = "dnstap_xdp";
    if !have_tool("dnstap", test) {
        return;
    }
    let Some(ns) = XdpNamespaces::create(test) else { return };
    let pair = &ns.pair;
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("dnstap.sock");
    let reader = Reader::start(&socket, dir.path().join("xdp.json"));
    let pins = format!("/sys/fs/bpf/lagran-e2e-dnstap-{}", std::process::id());
    let mut options = ns.daemon_options(&pins);
    options.config = Some(format!("[dnstap]\nsocket = {:?}\nxdp_sample = \"1/1\"\n", socket.display().to_string()));
    let d = Daemon::start(options);
    assert!(d.log().contains("XDP answers sampled into dnstap"), "{}", d.log());

    // Answered in the kernel: ECS from a Shenzhen subnet, no cookie.
    let mut sent = Vec::new();
    for i in 0..4 {
        let subnet = format!("+subnet=58.60.{i}.0/24");
        let server = format!("@{}", pair.server_addr);
        let args = [server.as_str(), "+tries=1", "+time=2", "+nocookie", "edge.lagran.net", "A", subnet.as_str()];
        let out = pair.client_run("dig", &args).expect("running dig in the client namespace");
        let dig = Dig::parse(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(dig.answers("A"), vec!["203.0.113.21"], "{}\n{}", dig.text, d.log());
        sent.push((header_id(&dig.text).unwrap_or_else(|| panic!("an id in {}", dig.text)), subnet));
    }
    let m = ns.metrics(&d);
    assert_eq!(metric_value(&m, "lagran_xdp_packets_total{result=\"answered\"}"), 4, "XDP answered them:\n{m}");
    assert_eq!(metric_value(&m, "lagran_dns_queries_total{transport=\"udp\"}"), 0, "userspace saw none:\n{m}");

    let messages = reader.wait_for(8);
    assert_eq!(messages.len(), 8, "a query and a response for each of the 4: {messages:#?}\n{}", d.log());
    let today = String::from_utf8_lossy(&Command::new("date").args(["-u", "+%Y-%m-%d"]).output().unwrap().stdout)
        .trim()
        .to_string();
    for (id, subnet) in &sent {
        let find = |kind: &str, field: &str| {
            messages
                .iter()
                .map(|m| &m["message"])
                .find(|m| m["type"] == kind && header_id(m[field].as_str().unwrap_or_default()) == Some(*id))
                .unwrap_or_else(|| panic!("no {kind} with id {id} in {messages:#?}"))
        };
        let (q, r) = (find("AUTH_QUERY", "query_message"), find("AUTH_RESPONSE", "response_message"));
        let query = flat(q["query_message"].as_str().unwrap());
        assert!(query.contains(";edge.lagran.net. IN A"), "{q:#}");
        let ecs = subnet.trim_start_matches("+subnet=");
        assert!(query.contains(ecs), "the query as sent, with its ECS option {ecs}: {q:#}");
        assert!(flat(r["response_message"].as_str().unwrap()).contains("IN A 203.0.113.21"), "{r:#}");
        for m in [q, r] {
            assert_eq!(m["socket_protocol"], "UDP", "{m:#}");
            assert_eq!(m["socket_family"], "INET", "{m:#}");
            assert_eq!(m["query_address"], pair.client_addr.to_string(), "{m:#}");
            assert_eq!(m["response_address"], pair.server_addr.to_string(), "{m:#}");
            assert_eq!(m["response_port"], 53, "{m:#}");
            assert!(m["query_port"].as_u64().is_some_and(|p| p > 0), "{m:#}");
            let time = m["query_time"].as_str().or(m["response_time"].as_str()).unwrap_or_default();
            assert!(time.starts_with(&today), "the kernel's clock turned into wall time ({today}): {m:#}");
        }
    }
    let m = ns.metrics(&d);
    assert_eq!(metric_value(&m, "lagran_dnstap_dropped_total{source=\"xdp\"}"), 0, "{m}");
    assert_eq!(metric_value(&m, "lagran_dnstap_messages_total"), 8, "{m}");
    assert_eq!(
        metric_value(&m, &format!("lagran_xdp_attached{{interface=\"{}\"", pair.server_if)),
        1,
        "the program is attached:\n{m}"
    );
}
