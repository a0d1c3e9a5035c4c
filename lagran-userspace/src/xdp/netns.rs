//! Network namespaces and veth pairs for tests: a throwaway topology that
//! disappears when its guards drop, also on panic.
//!
//! ```text
//!  netns "client"                      netns "server"
//!  veth "lgr-c" 198.18.0.2/30  <---->  veth "lgr-s" 198.18.0.1/30  (XDP here)
//! ```
//!
//! Addresses are from 198.18.0.0/15 (RFC 2544 benchmarking) and exist only
//! inside the namespaces. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and `ip`.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd as _;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// A named network namespace (`ip netns add`), deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates `lagran-<tag>-<pid>-<n>` with its loopback up.
    pub fn create(tag: &str) -> io::Result<NetNs> {
        let name = format!("lagran-{tag}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        ip(&["netns", "add", &name])?;
        let ns = NetNs { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A command run inside the namespace (`ip netns exec NAME program …`).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs `ip -n NAME args…`.
    pub fn ip(&self, args: &[&str]) -> io::Result<()> {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Runs `f` with the calling thread inside the namespace, then moves it back
    /// (also when `f` panics). Sockets, links and interface lookups made by `f`
    /// belong to the namespace.
    pub fn enter<T>(&self, f: impl FnOnce() -> T) -> io::Result<T> {
        let home = File::open("/proc/thread-self/ns/net")?;
        let target = File::open(PathBuf::from("/var/run/netns").join(&self.name))?;
        setns(&target)?;
        struct Back(File);
        impl Drop for Back {
            fn drop(&mut self) {
                if let Err(e) = setns(&self.0) {
                    // Carrying on in the wrong namespace would be worse.
                    panic!("cannot return to the original network namespace: {e}");
                }
            }
        }
        let _back = Back(home);
        Ok(f())
    }
}

fn setns(ns: &File) -> io::Result<()> {
    // SAFETY: setns(2) on an open namespace file descriptor; affects this thread only.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth end inside it, and its peer.
        if let Err(e) = ip(&["netns", "delete", &self.name]) {
            eprintln!("warning: {e}");
        }
    }
}

/// Two namespaces joined by a veth pair, addressed and up.
#[derive(Debug)]
pub struct VethPair {
    pub server: NetNs,
    pub client: NetNs,
    pub server_if: &'static str,
    pub client_if: &'static str,
    pub server_addr: std::net::Ipv4Addr,
    pub client_addr: std::net::Ipv4Addr,
    /// IPv6 addresses of the two ends (ULA, `nodad`: usable at once).
    pub server_addr6: std::net::Ipv6Addr,
    pub client_addr6: std::net::Ipv6Addr,
}

impl VethPair {
    pub fn create() -> io::Result<VethPair> {
        let server = NetNs::create("srv")?;
        let client = NetNs::create("cli")?;
        let (server_if, client_if) = ("lgr-s", "lgr-c");
        ip(&[
            "link",
            "add",
            server_if,
            "netns",
            server.name(),
            "type",
            "veth",
            "peer",
            "name",
            client_if,
            "netns",
            client.name(),
        ])?;
        server.ip(&["addr", "add", "198.18.0.1/30", "dev", server_if])?;
        client.ip(&["addr", "add", "198.18.0.2/30", "dev", client_if])?;
        // `nodad`: no duplicate address detection, so the addresses work at once
        // instead of after a second or two of "tentative".
        server.ip(&["-6", "addr", "add", "fd00:198:18::1/64", "dev", server_if, "nodad"])?;
        client.ip(&["-6", "addr", "add", "fd00:198:18::2/64", "dev", client_if, "nodad"])?;
        server.ip(&["link", "set", server_if, "up"])?;
        client.ip(&["link", "set", client_if, "up"])?;
        Ok(VethPair {
            server,
            client,
            server_if,
            client_if,
            server_addr: std::net::Ipv4Addr::new(198, 18, 0, 1),
            client_addr: std::net::Ipv4Addr::new(198, 18, 0, 2),
            server_addr6: std::net::Ipv6Addr::new(0xfd00, 0x198, 0x18, 0, 0, 0, 0, 1),
            client_addr6: std::net::Ipv6Addr::new(0xfd00, 0x198, 0x18, 0, 0, 0, 0, 2),
        })
    }

    /// Runs a program in the client namespace and returns its output.
    pub fn client_run(&self, program: &str, args: &[&str]) -> io::Result<Output> {
        self.client.command(program).args(args).output()
    }
}
