//! A two-instruction XDP program (`return XDP_PASS` or `return XDP_DROP`)
//! loaded with the raw `bpf(2)` syscall and attached to an interface through a
//! BPF link, so it is detached when the link's file descriptor closes (also when
//! the process dies).
//!
//! Why: `XDP_TX` on a veth reaches the peer only when the peer runs an XDP
//! program. Queries answered by the fast path come back to the client veth and
//! are lost unless something is attached there: `PASS` for a socket that reads
//! the answers, `DROP` for the load generator, which only counts them (the
//! veth's `rx_packets`) and must not spend its CPU on the kernel stack.

use std::io;
use std::os::fd::{FromRawFd as _, OwnedFd};

pub const XDP_DROP: i32 = 1;
pub const XDP_PASS: i32 = 2;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type`: BPF_XDP.
const BPF_XDP: u32 = 37;

/// The program attached to an interface; detached on drop.
pub struct Attached {
    _link: OwnedFd,
    _prog: OwnedFd,
}

fn bpf(cmd: libc::c_long, attr: &mut [u8; 128]) -> io::Result<OwnedFd> {
    // SAFETY: bpf(2) with a zero-initialised attribute union of 128 bytes, larger
    // than every field we set; the kernel checks the size we pass.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len() as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new file descriptor returned by the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn put_u32(a: &mut [u8; 128], off: usize, v: u32) {
    a[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put_u64(a: &mut [u8; 128], off: usize, v: u64) {
    a[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}

/// Loads `r0 = action; exit` and attaches it to `iface` (native mode on veth).
pub fn attach(iface: &str, action: i32) -> io::Result<Attached> {
    // BPF_ALU64|BPF_MOV|BPF_K r0, imm ; BPF_JMP|BPF_EXIT
    let mut insns = [0u8; 16];
    insns[0] = 0xb7;
    insns[4..8].copy_from_slice(&action.to_ne_bytes());
    insns[8] = 0x95;
    let license = c"GPL";
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, BPF_PROG_TYPE_XDP);
    put_u32(&mut attr, 4, 2);
    put_u64(&mut attr, 8, insns.as_ptr() as u64);
    put_u64(&mut attr, 16, license.as_ptr() as u64);
    let name = if action == XDP_DROP { &b"bench_drop"[..] } else { &b"bench_pass"[..] };
    attr[48..48 + name.len()].copy_from_slice(name);
    put_u32(&mut attr, 68, BPF_XDP);
    let prog = bpf(BPF_PROG_LOAD, &mut attr)
        .map_err(|e| io::Error::new(e.kind(), format!("BPF_PROG_LOAD of a 2-instruction XDP program: {e}")))?;

    let cname = std::ffi::CString::new(iface).map_err(io::Error::other)?;
    // SAFETY: a NUL-terminated interface name.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no interface {iface} in this namespace")));
    }
    use std::os::fd::AsRawFd as _;
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, prog.as_raw_fd() as u32);
    put_u32(&mut attr, 4, ifindex);
    put_u32(&mut attr, 8, BPF_XDP);
    let link = bpf(BPF_LINK_CREATE, &mut attr).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("attaching XDP to {iface}: {e} (another program attached? `ip link set dev {iface} xdp off`)"),
        )
    })?;
    Ok(Attached { _link: link, _prog: prog })
}
