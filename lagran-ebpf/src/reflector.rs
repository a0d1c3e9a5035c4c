//! A bare XDP_TX reflector: the ceiling of the box for `cargo xtask bench`.
//!
//! Every IPv4/UDP packet to port 53 goes back where it came from with the DNS QR
//! bit set, and nothing else: no name, no map, no answer. The bench measures the
//! Lagran fast path against it with the same generator, so "lagran-xdp /
//! reflector" says how much of the box's packet rate the real work costs. Not a
//! DNS server: never attach it anywhere but the bench's namespaces.
//!
//! Minimum kernel version: 4.8 (XDP_TX).
#![no_std]
#![no_main]

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};

const ETH_LEN: usize = 14;
const IP_LEN: usize = 20;
const UDP_LEN: usize = 8;

#[xdp]
pub fn reflector(ctx: XdpContext) -> u32 {
    let data = ctx.data();
    let end = ctx.data_end();
    // Ethernet + IPv4 without options + UDP + the DNS flags.
    if data + ETH_LEN + IP_LEN + UDP_LEN + 4 > end {
        return xdp_action::XDP_PASS;
    }
    let p = data as *mut u8;
    // SAFETY: every offset below is inside the length checked above.
    unsafe {
        let ethertype = u16::from_be(core::ptr::read_unaligned(p.add(12) as *const u16));
        let vihl = *p.add(ETH_LEN);
        let proto = *p.add(ETH_LEN + 9);
        let dport = u16::from_be(core::ptr::read_unaligned(p.add(ETH_LEN + IP_LEN + 2) as *const u16));
        if ethertype != 0x0800 || vihl != 0x45 || proto != 17 || dport != 53 {
            return xdp_action::XDP_PASS;
        }
        // Swap the MACs, the addresses (the IPv4 checksum covers both the same way)
        // and the ports.
        let macs = core::ptr::read_unaligned(p as *const [u8; 12]);
        core::ptr::copy_nonoverlapping(macs.as_ptr().add(6), p, 6);
        core::ptr::copy_nonoverlapping(macs.as_ptr(), p.add(6), 6);
        let addrs = core::ptr::read_unaligned(p.add(ETH_LEN + 12) as *const [u32; 2]);
        core::ptr::write_unaligned(p.add(ETH_LEN + 12) as *mut [u32; 2], [addrs[1], addrs[0]]);
        let ports = core::ptr::read_unaligned(p.add(ETH_LEN + IP_LEN) as *const [u16; 2]);
        core::ptr::write_unaligned(p.add(ETH_LEN + IP_LEN) as *mut [u16; 2], [ports[1], ports[0]]);
        // RFC 768: a zero checksum means "not computed" over IPv4.
        core::ptr::write_unaligned(p.add(ETH_LEN + IP_LEN + 6) as *mut u16, 0);
        // QR = 1: a response.
        *p.add(ETH_LEN + IP_LEN + UDP_LEN + 2) |= 0x80;
    }
    xdp_action::XDP_TX
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
