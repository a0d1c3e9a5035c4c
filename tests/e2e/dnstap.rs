//! Query logs: `[dnstap] socket` read by a real dnstap reader, Debian's
//! `dnstap` tool (golang-dnstap) listening on a Unix socket: every query sent
//! by dig over UDP and TCP and by kdig over TLS comes back decoded as an
//! `AUTH_QUERY` and an `AUTH_RESPONSE` with its name, type, addresses, ports
//! and answer; the reader going away and coming back loses only what was
//! sent in between (counted).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Daemon, Dig, Options, have_tool, metric_value, write_test_certificate};

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
