//! A point-to-point link between two network namespaces that delays every
//! packet one way by an adjustable time: what `tc qdisc … netem delay` does on
//! a veth, for kernels built without `sch_netem` (and without `fq`, which a
//! BPF program setting departure times would need). Each end is a TUN device
//! (`IFF_TUN | IFF_NO_PI`: bare IP packets); a thread per direction reads the
//! packets one end's kernel sends and writes them into the other end's kernel
//! once they are due, so TCP on both sides sees the delay in its RTT.
//!
//! Dropping the link stops the threads and closes the devices (a TUN device
//! that is not persistent disappears with its last descriptor).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lagran::xdp::netns::NetNs;

const IFF_TUN: i16 = 0x0001;
const IFF_NO_PI: i16 = 0x1000;
/// `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// Larger than any packet the devices' MTU lets through.
const MAX_PACKET: usize = 65_536;
/// How often an idle thread looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);

/// `struct ifreq` as `TUNSETIFF` reads it: the name, then the flags.
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: i16,
    _pad: [u8; 22],
}

/// Opens a TUN device named `name` in the calling thread's namespace.
fn open_tun(name: &str) -> std::io::Result<File> {
    let tun = OpenOptions::new().read(true).write(true).open("/dev/net/tun")?;
    let mut req = IfReq { name: [0; 16], flags: IFF_TUN | IFF_NO_PI, _pad: [0; 22] };
    assert!(name.len() < 16, "an interface name has at most 15 bytes: {name}");
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `req` is, for its whole duration.
    if unsafe { libc::ioctl(tun.as_raw_fd(), TUNSETIFF, &mut req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(tun)
}

/// Waits up to [`POLL`] for `file` to be readable.
fn readable(file: &File) -> bool {
    let mut fd = libc::pollfd { fd: file.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, for the length given.
    unsafe { libc::poll(&mut fd, 1, POLL.as_millis() as libc::c_int) > 0 }
}

/// One end of the link: its namespace, device and address.
pub struct End<'a> {
    pub ns: &'a NetNs,
    pub device: &'a str,
    pub addr: &'a str,
}

/// See the module doc.
pub struct DelayLine {
    /// The delay of packets from the first end to the second, in microseconds.
    delay_us: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl DelayLine {
    /// Links `a` and `b` (both up, addressed point to point); packets from `a`
    /// to `b` are delayed by `delay`, those back by nothing added.
    pub fn create(a: End, b: End, delay: Duration) -> DelayLine {
        let tun_a = Arc::new(open_in(&a, b.addr));
        let tun_b = Arc::new(open_in(&b, a.addr));
        let delay_us = Arc::new(AtomicU32::new(micros(delay)));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        threads.extend(forward(tun_a.clone(), tun_b.clone(), delay_us.clone(), stop.clone()));
        threads.extend(forward(tun_b, tun_a, Arc::new(AtomicU32::new(0)), stop.clone()));
        DelayLine { delay_us, stop, threads }
    }

    /// Sets the delay of packets from the first end to the second.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_us.store(micros(delay), Ordering::SeqCst);
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).expect("a delay under an hour")
}

/// The end's device, made in its namespace, addressed to `peer` and up.
fn open_in(end: &End, peer: &str) -> File {
    let tun = end
        .ns
        .enter(|| open_tun(end.device))
        .expect("entering the namespace")
        .unwrap_or_else(|e| panic!("opening TUN device {} (root needed): {e}", end.device));
    let ok = |r: std::io::Result<()>| r.unwrap_or_else(|e| panic!("setting up {}: {e}", end.device));
    ok(end.ns.ip(&["addr", "add", end.addr, "peer", peer, "dev", end.device]));
    ok(end.ns.ip(&["link", "set", end.device, "up"]));
    tun
}

/// Two threads moving packets from `from` to `to`: one reads and stamps each
/// packet with the time it is due, one writes it then, in order.
fn forward(from: Arc<File>, to: Arc<File>, delay_us: Arc<AtomicU32>, stop: Arc<AtomicBool>) -> [JoinHandle<()>; 2] {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let reading = stop.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; MAX_PACKET];
        while !reading.load(Ordering::SeqCst) {
            if !readable(&from) {
                continue;
            }
            let Ok(n) = (&*from).read(&mut buf) else { continue };
            let due = Instant::now() + Duration::from_micros(u64::from(delay_us.load(Ordering::SeqCst)));
            if tx.send((due, buf[..n].to_vec())).is_err() {
                return;
            }
        }
    });
    let writer = std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            let Ok((due, packet)) = rx.recv_timeout(POLL) else { continue };
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            // A packet the kernel refuses is a packet lost on the wire.
            let _ = (&*to).write(&packet);
        }
    });
    [reader, writer]
}
