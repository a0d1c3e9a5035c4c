//! Query packets: the DNS message (`NAME A IN`, an OPT with one ECS option, no
//! COOKIE — the fast path leaves cookies to userspace by design), the Ethernet,
//! IPv4 and UDP headers around it, and a small reply parser.

use std::net::Ipv4Addr;

/// `NAME A IN` with `RD=0`, and when `ecs` is set an OPT (UDP size 1232) carrying
/// ECS `addr/len` (RFC 7871 §6: only the prefix bytes, bits beyond it zero).
pub fn dns_query(name: &str, id: u16, ecs: Option<(Ipv4Addr, u8)>) -> Vec<u8> {
    let mut m = Vec::with_capacity(64);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0, 0]); // flags: QUERY, no RD
    m.extend_from_slice(&1u16.to_be_bytes()); // QDCOUNT
    m.extend_from_slice(&[0, 0, 0, 0]); // ANCOUNT, NSCOUNT
    m.extend_from_slice(&u16::from(ecs.is_some()).to_be_bytes()); // ARCOUNT
    for label in name.trim_end_matches('.').split('.') {
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
    m.extend_from_slice(&1u16.to_be_bytes()); // A
    m.extend_from_slice(&1u16.to_be_bytes()); // IN
    if let Some((addr, len)) = ecs {
        let nbytes = (len as usize).div_ceil(8);
        let masked = if len == 0 { 0 } else { u32::from(addr) & (u32::MAX << (32 - len as u32)) };
        let opt_len = 4 + 4 + nbytes;
        m.push(0); // root
        m.extend_from_slice(&41u16.to_be_bytes()); // OPT
        m.extend_from_slice(&1232u16.to_be_bytes()); // UDP payload size
        m.extend_from_slice(&[0, 0, 0, 0]); // extended RCODE, version, flags
        m.extend_from_slice(&(opt_len as u16).to_be_bytes());
        m.extend_from_slice(&8u16.to_be_bytes()); // ECS
        m.extend_from_slice(&((4 + nbytes) as u16).to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes()); // family IPv4
        m.push(len);
        m.push(0); // scope
        m.extend_from_slice(&masked.to_be_bytes()[..nbytes]);
    }
    m
}

/// Sets the DO bit (RFC 3225) of the OPT record that ends a [`dns_query`]
/// with ECS: the high bit of the OPT TTL's third octet.
pub fn set_dnssec_ok(m: &mut [u8]) {
    let mut at = 12;
    while at < m.len() && m[at] != 0 {
        at += 1 + m[at] as usize;
    }
    // Past the root, QTYPE and QCLASS: the OPT's root, TYPE, CLASS, EXTENDED-RCODE, VERSION.
    let flags = at + 1 + 4 + 1 + 2 + 2 + 2;
    if let Some(b) = m.get_mut(flags) {
        *b |= 0x80;
    }
}

/// Header fields of one UDP/IPv4 frame.
#[derive(Clone, Copy, Debug)]
pub struct Addrs {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
}

/// Ethernet + IPv4 (no options, DF) + UDP (checksum computed) around `payload`.
pub fn udp_frame(a: &Addrs, payload: &[u8]) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let ip_len = 20 + udp_len;
    let mut f = Vec::with_capacity(14 + ip_len);
    f.extend_from_slice(&a.dst_mac);
    f.extend_from_slice(&a.src_mac);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let ip_start = f.len();
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&(ip_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]); // id, DF, TTL 64, UDP, checksum
    f.extend_from_slice(&a.src_ip.octets());
    f.extend_from_slice(&a.dst_ip.octets());
    let csum = checksum(&f[ip_start..ip_start + 20], 0);
    f[ip_start + 10..ip_start + 12].copy_from_slice(&csum.to_be_bytes());
    let udp_start = f.len();
    f.extend_from_slice(&a.src_port.to_be_bytes());
    f.extend_from_slice(&a.dst_port.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    let mut pseudo = 0u32;
    for w in [a.src_ip.octets(), a.dst_ip.octets()] {
        pseudo += u32::from(u16::from_be_bytes([w[0], w[1]])) + u32::from(u16::from_be_bytes([w[2], w[3]]));
    }
    pseudo += 17 + udp_len as u32;
    let mut c = checksum(&f[udp_start..], pseudo);
    if c == 0 {
        c = 0xffff;
    }
    f[udp_start + 6..udp_start + 8].copy_from_slice(&c.to_be_bytes());
    f
}

/// RFC 1071 one's-complement sum of `data`, starting from `sum`.
fn checksum(data: &[u8], mut sum: u32) -> u16 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// What a reply said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    pub id: u16,
    pub rcode: u8,
    pub aa: bool,
    pub a: Vec<Ipv4Addr>,
    pub ttl: Option<u32>,
    /// ECS SCOPE PREFIX-LENGTH of the echoed option.
    pub scope: Option<u8>,
}

