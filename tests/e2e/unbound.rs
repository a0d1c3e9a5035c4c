//! Unbound as the validating resolver of the DNSSEC tests: ECS on (a /24 of
//! the client subnet `dig` names), the NS host under test as the zone's stub,
//! one trust anchor; on a free port (another tried when the port was taken
//! between choosing it and Unbound binding it, UDP and TCP), in a network
//! namespace when given; killed on drop.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lagran::xdp::netns::NetNs;

use crate::support::Dig;

/// How Unbound trusts the zone's KSK (its DNSKEY RDATA).
pub(crate) enum Anchor<'a> {
    /// A static trust anchor; nothing cached, so every query reaches the NS host.
    Static(&'a str),
    /// RFC 5011: the anchor follows a KSK rollover the trusted key signs for
    /// (`auto-trust-anchor-file`, hold-down timers shortened to seconds).
    Rfc5011(&'a str),
}

pub(crate) struct Unbound<'n> {
    child: Child,
    port: u16,
    dir: PathBuf,
    /// The network namespace it runs in (and `dig` asks it from), if not ours.
    netns: Option<&'n NetNs>,
}

/// `program` run in `netns`, or here.
fn command(netns: Option<&NetNs>, program: &str) -> Command {
    netns.map_or_else(|| Command::new(program), |n| n.command(program))
}

/// A port free for UDP and TCP on 127.0.0.1 when asked (Unbound binds both).
fn free_port() -> u16 {
    loop {
        let port = UdpSocket::bind("127.0.0.1:0").expect("a free UDP port").local_addr().unwrap().port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

impl<'n> Unbound<'n> {
    /// Unbound for `zone` at the NS host `ns`, its files in `dir`, here.
    pub(crate) fn start(dir: &Path, zone: &str, ns: SocketAddr, anchor: Anchor) -> Unbound<'n> {
        Unbound::start_in(None, dir, zone, ns, anchor)
    }

    /// [`Unbound::start`] inside `netns` (its loopback), when given.
    pub(crate) fn start_in(
        netns: Option<&'n NetNs>,
        dir: &Path,
        zone: &str,
        ns: SocketAddr,
        anchor: Anchor,
    ) -> Unbound<'n> {
        let trust = match anchor {
            Anchor::Static(key) => {
                format!("  cache-max-ttl: 0\n  cache-max-negative-ttl: 0\n  trust-anchor: \"{zone}. DNSKEY {key}\"\n")
            }
            Anchor::Rfc5011(key) => {
                std::fs::write(dir.join("anchor.key"), format!("{zone}. 2 IN DNSKEY {key}\n")).expect("the anchor");
                format!(
                    "  auto-trust-anchor-file: \"{}/anchor.key\"\n  permit-small-holddown: yes\n\
                     \x20 add-holddown: 2\n  del-holddown: 2\n",
                    dir.display()
                )
            }
        };
        for _ in 0..5 {
            if let Some(u) = Unbound::start_on(netns, free_port(), dir, (zone, ns), &trust) {
                return u;
            }
        }
        panic!(
            "unbound could not bind a port in 5 tries:\n{}",
            std::fs::read_to_string(dir.join("unbound.log")).unwrap_or_default()
        );
    }

    /// `None` when Unbound could not bind `port`.
    fn start_on(
        netns: Option<&'n NetNs>,
        port: u16,
        dir: &Path,
        (zone, ns): (&str, SocketAddr),
        trust: &str,
    ) -> Option<Unbound<'n>> {
        let conf = format!(
            "server:\n  interface: 127.0.0.1@{port}\n  port: {port}\n  do-daemonize: no\n  username: \"\"\n\
             \x20 chroot: \"\"\n  directory: \"{d}\"\n  pidfile: \"{d}/unbound.pid\"\n  use-syslog: no\n\
             \x20 logfile: \"\"\n  verbosity: 1\n  val-log-level: 2\n  do-not-query-localhost: no\n\
             \x20 access-control: 127.0.0.0/8 allow\n  module-config: \"subnetcache validator iterator\"\n\
             \x20 send-client-subnet: {ip}\n  client-subnet-always-forward: yes\n  max-client-subnet-ipv4: 24\n\
             \x20 qname-minimisation: no\n{trust}\
             stub-zone:\n  name: \"{zone}\"\n  stub-addr: {ip}@{ns_port}\n",
            d = dir.display(),
            ip = ns.ip(),
            ns_port = ns.port(),
        );
        std::fs::write(dir.join("unbound.conf"), conf).expect("writing unbound.conf");
        let log = std::fs::File::create(dir.join("unbound.log")).expect("unbound.log");
        let child = command(netns, "unbound")
            .args(["-d", "-c"])
            .arg(dir.join("unbound.conf"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn()
            .expect("starting unbound");
        let mut u = Unbound { child, port, dir: dir.to_path_buf(), netns };
        // Up when it answers at all (SERVFAIL included): bounded.
        let deadline = Instant::now() + Duration::from_secs(10);
        while u.dig(&[zone, "SOA"]).status.is_empty() {
            if u.child.try_wait().ok().flatten().is_some() && u.log().contains("could not open ports") {
                return None;
            }
            assert!(Instant::now() < deadline, "unbound did not answer within 10 s:\n{}", u.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(u)
    }

    pub(crate) fn dig(&self, args: &[&str]) -> Dig {
        let out = command(self.netns, "dig")
            .args(["@127.0.0.1", "-p", &self.port.to_string(), "+time=5", "+tries=1"])
            .args(args)
            .output()
            .expect("running dig");
        Dig::parse(&String::from_utf8_lossy(&out.stdout))
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("unbound.log")).unwrap_or_default()
    }

    /// The RFC 5011 anchor file as Unbound keeps it (empty for a static anchor).
    pub(crate) fn anchors(&self) -> String {
        std::fs::read_to_string(self.dir.join("anchor.key")).unwrap_or_default()
    }
}

impl Drop for Unbound<'_> {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
