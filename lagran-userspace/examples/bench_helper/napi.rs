//! NAPI threading on a veth (the benchmark's setup): on veth the receive work runs on
//! the sender's CPU unless NAPI threading is on; threading needs NAPI, which a
//! veth has only with XDP or GRO, so GRO is switched on first (the legacy
//! `ETHTOOL_SGRO` ioctl, no `ethtool` binary needed). The NAPI kthreads
//! (`napi/<iface>-<id>`) are then pinned to one CPU. Run inside the namespace.

use anyhow::{Context as _, bail};

use crate::result;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    iface: String,
    /// CPU for the interface's NAPI threads.
    #[arg(long)]
    cpu: usize,
}

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_SGRO: u32 = 0x2c;

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

fn gro_on(iface: &str) -> anyhow::Result<()> {
    use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
    // SAFETY: a plain datagram socket for the ioctl.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
    if fd < 0 {
        bail!("socket: {}", std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut val = EthtoolValue { cmd: ETHTOOL_SGRO, data: 1 };
    // SAFETY: ifreq is plain data.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    if iface.len() >= ifr.ifr_name.len() {
        bail!("interface name {iface} too long");
    }
    for (d, s) in ifr.ifr_name.iter_mut().zip(iface.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = &mut val as *mut EthtoolValue as *mut libc::c_char;
    // SAFETY: SIOCETHTOOL with an ifreq pointing at a live ethtool_value.
    if unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) } != 0 {
        bail!("ETHTOOL_SGRO on {iface}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

pub fn run(a: Args) -> anyhow::Result<()> {
    gro_on(&a.iface)?;
    let path = format!("/sys/class/net/{}/threaded", a.iface);
    std::fs::write(&path, "1").with_context(|| format!("writing 1 to {path}"))?;
    let want = format!("napi/{}-", a.iface);
    let mut pinned = 0;
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if !comm.trim().starts_with(&want) {
            continue;
        }
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<libc::pid_t>() else { continue };
        // SAFETY: cpu_set_t is plain data, filled by the CPU_* helpers.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        unsafe { libc::CPU_SET(a.cpu, &mut set) };
        // SAFETY: sched_setaffinity on a kernel thread's pid with a valid set.
        if unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
            bail!("pinning {} (pid {pid}) to CPU {}: {}", comm.trim(), a.cpu, std::io::Error::last_os_error());
        }
        pinned += 1;
    }
    if pinned == 0 {
        bail!("no NAPI thread {want}* after enabling threading");
    }
    result("napi_threads", pinned);
    Ok(())
}