/// Parses a DNS response (A answers, the OPT's ECS scope); `None` if malformed.
pub fn parse_reply(m: &[u8]) -> Option<Reply> {
    let u16_at = |i: usize| -> Option<u16> { Some(u16::from_be_bytes([*m.get(i)?, *m.get(i + 1)?])) };
    let mut r = Reply { id: u16_at(0)?, ..Reply::default() };
    let flags = u16_at(2)?;
    if flags & 0x8000 == 0 {
        return None;
    }
    r.aa = flags & 0x0400 != 0;
    r.rcode = (flags & 0xf) as u8;
    let (qd, an, ns, ar) = (u16_at(4)?, u16_at(6)?, u16_at(8)?, u16_at(10)?);
    let mut i = 12;
    let skip_name = |mut i: usize| -> Option<usize> {
        loop {
            let l = *m.get(i)? as usize;
            if l == 0 {
                return Some(i + 1);
            }
            if l & 0xc0 == 0xc0 {
                return Some(i + 2);
            }
            i += 1 + l;
        }
    };
    for _ in 0..qd {
        i = skip_name(i)? + 4;
    }
    for n in 0..(an as usize + ns as usize + ar as usize) {
        i = skip_name(i)?;
        let (ty, ttl, rdlen) = (u16_at(i)?, u32::from_be_bytes(m.get(i + 4..i + 8)?.try_into().ok()?), u16_at(i + 8)?);
        let rd = m.get(i + 10..i + 10 + rdlen as usize)?;
        if n < an as usize && ty == 1 && rd.len() == 4 {
            r.a.push(Ipv4Addr::new(rd[0], rd[1], rd[2], rd[3]));
            r.ttl = Some(ttl);
        }
        if ty == 41 {
            let mut j = 0;
            while j + 4 <= rd.len() {
                let code = u16::from_be_bytes([rd[j], rd[j + 1]]);
                let len = u16::from_be_bytes([rd[j + 2], rd[j + 3]]) as usize;
                if code == 8 && len >= 4 {
                    r.scope = rd.get(j + 7).copied();
                }
                j += 4 + len;
            }
        }
        i += 10 + rdlen as usize;
    }
    Some(r)
}

/// The DNS message inside an Ethernet/IPv4/UDP frame.
pub fn frame_payload(f: &[u8]) -> Option<&[u8]> {
    if f.len() < 42 || f[12..14] != [0x08, 0x00] {
        return None;
    }
    let ihl = (f[14] & 0xf) as usize * 4;
    f.get(14 + ihl + 8..)
}

/// This interface's MAC address, from sysfs.
pub fn iface_mac(iface: &str) -> anyhow::Result<[u8; 6]> {
    let path = format!("/sys/class/net/{iface}/address");
    let s = std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("reading {path}: {e}"))?;
    parse_mac(s.trim())
}

pub fn parse_mac(s: &str) -> anyhow::Result<[u8; 6]> {
    let parts: Vec<u8> = s
        .split(':')
        .map(|p| u8::from_str_radix(p, 16))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("MAC {s:?}: {e}"))?;
    parts.try_into().map_err(|_| anyhow::anyhow!("MAC {s:?}: not six bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecs_query_layout() {
        let q = dns_query("edge.lagran.net", 7, Some((Ipv4Addr::new(58, 60, 1, 9), 24)));
        // header 12 + name 17 + type/class 4 + OPT 11 + ECS 4+4+3
        assert_eq!(q.len(), 12 + 17 + 4 + 11 + 11);
        assert_eq!(&q[q.len() - 3..], &[58, 60, 1]);
        let mut d = q.clone();
        set_dnssec_ok(&mut d);
        // The OPT's TTL: EXTENDED-RCODE, VERSION, then DO in the high bit.
        let opt = 12 + 17 + 4;
        assert_eq!((&d[opt..opt + 3], d[opt + 7]), (&[0u8, 0, 41][..], 0x80));
        assert_eq!(d.iter().zip(&q).filter(|(a, b)| a != b).count(), 1, "only the DO bit changes");
    }

    #[test]
    fn udp_checksum_verifies() {
        let a = Addrs {
            src_mac: [2; 6],
            dst_mac: [4; 6],
            src_ip: Ipv4Addr::new(198, 18, 0, 2),
            dst_ip: Ipv4Addr::new(198, 18, 0, 1),
            src_port: 1000,
            dst_port: 53,
        };
        let f = udp_frame(&a, &dns_query("edge.lagran.net", 1, None));
        assert_eq!(checksum(&f[14..34], 0), 0, "IPv4 header sums to zero");
    }
}
